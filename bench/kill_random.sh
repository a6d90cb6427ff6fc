#!/usr/bin/env bash
# bench/kill_random.sh — kill -9 at random moments, then resume: does the run go on
# as if nothing had happened?
#
#   TRIALS=40 bash bench/kill_random.sh      # results/kill_random.md
#
# The run: 2 ranks (tensor parallel 2 with sequence parallel, or data parallel 2
# with ZeRO-1, alternating), a checkpoint after every step (every third trial with
# checkpoint.async), 30 steps, a constant learning rate. The reference is the same
# run never interrupted. Each trial starts the run, then SIGKILLs every rank at a
# random moment — a third of the trials exactly while a save is in flight (a
# .tmp_step_* directory exists) — resumes with --checkpoint.resume true to the end,
# and compares every step's loss and gradient norm after the checkpoint it resumed
# from with the reference, bit for bit. Counted: trials, kills inside a save,
# resumes that started (none may fail), runs bit-exact with the reference.
. "$(dirname "$0")/lib.sh"
TRIALS=${TRIALS:-40}
STEPS=30
MPI=(mpirun --oversubscribe --allow-run-as-root)
cat /usr/share/games/fortunes/{computers,science,literature} >"$TMP/corpus.txt"
"$FT" prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
common=(--data.train "$TMP/data/train_*.bin" --data.shuffle true
        --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 32 --training.global_batch_size 8 --training.micro_batch_size 4
        --training.lr 2e-3 --training.min_lr 2e-3 --training.warmup_steps 0
        --training.threads 1 --training.peak_flops 1e10 --training.steps $STEPS)
layouts=("--parallel.tp 2 --parallel.sequence_parallel true" "--parallel.dp 2 --parallel.zero 1")
losses() { sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/' "$1"; }

for l in 0 1; do
    read -r -a lay <<<"${layouts[$l]}"
    "${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --logging.metrics "$TMP/ref$l.jsonl" >/dev/null 2>&1
done
t0=$(date +%s.%N)
"${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --checkpoint.dir "$TMP/timing" --checkpoint.every 1 >/dev/null 2>&1
run_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')

in_save=0 resumed=0 exact=0 rows=""
for trial in $(seq 1 "$TRIALS"); do
    l=$((trial % 2)); read -r -a lay <<<"${layouts[$l]}"
    async=false; [ $((trial % 3)) -eq 0 ] && async=true
    ck=$TMP/ck$trial
    "${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --checkpoint.dir "$ck" --checkpoint.every 1 \
        --checkpoint.async $async >"$TMP/run$trial.log" 2>&1 &
    pid=$!
    how="at a random moment"
    if [ $((trial % 3)) -eq 1 ]; then  # wait for a save in flight, then kill inside it
        for _ in $(seq 1 20000); do ls "$ck" 2>/dev/null | grep -q '^\.tmp_step_' && break; done
        how="inside a save"
    else
        sleep "$(awk -v s="$RANDOM" -v t="$run_s" 'BEGIN { srand(s); print 0.2 + rand() * t * 0.9 }')"
    fi
    was_saving=0; ls "$ck" 2>/dev/null | grep -q '^\.tmp_step_' && was_saving=1
    pkill -9 -f "^$FT train.*$ck " ; wait "$pid" 2>/dev/null
    in_save=$((in_save + was_saving))
    k=$(ls "$ck" 2>/dev/null | grep -E '^step_[0-9]+$' | sort | tail -n 1); k=${k#step_}; k=$((10#${k:-0}))
    if "${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --checkpoint.dir "$ck" --checkpoint.every 1 \
           --checkpoint.resume true --logging.metrics "$TMP/res$trial.jsonl" >"$TMP/res$trial.log" 2>&1; then
        resumed=$((resumed + 1))
        if [ "$(losses "$TMP/res$trial.jsonl")" = "$(losses "$TMP/ref$l.jsonl" | awk -v k="$k" '$1 > k')" ]; then
            exact=$((exact + 1)); verdict="bit-exact"
        else
            verdict="DIFFERS"
        fi
    else
        verdict="RESUME FAILED: $(grep -m1 error "$TMP/res$trial.log")"
    fi
    rows="$rows| $trial | ${layouts[$l]} | $async | $how | $was_saving | $k | $verdict |\n"
done

{
    echo "# kill -9 at random moments, then resume"
    echo
    echo "$(date -u +%Y-%m-%d), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps of 2 ranks,"
    echo "a checkpoint after every step (every third trial asynchronous); every rank SIGKILLed."
    echo
    echo "**$TRIALS trials, $in_save killed while a save was in flight, $resumed resumed, $exact bit-exact with the uninterrupted run.**"
    echo
    echo "| trial | layout | async | kill | save in flight | resumed from step | after the resume |"
    echo "|---|---|---|---|---|---|---|"
    printf "%b" "$rows"
} >"$RES/kill_random.md"
cat "$RES/kill_random.md" | sed -n 5,7p
