#!/usr/bin/env bash
# tests/shell/test_progress.sh — operating a run: what a person reads on the console
# (start-up date, elapsed time and ETA on each logged step, a line per checkpoint,
# sync or async, the summary), what metrics.jsonl holds (every step whatever
# logging.every says, each with a wall-clock time, val and checkpoint events), a
# kill -9 and resume that leaves each step in the file exactly once, and
# `femtotron plot`.
. "$(dirname "$0")/lib.sh"
fortunes_data
PY=/usr/bin/python3

tiny=(--data.train "$tmp/data/train_*.bin" --training.seq_length 32 --training.micro_batch_size 2
      --training.global_batch_size 2 --model.hidden_size 32 --model.intermediate_size 64
      --model.num_hidden_layers 1 --training.threads 1 --training.peak_flops 1e10
      --training.warmup_steps 2 --logging.every 5)

# A: 12 steps, console every 5, validation every 6, synchronous checkpoints every 4.
"$FT" train "${tiny[@]}" --training.steps 12 --data.val "$tmp/data/train_*.bin" --logging.val_every 6 \
    --logging.val_batches 1 --checkpoint.every 4 --checkpoint.dir "$tmp/ck_a" \
    --logging.metrics "$tmp/a.jsonl" >"$tmp/a.log" 2>&1 || { failed "run a: $(tail -3 "$tmp/a.log")"; exit 1; }

if out=$($PY - "$tmp/a.jsonl" "$tmp/ck_a" <<'PY'
import json, os, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "event" not in r]
assert [r["step"] for r in steps] == list(range(1, 13)), "step records %s" % [r["step"] for r in steps]
times = [r["time"] for r in recs]
assert all(isinstance(t, float) and t > 1.6e9 for t in times), "times %s" % times[:3]
assert times == sorted(times), "times not in order: %s" % times
vals = [(r["step"], r["val_loss"]) for r in recs if r.get("event") == "val"]
assert vals == [(r["step"], r["val_loss"]) for r in steps if "val_loss" in r] and [s for s, _ in vals] == [6, 12], vals
cks = [r for r in recs if r.get("event") == "checkpoint"]
assert [r["step"] for r in cks] == [4, 8, 12], cks
for r in cks:
    size = sum(os.path.getsize(os.path.join(r["path"], f)) for f in os.listdir(r["path"]))
    assert r["path"] == os.path.join(sys.argv[2], "step_%07d" % r["step"]) and r["bytes"] == size and r["seconds"] >= 0, r
print("steps 1..12 once each (logging.every 5), times %.3f..%.3f in order, val events at 6 and 12, "
      "checkpoint events at 4, 8, 12 with the directories' bytes" % (times[0], times[-1]))
PY
); then pass "metrics: $out"; else failed "metrics of run a: $out"; fi

logged=$(grep '^step ' "$tmp/a.log" | awk '{print $2}' | tr '\n' ' ')
if [ "$logged" = "5/12 6/12 10/12 12/12 " ] &&
   [ "$(grep '^step ' "$tmp/a.log" | grep -cE '\| [0-9]+:[0-9]{2}:[0-9]{2} elapsed, ETA [0-9]+:[0-9]{2}:[0-9]{2}$')" -eq 4 ]; then
    pass "console: steps $logged(every 5, validation, the last), each with elapsed and ETA: $(grep -m1 '^step ' "$tmp/a.log" | grep -o '| [0-9:]* elapsed.*')"
else
    failed "console step lines: logged '$logged': $(grep -m1 '^step ' "$tmp/a.log")"
fi
if grep -qE '^started [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2} \(local time\)$' "$tmp/a.log" &&
   [ "$(head -n1 "$tmp/a.log" | cut -c1-7)" = started ]; then
    pass "start-up: $(head -n1 "$tmp/a.log")"
else
    failed "start-up date line: $(head -n1 "$tmp/a.log")"
fi
ck_lines=$(grep -cE "^checkpoint: step (4|8|12) written to $tmp/ck_a/step_00000(04|08|12) \([0-9.]+ MiB, [0-9.]+ s\)$" "$tmp/a.log")
[ "$ck_lines" -eq 3 ] && pass "a checkpoint line per synchronous save: $(grep -m1 '^checkpoint:' "$tmp/a.log")" ||
    failed "checkpoint lines: $ck_lines of 3: $(grep '^checkpoint' "$tmp/a.log" | head -3)"
if grep -qE '^done: 12 steps in this run \(1\.\.12 of 12\) \| 768 tokens \| wall time [0-9:]+ \(training [0-9:]+\) \| mean [0-9]+ tok/s \| mean mfu [0-9.]+%$' "$tmp/a.log" &&
   grep -qE '^  best val_loss [0-9.]+ at step (6|12)$' "$tmp/a.log" && grep -q "^  checkpoints: $tmp/ck_a/latest$" "$tmp/a.log" &&
   grep -q "^  metrics: $tmp/a.jsonl$" "$tmp/a.log" && [ "$(tail -n1 "$tmp/a.log")" = "  metrics: $tmp/a.jsonl" ]; then
    pass "summary: $(grep '^done:' "$tmp/a.log") / $(grep 'best val_loss' "$tmp/a.log")"
else
    failed "summary: $(grep -A4 '^done' "$tmp/a.log")"
fi

