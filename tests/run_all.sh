#!/usr/bin/env bash
# tests/run_all.sh — runs every test (the unit-test binaries in build/tests, then the
# shell tests of tests/shell and the Python tests of tests/reference; tests/README.md
# tells the kinds apart), counts the PASS/FAIL lines they print, and ends on the
# line CI reads: "N passed, N failed". Exit status 1 when anything failed.
set -u
cd "$(dirname "$0")/.."
log_dir=build/test-logs
mkdir -p "$log_dir"
total_pass=0
total_fail=0
run() {  # run NAME COMMAND...
    local name=$1; shift
    local log="$log_dir/$name.log"
    local t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local p f
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "FAIL $name: exited with status $rc (see $log)" | tee -a "$log"
    fi
    grep '^FAIL ' "$log"
    printf '%-28s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
}
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done
for t in tests/shell/test_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t" .sh)" bash "$t"
done
for t in tests/reference/test_*.py; do
    [ -f "$t" ] || continue
    run "$(basename "$t" .py)" /usr/bin/python3 "$t"
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
