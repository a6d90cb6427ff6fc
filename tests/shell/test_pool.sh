#!/usr/bin/env bash
# tests/shell/test_pool.sh — tests/shell/pool.sh, which the parity rows, the fuzzers,
# the ASan unit tests and the emulated GPU's NCCL part run through: a check that
# fails must still fail the test when checks run side by side, and the lines must
# come in the order the checks were started, whatever order they end in.
. "$(dirname "$0")/lib.sh"
. tests/shell/pool.sh

slow_pass() { sleep 0.3; echo "PASS slow one"; }
quick_fail() { echo "FAIL quick one"; return 1; }
silent_fail() { return 3; }
killed() { kill -9 $BASHPID; }
flagged() { fail=1; }  # the tests' convention: failed sets fail=1, the status stays 0

pool_init 2
pool_run slow slow_pass
pool_run quick quick_fail
pool_run silent silent_fail
pool_run killed killed
pool_run flagged flagged
pool_finish >"$tmp/out" 2>/dev/null
rc=$?
out=$(cat "$tmp/out")
want=$'PASS slow one\nFAIL quick one\nFAIL silent: exited with status 3\nFAIL killed: exited with status (none: killed)\nFAIL flagged: exited with status 1'
if [ "$rc" -eq 1 ] && [ "$out" = "$want" ]; then
    pass "pool.sh: 5 checks 2 at a time, lines in start order, a failure with its FAIL line, one without (named with its status), a killed one and one that only set fail=1 each fail the pool"
else
    failed "pool.sh: status $rc, lines: $out"
fi

pool_init 3
for i in 1 2 3 4 5; do pool_run "p$i" eval "sleep 0.$((6 - i)); echo PASS p$i"; done
pool_finish >"$tmp/out" 2>/dev/null
rc=$?
out=$(cat "$tmp/out")
if [ "$rc" -eq 0 ] && [ "$out" = "$(printf 'PASS p%d\n' 1 2 3 4 5 | head -c -1)" ]; then
    pass "pool.sh: 5 passing checks 3 at a time pass, in start order though they end in reverse"
else
    failed "pool.sh: passing checks: status $rc, lines: $out"
fi

if ! (pool_init 0) >/dev/null && [ "$(pool_init x)" = "FAIL the number of checks at a time must be a positive integer, not 'x'" ]; then
    pass "pool.sh: 0 or a non-number of checks at a time is refused, naming the value"
else
    failed "pool.sh: pool_init 0 / x was not refused"
fi
exit $fail
