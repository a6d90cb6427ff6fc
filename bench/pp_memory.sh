#!/usr/bin/env bash
# bench/pp_memory.sh — activation memory per pipeline stage under the afab, 1f1b
# and interleaved (v = 2) schedules at pp = 4 with M = 8 micro-batches per step.
# Expected: AFAB keeps all M micro-batches of a step in flight on every stage,
# 1F1B at most pp - s on stage s (Narayanan et al. 2021), interleaved 1F1B a little
# more than 1F1B (chunk-micro-batches of 1/v of a stage each).
#
# Two measurements per run:
#   - activation bytes: every rank's start-up line "memory (rank R): ... activations
#     X MiB" (--logging.verbose true): the activation slots the schedule planned,
#     with their token buffers (src/engines/pipeline.c; the gradient
#     messages between stages are communication buffers, not counted here);
#   - micro-batches in flight: from the run's trace (logging.trace), per rank and
#     chunk the most micro-batches whose forward has started and whose backward has
#     not yet ended, in the order the rank really executed them.
# The bytes of one in-flight micro-batch on a stage and the fixed part (the backward
# scratch shared by all slots) come from two extra AFAB runs with M = 1 and M = 8:
# per slot = (A(8) - A(1)) / 7, fixed = A(1) - per slot; "slots in memory" =
# (A - fixed) / per slot is then how many micro-batches the bytes pay for.
#
# Output: bench/results/pp_memory.md. Usage: bench/pp_memory.sh
# (FEMTOTRON=path overrides ./femtotron)
. "$(dirname "$0")/lib.sh"
bench_corpus

PP=4
M=8
MODEL=(--model.hidden_size 256 --model.intermediate_size 768 --model.num_hidden_layers 8
       --model.num_attention_heads 4 --model.num_key_value_heads 2)

run() {  # run NAME SCHEDULE V M
    local name=$1 sched=$2 v=$3 m=$4
    mpirun --oversubscribe --allow-run-as-root -np $PP "$FT" train \
        --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
        --training.steps 1 --training.threads 1 --training.peak_flops 1e10 \
        --training.seq_length 128 --training.micro_batch_size 4 --training.grad_acc_steps "$m" \
        --parallel.pp $PP --parallel.pp_schedule "$sched" --parallel.pp_virtual "$v" \
        --logging.verbose true --logging.trace "$TMP/$name.json" >"$TMP/$name.log" 2>&1 ||
        { echo "run $name failed:"; tail -5 "$TMP/$name.log"; exit 1; }
    # memory (rank R): params X MiB | grads X MiB | optimizer X MiB | activations X MiB | total X MiB
    awk '/^memory \(rank / { sub(/\):/, "", $3); print $3, $17 }' "$TMP/$name.log" | sort -n >"$TMP/$name.mem"
    [ "$(wc -l <"$TMP/$name.mem")" -eq $PP ] || { echo "run $name: expected $PP memory lines"; exit 1; }
}
run afab afab 1 $M
run 1f1b 1f1b 1 $M
run interleaved interleaved 2 $M
run afab_m1 afab 1 1
echo "runs done"

/usr/bin/python3 - "$TMP" $PP $M "$RES/pp_memory.md" <<'EOF'
import json, sys
tmp, P, M, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def mem(name):
    return {int(r): float(a) for r, a in (l.split() for l in open(f"{tmp}/{name}.mem"))}

def in_flight(name, v):
    """Per rank: most micro-batches forwarded and not yet backwarded, per chunk and
    over all chunks at once (the joint peak)."""
    ev = [e for e in json.load(open(f"{tmp}/{name}.json"))["traceEvents"]
          if e.get("ph") == "X" and e["name"] in ("forward", "backward") and e["args"]["step"] == 1]
    res = {}
    for r in range(P):
        pts = []
        for e in ev:
            if e["tid"] != r:
                continue
            if e["name"] == "forward":
                pts.append((e["ts"], 1, e["args"]["chunk"]))
            else:
                pts.append((e["ts"] + e["dur"], -1, e["args"]["chunk"]))
        live, peak, joint = [0] * v, [0] * v, 0
        for _, d, c in sorted(pts):
            live[c] += d
            peak[c] = max(peak[c], live[c])
            joint = max(joint, sum(live))
        res[r] = peak + [joint]
    return res

