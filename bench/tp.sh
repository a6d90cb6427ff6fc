#!/usr/bin/env bash
# bench/tp.sh — tensor parallelism on this machine: training throughput and memory
# per rank of the "small" model (hidden 512, 8 layers, 8 heads / 4 kv heads,
# intermediate 1536, vocab 8192, untied head; seq 256, micro-batch 8 = 2048 tokens
# per step) at
#   tp 1: 1 rank x 2 threads (mpirun --bind-to none: Open MPI's default binds a
#         lone rank to ONE core, which would put both threads on it)
#   tp 2: 2 ranks x 1 thread, one per core (--bind-to core), without and with
#         sequence parallel
#   tp 4: 4 ranks x 1 thread oversubscribed on the 2 cores, 1 step, memory only
#         (its throughput would measure time-sharing, not tensor parallelism)
# so every timed layout uses the same 2 cores.
#
# Throughput: ROUNDS rounds of the three timed layouts, interleaved (the machine is
# shared and drifts); of all steps 2..STEPS of a layout (step 1 warms up) the
# fastest is reported (the least disturbed by other jobs), and the median next to
# it. The loss of step STEPS must agree across layouts. MFU is against one GEMM peak
# measured here with 2 threads (`femtotron bench peak --threads 2`): passed as
# training.peak_flops = peak (tp 1) or peak / 2 per rank (tp 2), so the MFU of
# every layout is against the same 2-core peak.
#
# Memory: the start-up report every rank prints with --logging.verbose true
# ("memory (rank R): params | grads | optimizer | activations | total"), max over
# ranks, and the peak resident set of every rank (/usr/bin/time %M, max over ranks).
# The loss of step 1 (and of the last step) shows that the layouts compute the
# same model.
#
# Output: bench/results/tp.md (table), tp.png (activations per rank vs tp), tp.dat.
# Usage: bench/tp.sh   (FEMTOTRON=path overrides ./femtotron; STEPS [6]; ROUNDS [2]; RES [bench/results])
. "$(dirname "$0")/lib.sh"
STEPS=${STEPS:-6}
ROUNDS=${ROUNDS:-2}
bench_private_binary
bench_corpus
MODEL=(--model.hidden_size 512 --model.num_hidden_layers 8 --model.num_attention_heads 8
       --model.num_key_value_heads 4 --model.intermediate_size 1536 --model.vocab_size 8192
       --model.max_position_embeddings 256 --training.seq_length 256 --training.micro_batch_size 8)

PEAK_GFLOPS=$("$FT" bench peak --threads 2 --seconds 5 | awk '{print $2}')
echo "GEMM peak, 2 threads: $PEAK_GFLOPS GFLOP/s"

# Each rank's peak resident set goes to its own file (stderr lines of several ranks
# can interleave mid-line).
cat >"$TMP/timed.sh" <<'EOF2'
#!/bin/sh
exec /usr/bin/time -o "$RSS_OUT.${OMPI_COMM_WORLD_RANK:-0}" -f "%M" "$@"
EOF2
chmod +x "$TMP/timed.sh"

run() {  # run NAME ROUND TP THREADS BIND SP STEPS
    local name=$1 round=$2 tp=$3 threads=$4 bind=$5 sp=$6 steps=$7
    local log="$TMP/$name.r$round.log"
    local peak
    peak=$(awk -v g="$PEAK_GFLOPS" -v n="$tp" 'BEGIN { printf "%.6e", g * 1e9 / (n < 2 ? 1 : 2) }')
    mpirun --oversubscribe --allow-run-as-root --bind-to "$bind" -np "$tp" -x RSS_OUT="$TMP/$name.r$round.rss" \
        "$TMP/timed.sh" "$FT" train --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
        --training.steps "$steps" --training.threads "$threads" --training.peak_flops "$peak" \
        --parallel.tp "$tp" --parallel.sequence_parallel "$sp" --logging.verbose true \
        --logging.metrics "$TMP/$name.r$round.jsonl" >"$log" 2>&1 ||
        { echo "run $name (round $round) failed:"; tail -5 "$log"; exit 1; }
    grep '^step' "$log" | tail -1 | sed "s/^/$name r$round: /"
}

for r in $(seq 1 "$ROUNDS"); do
    run tp1 "$r" 1 2 none false "$STEPS"
    run tp2 "$r" 2 1 core false "$STEPS"
    run tp2_sp "$r" 2 1 core true "$STEPS"
done
run tp4 1 4 1 none false 1
run tp4_sp 1 4 1 none true 1

python3 - "$TMP" "$RES" "$PEAK_GFLOPS" "$STEPS" "$ROUNDS" <<'EOF'
import glob, json, re, statistics, sys
tmp, res, peak, steps, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [  # name, tp, ranks x threads, sp, timed
    ("tp1", 1, "1 x 2", "-", True), ("tp2", 2, "2 x 1", "off", True), ("tp2_sp", 2, "2 x 1", "on", True),
    ("tp4", 4, "4 x 1 (oversubscribed)", "off", False), ("tp4_sp", 4, "4 x 1 (oversubscribed)", "on", False)]
MEM = re.compile(r"^memory \(rank (\d+)\): params ([\d.]+) MiB \| grads ([\d.]+) MiB \| optimizer ([\d.]+) MiB"
                 r" \| activations ([\d.]+) MiB(?: \| comm [\d.]+ MiB)? \| total ([\d.]+) MiB")
