#!/usr/bin/env bash
# scripts/install_scipy_openblas.sh — a recent OpenBLAS for
# `make BLAS=scipy-openblas build-scipy-openblas/femtotron`: PyPI's scipy-openblas32
# wheel (the OpenBLAS NumPy and SciPy ship: DYNAMIC_ARCH, its own threads, symbols
# prefixed scipy_; about 25 MB), unpacked without installing into DIR, the build's
# default build/scipy-openblas. Debian 12's OpenBLAS is 0.3.21; on the AMD EPYC
# (Zen 4) the training step's products ran 1.08x faster on 0.3.34
# (bench/results/blas_products_2026-11-30_amd.md), though the training step did not
# (0.98-1.01x, bench/results/train_vs_pytorch_2026-11-30_amd_scipy.md). Nothing is done where the library is
# there already. Usage: bash scripts/install_scipy_openblas.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/scipy-openblas}
LIB=$DIR/scipy_openblas32/lib/libscipy_openblas.so
if [ -e "$LIB" ] && [ -e "$DIR/scipy_openblas32/include/cblas.h" ]; then
    echo "scipy-openblas32: already in $DIR"; exit 0
fi
. bench/wheel.sh
wheel_unpack scipy-openblas32 "$DIR" || { echo "install_scipy_openblas.sh: pip could not download scipy-openblas32" >&2; exit 1; }
[ -e "$LIB" ] || { echo "install_scipy_openblas.sh: the wheel has no scipy_openblas32/lib/libscipy_openblas.so" >&2; exit 1; }
echo "scipy-openblas32: $(sed -n 's/^Version: //p' "$DIR"/scipy_openblas32-*.dist-info/METADATA) in $DIR"
