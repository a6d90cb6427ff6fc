#!/usr/bin/env bash
# scripts/install_mkl.sh — Intel's oneMKL for `make BLAS=mkl build-mkl/femtotron`:
# PyPI's `mkl` (the libraries) and `mkl-devel` (headers) wheels in a virtual
# environment, MKLROOT's default build/mklenv (about 1 GB). Nothing is done where
# the libraries are there already. Usage: bash scripts/install_mkl.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/mklenv}
if ls "$DIR"/lib/libmkl_core.so* >/dev/null 2>&1 && [ -e "$DIR/include/mkl_service.h" ]; then
    echo "oneMKL: already in $DIR"; exit 0
fi
python3 -m venv "$DIR"
"$DIR/bin/pip" install -q mkl mkl-devel
ls "$DIR"/lib/libmkl_core.so* >/dev/null || { echo "install_mkl.sh: pip installed no libmkl_core in $DIR/lib" >&2; exit 1; }
echo "oneMKL: $("$DIR/bin/pip" show mkl | sed -n 's/^Version: //p') in $DIR"
