#!/usr/bin/env bash
# tests/shell/test_faults.sh — failures under MPI end cleanly and recoverably:
#   a. a checkpoint written at dp 4 / ZeRO-3 resumes at dp 2 / ZeRO-1 and at 1 rank
#      with the uninterrupted 1-rank run's losses;
#   b. kill -9 of one rank of a 4-rank job ends the job (non-zero, within 30 s), and
#      resuming from the last checkpoint reproduces the uninterrupted losses;
#   c. non-finite steps are skipped, and training.max_bad_steps of them in a row stop
#      the run with a message naming the key;
#   d. a collective that cannot finish (one rank stopped by SIGSTOP) aborts the job
#      after parallel.timeout_s with a message naming the key;
#   e. world-size mismatches and config errors under mpirun -np 2 fail fast with one
#      clear message: once for configuration errors, once per rank before them.
# Prints PASS/FAIL lines; exit 1 on any failure.
# environment: FEMTOTRON (default ./femtotron), MPIRUN (default
#   "mpirun --oversubscribe --allow-run-as-root"), KEEP=1 keeps the work directory.
set -u
cd "$(dirname "$0")/../.." || exit 1
FEMTOTRON=${FEMTOTRON:-./femtotron}
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}"
tmp=$(mktemp -d)
if [ "${KEEP:-0}" = 1 ]; then echo "work directory: $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
fail=0
pass() { echo "PASS $*"; }
failed() { echo "FAIL $*"; fail=1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }   # le A B: A <= B
show() { grep -v '^step ' "$1" | tail -n "${2:-8}" | sed 's/^/    /'; }

[ -x "$FEMTOTRON" ] || { failed "setup: $FEMTOTRON not built (run make)"; exit 1; }
# A fixed corpus (Debian's fortunes package, installed by scripts/install_deps.sh):
# the training data must not change when the code does.
cat /usr/share/games/fortunes/{computers,science,literature,wisdom,linux} > "$tmp/corpus.txt"
"$FEMTOTRON" prepare --input "$tmp/corpus.txt" --output "$tmp/data" --val-fraction 0 \
    >"$tmp/prepare.log" 2>&1 || { failed "setup: prepare corpus"; cat "$tmp/prepare.log"; exit 1; }

# The tiny problem of tests/shell/test_parity.sh: 8 sequences x 32 tokens per step.
model=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
       --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
       --model.num_attention_heads 4 --model.num_key_value_heads 2
       --training.seq_length 32 --training.global_batch_size 8
       --training.lr 2e-3 --training.min_lr 3e-5 --training.warmup_steps 2
       --training.threads 1 --training.peak_flops 1e10)
launch() { local np=$1; shift; timeout -k 10 120 "${MPIRUN[@]}" -np "$np" "$FEMTOTRON" train "$@"; }

# pid_of_rank PATTERN RANK: the femtotron process (not mpirun) whose command line
# matches PATTERN and whose Open MPI / MPICH rank is RANK.
pid_of_rank() {
    local p
    for p in $(pgrep -f "^[^ ]*femtotron train .*$1"); do
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -Eqx "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2"; then
            echo "$p"; return 0
        fi
    done
    return 1
}

# compare_tail REF RUN FIRST LAST: steps FIRST..LAST of RUN against REF (metrics files),
# loss and grad_norm within 1e-5 relative. Prints the worst differences; status 1 if off.
compare_tail() {
    awk -v first="$3" -v last="$4" '
        function field(line, key,   m) {
            if (match(line, "\"" key "\": [^,}]*")) { m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m }
            return "NA"
        }
        function rel(a, b,   d) { a += 0; b += 0; d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; return d / (b > 1e-30 ? b : 1e-30) }
        /"event"/ { next }  # validation and checkpoint records: not steps
        FNR == NR { s = field($0, "step"); rl[s] = field($0, "loss"); rg[s] = field($0, "grad_norm"); next }
        {
            s = field($0, "step") + 0
            if (s < first || s > last) next
            seen[s] = 1
            l = field($0, "loss"); g = field($0, "grad_norm")
            if (!(s in rl)) { bad = bad " no reference step " s ";"; next }
            if (l != rl[s] || g != rg[s]) same = "no"
            dl = rel(l, rl[s]); dg = rel(g, rg[s])
            if (dl > wl) wl = dl
            if (dg > wg) wg = dg
        }
        END {
            for (s = first; s <= last; s++) if (!(s in seen)) { bad = bad " step " s " missing;"; break }
            printf "steps %d..%d: worst loss rel diff %.3g, grad_norm %.3g%s", first, last, wl, wg, same == "no" ? "" : " (bit-identical)"
            if (wl > 1e-5 || wg > 1e-5 || bad != "") { printf ";%s", bad; exit 1 }
        }' "$1" "$2"
}

