# tests/shell/pool.sh — independent checks run a few at a time, their lines printed
# in the order they were started (sourced by tests that run many small processes:
# a CI machine has 2 cores, and most checks keep one busy at most).
#   pool_init JOBS          a fresh pool that runs at most JOBS checks at once
#   pool_run NAME CMD...    CMD in the background (first waiting while JOBS run), its
#                           output kept; it fails by a non-zero exit status or by
#                           setting fail=1 (lib.sh's and test_parity.sh's failed,
#                           tests/shell/test_cuda_emu.sh's part), as the tests do
#   pool_finish             waits for all, prints each check's output in order;
#                           status 1 when one failed (a check that failed without a
#                           FAIL line of its own gets one naming it); call it in
#                           the shell that ran pool_run, not in $(...): a subshell
#                           cannot wait for its parent's jobs
pool_init() {
    [[ "$1" =~ ^[1-9][0-9]*$ ]] || { echo "FAIL the number of checks at a time must be a positive integer, not '$1'"; return 1; }
    POOL_JOBS=$1
    POOL_DIR=$(mktemp -d)
    POOL_NAMES=()
}

pool_run() {
    local name=$1 n; shift
    while [ "$(jobs -rp | wc -l)" -ge "$POOL_JOBS" ]; do wait -n; done
    n=${#POOL_NAMES[@]}
    POOL_NAMES+=("$name")
    ( fail=0; "$@"; rc=$?; [ "$fail" = 0 ] || rc=1; echo "$rc" >"$POOL_DIR/$n.status" ) >"$POOL_DIR/$n.out" 2>&1 &
}

pool_finish() {
    local i status=0
    wait
    for i in "${!POOL_NAMES[@]}"; do
        cat "$POOL_DIR/$i.out"
        if [ "$(cat "$POOL_DIR/$i.status" 2>/dev/null)" != 0 ]; then
            grep -q '^FAIL ' "$POOL_DIR/$i.out" || echo "FAIL ${POOL_NAMES[$i]}: exited with status $(cat "$POOL_DIR/$i.status" 2>/dev/null || echo '(none: killed)')"
            status=1
        fi
    done
    rm -rf "$POOL_DIR"
    return $status
}
