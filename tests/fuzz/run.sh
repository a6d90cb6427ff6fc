#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS — run every fuzzer of build-fuzz/fuzz (make fuzzers)
# for SECONDS each on a working copy of the seed corpus (made by make_corpus.sh
# into build/fuzz-corpus when missing). One PASS/FAIL line per fuzzer; a crash,
# a sanitizer report or a failed oracle leaves its input in build/fuzz-crashes.
set -u
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-60}
CORPUS=build/fuzz-corpus
[ -d "$CORPUS" ] || bash tests/fuzz/make_corpus.sh "$CORPUS" >/dev/null || { echo "FAIL fuzz: cannot make the seed corpus"; exit 1; }
mkdir -p build/fuzz-work build/fuzz-crashes
# Leak checking on: the harness frees what a refused parse allocated (fuzz.h), so
# a leak LeakSanitizer reports is one of an accepted input, a real finding.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fail=0
# fuzz_one NAME: one fuzzer for SECONDS_EACH; prints its PASS/FAIL line, status 1 on a finding.
fuzz_one() {
    local name=$1 work=build/fuzz-work/$1 log=build/fuzz-work/$1.log rc runs
    rm -rf "$work" && mkdir -p "$work" && cp -r "$CORPUS/$name/." "$work/" 2>/dev/null
    timeout $((SECONDS_EACH + 60)) "build-fuzz/fuzz/$name" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -max_len=65536 \
        -artifact_prefix=build/fuzz-crashes/"$name"- "$work" >"$log" 2>&1
    rc=$?
    runs=$(grep -a -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*')
    if [ "$rc" -eq 0 ] && [ -n "$runs" ]; then
        echo "PASS $name: $runs inputs in ${SECONDS_EACH} s, no crash, no leak, no sanitizer report"
    else
        echo "FAIL $name: exit $rc: $(grep -a -E 'ERROR|SUMMARY|decode\(encode' "$log" | head -3 | tr '\n' ' ') (log $log, input in build/fuzz-crashes)"
        return 1
    fi
}
# FUZZ_JOBS (default: the cores, nproc) fuzzers at a time (tests/shell/pool.sh): each
# is one process on one core. The lines come in the fuzzers' order.
. tests/shell/pool.sh
pool_init "${FUZZ_JOBS:-$(nproc)}" || exit 1
for f in build-fuzz/fuzz/fuzz_*; do
    pool_run "$(basename "$f")" fuzz_one "$(basename "$f")"
done
pool_finish || fail=1
exit $fail
