#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU tests, one command: builds the CUDA binary and the GPU
# drivers (make cuda; PREBUILT=1 skips that, for binaries scripts/gpu_bundle.sh
# packed), then runs tests/gpu/gpu_ops.c, every op of ops.h on the GPU
# against the CPU op on seeded random inputs (fp32 within 1e-5 relative max-norm),
# and tests/gpu/train_parity.sh (training on the GPU against the CPU: one rank,
# determinism, the memory line, two ranks sharing the GPU), and tests/gpu/layouts.sh
# (every layout issue 14 lists, ranks sharing the GPU, fp32 within 1e-5 of the CPU's
# one rank, memory per rank as predicted), tests/gpu/layouts_bf16.sh (the same
# layouts in bf16 against one rank in bf16, within 4x the measured spread of one
# rank's gradient-accumulation splits), and tests/gpu/bf16_main_job.sh (the
# README main job's 500 steps in bf16: final validation loss within 1% of fp32),
# tests/gpu/reference.sh (the float64 PyTorch reference test against the CUDA
# build), tests/gpu/resume_devices.sh (GPU checkpoints resumed on the CPU and the
# other way round, fp32 and bf16), tests/gpu/calibrate.sh (`bench calibrate` on
# the GPU in bf16 and fp32, `plan --hardware this` with its profile, two ranks'
# collectives, training's MFU peak from the GPU's datasheet), tests/gpu/generate.sh
# (`generate` on the GPU build writes the CPU build's text) and tests/gpu/nccl.sh
# (parallel.comm: NCCL's collectives and watchdog on one GPU, the refusal of two
# ranks on one GPU, auto's fallback to MPI). Ends on "N passed, N failed" over all
# ten (exit 1 on a failure). Where there is no nvcc or no NVIDIA GPU it says so and exits 0:
# nothing ran. GPU_TESTS (default all of them: "gpu_ops train_parity layouts
# layouts_bf16 bf16_main_job reference resume_devices calibrate generate nccl")
# runs only the parts it names, in that order, so that a machine lent for a few
# minutes per command can run them in several calls (their counts add up).
# Time limits, for a lent machine (tests/gpu/session.sh sets them): PART_LIMIT_S
# caps each part (a part stopped at it fails, "FAIL PART.sh stopped at its N s
# limit"), and DEADLINE (seconds since the epoch) caps every part at the time left
# and skips a part with under 20 s left ("SKIP PART: ..."; not counted).
set -u
cd "$(dirname "$0")/../.." || exit 1
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ "${PREBUILT:-0}" != 1 ] && [ ! -x "$NVCC" ]; then
    echo "SKIP no nvcc at $NVCC: the GPU tests were not built or run"
    echo "0 passed, 0 failed"
    exit 0
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "SKIP no NVIDIA GPU here (nvidia-smi lists none): the GPU tests did not run"
    echo "0 passed, 0 failed"
    exit 0
fi
nvidia-smi -L
# On a GPU, gpu_ops' cuDNN attention checks fail where cuDNN does not load
# (FEMTOTRON_TEST_CUDNN=skip makes them SKIP instead, on a machine without cuDNN 9).
export FEMTOTRON_TEST_CUDNN=${FEMTOTRON_TEST_CUDNN:-require}
# PREBUILT=1: the binaries came built (scripts/gpu_bundle.sh, for a machine without
# MPI or femtotron's libraries): no make.
if [ "${PREBUILT:-0}" != 1 ]; then
    make -s -j"$(nproc)" cuda >/dev/null || { echo "FAIL make cuda"; echo "0 passed, 1 failed"; exit 1; }
    make -s -j"$(nproc)" femtotron build/tests/plan_memory_main build/tests/dump_grads >/dev/null ||
        { echo "FAIL make"; echo "0 passed, 1 failed"; exit 1; }
fi
ALL="gpu_ops train_parity layouts layouts_bf16 bf16_main_job reference resume_devices calibrate generate nccl"
for t in ${GPU_TESTS:-$ALL}; do
    grep -qw -- "$t" <<<"$ALL" || { echo "FAIL GPU_TESTS names '$t', which is none of: $ALL"; echo "0 passed, 1 failed"; exit 1; }
done
wanted() { grep -qw -- "$1" <<<"${GPU_TESTS:-$ALL}"; }
# The seconds part NAME may run (PART_LIMIT_S, and DEADLINE's time left); empty
# for no limit. A part with under 20 s left is not started.
part_limit() {
    local cap=${PART_LIMIT_S:-} left
    if [ -n "${DEADLINE:-}" ]; then
        left=$((DEADLINE - $(date +%s)))
        { [ -z "$cap" ] || [ "$left" -lt "$cap" ]; } && cap=$left
    fi
    echo "$cap"
}
log=$(mktemp)
: >"$log"
# Each part prints PASS/FAIL lines; one that fails without a FAIL line of its own
# (a crash, or its time limit) gets one here.
for t in $ALL; do
    wanted "$t" || continue
    cap=$(part_limit)
    if [ -n "$cap" ] && [ "$cap" -lt 20 ]; then
        echo "SKIP $t: out of time (${cap} s left before DEADLINE)"
        continue
    fi
    echo "== $t ($(date -u +%H:%M:%S)${cap:+, limit $cap s})"
    cmd=(bash "tests/gpu/$t.sh")
    [ "$t" = gpu_ops ] && cmd=("${GPU_OPS:-./build-cuda/tests/gpu_ops}")
    [ -n "$cap" ] && cmd=(timeout -k 10 "$cap" "${cmd[@]}")
    "${cmd[@]}" 2>&1 | tee "$log.part"
    rc=${PIPESTATUS[0]}
    cat "$log.part" >>"$log"
    if [ -n "$cap" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
        echo "FAIL $t stopped at its $cap s limit" | tee -a "$log"
    elif [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$log.part"; then
        echo "FAIL $t exited with status $rc: $(grep -v '^ *$' "$log.part" | tail -n 3 | tr '\n' ' ' | cut -c1-400)" |
            tee -a "$log"
    fi
done
rm -f "$log.part"
p=$(grep -c '^PASS ' "$log")
f=$(grep -c '^FAIL ' "$log")
rm -f "$log"
echo "$p passed, $f failed"
[ "$f" -eq 0 ]
