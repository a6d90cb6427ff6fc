#!/usr/bin/env bash
# bench/pp_bubble.sh — pipeline bubble of the afab, 1f1b, interleaved (v = 2) and
# zero-bubble zb-h1 and zb-v (v = 2, chunks in a V) schedules at pp = 2 and 4 for M = pp, 2pp, 4pp micro-batches
# per step, next to the formula (p - 1) / (v m) (bubble time over ideal compute
# time; Narayanan et al. 2021, eq. 1 and 3), for zb-h1 (p - 1)(TF + TB - TW) /
# (m (TF + TB + TW)) = (p - 1) / (3m) at TF = TB = TW (Qi et al. 2023; zb-v: 0 in
# the paper's handcrafted schedule, ours comes from a greedy replay), with each
# run's step time and every stage's planned activation memory. The zero-bubble
# schedules run three times, their lists built for three sets of per-pass costs
# (parallel.pp_costs): unit (equal F, I, W), flops (predicted from the model, the
# default) and measured (each virtual stage's median F, I, W from the unit run).
#
# Every run writes a Chrome trace (logging.trace); the bubble is computed from it
# in several ways (see the "Pipeline bubble" section of bench/README.md):
#
#   schedule bubble: replay of the trace's event ORDER in unit time. Each rank's
#     forward/backward events, sorted by start time on that rank's own clock, give
#     the order in which the rank really executed its actions; they are replayed
#     with forward = 1/v, backward = 2/v time units per chunk (a split backward's
#     input half I and weight half W 1/v each) and the message dependencies F(k, m)
#     after F(k-1, m), B or I(k, m) after B or I(k+1, m) (k = virtual stage), W(k, m)
#     after I(k, m): the replay of plan/pipeline_sim.c (the planner) on equal
#     stages. Bubble = T / (3M) - 1, T the replayed makespan, 3M the work of one
#     rank. Independent of how the ranks time-share the cores.
#
#   timed replay: the same replay with each virtual stage's median measured pass
#     durations (steps 2..N): the real stage imbalance and pass ratios, no noise.
#
#   event replay: the same replay with every pass's own duration in that step:
#     the bubble the dependencies alone leave with the real, noisy times.
#
#   measured bubble: per step, span = first stage's first forward start to its
#     last backward end (one rank's clock: the first stage starts every step and
#     ends it), busy = sum of a rank's pass durations; bubble = span / mean busy -
#     1 and span / slowest rank's busy - 1; medians over steps 2..N. The first
#     stage's idle time is split into recv waits (blocked on a message) and the
#     rest (between events), and each rank's CPU time per pass wall time (the
#     trace's cpu_us) shows how much of a pass the rank spent without a core. At
#     pp = 4 the 4 ranks share 2 cores: a waiting rank lends its core to a
#     computing one, so wall-clock idle time there is not only a bubble.
#
# Output: bench/results/pp_bubble.md (table), pp_bubble.png (plot), pp_bubble.dat.
# Usage: bench/pp_bubble.sh   (FEMTOTRON=path overrides ./femtotron; STEPS=N;
#        PPS="2 4" and SCHEDS="afab 1f1b interleaved zb-h1 zb-v" pick rows)
. "$(dirname "$0")/lib.sh"
bench_corpus

# 8 layers (2 per virtual stage at pp = 4, v = 2), hidden 256, seq 128, micro-batch 2.
MODEL=(--model.hidden_size 256 --model.intermediate_size 768 --model.num_hidden_layers 8
       --model.num_attention_heads 4 --model.num_key_value_heads 2)
STEPS=${STEPS:-6}

cat >"$TMP/bubble.py" <<'EOF'
# bubble.py TRACE PP V M SCHED [costs | REF_TRACE]
#   -> "sim timed same event measured_vs_mean measured_vs_slowest wait other cpu busy_ms(per rank) span_ms"
#   with "costs": the F:I:W,... spec of each virtual stage's median pass times in ms (parallel.pp_costs);
#   REF_TRACE: the run whose median pass times the "same" column replays this run's order with
#   (the zero-bubble variants: their unit run, so every variant's lists meet the same costs)
import json, statistics, sys
path, P, V, M, sched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
vee = sched == "zb-v"  # chunk c of rank r is virtual stage r (c = 0) or 2P-1-r (c = 1)
OPS = {"forward": "F", "backward": "B", "backward-input": "I", "backward-weight": "W"}
def events(p):
    return [e for e in json.load(open(p))["traceEvents"] if e.get("ph") == "X" and e["args"].get("step", 0) > 0]