A = {n: mem(n) for n in ("afab", "1f1b", "interleaved", "afab_m1")}
F = {n: in_flight(n, 2 if n == "interleaved" else 1) for n in ("afab", "1f1b", "interleaved")}
per = {s: (A["afab"][s] - A["afab_m1"][s]) / (M - 1) for s in range(P)}
fixed = {s: A["afab_m1"][s] - per[s] for s in range(P)}
slots = lambda n, s: (A[n][s] - fixed[s]) / per[s]

L = []
L.append("# Activation memory per pipeline stage: afab vs 1f1b vs interleaved")
L.append("")
L.append(f"pp = {P}, M = {M} micro-batches per step; model 8 layers (2 per stage), hidden 256,")
L.append("intermediate 768, 4/2 heads, vocab 257; seq 128 x micro-batch 4; one step, threads 1.")
L.append("")
L.append("- **activations MiB**: each rank's start-up memory line (planned activation slots with their")
L.append("  token buffers; the gradient messages between stages count as comm; --logging.verbose true).")
L.append("- **in flight (trace)**: most micro-batches forwarded but not yet backwarded on that rank,")
L.append("  from the order of its forward/backward events in the run's trace (interleaved: per chunk).")
L.append(f"- **per micro-batch / fixed**: from AFAB runs with M = 1 and M = {M}: per = (A({M}) - A(1)) / {M - 1},")
L.append("  fixed = A(1) - per (the backward scratch, shared by all slots); **slots in memory** =")
L.append("  (activations - fixed) / per: how many micro-batches of a stage the bytes pay for.")
L.append("")
L.append(f"| stage | per micro-batch MiB | fixed MiB | afab MiB | afab in flight | afab slots in memory | 1f1b MiB | 1f1b in flight | 1f1b slots in memory | expected 1f1b (pp - s) | 1f1b / afab |")
L.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in range(P):
    L.append(f"| {s} | {per[s]:.1f} | {fixed[s]:.1f} | {A['afab'][s]:.1f} | {F['afab'][s][0]} | {slots('afab', s):.2f} "
             f"| {A['1f1b'][s]:.1f} | {F['1f1b'][s][0]} | {slots('1f1b', s):.2f} | {P - s} | {A['1f1b'][s] / A['afab'][s]:.3f} |")
tot = lambda n: sum(A[n].values())
L.append(f"| all | | | {tot('afab'):.1f} | | | {tot('1f1b'):.1f} | | | | {tot('1f1b') / tot('afab'):.3f} |")
L.append("")
L.append(f"Interleaved 1F1B (v = 2: rank s holds virtual stages s and s + {P}, one layer each, so a chunk")
L.append("micro-batch holds about half a stage's activations). The chunks share one pool of slots, as")
L.append("many as they hold at once (\"joint\"), each sized for the larger chunk, where that plans fewer")
L.append("bytes than a pool per chunk of its own peak (\"per-chunk sum\"; engines/pipeline.c). Megatron-LM's")
L.append("count is warm-up + 1 = (pp - s - 1)·2 + (v - 1)·pp + 1:")
L.append("")
L.append("| stage | activations MiB | vs 1f1b MiB | in flight chunk 0 | chunk 1 | per-chunk sum | joint in flight | Megatron warm-up + 1 |")
L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in range(P):
    c0, c1, j = F["interleaved"][s]
    L.append(f"| {s} | {A['interleaved'][s]:.1f} | {A['interleaved'][s] / A['1f1b'][s]:.3f} | {c0} | {c1} | {c0 + c1} "
             f"| {j} | {min((P - s - 1) * 2 + P + 1, 2 * M)} |")
L.append(f"| all | {tot('interleaved'):.1f} | {tot('interleaved') / tot('1f1b'):.3f} | | | "
         f"{sum(sum(F['interleaved'][s][:2]) for s in range(P))} | {sum(F['interleaved'][s][2] for s in range(P))} | |")
open(out, "w").write("\n".join(L) + "\n")
EOF
cat "$RES/pp_memory.md"
