#!/usr/bin/env bash
# scripts/install_deps.sh — install femtotron's build and test dependencies from
# Debian's packages (idempotent: skips apt when everything is already there).
set -euo pipefail
pkgs=(build-essential libopenmpi-dev openmpi-bin libopenblas-openmp-dev libcjson-dev
      python3-torch python3-numpy gnuplot-nox fortunes gzip)
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
