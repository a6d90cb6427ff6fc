#!/usr/bin/env bash
# bench/kill_random.sh — kill -9 at random moments, then resume: does the run go on
# as if nothing had happened?
#
#   TRIALS=40 bash bench/kill_random.sh      # results/kill_random.md
#
# The run: 2 ranks (tensor parallel 2 with sequence parallel, or data parallel 2
# with ZeRO-1, alternating), a checkpoint after every step (every third trial with
# checkpoint.async), 60 steps, a constant learning rate. The reference is the same
# run never interrupted. Each trial starts the run, waits until a random step
# between 2 and 50 has been logged, then SIGKILLs every rank — in a third of the
# trials at the next moment a save is in flight (a .tmp_step_* directory exists),
# otherwise after a random further delay — resumes with --checkpoint.resume true,
# and compares every step's loss and gradient norm after the checkpoint it resumed
# from with the reference, bit for bit. Counted: trials, kills that cut a save short
# (its .tmp_step_* directory left behind),
# resumes that started (none may fail), runs bit-exact with the reference.
. "$(dirname "$0")/lib.sh"
TRIALS=${TRIALS:-40}
STEPS=60
MPI=(mpirun --oversubscribe --allow-run-as-root)
bench_private_binary
cat /usr/share/games/fortunes/{computers,science,literature} >"$TMP/corpus.txt"
"$FT" prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
common=(--data.train "$TMP/data/train_*.bin" --data.shuffle true
        --model.hidden_size 128 --model.intermediate_size 384 --model.num_hidden_layers 3
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 64 --training.global_batch_size 8 --training.micro_batch_size 4
        --training.lr 2e-3 --training.min_lr 2e-3 --training.warmup_steps 0
        --training.threads 1 --training.peak_flops 1e10 --training.steps $STEPS)
layouts=("--parallel.tp 2 --parallel.sequence_parallel true" "--parallel.dp 2 --parallel.zero 1")
losses() { sed -nE 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/p' "$1"; }

for l in 0 1; do
    read -r -a lay <<<"${layouts[$l]}"
    "${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --logging.metrics "$TMP/ref$l.jsonl" >/dev/null 2>&1
done
set +e  # kills and waits return failures on purpose from here on
in_save=0 resumed=0 exact=0 rows=""
for trial in $(seq 1 "$TRIALS"); do
    l=$((trial % 2)); read -r -a lay <<<"${layouts[$l]}"
    async=false; [ $((trial % 3)) -eq 0 ] && async=true
    ck=$TMP/ck$trial
    "${MPI[@]}" -np 2 "$FT" train "${common[@]}" "${lay[@]}" --checkpoint.dir "$ck" --checkpoint.every 1 \
        --checkpoint.async $async --logging.metrics "$TMP/run$trial.jsonl" >"$TMP/run$trial.log" 2>&1 &
    pid=$!
    at=$((2 + RANDOM % 49))
    for _ in $(seq 1 30000); do [ -f "$TMP/run$trial.jsonl" ] && [ "$(grep -c '"loss":' "$TMP/run$trial.jsonl")" -ge $at ] && break; sleep 0.005; done
    # the ranks' pids, looked up once so that the kill itself is a shell builtin (microseconds)
    pids=$(pgrep -f "^$FT train.*$ck ")
    if [ $((trial % 3)) -eq 1 ]; then  # the next moment a save is in flight
        for _ in $(seq 1 200000); do compgen -G "$ck/.tmp_step_*" >/dev/null && break; done
        how="inside a save, after step $at"
    else
        sleep "0.0$((RANDOM % 10))$((RANDOM % 10))"
        how="after step $at + a random delay"
    fi
    kill -9 $pids 2>/dev/null; wait "$pid" 2>/dev/null
    was_saving=0; compgen -G "$ck/.tmp_step_*" >/dev/null && was_saving=1  # a save the kill cut short
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
    rm -rf "$ck"  # 60 checkpoints a trial: keep the disk
done

{
    echo "# kill -9 at random moments, then resume"
    echo
    echo "$(date -u +%Y-%m-%d), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps of 2 ranks (hidden 128, 3 layers),"
    echo "a checkpoint after every step (every third trial asynchronous); every rank SIGKILLed."
    echo
    echo "**$TRIALS trials, $in_save of them cut a save short (its temporary directory left behind), $resumed resumed, $exact bit-exact with the uninterrupted run.**"
    echo
    echo "| trial | layout | async | kill | save cut short | resumed from step | after the resume |"
    echo "|---|---|---|---|---|---|---|"
    printf "%b" "$rows"
} >"$RES/kill_random.md"
cat "$RES/kill_random.md" | sed -n 5,7p