allev = events(path)
ev = [e for e in allev if e["name"] in OPS]
split = any(OPS[e["name"]] == "W" for e in ev)
UNIT = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
steps = sorted({e["args"]["step"] for e in ev})
K = P * V                                      # virtual stages; chunk c of rank r is c * P + r
def stage(c, r): return (r if c == 0 else 2 * P - 1 - r) if vee else c * P + r
ops = ("F", "I", "W") if split else ("F", "B")
def medians(evs):
    """Each (pass, virtual stage)'s median duration over steps 2..N (step 1 warms caches and pages)."""
    return {(op, k): statistics.median([e["dur"] for e in evs if e["name"] in OPS and e["args"]["step"] > 1
                                        and OPS[e["name"]] == op and stage(e["args"]["chunk"], e["tid"]) == k]
                                       or [float("nan")])
            for op in ops for k in range(K)}
med = medians(ev)
if len(sys.argv) > 6 and sys.argv[6] == "costs":
    print(",".join(":".join(f"{med[(op, k)] / 1e3:.3f}" for op in ("F", "I", "W")) for k in range(K)))
    sys.exit(0)
ref = medians(events(sys.argv[6])) if len(sys.argv) > 6 else med

def replay(step, cost):
    """Replay of every rank's action order, an action taking cost(op, k, m); returns the makespan."""
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
                free[r] = done[("B" if op == "I" else op, k, m)] = t0 + cost(op, k, m)
                pos[r] += 1
                moved = True
        if not moved:
            sys.exit(f"step {step}: the action order deadlocks")
    return max(free)

sims = [replay(s, lambda op, k, m: UNIT[op] / V) / (3.0 * M) - 1.0 for s in steps]
assert max(sims) - min(sims) < 1e-9, f"schedule differs between steps: {sims}"
# Timed replay: the median durations (the stage imbalance and pass ratios, no noise);
# "same": with the reference run's medians instead (one set of costs for every variant).
def timed_replay(m):
    work = statistics.mean(sum(M * m[(op, stage(c, r))] for op in ops for c in range(V)) for r in range(P))
    return replay(steps[-1], lambda op, k, mb: m[(op, k)]) / work - 1.0
timed, same = timed_replay(med), timed_replay(ref)
rows = []
for s in steps[1:]:
    mine = [e for e in ev if e["args"]["step"] == s]
    dur = {(OPS[e["name"]], stage(e["args"]["chunk"], e["tid"]), e["args"]["micro"]): e["dur"] for e in mine}
    busy = [sum(e["dur"] for e in mine if e["tid"] == r) for r in range(P)]
    # Event replay: every pass with its own measured duration and no time between
    # passes but what the dependencies impose: the schedule's bubble on this step's times.
    event = replay(s, lambda op, k, m: dur[(op, k, m)]) / statistics.mean(busy) - 1.0
    first = [e for e in mine if e["tid"] == 0]
    t0, t1 = min(e["ts"] for e in first), max(e["ts"] + e["dur"] for e in first)
    span = t1 - t0
    # The first stage's time blocked on messages (recv events) inside the span; the
    # rest of its idle time is between events (executor bookkeeping, sends, the trace).
    wait = sum(e["dur"] for e in allev if e["tid"] == 0 and e["name"] == "recv" and e["args"]["step"] == s
               and t0 <= e["ts"] < t1)
    rows.append((span / statistics.mean(busy) - 1.0, span / max(busy) - 1.0, event,
                 wait / statistics.mean(busy), (span - busy[0] - wait) / statistics.mean(busy), busy, span))
# CPU share of the passes: the CPU time a rank got from the end of its previous event
# to the end of a pass (cpu_us, train/trace.c) over the pass's wall time; below 1
# when the rank waited for a core (another rank or another process held it).
cpu = []
for r in range(P):
    mine = sorted((e for e in allev if e["tid"] == r and "cpu_us" in e["args"]), key=lambda e: e["ts"])
    got = wall = 0.0
    for a, b in zip(mine, mine[1:]):
        if b["name"] in OPS and b["args"]["step"] > 1:
            got += b["args"]["cpu_us"] - a["args"]["cpu_us"]
            wall += b["dur"]
    cpu.append(got / wall if wall else float("nan"))
med_of = lambda i: statistics.median(r[i] for r in rows)
busy_ms = "/".join(f"{statistics.median(row[5][r] for row in rows) / 1e3:.0f}" for r in range(P))
span_ms = f"{statistics.median(r[6] for r in rows) / 1e3:.0f}"
print(f"{sims[0]:.4f} {timed:.4f} {same:.4f} {med_of(2):.4f} {med_of(0):.4f} {med_of(1):.4f} {med_of(3):.4f} {med_of(4):.4f} "
      f"{min(cpu):.3f} {busy_ms} {span_ms}")
EOF