# B: asynchronous saves are reported when published, before the summary.
"$FT" train "${tiny[@]}" --training.steps 12 --checkpoint.every 4 --checkpoint.async true \
    --checkpoint.dir "$tmp/ck_b" --logging.metrics "$tmp/b.jsonl" >"$tmp/b.log" 2>&1 || failed "run b: $(tail -3 "$tmp/b.log")"
ck_lines=$(grep -cE '^checkpoint: step (4|8|12) written to .*step_00000(04|08|12) \([0-9.]+ MiB, [0-9.]+ s, written in the background\)$' "$tmp/b.log")
ck_events=$(grep -c '"event": "checkpoint"' "$tmp/b.jsonl")
if [ "$ck_lines" -eq 3 ] && [ "$ck_events" -eq 3 ] && grep -A1 'step 12 written' "$tmp/b.log" | grep -q '^done: 12 steps'; then
    pass "async: 3 checkpoint lines and events, the last before the summary: $(grep -m1 '^checkpoint:' "$tmp/b.log")"
else
    failed "async checkpoint lines $ck_lines, events $ck_events: $(grep -A1 '^checkpoint' "$tmp/b.log" | tail -4)"
fi

# C: kill -9 after the step-20 checkpoint and some steps past it; the resume cuts
# metrics.jsonl back to the checkpoint's step, so every step is there once.
mid=(--data.train "$tmp/data/train_*.bin" --training.steps 300 --training.seq_length 64 --training.micro_batch_size 4
     --training.grad_acc_steps 2 --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
     --training.threads 1 --training.peak_flops 1e10 --training.warmup_steps 2 --logging.every 50
     --checkpoint.every 20 --checkpoint.dir "$tmp/ck_c" --logging.metrics "$tmp/c.jsonl")
"$FT" train "${mid[@]}" >"$tmp/c.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    grep -q '"step": 25, "loss"' "$tmp/c.jsonl" 2>/dev/null && break
    sleep 0.01
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
cp "$tmp/c.jsonl" "$tmp/c_killed.jsonl"
K=$(readlink "$tmp/ck_c/latest" | sed 's/^step_0*//')
"$FT" train "${mid[@]}" --checkpoint.resume true >"$tmp/c2.log" 2>&1 || failed "resume c: $(tail -3 "$tmp/c2.log")"
if out=$($PY - "$tmp/c_killed.jsonl" "$tmp/c.jsonl" "${K:-0}" <<'PY'
import json, sys
killed_lines, lines, K = open(sys.argv[1]).read().split("\n"), open(sys.argv[2]).read().split("\n"), int(sys.argv[3])
steps = [json.loads(l)["step"] for l in lines if l and "event" not in json.loads(l)]
killed = [json.loads(l)["step"] for l in killed_lines[:-1] if "event" not in json.loads(l)]  # [-1]: partial or ""
assert K >= 20 and max(killed) > K, "killed at step %d, checkpoint %d: nothing to cut" % (max(killed), K)
assert steps == list(range(1, 301)), "steps: %d records, %d distinct" % (len(steps), len(set(steps)))
keep = [l for l in killed_lines[:-1] if json.loads(l)["step"] <= K]
assert lines[:len(keep)] == keep, "the records up to step %d changed" % K
assert all(json.loads(l)["step"] > K for l in lines[len(keep):] if l), "an old record after the cut"
print("killed at step %d, resumed from step %d: steps 1..300 once each, the %d records up to step %d unchanged"
      % (max(killed), K, len(keep), K))
PY
); then pass "kill -9 and resume: $out"; else failed "kill -9 and resume: $out"; fi

# femtotron plot: one file, two files overlaid, and refusals.
png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
if "$FT" plot "$tmp/a.jsonl" >"$tmp/p1.log" 2>&1 && png "$tmp/a.png" &&
   "$FT" plot --output "$tmp/ab.png" "$tmp/a.jsonl" "$tmp/b.jsonl" >"$tmp/p2.log" 2>&1 && png "$tmp/ab.png"; then
    pass "plot: PNGs from one file ($(stat -c %s "$tmp/a.png") bytes) and two ($(stat -c %s "$tmp/ab.png") bytes): $(cat "$tmp/p2.log")"
else
    failed "plot: $(cat "$tmp/p1.log" "$tmp/p2.log" 2>/dev/null | tail -3)"
fi
head -c -40 "$tmp/c.jsonl" >"$tmp/partial.jsonl"  # a run still writing its last line
"$FT" plot --output "$tmp/partial.png" "$tmp/partial.jsonl" >"$tmp/p3.log" 2>&1 && png "$tmp/partial.png" &&
    pass "plot: a partial last line is ignored" || failed "plot of a partial file: $(cat "$tmp/p3.log")"
: >"$tmp/empty.jsonl"
"$FT" plot "$tmp/missing.jsonl" >"$tmp/p4.log" 2>&1; rc4=$?
"$FT" plot "$tmp/empty.jsonl" >"$tmp/p5.log" 2>&1; rc5=$?
if [ $rc4 -ne 0 ] && grep -q "plot: $tmp/missing.jsonl: no such file" "$tmp/p4.log" &&
   [ $rc5 -ne 0 ] && grep -q "plot: $tmp/empty.jsonl holds no step record" "$tmp/p5.log" && [ ! -e "$tmp/empty.png" ]; then
    pass "plot refuses a missing file ($(cat "$tmp/p4.log")) and an empty one"
else
    failed "plot refusals: exit $rc4 '$(cat "$tmp/p4.log")', exit $rc5 '$(cat "$tmp/p5.log")'"
fi
exit $fail
