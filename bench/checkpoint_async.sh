#!/usr/bin/env bash
# bench/checkpoint_async.sh — what a checkpoint costs the training, written in the
# step (checkpoint.async false) or from a snapshot by a background thread (true).
#
#   bash bench/checkpoint_async.sh          # results/checkpoint_async.md
#
# Runs the same 2-rank (dp 2, ZeRO-1) training of a 4-layer, hidden-512 model
# (~13M parameters: a checkpoint of ~150 MB with the AdamW moments) for 24 steps
# three ways — no checkpoints, a checkpoint every 4 steps synchronously, the same
# asynchronously — ROUNDS times interleaved (the machine is shared: compare within
# a round). The cost of a save is (wall time - wall time without checkpoints) / the
# number of saves. The page cache absorbs the writes here; on a file system slower
# than the step, the synchronous cost grows with the write and the asynchronous one
# stays the snapshot copy.
. "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
STEPS=24 EVERY=4
SAVES=$((STEPS / EVERY))
bench_private_binary
cat /usr/share/games/fortunes/{computers,science,literature} >"$TMP/corpus.txt"
"$FT" prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
common=(--data.train "$TMP/data/train_*.bin" --model.hidden_size 512 --model.intermediate_size 1536
        --model.num_hidden_layers 4 --model.num_attention_heads 8 --model.num_key_value_heads 4
        --training.seq_length 128 --training.global_batch_size 8 --training.micro_batch_size 4
        --training.threads 1 --training.peak_flops 1e10 --training.steps $STEPS
        --parallel.dp 2 --parallel.zero 1)
run() {  # run MODE -> wall seconds
    local mode=$1 extra=()
    rm -rf "$TMP/ck"
    case $mode in
        sync) extra=(--checkpoint.dir "$TMP/ck" --checkpoint.every $EVERY) ;;
        async) extra=(--checkpoint.dir "$TMP/ck" --checkpoint.every $EVERY --checkpoint.async true) ;;
    esac
    local t0; t0=$(date +%s.%N)
    mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" train "${common[@]}" "${extra[@]}" >"$TMP/$mode.log" 2>&1
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'
}
rows=""
for r in $(seq 1 "$ROUNDS"); do
    none=$(run none); sync=$(run sync); async=$(run async)
    bytes=$(du -sb "$TMP/ck/step_$(printf %07d $STEPS)" | cut -f1)
    rows="$rows| $r | $none | $sync | $async | $(awk -v n="$none" -v s="$sync" -v k=$SAVES 'BEGIN { printf "%.3f", (s - n) / k }') | $(awk -v n="$none" -v s="$async" -v k=$SAVES 'BEGIN { printf "%.3f", (s - n) / k }') | $(cut -d' ' -f1 /proc/loadavg) |\n"
done
{
    echo "# checkpoint cost: synchronous vs asynchronous (checkpoint.async)"
    echo
    echo "$(date -u +%Y-%m-%d), $(nproc) cores; 2 ranks (dp 2, ZeRO-1), hidden 512, 4 layers, $STEPS steps,"
    echo "a checkpoint every $EVERY steps ($SAVES saves of $((bytes / 1048576)) MiB each, page cache); wall seconds per run."
    echo
    echo "| round | no checkpoints (s) | sync (s) | async (s) | cost per save, sync (s) | cost per save, async (s) | load |"
    echo "|---|---|---|---|---|---|---|"
    printf "%b" "$rows"
    echo
    grep "written" "$TMP/async.log" | head -2 | sed 's/^/    /'
} >"$RES/checkpoint_async.md"
cat "$RES/checkpoint_async.md"
