#!/usr/bin/env bash
# tests/shell/test_trace.sh — logging.trace writes one valid Chrome trace-event file for a
# pp = 2 (2 ranks) 1F1B run, with the events the pipeline schedule implies:
#   - valid JSON, an object with a traceEvents list; complete events ("ph": "X")
#     with name, ts, dur >= 0, tid = world rank and args {step, chunk, micro};
#   - events from both ranks (tid 0 and 1);
#   - every step: M forward and M backward events per rank (micro 0..M-1 once
#     each), in the 1F1B order (stage s: pp - s - 1 warm-up forwards, then one
#     forward / one backward, then the remaining backwards); one optimizer event
#     per rank and step;
#   - on every rank a rank's events do not overlap (one executor thread), and the
#     backward of micro m starts after its forward of micro m ended;
#   - message dependencies across ranks: the last stage's forward of micro m starts
#     after the first stage's forward of m ended (activation message), and the
#     first stage's backward of m starts after the last stage's backward of m
#     ended (gradient message). These compare timestamps of two ranks, so they
#     also check that the ranks' time origins are aligned;
#   - the per-rank temporary files PATH.rankN are gone after the merge.
# Timestamps are printed with 0.1 us resolution (ts and dur rounded separately),
# so comparisons allow 0.2 us.
. "$(dirname "$0")/lib.sh"
fortunes_data

M=4
STEPS=3
mkdir -p "$tmp/out"
trace="$tmp/out/trace.json"
mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" train --data.train "$tmp/data/train_*.bin" \
    --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2 \
    --model.num_attention_heads 4 --model.num_key_value_heads 2 \
    --training.seq_length 32 --training.micro_batch_size 2 --training.grad_acc_steps $M \
    --training.steps $STEPS --training.threads 1 --training.peak_flops 1e10 \
    --parallel.pp 2 --parallel.pp_schedule 1f1b --logging.trace "$trace" >"$tmp/run.log" 2>&1 ||
    { failed "pp=2 1f1b run with logging.trace"; tail -20 "$tmp/run.log"; exit 1; }
pass "pp=2 1f1b run with logging.trace"

left=$(ls "$tmp/out" | grep -c '\.rank[0-9]*$')
if [ "$left" -eq 0 ]; then pass "per-rank files $trace.rankN removed"
else failed "$left per-rank file(s) left: $(ls "$tmp/out" | tr '\n' ' ')"; fi

/usr/bin/python3 - "$trace" $M $STEPS <<'EOF' || fail=1
import json, sys
path, M, STEPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PP, EPS = 2, 0.2
bad = 0
def check(ok, what):
    global bad
    print(("PASS " if ok else "FAIL ") + what)
    bad |= not ok
    return ok

try:
    doc = json.load(open(path))
except Exception as e:
    check(False, f"trace is valid JSON ({e})"); sys.exit(1)
check(True, "trace is valid JSON")
if not check(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list),
             "top level is an object with a traceEvents list"):
    sys.exit(1)
ev = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
def well_formed(e):
    a = e.get("args", {})
    return (isinstance(e.get("name"), str) and isinstance(e.get("ts"), (int, float))
            and isinstance(e.get("dur"), (int, float)) and isinstance(e.get("tid"), int)
            and all(isinstance(a.get(k), int) for k in ("step", "chunk", "micro")))
check(len(ev) > 0 and all(well_formed(e) for e in ev),
      f"{len(ev)} complete events, each with name, ts, dur, tid and args step/chunk/micro")
ev = [e for e in ev if well_formed(e)]
neg = [e for e in ev if e["dur"] < 0]
check(not neg, f"every duration >= 0" + (f" (first bad: {neg[0]})" if neg else ""))
check({e["tid"] for e in ev} == {0, 1}, f"events from ranks 0 and 1 (tids {sorted({e['tid'] for e in ev})})")

