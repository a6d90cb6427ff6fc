#!/usr/bin/env bash
# bench/pp_bubble.sh — pipeline bubble of the afab, 1f1b, interleaved (v = 2) and
# zero-bubble zb-h1 and zb-v (v = 2, chunks in a V) schedules at pp = 2 and 4 for M = pp, 2pp, 4pp micro-batches
# per step, next to the formula (p - 1) / (v m) (bubble time over ideal compute
# time; Narayanan et al. 2021, eq. 1 and 3), for zb-h1 (p - 1)(TF + TB - TW) /
# (m (TF + TB + TW)) = (p - 1) / (3m) at TF = TB = TW (Qi et al. 2023; zb-v: 0 in
# the paper's handcrafted schedule, ours comes from a greedy replay), with each
# run's step time and every stage's planned activation memory.
#
# Every run writes a Chrome trace (logging.trace); the bubble is computed from it
# in three ways (see the "Pipeline bubble" section of bench/README.md):
#
#   schedule bubble (pp = 2 and 4): replay of the trace's event ORDER in unit
#     time. Each rank's forward/backward events, sorted by start time on that
#     rank's own clock, give the order in which the rank really executed its
#     actions; they are replayed with forward = 1/v, backward = 2/v time units
#     per chunk (a split backward's input half I and weight half W 1/v each) and
#     the message dependencies F(k, m) after F(k-1, m), B or I(k, m) after B or
#     I(k+1, m) (k = virtual stage), W(k, m) after I(k, m): the replay of
#     plan/pipeline_sim.c (the planner) on equal stages. Bubble = T / (3M) - 1, T the
#     replayed makespan, 3M the work of one rank. Independent of how the ranks
#     time-share the cores; it measures the schedule, not the machine.
#
#   timed replay (pp = 2 only): the same replay with each virtual stage's median
#     measured forward and backward durations (steps 2..N): the real stage
#     imbalance and backward/forward ratio without the noise of single events.
#
#   measured bubble (pp = 2 only: 2 ranks on the 2 cores, threads 1): per step,
#     span = first stage's first forward start to its last backward end (one
#     rank's clock: the first stage starts every step and ends it), busy = sum of
#     a rank's forward + backward durations; bubble = span / mean busy - 1 (idle
#     time from the schedule AND from unequal stage times) and span / slowest
#     rank's busy - 1 (the schedule's bubble around the slowest stage, the figure
#     the formula predicts when stages are unequal); medians over steps 2..N,
#     per-rank busy printed to show the imbalance. At pp = 4 the 4 ranks share 2 cores, so a waiting
#     rank lends its core to a computing one and wall-clock idle time is not a
#     bubble; no measured value is given there.
#
# Output: bench/results/pp_bubble.md (table), pp_bubble.png (plot), pp_bubble.dat.
# Usage: bench/pp_bubble.sh   (FEMTOTRON=path overrides ./femtotron; STEPS=N)
. "$(dirname "$0")/lib.sh"
bench_corpus

# 8 layers (2 per virtual stage at pp = 4, v = 2), hidden 256, seq 128, micro-batch 2.
MODEL=(--model.hidden_size 256 --model.intermediate_size 768 --model.num_hidden_layers 8
       --model.num_attention_heads 4 --model.num_key_value_heads 2)
STEPS=${STEPS:-5}

cat >"$TMP/bubble.py" <<'EOF'
# bubble.py TRACE PP V M MEASURE SCHED -> "sim timed measured_vs_mean measured_vs_slowest busy_ms(per rank) span_ms"
import json, statistics, sys
path, P, V, M, measure = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
vee = sys.argv[6] == "zb-v"  # chunk c of rank r is virtual stage r (c = 0) or 2P-1-r (c = 1)
OPS = {"forward": "F", "backward": "B", "backward-input": "I", "backward-weight": "W"}
ev = [e for e in json.load(open(path))["traceEvents"]
      if e.get("ph") == "X" and e["name"] in OPS and e["args"]["step"] > 0]
split = any(OPS[e["name"]] == "W" for e in ev)
UNIT = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
steps = sorted({e["args"]["step"] for e in ev})
K = P * V                                      # virtual stages; chunk c of rank r is c * P + r
def stage(c, r): return (r if c == 0 else 2 * P - 1 - r) if vee else c * P + r