DAT="$RES/pp_bubble.dat"
echo "# pp schedule costs v M formula sim_ratio timed_ratio same_costs_ratio event_ratio measured_vs_mean measured_vs_slowest wait other cpu_share busy_ms_per_rank span_ms step_ms act_mib_per_rank load1" >"$DAT"
# One run: train, read its trace, append a row. COSTS: parallel.pp_costs ("-": the schedule has none).
run() {
    local pp=$1 sched=$2 v=$3 M=$4 costs=$5 label=$6 ref=${7:-}
    local log="$TMP/run.log" trace="$TMP/trace_${pp}_${sched}_${M}_${label}.json" extra=()
    [ "$costs" = - ] || extra=(--parallel.pp_costs "$costs")
    mpirun --oversubscribe --allow-run-as-root -np "$pp" "$FT" train \
        --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
        --training.steps "$STEPS" --training.threads 1 --training.peak_flops 1e10 \
        --training.seq_length 128 --training.micro_batch_size 2 --training.grad_acc_steps "$M" \
        --parallel.pp "$pp" --parallel.pp_schedule "$sched" --parallel.pp_virtual "$v" "${extra[@]}" \
        --logging.trace "$trace" --logging.verbose true --logging.metrics "$TMP/metrics.jsonl" \
        >"$log" 2>&1 || { echo "run pp=$pp $sched ($label) M=$M failed:"; tail -5 "$log"; exit 1; }
    local load r f step_ms act
    load=$(cut -d' ' -f1 /proc/loadavg)
    r=$(/usr/bin/python3 "$TMP/bubble.py" "$trace" "$pp" "$v" "$M" "$sched" ${ref:+"$ref"})
    f=$(awk -v p="$pp" -v v="$v" -v m="$M" -v s="$sched" 'BEGIN { d = s == "zb-h1" ? 3 * m : v * m; printf "%.4f", s == "zb-v" ? 0 : (p - 1) / d }')
    # Median step time (steps 2..N) and every rank's planned activation bytes.
    step_ms=$(grep -o '"step_ms": [0-9.]*' "$TMP/metrics.jsonl" | awk 'NR > 1 { print $2 }' | sort -n |
              awk '{ a[NR] = $1 } END { printf "%.0f", NR ? a[int((NR + 1) / 2)] : 0 }')
    act=$(sed -n 's/^memory bytes (rank \([0-9]*\)):.* activations \([0-9]*\) .*/\1 \2/p' "$log" | sort -n |
          awk '{ printf "%s%.1f", (NR > 1 ? "/" : ""), $2 / 1048576 }')
    rm -f "$TMP/metrics.jsonl"
    echo "$pp $sched $label $v $M $f $r $step_ms $act $load" | tee -a "$DAT"
}
for pp in ${PPS:-2 4}; do
    for sched in ${SCHEDS:-afab 1f1b interleaved zb-h1 zb-v}; do
        v=1; [ "$sched" = interleaved ] || [ "$sched" = zb-v ] && v=2
        for M in $pp $((2 * pp)) $((4 * pp)); do
            case $sched in
            zb-*)
                # The zero-bubble lists for three sets of costs: equal (the unit-time
                # lists), predicted from the model's FLOPs (the default), and measured:
                # each virtual stage's median F, I, W of the unit run, in ms.
                run "$pp" "$sched" "$v" "$M" unit unit
                measured=$(/usr/bin/python3 "$TMP/bubble.py" "$TMP/trace_${pp}_${sched}_${M}_unit.json" "$pp" "$v" "$M" "$sched" costs)
                echo "  measured costs (F:I:W ms per virtual stage): $measured"
                unit_trace="$TMP/trace_${pp}_${sched}_${M}_unit.json"
                run "$pp" "$sched" "$v" "$M" flops flops "$unit_trace"
                run "$pp" "$sched" "$v" "$M" "$measured" measured "$unit_trace" ;;
            *) run "$pp" "$sched" "$v" "$M" - - ;;
            esac
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
    echo "- **costs** (zb-h1, zb-v): what the lists were built for (parallel.pp_costs): **unit** equal F, I, W"
    echo "  (the unit-time lists), **flops** predicted from the model (the default), **measured** each virtual"
    echo "  stage's median F, I, W of the unit run just before (ms, passed as F:I:W per stage)."
    echo "- **schedule**: each rank's event order from the trace, replayed in unit time (forward 1/v,"
    echo "  backward 2/v per chunk, zb's I and W 1/v each; an action waits for its message from the"
    echo "  neighbouring virtual stage): the planner's replay (plan/pipeline_sim.c) of the same lists."
    echo "- **timed replay**: the same order replayed with each virtual stage's median measured pass"
    echo "  durations (steps 2..$STEPS): the real pass ratios and stage imbalance, no noise."
    echo "- **at unit run's costs** (zb-h1, zb-v): the same order replayed with the median pass times of"
    echo "  the unit run (of the same pp and M): every variant's lists under one set of costs, so the"
    echo "  lists are compared without the run-to-run noise of the machine (= timed replay elsewhere)."
    echo "- **event replay**: the same order replayed with every pass's own measured duration, no time"
    echo "  between passes but what the dependencies impose (median over steps 2..$STEPS)."
    echo "- **measured**: span of a step on the first stage (it starts and ends every step) / busy - 1,"
    echo "  busy = a rank's pass time; **vs mean** divides by the mean over ranks, **vs slowest** by the"
    echo "  slowest rank. Medians over steps 2..$STEPS. At pp = 4 four ranks share 2 cores: a waiting rank"
    echo "  lends its core, so wall-clock idle time there is not only a bubble."
    echo "- **recv wait**, **other**: the first stage's idle time split into time blocked on a message"
    echo "  (its recv events) and time between events (executor bookkeeping, sends, the trace, waiting"
    echo "  for a core after a wait), each / mean busy: measured vs mean = busy imbalance + wait + other."
    echo "- **CPU share**: CPU time / wall time of the passes on the rank that got least (cpu_us of the"
    echo "  trace): 1 on a dedicated core, below 1 when other processes held the core. **load**: 1-minute"
    echo "  load average after the run (2 cores)."
    echo "- **step ms**: median step time. **activations MiB**: each rank's planned (= allocated)"
    echo "  activation memory, slots and the zero-bubble schedules' weight-gradient stashes."
    echo
    echo "| pp | schedule | costs | v | M | formula | schedule | timed replay | at unit run's costs | event replay | measured vs mean | measured vs slowest | recv wait | other | CPU share | busy ms (per rank) | span ms | step ms | activations MiB (per rank) | load |"
    echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    awk 'function g(x) { return x == "nan" ? "–" : sprintf("%.3f", x) }
         !/^#/ { printf "| %d | %s | %s | %d | %d | %.3f | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                 $1, $2, $3, $4, $5, $6, $7, g($8), g($9), g($10), g($11), g($12), g($13), g($14), $15, $16, $17, $18, $19, $20 }' "$DAT"
} >"$RES/pp_bubble.md"

