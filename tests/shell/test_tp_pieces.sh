#!/usr/bin/env bash
# tests/shell/test_tp_pieces.sh — every tensor-parallel piece against its 1-rank equivalent,
# forward and backward, at tp = 2 and tp = 4, with and without sequence parallel:
# column- and row-parallel linear layers, the sequence-parallel norm, the
# vocab-parallel embedding (padded vocabulary, a rank with an empty slice), the
# vocab-parallel cross-entropy (large logits, padding columns) and a whole decoder
# stack of a model_tp_shard model (loss and every gradient slice, tied and untied),
# and its split backward (zero-bubble schedules) equal to the fused one bit for bit.
# The driver (tests/tp_pieces_main.c) prints one PASS/FAIL line per check on rank 0.
set -u
cd "$(dirname "$0")/../.."
fail=0
if ! make -s build/tests/tp_pieces_main >/dev/null; then
    echo "FAIL build of build/tests/tp_pieces_main"
    exit 1
fi
export OMP_NUM_THREADS=1
for np in 2 4; do
    log=$(mktemp /tmp/femtotron_tp_pieces_XXXXXX)
    mpirun --oversubscribe --allow-run-as-root -np "$np" build/tests/tp_pieces_main >"$log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL) ' "$log"
    grep -q '^FAIL ' "$log" && fail=1
    n=$(grep -c '^PASS ' "$log")
    if [ "$rc" -ne 0 ] || [ "$n" -lt 74 ]; then
        echo "FAIL tp $np: driver exited with status $rc after $n passing checks (expected 74): $(grep -vE '^(PASS|FAIL) ' "$log" | tail -5)"
        fail=1
    fi
    rm -f "$log"
done
exit $fail