def replay(step, cost):
    """Replay of every rank's action order, an action op of virtual stage k taking
    cost(op, k); returns the makespan."""
    todo = {r: [(OPS[e["name"]], stage(e["args"]["chunk"], r), e["args"]["micro"])
                for e in sorted((e for e in ev if e["tid"] == r and e["args"]["step"] == step),
                                key=lambda e: e["ts"])] for r in range(P)}
    assert all(len(todo[r]) == (3 if split else 2) * M * V for r in range(P)), f"step {step}: wrong action count"
    done, free, pos = {}, [0.0] * P, [0] * P
    while any(pos[r] < len(todo[r]) for r in range(P)):
        moved = False
        for r in range(P):
            while pos[r] < len(todo[r]):
                op, k, m = todo[r][pos[r]]
                # B and I both end as "B": what the previous stage waits for.
                dep = ("F", k - 1, m) if op == "F" and k > 0 else ("B", k, m) if op == "W" else \
                      ("B", k + 1, m) if op != "F" and k < K - 1 else ("F", k, m) if op != "F" else None
                if dep is not None and dep not in done:
                    break
                t0 = max(free[r], done[dep] if dep else 0.0)
                free[r] = done[("B" if op == "I" else op, k, m)] = t0 + cost(op, k)
                pos[r] += 1
                moved = True
        if not moved:
            sys.exit(f"step {step}: the action order deadlocks")
    return max(free)

sims = [replay(s, lambda op, k: UNIT[op] / V) / (3.0 * M) - 1.0 for s in steps]
assert max(sims) - min(sims) < 1e-9, f"schedule differs between steps: {sims}"
# Replay with each (virtual stage, forward/backward)'s median measured duration
# (steps 2..N): the real stage imbalance and backward/forward ratio, without noise.
timed = float("nan")
med = {}
ops = ("F", "I", "W") if split else ("F", "B")
for op in ops if measure else ():
    for k in range(K):
        d = [e["dur"] for e in ev if e["args"]["step"] > 1 and OPS[e["name"]] == op
             and stage(e["args"]["chunk"], e["tid"]) == k]
        med[(op, k)] = statistics.median(d)
if measure:
    mean_work = statistics.mean(sum(M * sum(med[(op, k)] for op in ops) for c in range(V) for k in [stage(c, r)])
                                for r in range(P))
    timed = statistics.median(replay(s, lambda op, k: med[(op, k)]) for s in steps[1:]) / mean_work - 1.0
meas_mean = meas_max = float("nan")
busy_ms, span_ms = "nan", "nan"
if measure:
    rows = []
    for s in steps[1:]:                         # step 1 warms up caches and pages
        first = [e for e in ev if e["tid"] == 0 and e["args"]["step"] == s]
        span = max(e["ts"] + e["dur"] for e in first) - min(e["ts"] for e in first)
        busy = [sum(e["dur"] for e in ev if e["tid"] == r and e["args"]["step"] == s) for r in range(P)]
        rows.append((span / statistics.mean(busy) - 1.0, span / max(busy) - 1.0, busy, span))
    meas_mean = statistics.median(r[0] for r in rows)
    meas_max = statistics.median(r[1] for r in rows)
    busy_ms = "/".join(f"{statistics.median(row[2][r] for row in rows) / 1e3:.0f}" for r in range(P))
    span_ms = f"{statistics.median(r[3] for r in rows) / 1e3:.0f}"
print(f"{sims[0]:.4f} {timed:.4f} {meas_mean:.4f} {meas_max:.4f} {busy_ms} {span_ms}")
EOF