# One file per (pp, schedule, costs) series, so gnuplot joins each series' points.
awk -v dir="$TMP" '!/^#/ { f = dir "/s_" $1 "_" $2 "_" $3 ".dat"; print > f }' "$DAT"
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
s(p, name) = sprintf("$TMP/s_%d_%s.dat", p, name)
do for [p=2:4:2] {
    set title (p == 2 ? "pp = 2 (2 ranks on 2 cores)" : "pp = 4 (4 ranks on 2 cores: measured includes time-sharing)")
    set xrange [p/1.3 : 4*p*1.3]
    set xtics (p, 2*p, 4*p)
    plot (p-1.0)/x with lines lw 2 lc rgb "gray30" dt 2 title "(p-1)/m", \
         (p-1.0)/(3*x) with lines lw 2 lc rgb "dark-green" dt 2 title "(p-1)/(3m) (zb-h1)", \
         s(p, "1f1b_-") using 5:7 with points pt 2 ps 1.6 lc 2 title "1f1b schedule", \
         s(p, "zb-v_unit") using 5:7 with points pt 4 ps 1.8 lc rgb "orange" title "zb-v schedule (unit lists)", \
         s(p, "1f1b_-") using 5:12 with linespoints lw 2 pt 5 lc 2 title "1f1b measured (vs slowest)", \
         s(p, "zb-h1_unit") using 5:12 with linespoints lw 2 pt 9 lc rgb "dark-green" title "zb-h1 measured", \
         s(p, "zb-v_unit") using 5:12 with linespoints lw 2 pt 5 lc rgb "orange" title "zb-v measured, unit lists", \
         s(p, "zb-v_flops") using 5:12 with linespoints lw 2 pt 7 lc rgb "red" title "zb-v measured, flops lists", \
         s(p, "zb-v_measured") using 5:12 with linespoints lw 2 pt 13 lc rgb "purple" title "zb-v measured, measured-cost lists", \
         s(p, "zb-v_unit") using 5:9 with lines lw 1 lc rgb "orange" dt 3 title "zb-v replay at the unit run's costs, unit lists", \
         s(p, "zb-v_flops") using 5:9 with lines lw 1 lc rgb "red" dt 3 title "... flops lists", \
         s(p, "zb-v_measured") using 5:9 with lines lw 1 lc rgb "purple" dt 3 title "... measured-cost lists"
}
unset multiplot
EOF
cat "$RES/pp_bubble.md"
