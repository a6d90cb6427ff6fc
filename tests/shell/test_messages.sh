#!/usr/bin/env bash
# tests/shell/test_messages.sh — one message per error under mpirun -np 4: a
# configuration error (every rank finds it, a --config file's included) is printed once, without a rank and
# without Open MPI's MPI_ABORT banner, and the job exits non-zero; the numbers in a
# message are the ones that failed (the micro-batch's 512 tokens, 256 per rank after
# cp 2, not divisible by tp 3); an error only one rank meets (checkpoint.dir, checked
# by rank 0) still aborts the job and names that rank.
# Prints PASS/FAIL lines (tests/run_all.sh counts them).
. "$(dirname "$0")/lib.sh"
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}"
export OMP_NUM_THREADS=1
for i in $(seq 1 200); do echo "line $i of some text for training the tiny model"; done >"$tmp/in.txt"
"$FT" prepare --input "$tmp/in.txt" --output "$tmp/data" --val-fraction 0 >/dev/null 2>&1 || { failed "setup: prepare"; exit 1; }
base=(--data.train "$tmp/data/train_*.bin" --training.threads 1 --training.peak_flops 1e9
      --model.hidden_size 48 --model.intermediate_size 96 --model.num_hidden_layers 2
      --model.num_attention_heads 6 --model.num_key_value_heads 6 --model.max_position_embeddings 64
      --training.seq_length 16 --training.micro_batch_size 2 --training.steps 1)

# once NAME NP REGEX ARGS...: the job fails, REGEX matches exactly one stderr line,
# which is the only error line and has no rank, and nothing says MPI_ABORT.
once() {
    local name=$1 np=$2 want=$3; shift 3
    timeout -k 5 60 "${MPIRUN[@]}" -np "$np" "$FT" train ${CFG:+--config "$CFG"} "${base[@]}" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? n all
    n=$(grep -Ec "$want" "$tmp/err"); all=$(grep -c 'error: ' "$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" = 1 ] && [ "$all" = 1 ] &&
       grep -Eq "^femtotron: error: .*$want" "$tmp/err" && ! grep -q MPI_ABORT "$tmp/err"; then
        pass "$name: status $rc, printed once, no MPI_ABORT: $(grep -m1 'error: ' "$tmp/err")"
    else
        failed "$name: status $rc, '$want' $n time(s), $all error line(s), MPI_ABORT $(grep -c MPI_ABORT "$tmp/err") time(s): $(tr '\n' ' ' <"$tmp/err" | cut -c1-600)"
    fi
}
once "tp 3 on 4 ranks" 4 'parallel.dp \* tp \* pp \* cp = 1 \* 3 \* 1 \* 1 = 3, but the job has 4 ranks' --parallel.tp 3
once "unknown key on 4 ranks" 4 'unknown key "training.lrr"' --parallel.dp 4 --training.lrr 1
once "negative lr on 4 ranks" 4 'training.lr = -1' --parallel.dp 4 --training.lr -1
echo '{"training": {"steps": 2,}}' >"$tmp/bad.json"
CFG=$tmp/bad.json once "--config file with a JSON error on 4 ranks" 4 'invalid JSON at line 1, column 27' --parallel.dp 4
CFG=$tmp/none.json once "--config file missing on 4 ranks" 4 'cannot read config file .*none.json' --parallel.dp 4
once "tp 3 x cp 2 with SP" 6 "the micro-batch's 512 tokens .* split over parallel.cp = 2 leave 256 per rank, not divisible by parallel.tp = 3" \
    --parallel.tp 3 --parallel.cp 2 --parallel.sequence_parallel true --training.seq_length 64 --training.micro_batch_size 8
once "tp 3 with SP, no cp" 3 "the micro-batch's 20 tokens \(training.micro_batch_size \* training.seq_length = 1 \* 20\) are not divisible by parallel.tp = 3" \
    --parallel.tp 3 --parallel.sequence_parallel true --training.seq_length 20 --training.micro_batch_size 1

# A good layout still trains: the agreement costs nothing when nobody failed.
if timeout -k 5 120 "${MPIRUN[@]}" -np 4 "$FT" train "${base[@]}" --parallel.dp 2 --parallel.tp 2 >"$tmp/out" 2>"$tmp/err" &&
   grep -q 'dp 2 x pp 1 x cp 1 x tp 2' "$tmp/out"; then
    pass "a good dp 2 x tp 2 layout on 4 ranks trains"
else failed "good layout: $(tr '\n' ' ' <"$tmp/err" | cut -c1-400)"; fi

# A runtime error met by one rank: checkpoint.dir under a regular file (rank 0
# prepares the directory). It cannot be agreed, so it aborts, naming the rank.
: >"$tmp/a_file"
timeout -k 5 60 "${MPIRUN[@]}" -np 4 "$FT" train "${base[@]}" --parallel.dp 4 --checkpoint.dir "$tmp/a_file/ckpt" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q '^femtotron: rank 0: error: .*a_file/ckpt' "$tmp/err" &&
   [ "$(grep -c 'error: ' "$tmp/err")" = 1 ]; then
    pass "runtime error on rank 0 only: status $rc, names the rank: $(grep -m1 'error: ' "$tmp/err")"
else failed "runtime error on one rank: status $rc: $(tr '\n' ' ' <"$tmp/err" | cut -c1-600)"; fi
exit $fail
