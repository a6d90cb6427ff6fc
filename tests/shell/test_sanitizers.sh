#!/usr/bin/env bash
# tests/shell/test_sanitizers.sh — the C unit tests again, built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-O1, every UB report fatal) into build-asan/: an
# out-of-bounds access, a use after free or undefined behaviour in a kernel, the
# model, the parsers or the checkpoint code fails here even when the numbers
# happen to come out right.
set -u
cd "$(dirname "$0")/../.."
flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if ! make -s -j2 BUILD=build-asan OPT="$flags" EXTRA_LDFLAGS="-fsanitize=address,undefined" \
        tests-bin >build-asan.log 2>&1; then
    echo "FAIL sanitizer build: $(grep -m3 -E 'error' build-asan.log)"
    exit 1
fi
rm -f build-asan.log
# Leak checking is off: OpenMP and OpenBLAS keep thread pools alive at exit.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
fail=0
for t in build-asan/tests/test_*; do
    name=$(basename "$t")
    out=$("$t" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q -E 'ERROR: AddressSanitizer|runtime error' <<<"$out"; then
        echo "PASS $name under ASan+UBSan ($(tail -1 <<<"$out"))"
    else
        echo "FAIL $name under ASan+UBSan (exit $rc): $(grep -m2 -E 'AddressSanitizer|runtime error|^FAIL' <<<"$out")"
        fail=1
    fi
done
exit $fail
