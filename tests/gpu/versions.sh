#!/usr/bin/env bash
# tests/gpu/versions.sh [BINARY] — the GPU and software a GPU run ran on, as
# key=value lines (date, gpu, driver, cuda_driver, clocks, nvcc, cublaslt — the
# cuBLASLt BINARY, default ./femtotron-cuda, loads — femtotron_rev (gpu-bundle's
# REVISION where there is no .git), and, from the
# first python3 whose PyTorch sees a GPU: torch, torch_cuda, cudnn, nccl, triton),
# what issue 14 asks every recorded GPU run to state. Read by
# bench/gpu_vs_pytorch.sh (its env.txt) and tests/gpu/session.sh (its record's
# header). TORCH_PY names the python3 to ask (default python3). GPU (default 0)
# is the device nvidia-smi is asked about.
set -u
cd "$(dirname "$0")/../.." || exit 1
bin=${1:-./femtotron-cuda}
smi() { nvidia-smi -i "${GPU:-0}" "$@" 2>/dev/null; }
echo "date=$(date '+%Y-%m-%d %H:%M %Z')"
echo "gpu=$(smi --query-gpu=name,memory.total --format=csv,noheader)"
echo "driver=$(smi --query-gpu=driver_version --format=csv,noheader)"
echo "cuda_driver=$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/.*: *//')"
echo "clocks=$(smi --query-gpu=clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv,noheader)"
echo "nvcc=$( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
echo "cublaslt=$(basename "$(readlink -f "$(ldd "$bin" 2>/dev/null | awk '/libcublasLt/ {print $3}')")" 2>/dev/null)"
# The checkout's commit; on a machine the working tree came to without .git, the
# one scripts/gpu_bundle.sh built the binaries from.
if rev=$(git rev-parse --short HEAD 2>/dev/null); then
    git diff --quiet HEAD -- src Makefile 2>/dev/null || rev="$rev (src modified)"
elif [ -f gpu-bundle/REVISION ]; then rev="$(cat gpu-bundle/REVISION) (gpu-bundle)"
else rev=unknown; fi
echo "femtotron_rev=$rev"
"${TORCH_PY:-python3}" - <<'PY' 2>/dev/null
import torch
if torch.cuda.is_available():
    nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl
    print(f"torch={torch.__version__}")
    print(f"torch_cuda={torch.version.cuda}")
    print(f"cudnn={torch.backends.cudnn.version()}")
    print(f"nccl={nccl}")
    try:
        import triton
        print(f"triton={triton.__version__}")
    except ImportError:
        print("triton=none")
PY
exit 0