# ---------------------------------------------------------------- a. any-layout resume
N=12
launch 1 "${model[@]}" --training.steps $N --training.micro_batch_size 8 \
    --logging.metrics "$tmp/a_ref.jsonl" >"$tmp/a_ref.log" 2>&1 || { failed "a: uninterrupted 1-rank run"; show "$tmp/a_ref.log"; }
# The step-6 checkpoint of a dp 4 / ZeRO-3 run with the same training.steps (the LR
# schedule depends on it): run to the end, then keep only step 6.
launch 4 "${model[@]}" --training.steps $N --training.micro_batch_size 2 --parallel.dp 4 --parallel.zero 3 \
    --checkpoint.dir "$tmp/a_dp4" --checkpoint.every 6 >"$tmp/a_dp4.log" 2>&1
if [ $? -ne 0 ] || [ ! -d "$tmp/a_dp4/step_0000006" ]; then
    failed "a: dp 4 ZeRO-3 run did not write step_0000006"; show "$tmp/a_dp4.log"
else
    for layout in "1|--training.micro_batch_size 8" \
                  "2|--training.micro_batch_size 4 --parallel.dp 2 --parallel.zero 1" \
                  "8|--training.micro_batch_size 1 --parallel.dp 8 --parallel.zero 2"; do
        np=${layout%%|*}; read -r -a largs <<< "${layout#*|}"
        name="a: dp4 ZeRO-3 step-6 checkpoint resumed on $np rank(s) (${layout#*|})"
        d="$tmp/a_resume_$np"
        mkdir -p "$d" && cp -r "$tmp/a_dp4/step_0000006" "$d/"
        if ! launch "$np" "${model[@]}" --training.steps $N "${largs[@]}" --checkpoint.dir "$d" \
                --checkpoint.resume true --logging.metrics "$d.jsonl" >"$d.log" 2>&1; then
            failed "$name: run failed"; show "$d.log"; continue
        fi
        grep -q "resumed from .*step_0000006" "$d.log" || { failed "$name: no 'resumed from ...step_0000006' line"; continue; }
        if res=$(compare_tail "$tmp/a_ref.jsonl" "$d.jsonl" 7 $N); then pass "$name: $res"; else failed "$name: $res"; fi
    done
fi

# ---------------------------------------------------------------- b. kill -9 one rank
# 300 steps at dp 4 (a few ms each), a checkpoint every 100 steps; one rank is killed
# 0.2 s after the first checkpoint, i.e. between two checkpoints.
NB=300
b_args=("${model[@]}" --training.steps "$NB" --training.micro_batch_size 2 --parallel.dp 4 --parallel.zero 1
        --checkpoint.every 100)
launch 4 "${b_args[@]}" --checkpoint.dir "$tmp/b_full" --logging.metrics "$tmp/b_full.jsonl" >"$tmp/b_full.log" 2>&1 ||
    { failed "b: uninterrupted 4-rank run"; show "$tmp/b_full.log"; }
launch 4 "${b_args[@]}" --checkpoint.dir "$tmp/b_killed" --logging.metrics "$tmp/b_killed.jsonl" >"$tmp/b_killed.log" 2>&1 &
job=$!
for _ in $(seq 1 3000); do [ -L "$tmp/b_killed/latest" ] && break; sleep 0.01; done
sleep 0.2
victim=$(pid_of_rank "$tmp/b_killed" 2)
if [ -z "$victim" ]; then
    failed "b: could not find the process of rank 2 (job already over?)"; wait $job