out = {}
for name, tp, rt, sp, timed in rows:
    best, loss1, lossN, timed_steps = None, None, None, []
    for r in range(1, (rounds if timed else 1) + 1):
        recs = [x for x in map(json.loads, open(f"{tmp}/{name}.r{r}.jsonl")) if "event" not in x]
        loss1 = recs[0]["loss"]
        lossN = recs[-1]["loss"] if timed else None
        timed_steps += [x for x in recs if x["step"] >= 2]
    if timed:  # fastest step (the least disturbed on a shared machine) and the median step
        fast = max(timed_steps, key=lambda x: x["tokens_per_s"])
        best = (fast["tokens_per_s"], fast["mfu"], statistics.median(x["tokens_per_s"] for x in timed_steps))
    mem, ranks = [0.0] * 5, set()
    for line in open(f"{tmp}/{name}.r1.log"):
        m = MEM.match(line)
        if m:
            ranks.add(int(m.group(1)))
            mem = [max(a, float(b)) for a, b in zip(mem, m.groups()[1:])]
    if len(ranks) != tp: sys.exit(f"{name}: memory lines of ranks {sorted(ranks)}, expected {tp} ranks")
    rss_files = glob.glob(f"{tmp}/{name}.r1.rss.*")
    if len(rss_files) != tp: sys.exit(f"{name}: {len(rss_files)} peak RSS files, expected {tp}")
    rss = max(int(open(f).read().split()[-1]) for f in rss_files) / 1024
    out[name] = dict(tp=tp, rt=rt, sp=sp, best=best, loss1=loss1, lossN=lossN, mem=mem, rss=rss)
base = out["tp1"]
act1 = base["mem"][3]
with open(f"{res}/tp.dat", "w") as f:
    f.write("# name tp sp tokens_per_s mfu params_mib grads_mib optim_mib act_mib total_mib rss_mib loss1\n")
    for name, o in out.items():
        b = o["best"] or (float("nan"), float("nan"), float("nan"))
        f.write(f"{name} {o['tp']} {1 if o['sp'] == 'on' else 0} {b[0]:.1f} {b[1]:.4f} "
                + " ".join(f"{x:.1f}" for x in o["mem"]) + f" {o['rss']:.1f} {o['loss1']:.9f}\n")
L = ["# Tensor parallelism: throughput and memory per rank", "",
     "Model \"small\": hidden 512, 8 layers, 8 heads / 4 kv heads, intermediate 1536, vocab 8192, untied",
     f"head (33.6M parameters); seq 256 x micro-batch 8 = 2048 tokens per step. The same 2 cores for every",
     "timed layout: tp 1 = 1 rank x 2 threads (`--bind-to none`), tp 2 = 2 ranks x 1 thread (one per core).",
     "tp 4 = 4 ranks x 1 thread oversubscribed on the 2 cores, one step, for memory only.",
     f"tokens/s: the fastest of steps 2..{steps} of {rounds} interleaved runs per layout (the machine is shared;",
     "the fastest step is the least disturbed one), and the median of those steps. MFU (of the fastest step) against the",
     f"GEMM peak measured with 2 threads ({peak:.1f} GFLOP/s). Memory: femtotron's start-up report",
     "(`--logging.verbose true`, max over ranks); peak RSS: /usr/bin/time, max over ranks.", "",
     "| tp | ranks x threads | seq. parallel | tokens/s | vs tp 1 | MFU | median tokens/s | params MiB | grads MiB | optimizer MiB"
     " | activations MiB/rank | tp 1 / activations | total MiB/rank | peak RSS MiB | loss step 1 |"
     + (f" loss step {steps} |" if steps > 1 else ""),
     "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if steps > 1 else "")]
for name, o in out.items():
    b = o["best"]
    tps = f"{b[0]:.0f}" if b else "-"
    rel = f"{b[0] / base['best'][0]:.2f}" if b else "-"
    mfu = f"{100 * b[1]:.1f}%" if b else "-"
    med = f"{b[2]:.0f}" if b else "-"
    p, g, opt, a, tot = o["mem"]
    row = (f"| {o['tp']} | {o['rt']} | {o['sp']} | {tps} | {rel} | {mfu} | {med} | {p:.1f} | {g:.1f} | {opt:.1f} | "
           f"{a:.1f} | {act1 / a:.2f} | {tot:.1f} | {o['rss']:.0f} | {o['loss1']:.6f} |")
    if steps > 1: row += f" {o['lossN']:.6f} |" if o["lossN"] is not None else " - |"
    L.append(row)
open(f"{res}/tp.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
EOF

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 800,500 noenhanced
set output "$RES/tp.png"
set title "Activations per rank, small model, seq 256 x micro-batch 8"
set xlabel "tp"
set ylabel "MiB per rank"
set logscale xy 2
set xtics (1, 2, 4)
set key top right
set grid
a1 = system("awk '\$1 == \"tp1\" { print \$9 }' $RES/tp.dat") + 0
plot "< awk '\$1 == \"tp1\" || \$3 == 0' $RES/tp.dat" using 2:9 with linespoints lw 2 pt 7 title "without sequence parallel", \
     "< awk '\$1 == \"tp1\" || \$3 == 1' $RES/tp.dat" using 2:9 with linespoints lw 2 pt 5 title "with sequence parallel", \
     [1:4] a1 / x with lines dt 2 lw 2 title "tp 1 / tp"
EOF
fi
