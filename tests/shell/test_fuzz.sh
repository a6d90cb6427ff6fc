#!/usr/bin/env bash
# tests/shell/test_fuzz.sh — a short run of every libFuzzer harness (tests/fuzz): the
# fuzzers build with clang, ASan and UBSan, and each survives FUZZ_CI_SECONDS
# (default 5) of mutated inputs from the generated seed corpus. `make fuzz` runs
# them longer.
set -u
cd "$(dirname "$0")/../.." || exit 1
if ! command -v clang >/dev/null; then
    echo "FAIL fuzz: clang is not installed (scripts/install_deps.sh installs it)"
    exit 1
fi
if ! make -s -j2 fuzzers >build/fuzz-build.log 2>&1; then
    echo "FAIL fuzz: the fuzzers do not build: $(grep -m3 -E 'error' build/fuzz-build.log)"
    exit 1
fi
[ -x ./femtotron ] || make -s femtotron
echo "PASS fuzz: $(ls build-fuzz/fuzz | wc -l) harnesses built with libFuzzer, ASan and UBSan"
rm -rf build/fuzz-corpus
exec bash tests/fuzz/run.sh "${FUZZ_CI_SECONDS:-5}"
