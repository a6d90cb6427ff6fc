#!/usr/bin/env bash
# tests/shell/test_preempt.sh — preemption and asynchronous checkpoints:
#   a. SIGUSR1 to mpirun (which forwards it, as under `sbatch --signal=B:USR1@T`
#      with the batch script's trap): every rank finishes its step, a checkpoint is
#      written, a line says so, the job exits 75; resuming reproduces, bit for bit,
#      the losses and gradient norms of a run that was never interrupted;
#   b. SIGTERM straight to the rank processes (what Slurm's srun does), with
#      checkpoint.async on and saves every 3 steps in the background: the same, and
#      every rank's memory line (snapshot included) equals the planner's prediction;
#   c. a second SIGINT stops at once (exit 130) and leaves the published
#      checkpoints intact: resuming from them works.
# The learning rate is constant (min_lr = lr, no warmup), so a run of K + 10 steps
# is the same computation as the first K + 10 steps of a longer one.
. "$(dirname "$0")/lib.sh"
fortunes_data
MPI=(mpirun --oversubscribe --allow-run-as-root)
PLAN_MEMORY=build/tests/plan_memory_main
[ -x "$PLAN_MEMORY" ] || make -s "$PLAN_MEMORY" >/dev/null 2>&1
common=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
        --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 32 --training.global_batch_size 8 --training.micro_batch_size 2
        --training.lr 2e-3 --training.min_lr 2e-3 --training.warmup_steps 0
        --training.threads 1 --training.peak_flops 1e10)