DAT="$RES/pp_bubble.dat"
echo "# pp schedule v M formula sim_ratio timed_ratio measured_vs_mean measured_vs_slowest busy_ms_per_rank span_ms step_ms act_mib_per_rank" >"$DAT"
for pp in 2 4; do
    for sched in afab 1f1b interleaved zb-h1 zb-v; do
        v=1; [ "$sched" = interleaved ] || [ "$sched" = zb-v ] && v=2
        for M in $pp $((2 * pp)) $((4 * pp)); do
            log="$TMP/run.log"
            trace="$TMP/trace_${pp}_${sched}_${M}.json"
            mpirun --oversubscribe --allow-run-as-root -np "$pp" "$FT" train \
                --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
                --training.steps "$STEPS" --training.threads 1 --training.peak_flops 1e10 \
                --training.seq_length 128 --training.micro_batch_size 2 --training.grad_acc_steps "$M" \
                --parallel.pp "$pp" --parallel.pp_schedule "$sched" --parallel.pp_virtual "$v" \
                --logging.trace "$trace" --logging.verbose true --logging.metrics "$TMP/metrics.jsonl" \
                >"$log" 2>&1 || { echo "run pp=$pp $sched M=$M failed:"; tail -5 "$log"; exit 1; }
            measure=0; [ "$pp" -eq 2 ] && measure=1
            r=$(/usr/bin/python3 "$TMP/bubble.py" "$trace" "$pp" "$v" "$M" "$measure" "$sched")
            f=$(awk -v p="$pp" -v v="$v" -v m="$M" -v s="$sched" 'BEGIN { d = s == "zb-h1" ? 3 * m : v * m; printf "%.4f", s == "zb-v" ? 0 : (p - 1) / d }')
            # Median step time (steps 2..N) and every rank's planned activation bytes.
            step_ms=$(grep -o '"step_ms": [0-9.]*' "$TMP/metrics.jsonl" | awk 'NR > 1 { print $2 }' | sort -n |
                      awk '{ a[NR] = $1 } END { printf "%.0f", NR ? a[int((NR + 1) / 2)] : 0 }')
            act=$(sed -n 's/^memory bytes (rank \([0-9]*\)):.* activations \([0-9]*\) .*/\1 \2/p' "$log" | sort -n |
                  awk '{ printf "%s%.1f", (NR > 1 ? "/" : ""), $2 / 1048576 }')
            rm -f "$TMP/metrics.jsonl"
            echo "$pp $sched $v $M $f $r $step_ms $act" | tee -a "$DAT"
        done
    done
done

{
    echo "# Pipeline bubble: afab, 1f1b, interleaved, zb-h1, zb-v"
    echo
    echo "Model: 8 layers, hidden 256, intermediate 768, 4/2 heads, vocab 257; seq 128 x micro-batch 2;"
    echo "$STEPS steps per run, threads 1, one rank per pipeline stage (4 ranks on 2 cores at pp = 4)."
    echo "Bubble = bubble time / ideal compute time; formula (p - 1) / (v m), for zb-h1 (p - 1) / (3m)"
    echo "(Qi et al. 2023 at equal F, B and W), for zb-v 0 (the paper's handcrafted ZB-V; femtotron's"
    echo "lists come from a greedy replay). The idle fraction of a step is bubble / (1 + bubble)."
    echo "Method: bench/README.md, section \"Pipeline bubble\"."
    echo
    echo "- **schedule**: each rank's event order from the trace, replayed in unit time (forward 1/v,"
    echo "  backward 2/v per chunk, zb-h1's I and W 1/v each; an action waits for its message from the"
    echo "  neighbouring virtual stage): the planner's replay (plan/pipeline_sim.c) of the same lists."
    echo "- **timed replay**: the same replay with each virtual stage's median measured forward and"
    echo "  backward durations (steps 2..$STEPS): real stage imbalance and backward/forward ratio, no"
    echo "  noise (pp = 2 only)."
    echo "- **measured** (pp = 2 only, 2 ranks on 2 cores): span of a step on the first stage (it starts"
    echo "  and ends every step) / busy - 1, busy = a rank's forward + backward time; **vs mean** divides"
    echo "  by the mean over ranks (counts idle time from unequal stages too), **vs slowest** by the"
    echo "  slowest rank (the bubble around the bottleneck stage). Medians over steps 2..$STEPS; busy per"
    echo "  rank and span in ms. Not given at pp = 4, where a waiting rank lends its core to another"
    echo "  rank, so wall-clock idle time is not a bubble."
    echo "- **step ms**: median step time (steps 2..$STEPS; at pp = 4 on 2 shared cores). **activations MiB**:"
    echo "  each rank's planned (= allocated) activation memory, slots and zb-h1's weight-gradient stashes."
    echo
    echo "| pp | schedule | v | M | formula | schedule | timed replay | measured vs mean | measured vs slowest | busy ms (rank 0/1) | span ms | step ms | activations MiB (per rank) |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    awk 'function f(x) { return x == "nan" ? "–" : x }
         function g(x) { return x == "nan" ? "–" : sprintf("%.3f", x) }
         !/^#/ { printf "| %d | %s | %d | %d | %.3f | %.3f | %s | %s | %s | %s | %s | %s | %s |\n",
                 $1, $2, $3, $4, $5, $6, g($7), g($8), g($9), f($10), f($11), $12, $13 }' "$DAT"
} >"$RES/pp_bubble.md"

