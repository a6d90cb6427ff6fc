#!/usr/bin/env bash
# tests/gpu/layouts.sh — every layout issue 14 lists, trained by the CUDA binary with
# its ranks sharing the one GPU (collectives over MPI on the planned buffers), in fp32
# against the CPU binary's 1-rank reference: tests/shell/test_parity.sh's rows and
# tolerance (every step's loss and gradient norm within 1e-5 relative) and its memory
# check (every rank's allocated bytes equal the CUDA build's predictor, per category).
# Run by tests/gpu/run.sh. Rows: dp 2 with ZeRO 0-3, tp 2 with sequence parallel,
# pp 2 under each schedule (afab, 1f1b, interleaved, zb-h1, zb-v), cp 2, dp2 x tp2 x pp2,
# tp2 x cp2 x pp2, and that one under selective and full recomputation; and the
# Mixtral rows tp 2 with sequence parallel, ep 2, ep 2 x tp 2 and pp 2 (1f1b), whose
# dispatch and combine run on the GPU (ops/moe_dispatch_cuda.cu), the routing on the host.
# Environment: GPU_BIN (default ./femtotron-cuda), GPU_ARGS (default
# "--training.device cuda --training.precision fp32"), PLAN_MEMORY (default the CUDA
# build's build-cuda/tests/plan_memory_main), LAYOUTS (a regex on row names, default
# the list above). GPU_BIN=./femtotron GPU_ARGS= PLAN_MEMORY=build/tests/plan_memory_main
# checks the wiring on the CPU alone (tests/shell/test_cuda_build.sh does, on two rows).
set -u
cd "$(dirname "$0")/../.." || exit 1
DEFAULT='^(dp2_zero[0-3]|tp2_sp|pp2_afab_m8|pp2_1f1b_m8|pp2_int_m4|zb_pp2_m4|zbv_pp2_m4|cp2|dp2_tp2_pp2|tp2_cp2_pp2|recompute_(sel|full)_tp2_cp2_pp2|moe_tp2_sp|moe_ep2|moe_ep2_tp2_sp|moe_pp2_1f1b)$'
FEMTOTRON=${GPU_BIN:-./femtotron-cuda} REF_FEMTOTRON=${CPU_BIN:-./femtotron} \
    ROW_ARGS=${GPU_ARGS---training.device cuda --training.precision fp32} \
    PLAN_MEMORY=${PLAN_MEMORY:-build-cuda/tests/plan_memory_main} \
    exec bash tests/shell/test_parity.sh tests/shell/parity_layouts.txt "${LAYOUTS:-$DEFAULT}"