# wait_steps FILE N: until FILE holds N metric lines (at most 60 s)
wait_steps() { for _ in $(seq 1 6000); do [ -f "$1" ] && [ "$(grep -c '"loss":' "$1")" -ge "$2" ] && return 0; sleep 0.01; done; return 1; }
# losses FILE FROM TO: "step loss grad_norm" of steps FROM..TO, as written (17 digits)
losses() { sed -nE 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/p' "$1" |
           awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b'; }

# run_preempted NAME SIGNAL TARGET NP ARGS...: train "forever", send SIGNAL to TARGET
# (mpirun or ranks) after 5 steps; sets K (the step it stopped after) and rc.
run_preempted() {
    local name=$1 sig=$2 target=$3 np=$4; shift 4
    "${MPI[@]}" -np "$np" "$FT" train "${common[@]}" --training.steps 100000 "$@" \
        --checkpoint.dir "$tmp/ck_$name" --logging.metrics "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 &
    local pid=$!
    wait_steps "$tmp/$name.jsonl" 5 || failed "$name: the run did not reach step 5"
    if [ "$target" = mpirun ]; then kill -"$sig" "$pid"; else pkill -"$sig" -f "^$FT train.*ck_$name"; fi
    wait "$pid"; rc=$?
    K=$(sed -n 's/^preempted: .* stopped after step \([0-9]*\) of .*/\1/p' "$tmp/$name.log")
}

# check_resume NAME NP ARGS...: the preempted run NAME, resumed to K + 10 steps,
# against an uninterrupted run of K + 10 steps.
check_resume() {
    local name=$1 np=$2; shift 2
    local n=$((K + 10))
    "${MPI[@]}" -np "$np" "$FT" train "${common[@]}" --training.steps $n "$@" \
        --checkpoint.dir "$tmp/${name}_ref_ck" \
        --logging.metrics "$tmp/${name}_ref.jsonl" >"$tmp/${name}_ref.log" 2>&1 ||
        { failed "$name: the uninterrupted run failed: $(tail -2 "$tmp/${name}_ref.log")"; return; }
    "${MPI[@]}" -np "$np" "$FT" train "${common[@]}" --training.steps $n "$@" --checkpoint.dir "$tmp/ck_$name" \
        --checkpoint.resume true --logging.metrics "$tmp/${name}_res.jsonl" >"$tmp/${name}_res.log" 2>&1 ||
        { failed "$name: the resume failed: $(tail -2 "$tmp/${name}_res.log")"; return; }
    grep -q "resumed from .*step_$(printf %07d "$K")" "$tmp/${name}_res.log" ||
        { failed "$name: did not resume from step $K"; return; }
    if [ "$(losses "$tmp/$name.jsonl" 1 "$K")" = "$(losses "$tmp/${name}_ref.jsonl" 1 "$K")" ] &&
       [ "$(losses "$tmp/${name}_res.jsonl" $((K + 1)) $n)" = "$(losses "$tmp/${name}_ref.jsonl" $((K + 1)) $n)" ] &&
       [ "$(losses "$tmp/${name}_ref.jsonl" 1 $n | wc -l)" -eq $n ]; then
        pass "$name: steps 1..$K before the signal and $((K + 1))..$n after the resume equal an uninterrupted run bit for bit"
    else
        failed "$name: losses differ from the uninterrupted run: $(diff <(losses "$tmp/${name}_res.jsonl" $((K + 1)) $n) <(losses "$tmp/${name}_ref.jsonl" $((K + 1)) $n) | head -3 | tr '\n' ' ')"
    fi
}

# --- a. SIGUSR1 to mpirun ---------------------------------------------------------------
run_preempted a USR1 mpirun 2 --parallel.dp 2 --parallel.zero 1
if [ "$rc" -eq 75 ] && [ -n "$K" ] && [ -d "$tmp/ck_a/step_$(printf %07d "$K")" ] &&
   grep -q "preempted: SIGUSR1 received; stopped after step $K of 100000 and wrote the checkpoint" "$tmp/a.log"; then
    pass "a: SIGUSR1 to mpirun: stopped after step $K, wrote step_$(printf %07d "$K"), said so, exit code 75"
else
    failed "a: rc $rc, K '$K': $(grep -v '^step' "$tmp/a.log" | tail -3 | tr '\n' ' ')"
fi
[ -n "$K" ] && check_resume a 2 --parallel.dp 2 --parallel.zero 1

# --- b. SIGTERM to the ranks, asynchronous checkpoints -------------------------------------
b_args=(--parallel.tp 2 --parallel.sequence_parallel true --checkpoint.async true --checkpoint.every 3)
run_preempted b TERM ranks 2 "${b_args[@]}" --logging.verbose true
saves=$(grep -c "written in the background" "$tmp/b.log")
if [ "$rc" -eq 75 ] && [ -n "$K" ] && [ "$saves" -ge 2 ] &&
   grep -q "preempted: SIGTERM received; stopped after step $K" "$tmp/b.log"; then
    pass "b: SIGTERM to the ranks: $saves checkpoints written in the background, stopped after step $K, exit code 75"
else
    failed "b: rc $rc, K '$K', $saves background saves: $(grep -v '^step' "$tmp/b.log" | tail -3 | tr '\n' ' ')"
fi
pred=$("$PLAN_MEMORY" --world 2 "${common[@]}" --training.steps 100000 "${b_args[@]}" \
       --checkpoint.dir "$tmp/ck_b" 2>&1 | sort)
got=$(grep '^memory bytes' "$tmp/b.log" | sort)
if [ -n "$got" ] && [ "$pred" = "$got" ] && echo "$got" | grep -q ' snapshot [1-9]'; then
    pass "b: every rank's memory, the async snapshot included, equals the planner's prediction"
else
    failed "b: memory: predicted '$pred', reported '$got'"
fi
[ -n "$K" ] && check_resume b 2 "${b_args[@]}"

# --- c. a second SIGINT stops at once -------------------------------------------------------
# One rank, a model whose step takes seconds: the first SIGINT lands just after step
# 1 (its checkpoint published), the second 0.2 s later, long before step 2 ends.
big=(--model.hidden_size 512 --model.intermediate_size 1536 --model.num_hidden_layers 4
     --model.num_attention_heads 8 --model.num_key_value_heads 4 --training.seq_length 256
     --model.max_position_embeddings 256)
"$FT" train "${common[@]}" "${big[@]}" --training.steps 100000 --checkpoint.dir "$tmp/ck_c" \
    --checkpoint.every 1 --logging.metrics "$tmp/c.jsonl" >"$tmp/c.log" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do [ -L "$tmp/ck_c/latest" ] && break; sleep 0.01; done  # step 1 published
t0=$(date +%s.%N)
kill -INT "$pid"
sleep 0.2
kill -INT "$pid"
wait "$pid"; rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc" -eq 130 ] && grep -q "second SIGINT: stopping at once, without a checkpoint" "$tmp/c.log" &&
   ! grep -q "^preempted:" "$tmp/c.log" && [ ! -d "$tmp/ck_c/step_0000002" ]; then
    pass "c: a second SIGINT ends the run at once (exit 130, ${secs} s after the first) without a checkpoint"
else
    failed "c: rc $rc after ${secs} s: $(grep -v '^step' "$tmp/c.log" | tail -3 | tr '\n' ' ')"
fi
if "$FT" train "${common[@]}" "${big[@]}" --training.steps 1 --checkpoint.dir "$tmp/ck_c" \
       --checkpoint.resume true >"$tmp/c_res.log" 2>&1 &&
   grep -q "resumed from .*step_0000001" "$tmp/c_res.log"; then
    pass "c: the checkpoint published before the signals is intact and resumes"
else
    failed "c: resume after the second SIGINT: $(tail -2 "$tmp/c_res.log" | tr '\n' ' ')"
fi
exit $fail
