#!/usr/bin/env bash
# scripts/install_deps.sh — install femtotron's build and test dependencies from
# Debian's packages (idempotent: skips apt when everything is already there).
set -euo pipefail
# clang with compiler-rt (libFuzzer, sanitizers), libomp and llvm (llvm-symbolizer)
# build and run the fuzzers (tests/fuzz) and symbolize sanitizer reports; iproute2
# builds the network-namespace hosts of tests/shell/test_hosts.sh. zlib1g-dev and
# libzstd-dev: `prepare` reads gzip and zstd inputs through the libraries; the gzip
# and zstd programs make the compressed inputs of tests/shell/test_prepare.sh.
pkgs=(build-essential libopenmpi-dev openmpi-bin libopenblas-openmp-dev libcjson-dev
      zlib1g-dev libzstd-dev python3-torch python3-numpy python3-venv gnuplot-nox fortunes gzip zstd
      clang libclang-rt-14-dev libomp-14-dev llvm iproute2)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# The tokenizer tests and benchmark compare with the Hugging Face `tokenizers`
# package (PyPI; not packaged by Debian), installed into a venv that still sees
# Debian's torch and numpy. Skipped when it already imports.
cd "$(dirname "$0")/.."
if ! build/pyenv/bin/python -c "import tokenizers" >/dev/null 2>&1; then
    echo "installing the Python package tokenizers into build/pyenv"
    /usr/bin/python3 -m venv --system-site-packages build/pyenv
    build/pyenv/bin/pip install -q tokenizers
fi
# transformers (for tests/shell/test_transformers.sh: checkpoints load in transformers).
# Its own venv: transformers 4.36 (the last to support Debian's torch 1.13) pins an
# older tokenizers than the exactness test above uses.
if ! build/tfenv/bin/python -c "import transformers" >/dev/null 2>&1; then
    echo "installing the Python package transformers into build/tfenv"
    /usr/bin/python3 -m venv --system-site-packages build/tfenv
    build/tfenv/bin/pip install -q 'transformers==4.36.2' 'safetensors<0.5'
fi
