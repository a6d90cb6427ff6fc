#!/usr/bin/env bash
# bench/sass_mix.sh — read the attention kernels' machine code without a GPU: build
# src/ops/attention_cuda.cu for sm_90a with nvcc, then for each flash_mma kernel at
# head dimension 64 (16-byte aligned rows) print its instruction count and its hot
# loop's (bench/tools/sass_loop.py): how many instructions a visible tile costs a
# warp, how many of them are mma. A static count, not a timing: it says what the
# warps must issue, not how long they wait (bench/attention_ncu.sh, on a GPU).
# cuobjdump: on PATH, in $CUDA_HOME/bin, or PyPI's nvidia-cuda-cuobjdump wheel
# (fetched into build/sass-tools when pip can reach an index). Knobs: KERNELS (a
# regular expression over the mangled names) [k_forwardILi64ELb1ELb1|k_backward_dqILi64ELb1|
# k_backward_dkvILi64ELb1], CUDA_HOME [/usr/local/cuda].
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
KERNELS=${KERNELS:-'k_forwardILi64ELb1ELb1|k_backward_dqILi64ELb1|k_backward_dkvILi64ELb1'}
[[ -x $CUDA_HOME/bin/nvcc ]] || { echo "SKIP no nvcc at $CUDA_HOME/bin: bench/sass_mix.sh did not run"; exit 0; }
# cuobjdump and the nvdisasm it runs: on PATH, in $CUDA_HOME/bin, else PyPI's wheels
CUOBJDUMP=$(command -v cuobjdump || true)
[[ -z $CUOBJDUMP && -x $CUDA_HOME/bin/cuobjdump ]] && CUOBJDUMP=$CUDA_HOME/bin/cuobjdump
if [[ -z $CUOBJDUMP ]] || ! command -v nvdisasm >/dev/null && [[ ! -x $CUDA_HOME/bin/nvdisasm ]]; then
    tools=build/sass-tools
    if [[ ! -x $tools/nvidia/cu13/bin/cuobjdump || ! -x $tools/nvidia/cu13/bin/nvdisasm ]]; then
        . bench/wheel.sh
        for w in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
            wheel_unpack "$w" "$tools" ||
                { echo "SKIP no $w (not installed, and pip could not fetch it): bench/sass_mix.sh did not run"; exit 0; }
        done
        chmod +x "$tools"/nvidia/cu13/bin/*
    fi
    CUOBJDUMP=$tools/nvidia/cu13/bin/cuobjdump
    export NVDISASM_PATH=$PWD/$tools/nvidia/cu13/bin PATH=$PWD/$tools/nvidia/cu13/bin:$PATH
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$CUDA_HOME"/bin/nvcc -std=c++17 -O3 -Isrc -gencode=arch=compute_90a,code=sm_90a -c -o "$work/att.o" \
    src/ops/attention_cuda.cu
echo "# flash_mma's kernels on sm_90a ($(git rev-parse --short HEAD 2>/dev/null || echo '?'); $("$CUDA_HOME"/bin/nvcc --version | grep -o 'release [0-9.]*'))"
"$CUOBJDUMP" -symbols "$work/att.o" | grep -o '_ZN9flash_mma[A-Za-z0-9_]*' | sort -u | grep -E "$KERNELS" |
    while read -r fn; do
        "$CUOBJDUMP" -sass -fun "$fn" "$work/att.o" >"$work/k.sass"
        echo "## $fn"
        python3 bench/tools/sass_loop.py "$work/k.sass"
    done