end = lambda e: e["ts"] + e["dur"]
def pick(name, tid, step):
    return sorted((e for e in ev if e["name"] == name and e["tid"] == tid and e["args"]["step"] == step),
                  key=lambda e: e["ts"])

def order_1f1b(stage):  # the 1F1B action list of stage s (as "F0", "B0", ...)
    warm = min(PP - stage - 1, M)
    out = [f"F{i}" for i in range(warm)]
    for i in range(M - warm):
        out += [f"F{warm + i}", f"B{i}"]
    return out + [f"B{i}" for i in range(M - warm, M)]

counts = order = serial = local = fwd_dep = bwd_dep = opt = True
worst_f = worst_b = float("inf")
for step in range(1, STEPS + 1):
    fw = {r: {e["args"]["micro"]: e for e in pick("forward", r, step)} for r in (0, 1)}
    bw = {r: {e["args"]["micro"]: e for e in pick("backward", r, step)} for r in (0, 1)}
    for r in (0, 1):
        nf, nb = len(pick("forward", r, step)), len(pick("backward", r, step))
        if nf != M or nb != M or set(fw[r]) != set(range(M)) or set(bw[r]) != set(range(M)):
            counts = False
            print(f"  step {step} rank {r}: {nf} forward, {nb} backward, micros {sorted(fw[r])} / {sorted(bw[r])}")
            continue
        seq = [("F" if e["name"] == "forward" else "B") + str(e["args"]["micro"])
               for e in sorted(list(fw[r].values()) + list(bw[r].values()), key=lambda e: e["ts"])]
        if seq != order_1f1b(r):
            order = False
            print(f"  step {step} rank {r}: order {' '.join(seq)}, 1F1B is {' '.join(order_1f1b(r))}")
        if len(pick("optimizer", r, step)) != 1:
            opt = False
            print(f"  step {step} rank {r}: {len(pick('optimizer', r, step))} optimizer events")
        mine = sorted((e for e in ev if e["tid"] == r and e["args"]["step"] == step), key=lambda e: e["ts"])
        for a, b in zip(mine, mine[1:]):
            if b["ts"] < end(a) - EPS:
                serial = False
                print(f"  step {step} rank {r}: {b['name']} {b['args']} starts at {b['ts']} before "
                      f"{a['name']} {a['args']} ends at {end(a)}")
        for m in range(M):
            if bw[r][m]["ts"] < end(fw[r][m]) - EPS:
                local = False
                print(f"  step {step} rank {r} micro {m}: backward starts {bw[r][m]['ts']} < forward end {end(fw[r][m])}")
    if not counts:
        continue
    for m in range(M):
        gf = fw[1][m]["ts"] - end(fw[0][m])   # activation message 0 -> 1
        gb = bw[0][m]["ts"] - end(bw[1][m])   # gradient message 1 -> 0
        worst_f, worst_b = min(worst_f, gf), min(worst_b, gb)
        if gf < -EPS:
            fwd_dep = False
            print(f"  step {step} micro {m}: last stage forward starts {gf:.1f} us before the first stage's forward ended")
        if gb < -EPS:
            bwd_dep = False
            print(f"  step {step} micro {m}: first stage backward starts {-gb:.1f} us before the last stage's backward ended")

check(counts, f"every step: {M} forward and {M} backward events per rank, micros 0..{M - 1}")
check(order, "forward/backward order per rank is 1F1B (stage s: pp - s - 1 warm-up forwards)")
check(opt, "one optimizer event per rank and step")
check(serial, "a rank's events never overlap")
check(local, "on every rank, backward of micro m starts after its forward of m ended")
check(fwd_dep, f"last stage forward of m starts after the first stage's forward of m ended (min gap {worst_f:.1f} us)")
check(bwd_dep, f"first stage backward of m starts after the last stage's backward of m ended (min gap {worst_b:.1f} us)")
sys.exit(1 if bad else 0)
EOF
[ "$fail" -eq 0 ] || exit 1
