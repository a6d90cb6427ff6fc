#!/usr/bin/env bash
# tests/shell/test_cuda_build.sh — the CUDA build (issue 14) on a machine that may
# have no GPU: `make cuda` compiles src/ops/*.cu with nvcc (sm_90a and sm_80, host
# and device warnings as errors) into a fresh directory and links
# ./femtotron-cuda and the GPU test driver against cudart and cuBLASLt; a warning
# fails nvcc's flags; the binary holds sm_80 and sm_90a code; where there is no GPU
# it stops at once saying so; the GPU driver's comparisons work (built against the
# CPU kernels, the CPU against itself, and a wrong value caught), and so does
# tests/gpu/train_parity.sh, layouts.sh, bf16_main_job.sh and resume_devices.sh
# (the CPU binary in the GPU's place); the CPU binary
# refuses training.device cuda and precision bf16, naming what to build. Where nvcc
# is absent it prints SKIP and passes: nothing CUDA can be checked there.
. "$(dirname "$0")/lib.sh"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

# The CPU binary's refusals need no CUDA at all.
out=$("$FT" train --data.train "$tmp/none.bin" --training.device cuda 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "CPU build" <<<"$out" && grep -q "make cuda" <<<"$out" && grep -q "femtotron-cuda" <<<"$out"; then
    pass "the CPU binary refuses training.device cuda, naming make cuda and ./femtotron-cuda"
else
    failed "CPU binary with training.device cuda: exit $rc: $out"
fi
out=$("$FT" train --data.train "$tmp/none.bin" --training.precision bf16 2>&1)
rc=$?
if [ $rc -eq 1 ] && grep -q "training.precision = bf16 on the CPU needs the oneMKL build" <<<"$out" &&
    grep -q "make BLAS=mkl" <<<"$out"; then
    pass "the CPU binary (OpenBLAS) refuses training.precision bf16, naming the oneMKL build"
else
    failed "CPU binary with training.precision bf16: exit $rc: $out"
fi

if [ ! -x "$NVCC" ]; then
    echo "SKIP no nvcc at $NVCC: the CUDA build was not checked (install the CUDA toolkit to check it)"
    exit $fail
fi

# 1. A fresh build of the CUDA objects (the C objects are the CPU build's).
t0=$SECONDS
if make -s -j2 NVCC="$NVCC" CUDA_BUILD="$tmp/build-cuda" cuda >"$tmp/make.log" 2>&1; then
    n=$(ls src/ops/*.cu src/dist/*.cu | wc -l)
    pass "make cuda: $n .cu files compiled by nvcc and linked into ./femtotron-cuda and the GPU driver ($((SECONDS - t0)) s)"
else
    failed "make cuda: $(tail -20 "$tmp/make.log")"
    exit 1
fi

# 2. nvcc's flags make a warning an error (host side and device side).
printf '__global__ void k(float *x) { int unused; x[0] = 1.0f; }\n' >"$tmp/warn.cu"
read -r -a flags <<<"$(make -s nvcc-flags)"
if ! "$NVCC" "${flags[@]}" -c -o "$tmp/warn.o" "$tmp/warn.cu" >"$tmp/warn.log" 2>&1 &&
    grep -q "unused" "$tmp/warn.log"; then
    pass "an unused variable in a .cu file fails the build (warnings are errors)"
else
    failed "a warning did not fail nvcc with the build's flags: $(cat "$tmp/warn.log")"
fi

# 3. The architectures and the libraries.
# Each cubin of each .cu object keeps the ptxas options it was built with
# ("-arch sm_90a -m 64 -Werror"; read with strings: cuobjdump is not in every
# toolkit install).
n_cu=$(ls src/ops/*.cu src/dist/*.cu | wc -l)
n80=$(strings -a ./femtotron-cuda | grep -c -- '-arch sm_80 ')
n90=$(strings -a ./femtotron-cuda | grep -c -- '-arch sm_90a ')
if [ "$n80" -eq "$n_cu" ] && [ "$n90" -eq "$n_cu" ]; then
    pass "femtotron-cuda holds sm_80 and sm_90a code for each of its $n_cu .cu files"
else
    failed "femtotron-cuda: sm_80 code from $n80 and sm_90a from $n90 of $n_cu .cu files"
fi
libs=$(ldd ./femtotron-cuda | grep -o 'lib\(cudart\|cublasLt\|nccl\)[^ ]*' | sort -u | tr '\n' ' ')
if grep -q cudart <<<"$libs" && grep -q cublasLt <<<"$libs" && grep -q nccl <<<"$libs"; then
    pass "femtotron-cuda links $libs"
else
    failed "femtotron-cuda does not link cudart, cublasLt and NCCL: $(ldd ./femtotron-cuda)"
fi
# cuDNN's attention graphs for the trained shapes, checked by its frontend for
# Hopper without a GPU (tests/gpu/cudnn_graphs.c; SKIP where cuDNN does not load).
out=$("$tmp/build-cuda/tests/cudnn_graphs" 2>&1)
rc=$?
if grep -q '^SKIP' <<<"$out"; then
    echo "$out" | head -1
elif [ $rc -eq 0 ] && grep -Eq '^1[5-9] passed, 0 failed$' <<<"$out"; then
    pass "cuDNN's frontend takes femtotron's attention graphs (forward and backward, 7 shapes, sm 90) and refuses head dim 20"
else
    failed "cuDNN's attention graphs (exit $rc): $(grep -v '^PASS' <<<"$out" | head -5)"
fi
# cuDNN (training.attention = cudnn) is dlopened on first use, not linked: the
# binary starts, and trains on femtotron's kernels, where cuDNN is absent.
if ! ldd ./femtotron-cuda | grep -q libcudnn && nm ./femtotron-cuda | grep -q ' T cudnn_attention_forward$' &&
    strings -a ./femtotron-cuda | grep -q 'libcudnn.so.9'; then
    pass "femtotron-cuda holds cuDNN's attention glue and loads libcudnn.so.9 at run time (not linked)"
else
    failed "femtotron-cuda and cuDNN: linked ($(ldd ./femtotron-cuda | grep -c libcudnn)) or the glue missing"
fi

# 4. No GPU here: the binary says so at once and fails.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "SKIP a GPU is present: the no-GPU message was not checked (tests/gpu/run.sh runs the GPU tests)"
else
    out=$(./femtotron-cuda train --data.train "$tmp/none.bin" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && grep -q "no usable NVIDIA GPU" <<<"$out" && grep -q "./femtotron" <<<"$out"; then
        pass "without a GPU ./femtotron-cuda stops at once: $out"
    else
        failed "./femtotron-cuda without a GPU: exit $rc: $out"
    fi
fi

# 5. The GPU driver's comparisons, checked on the CPU kernels (CPU against CPU).
if make -s build/tests/gpu_ops_cpu >"$tmp/make2.log" 2>&1 && ./build/tests/gpu_ops_cpu >"$tmp/self.log" 2>&1; then
    pass "the GPU driver against the CPU kernels: $(tail -1 "$tmp/self.log") (a wrong value caught)"
else
    failed "the GPU driver against the CPU kernels: $(grep FAIL "$tmp/self.log" | head -5) $(tail -5 "$tmp/make2.log")"
fi

# 6. tests/gpu/train_parity.sh's comparisons, checked with the CPU binary in the
# GPU's place (the memory predictor the CPU's).
if GPU_BIN=$FT GPU_ARGS= PLAN_MEMORY=build/tests/plan_memory_main bash tests/gpu/train_parity.sh >"$tmp/tp.log" 2>&1 &&
    [ "$(grep -c '^PASS ' "$tmp/tp.log")" -eq 6 ] && grep -q "^(no CUDA profile" "$tmp/tp.log"; then
    pass "tests/gpu/train_parity.sh with the CPU binary in the GPU's place: 6 checks pass, the wait count skipped"
else
    failed "tests/gpu/train_parity.sh with the CPU binary: $(grep -v '^PASS' "$tmp/tp.log" | head -5)"
fi

# 7. tests/gpu/layouts.sh's wiring (CPU references, the rows' extra arguments, the
# predictor), with the CPU binary in the GPU's place on two of its rows; and a row
# argument the binary refuses must fail the row, not pass unseen.
if GPU_BIN=$FT GPU_ARGS="--training.device cpu" PLAN_MEMORY=build/tests/plan_memory_main LAYOUTS='^(dp2_zero3|tp2_cp2_pp2)$' \
    bash tests/gpu/layouts.sh >"$tmp/lay.log" 2>&1 && [ "$(grep -c '^PASS ' "$tmp/lay.log")" -eq 4 ]; then
    pass "tests/gpu/layouts.sh with the CPU binary in the GPU's place: dp2_zero3 and tp2_cp2_pp2 and their memory lines pass"
else
    failed "tests/gpu/layouts.sh with the CPU binary: $(grep -v '^PASS' "$tmp/lay.log" | head -5)"
fi
if ! GPU_BIN=$FT GPU_ARGS="--training.device cuda" PLAN_MEMORY=build/tests/plan_memory_main LAYOUTS='^dp2_zero1$' \
    bash tests/gpu/layouts.sh >"$tmp/lay2.log" 2>&1 && grep -q '^FAIL dp2_zero1: exited' "$tmp/lay2.log"; then
    pass "tests/gpu/layouts.sh: a row its binary refuses (device cuda on the CPU build) fails"
else
    failed "tests/gpu/layouts.sh with a refused row argument: $(head -5 "$tmp/lay2.log")"
fi

# 8. tests/gpu/bf16_main_job.sh's wiring on the CPU binary, 3 steps: a second run
# that differs a little (lr 1% higher in place of bf16) passes both checks; a second
# run identical to the first fails the "precision reached the products" one.
if GPU_BIN=$FT DEVICE_ARGS= FP32_ARGS= BF16_ARGS="--training.lr 0.00101" STEPS=3 \
    bash tests/gpu/bf16_main_job.sh >"$tmp/bf.log" 2>&1 && [ "$(grep -c '^PASS ' "$tmp/bf.log")" -eq 2 ]; then
    pass "tests/gpu/bf16_main_job.sh with the CPU binary, a 1% lr change in bf16's place: $(grep -m1 '^PASS' "$tmp/bf.log" | cut -c6-)"
else
    failed "tests/gpu/bf16_main_job.sh with the CPU binary: $(grep -v '^PASS' "$tmp/bf.log" | head -5)"
fi
if ! GPU_BIN=$FT DEVICE_ARGS= FP32_ARGS= BF16_ARGS= STEPS=3 bash tests/gpu/bf16_main_job.sh >"$tmp/bf2.log" 2>&1 &&
    grep -q '^FAIL the bf16 run logged the same losses' "$tmp/bf2.log"; then
    pass "tests/gpu/bf16_main_job.sh: a 'bf16' run identical to the fp32 one fails"
else
    failed "tests/gpu/bf16_main_job.sh with two identical runs: $(head -5 "$tmp/bf2.log")"
fi

# 9. tests/gpu/resume_devices.sh's wiring on the CPU binary alone (every "device" the
# CPU: each resume must still land on the uninterrupted curve, 4 PASS lines).
if GPU_BIN=$FT GPU_ARGS= BF16_ARGS= bash tests/gpu/resume_devices.sh >"$tmp/rd.log" 2>&1 &&
    [ "$(grep -c '^PASS ' "$tmp/rd.log")" -eq 4 ]; then
    pass "tests/gpu/resume_devices.sh with the CPU binary in the GPU's place: 4 resumes on the uninterrupted curve"
else
    failed "tests/gpu/resume_devices.sh with the CPU binary: $(grep -v '^PASS' "$tmp/rd.log" | head -5)"
fi

# Every GPU script parses (tests/gpu/nccl.sh needs the CUDA build's nccl_ops and a GPU
# to run at all).
bad=$(for f in tests/gpu/*.sh; do bash -n "$f" 2>&1 || echo "$f"; done)
if [ -z "$bad" ]; then pass "the $(ls tests/gpu/*.sh | wc -l) scripts of tests/gpu parse (bash -n)"
else failed "a script of tests/gpu does not parse: $bad"; fi

# 10. tests/gpu/reference.sh's wiring: with the CPU binaries in its place it passes
# (the PyTorch reference test, unchanged); the training keys it adds reach every run
# (device cuda, refused by the CPU binaries, fails it).
if GPU_BIN=$FT GPU_DUMP_GRADS=build/tests/dump_grads GPU_TRAINING='{"device": "cpu", "precision": "fp32"}' \
    bash tests/gpu/reference.sh >"$tmp/ref.log" 2>&1 && ! grep -q '^FAIL' "$tmp/ref.log"; then
    pass "tests/gpu/reference.sh with the CPU binaries in the GPU's place: $(tail -1 "$tmp/ref.log" | tr -d '#')"
else
    failed "tests/gpu/reference.sh with the CPU binaries: $(grep '^FAIL' "$tmp/ref.log" | head -3) $(tail -2 "$tmp/ref.log")"
fi
if ! GPU_BIN=$FT GPU_DUMP_GRADS=build/tests/dump_grads GPU_TRAINING='{"device": "cuda"}' \
    bash tests/gpu/reference.sh >"$tmp/ref2.log" 2>&1 && grep -q '^FAIL.*training.device = cuda' "$tmp/ref2.log"; then
    pass "tests/gpu/reference.sh: its training keys reach the runs (device cuda on the CPU binaries fails)"
else
    failed "tests/gpu/reference.sh with device cuda on the CPU binaries: $(head -3 "$tmp/ref2.log")"
fi
exit $fail