else
    t0=$(now)
    kill -9 "$victim"
    wait $job; rc=$?
    dt=$(elapsed "$t0")
    last_logged=$(grep '"loss":' "$tmp/b_killed.jsonl" | tail -n 1 2>/dev/null | grep -o '"step": [0-9]*' | cut -d' ' -f2)
    if [ $rc -eq 124 ] || le 100 "$dt"; then   # killed by the 120 s `timeout` of launch
        failed "b: job still running $dt s after kill -9 of rank 2 (pid $victim): hung"
    elif [ $rc -ne 0 ] && le "$dt" 30; then
        pass "b: kill -9 of rank 2 at step ~${last_logged:-?}/$NB ended the job with status $rc after $dt s"
    else
        failed "b: after kill -9 of rank 2 the job exited with status $rc after $dt s (want non-zero within 30 s)"; show "$tmp/b_killed.log"
    fi
    latest=$(ls "$tmp/b_killed" | grep -E '^step_[0-9]+$' | sort | tail -n 1)  # the newest published step
    k=$((10#${latest#step_}))
    if [ -z "$latest" ] || [ "$k" -ge $NB ]; then
        failed "b: no usable checkpoint before the kill (latest = '$latest')"
    elif launch 4 "${b_args[@]}" --checkpoint.dir "$tmp/b_killed" --checkpoint.resume true \
            --logging.metrics "$tmp/b_resumed.jsonl" >"$tmp/b_resumed.log" 2>&1; then
        if res=$(compare_tail "$tmp/b_full.jsonl" "$tmp/b_resumed.jsonl" $((k + 1)) $NB); then
            pass "b: resumed from $latest after the kill: $res"
        else
            failed "b: resumed from $latest after the kill: $res"
        fi
    else
        failed "b: resume from $latest failed"; show "$tmp/b_resumed.log"
    fi
fi

# ---------------------------------------------------------------- c. non-finite steps
t0=$(now)
launch 2 "${model[@]}" --training.steps 12 --training.micro_batch_size 4 --parallel.dp 2 \
    --training.lr 1e30 --training.min_lr 0 --training.grad_clip 0 --training.warmup_steps 0 \
    --training.max_bad_steps 3 --logging.metrics "$tmp/c.jsonl" >"$tmp/c.log" 2>&1
rc=$?; dt=$(elapsed "$t0")
nskip=$(grep -c '"skipped": true' "$tmp/c.jsonl" 2>/dev/null)
first_bad=$(grep -m1 '"skipped": true' "$tmp/c.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | cut -d' ' -f2)
if [ $rc -ne 0 ] && [ "${nskip:-0}" -ge 1 ] && grep -q 'error: .*training.max_bad_steps = 3' "$tmp/c.log" &&
   grep -q 'update skipped' "$tmp/c.log" && ! grep -q '"step": 12' "$tmp/c.jsonl"; then
    pass "c: lr 1e30: non-finite from step $first_bad, $nskip skipped update(s) logged, stopped with status $rc naming training.max_bad_steps ($dt s)"
else
    failed "c: lr 1e30 with max_bad_steps 3: status $rc, $nskip skipped step(s) in metrics, log:"; show "$tmp/c.log"
fi
# With checkpoints after every step, the message names the newest one of a step with a
# finite loss and gradient norm, not simply the last one (a skipped step).
launch 2 "${model[@]}" --training.steps 12 --training.micro_batch_size 4 --parallel.dp 2 \
    --training.lr 1e30 --training.min_lr 0 --training.grad_clip 0 --training.warmup_steps 0 \
    --training.max_bad_steps 3 --checkpoint.dir "$tmp/c_ck" --checkpoint.every 1 \
    --logging.metrics "$tmp/c2.jsonl" >"$tmp/c2.log" 2>&1
first_bad=$(grep -m1 '"skipped": true' "$tmp/c2.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | cut -d' ' -f2)
good=$(printf 'step_%07d' $((${first_bad:-1} - 1)))
newest=$(ls "$tmp/c_ck" | grep -E '^step_' | sort | tail -n 1)
if [ -n "$first_bad" ] && [ "$newest" != "$good" ] &&
   grep -q "resume from $tmp/c_ck/$good, the newest checkpoint of a step with a finite loss and gradient norm" "$tmp/c2.log"; then
    pass "c: after max_bad_steps the message names $good, the newest checkpoint of a good step (not $newest)"
else
    failed "c: max_bad_steps message with checkpoints (first bad step '$first_bad', newest $newest):"; show "$tmp/c2.log"
fi
# The metrics file must stay JSON even when the loss or norm is not finite.
if command -v python3 >/dev/null; then
    if out=$(python3 -c '
import json, sys
def bad(c): raise ValueError("non-JSON constant " + c)
for i, line in enumerate(open(sys.argv[1]), 1):
    try: json.loads(line, parse_constant=bad)
    except ValueError as e: print("line %d: %s: %s" % (i, e, line.strip()[:160])); sys.exit(1)
' "$tmp/c.jsonl" 2>&1); then
        pass "c: metrics lines of the non-finite run are valid JSON"
    else
        failed "c: metrics file is not valid JSON lines when a value is non-finite: $out"
    fi
fi

# ---------------------------------------------------------------- d. collective timeout
launch 2 "${model[@]}" --training.steps 1000000 --training.micro_batch_size 4 --parallel.dp 2 \
    --parallel.timeout_s 3 --checkpoint.dir "$tmp/d_ck" --logging.every 1000 >"$tmp/d.log" 2>&1 &
job=$!
for _ in $(seq 1 1000); do grep -q '^step ' "$tmp/d.log" && break; sleep 0.01; done
victim=$(pid_of_rank "$tmp/d_ck" 1)
if [ -z "$victim" ]; then
    failed "d: could not find the process of rank 1"; wait $job
else
    t0=$(now)
    kill -STOP "$victim"
    wait $job; rc=$?
    dt=$(elapsed "$t0")
    kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
    msg=$(grep -m1 'error: .*parallel.timeout_s' "$tmp/d.log")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -n "$msg" ] && le "$dt" 20 && le 2.5 "$dt"; then
        pass "d: rank 1 stopped: job aborted after $dt s (timeout_s 3), status $rc: ${msg#femtotron: }"
    else
        failed "d: rank 1 stopped with timeout_s 3: status $rc after $dt s, log:"; show "$tmp/d.log"
    fi
fi

# ---------------------------------------------------------------- e. start-up errors
printf '{ "training": { "lr": 1e-3, }\n' > "$tmp/broken.json"
# Configuration errors (config files, keys, auto layout, validation:
# train/train_configure.c) are every rank's error: one line without a rank, no
# MPI_ABORT banner. Errors after that (the data loader finding no shard) are still
# each rank's own: one line per rank, one text.
e_case() {  # e_case NAME once|per-rank EXPECTED_REGEX ARGS...
    local name=$1 mode=$2 want=$3; shift 3
    local t0 rc dt lines per texts ok=0
    t0=$(now)
    timeout -k 5 60 "${MPIRUN[@]}" -np 2 "$FEMTOTRON" train "$@" >"$tmp/e.log" 2>&1
    rc=$?; dt=$(elapsed "$t0")
    if [ "$mode" = once ]; then
        lines=$(grep -c '^femtotron: \(rank [0-9]*: \)\?error: ' "$tmp/e.log")
        [ "$lines" -eq 1 ] && grep -q '^femtotron: error: ' "$tmp/e.log" && ! grep -q MPI_ABORT "$tmp/e.log" && ok=1
    else
        lines=$(grep -c '^femtotron: rank [0-9]*: error: ' "$tmp/e.log")
        per=$(grep -o '^femtotron: rank [0-9]*: error: ' "$tmp/e.log" | sort | uniq -c | awk '$1 > 1' | wc -l)
        texts=$(sed -n 's/^femtotron: rank [0-9]*: error: //p' "$tmp/e.log" | sort -u | wc -l)
        [ "$lines" -ge 1 ] && [ "$per" -eq 0 ] && [ "$texts" -eq 1 ] && ok=1
    fi
    if [ $ok = 1 ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && le "$dt" 15 && grep -Eq "error: .*$want" "$tmp/e.log"; then
        pass "e: $name: status $rc in $dt s, $lines error line(s) ($mode): $(grep -m1 ' error: ' "$tmp/e.log" | sed 's/^femtotron: //')"
    else
        failed "e: $name: status $rc in $dt s, $lines error line(s) (want $mode, matching '$want'):"
        show "$tmp/e.log"
    fi
}
base=(--data.train "$tmp/data/train_*.bin" --training.threads 1 --training.peak_flops 1e10
      --training.seq_length 32 --training.micro_batch_size 1)
e_case "dp 4 on 2 ranks" once 'but the job has 2 ranks' "${base[@]}" --parallel.dp 4
e_case "default dp 1 on 2 ranks" once 'but the job has 2 ranks' "${base[@]}"
e_case "tp 2 x pp 2 on 2 ranks" once 'but the job has 2 ranks' "${base[@]}" --parallel.tp 2 --parallel.pp 2
e_case "negative lr" once 'training.lr' "${base[@]}" --parallel.dp 2 --training.lr -1
e_case "unknown key" once 'training.lrr' "${base[@]}" --parallel.dp 2 --training.lrr 1
e_case "zero 4" once 'parallel.zero' "${base[@]}" --parallel.dp 2 --parallel.zero 4
e_case "batch not divisible" once 'training.global_batch_size' "${base[@]}" --parallel.dp 2 --training.global_batch_size 3
e_case "missing data" per-rank 'no token file' "${base[@]}" --parallel.dp 2 --data.train "$tmp/none_*.bin"
e_case "invalid JSON config" once 'broken.json' --config "$tmp/broken.json" "${base[@]}" --parallel.dp 2

exit $fail