gnuplot <<EOF
set terminal pngcairo size 1300,560 noenhanced
set output "$RES/pp_bubble.png"
set multiplot layout 1,2 title "Pipeline bubble (bubble time / ideal compute time) vs micro-batches per step M"
set xlabel "M (micro-batches per step)"
set ylabel "bubble / ideal"
set logscale x 2
set grid
set key top right font ",9"
set yrange [0:*]
do for [p=2:4:2] {
    set title (p == 2 ? "pp = 2 (2 ranks on 2 cores)" : "pp = 4 (4 ranks on 2 cores: no wall-clock measurement)")
    set xrange [p/1.3 : 4*p*1.3]
    set xtics (p, 2*p, 4*p)
    plot (p-1.0)/x with lines lw 2 lc rgb "gray30" dt 2 title "(p-1)/m", \
         (p-1.0)/(2*x) with lines lw 2 lc rgb "gray60" dt 2 title "(p-1)/(2m)", \
         "$DAT" using (\$1==p && strcol(2) eq "afab" ? \$4 : 1/0):6 with points pt 6 ps 2.2 lc 1 title "afab schedule", \
         "$DAT" using (\$1==p && strcol(2) eq "1f1b" ? \$4 : 1/0):6 with points pt 2 ps 1.6 lc 2 title "1f1b schedule", \
         "$DAT" using (\$1==p && strcol(2) eq "interleaved" ? \$4 : 1/0):6 with points pt 12 ps 1.8 lc 4 title "interleaved v=2 schedule", \
         (p-1.0)/(3*x) with lines lw 2 lc rgb "dark-green" dt 2 title "(p-1)/(3m) (zb-h1)", \
         "$DAT" using (\$1==p && strcol(2) eq "zb-h1" ? \$4 : 1/0):6 with points pt 8 ps 1.8 lc rgb "dark-green" title "zb-h1 schedule", \
         "$DAT" using (\$1==p && strcol(2) eq "zb-h1" ? \$4 : 1/0):(\$9==\$9 ? \$9 : 1/0) with linespoints lw 2 pt 9 lc rgb "dark-green" title "zb-h1 measured (vs slowest rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "zb-v" ? \$4 : 1/0):6 with points pt 4 ps 1.8 lc rgb "orange" title "zb-v schedule", \
         "$DAT" using (\$1==p && strcol(2) eq "zb-v" ? \$4 : 1/0):(\$9==\$9 ? \$9 : 1/0) with linespoints lw 2 pt 5 lc rgb "orange" title "zb-v measured (vs slowest rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "afab" ? \$4 : 1/0):(\$9==\$9 ? \$9 : 1/0) with linespoints lw 2 pt 7 lc 1 title "afab measured (vs slowest rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "1f1b" ? \$4 : 1/0):(\$9==\$9 ? \$9 : 1/0) with linespoints lw 2 pt 5 lc 2 title "1f1b measured (vs slowest rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "interleaved" ? \$4 : 1/0):(\$9==\$9 ? \$9 : 1/0) with linespoints lw 2 pt 13 lc 4 title "interleaved measured (vs slowest rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "afab" ? \$4 : 1/0):(\$8==\$8 ? \$8 : 1/0) with lines lw 1 lc 1 dt 3 title "afab measured (vs mean rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "1f1b" ? \$4 : 1/0):(\$8==\$8 ? \$8 : 1/0) with lines lw 1 lc 2 dt 3 title "1f1b measured (vs mean rank)", \
         "$DAT" using (\$1==p && strcol(2) eq "interleaved" ? \$4 : 1/0):(\$8==\$8 ? \$8 : 1/0) with lines lw 1 lc 4 dt 3 title "interleaved measured (vs mean rank)"
}
unset multiplot
EOF
cat "$RES/pp_bubble.md"
