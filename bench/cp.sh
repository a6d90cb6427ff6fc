#!/usr/bin/env bash
# bench/cp.sh — context parallelism: (1) the longest sequence that trains within a
# fixed per-rank memory budget for cp = 1, 2, 4, and (2) tokens/s of cp 1 vs cp 2 on
# two ranks at a long sequence.
#
# (1) Memory. Attention is tiled (flash style: only a log-sum-exp per row is kept), so
# a rank's activations are linear in its tokens, and with cp ranks each rank holds
# S/cp tokens of every sequence (zigzag chunks; K/V travel around a ring). For each
# cp the largest seq_length (a multiple of G = 2*cp*64, so every zigzag chunk is a
# multiple of 64 tokens) whose planned per-rank total (femtotron's start-up line
# "memory (rank R): ... total X MiB", max over ranks) fits BUDGET_MIB is found by
# doubling + bisection on the start-up report alone (each probe is stopped as soon as
# every rank has printed its plan: all buffers are allocated at start-up). The winner
# is then trained for 2 real optimizer steps under /usr/bin/time -v on every rank
# (ranks oversubscribed on the cores, threads 1), to show that it runs and that the
# planned number is what the process really uses (peak RSS, max over ranks; it also
# holds code, BLAS and MPI buffers, which the plan does not count).
#
# (2) Speed. The same model at SEQ tokens, micro-batch 1, global batch 1 sequence:
# cp 1 on one rank with 2 threads vs cp 2 on two ranks with 1 thread each (same
# cores, same global batch, same data). Runs alternate (cp1, cp2, cp1, ...) ROUNDS
# times; the first step of every run is a warm-up and is dropped; the median of the
# remaining step times gives tokens/s. MFU = tokens/s x model FLOPs per token
# (femtotron's formula, 6*N_matmul + 6*L*S*D, causal attention counted once) / the
# machine's fp32 GEMM peak (best of 3 `femtotron bench peak --threads 2`, both
# cores), the same denominator for both layouts. Losses of cp 1 and cp 2 must agree.
#
# Output: bench/results/cp.md (tables), bench/results/cp.png (plot),
# bench/results/cp_probe.dat, cp_max.dat, cp_speed.dat (raw numbers).
# Usage: bench/cp.sh   (env: BUDGET_MIB=256 SEQ=8192 ROUNDS=3 STEPS=4; REPORT_ONLY=1
# rebuilds cp.md and cp.png from the .dat files without running anything). ~5 minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RES=bench/results
mkdir -p "$RES"
[ -x ./femtotron ] || make -j2 >/dev/null

BUDGET_MIB=${BUDGET_MIB:-256}
SEQ=${SEQ:-8192}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-4}
# --bind-to none: Open MPI 4 binds each rank to one core when np <= 2, so `mpirun -np 1`
# would put both of cp 1's threads on core 0.
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# 3.3M parameters: hidden 256, 4 layers, 4 query / 2 key-value heads, SwiGLU 768, vocab 257.
MODEL=(--model.hidden_size 256 --model.num_hidden_layers 4 --model.num_attention_heads 4
       --model.num_key_value_heads 2 --model.intermediate_size 768 --model.vocab_size 257)
COMMON=(--data.train "$TMP/data/train_*.bin" "${MODEL[@]}" --training.micro_batch_size 1
        --training.global_batch_size 1 --training.warmup_steps 1)

PROBE="$RES/cp_probe.dat" MAX="$RES/cp_max.dat" SPEED="$RES/cp_speed.dat"
if [ "${REPORT_ONLY:-0}" != 1 ]; then
cat src/*.c src/*/*.c >"$TMP/corpus.txt"
./femtotron prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
# ---------------------------------------------------------------- (1) memory
echo "# cp seq_length planned_total_mib planned_activations_mib (max over ranks)" >"$PROBE"

# probe CP S: planned per-rank total in MiB (max over ranks), from the start-up report.
probe() {
    local cp=$1 S=$2 log="$TMP/probe_cp$1_S$2.log" pid n=0
    : >"$log"  # exists before the background job opens it, so the polling never misses it
    "${MPI[@]}" -np "$cp" stdbuf -oL ./femtotron train "${COMMON[@]}" \
        --training.seq_length "$S" --model.max_position_embeddings "$S" --parallel.cp "$cp" \
        --training.steps 1 --training.threads 1 --training.peak_flops 1e10 \
        --logging.verbose true >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        n=$(grep -c '^memory (rank' "$log") || n=0
        if [ "$n" -ge "$cp" ]; then kill "$pid" 2>/dev/null || true; break; fi
        sleep 0.2
    done
    wait "$pid" 2>/dev/null || true
    n=$(grep -c '^memory (rank' "$log") || n=0
    if [ "$n" -lt "$cp" ]; then echo "probe cp=$cp S=$S: no memory report:" >&2; tail -5 "$log" >&2; exit 1; fi
    awk -v cp="$cp" -v S="$S" -v out="$PROBE" '/^memory \(rank/ {  # "... activations X MiB | ... | total X MiB"
            for (i = 1; i < NF; i++) { if ($i == "total" && $(i + 1) > t) t = $(i + 1); if ($i == "activations" && $(i + 1) > a) a = $(i + 1) } }
        END { printf "%d %d %.1f %.1f\n", cp, S, t, a >> out; printf "%.1f\n", t }' "$log"
}
# fits_at CP S: does seq_length S fit the budget under cp? (exits the script if a probe fails)
fits_at() {
    local t
    t=$(probe "$1" "$2") || exit 1
    awk -v t="$t" -v b="$BUDGET_MIB" 'BEGIN { exit !(t + 0 > 0 && t <= b) }'
}

echo "# budget_mib $BUDGET_MIB" >"$MAX"
echo "# cp max_seq tokens_per_rank planned_total_mib planned_act_mib next_seq next_planned_mib rss_max_mib steps_ok final_loss step_ms" >>"$MAX"
for cp in 1 2 4; do
    G=$((2 * cp * 64))
    lo=0 hi=1                                   # in units of G: lo fits (0 = none yet), hi does not
    while fits_at "$cp" $((hi * G)); do lo=$hi; hi=$((hi * 2)); done
    while [ $((hi - lo)) -gt 1 ]; do
        mid=$(((lo + hi) / 2))
        if fits_at "$cp" $((mid * G)); then lo=$mid; else hi=$mid; fi
    done
    [ "$lo" -ge 1 ] || { echo "cp=$cp: even seq_length $G exceeds ${BUDGET_MIB} MiB"; exit 1; }
    S=$((lo * G)) Snext=$((hi * G))
    # Verify: 2 real steps at S, peak RSS of every rank.
    log="$TMP/verify_cp$cp.log"
    "${MPI[@]}" -np "$cp" /usr/bin/time -v ./femtotron train "${COMMON[@]}" \
        --training.seq_length "$S" --model.max_position_embeddings "$S" --parallel.cp "$cp" \
        --training.steps 2 --training.threads 1 --training.peak_flops 1e10 \
        --logging.verbose true >"$log" 2>&1 || { echo "cp=$cp S=$S: training failed:"; tail -20 "$log"; exit 1; }
    awk -v cp="$cp" -v S="$S" -v Sn="$Snext" -v pf="$PROBE" '
        BEGIN { while ((getline l < pf) > 0) { split(l, f, " "); if (f[1] == cp && f[2] == Sn) nt = f[3] } }
        /^memory \(rank/ {  # "... activations X MiB | comm X MiB | total X MiB (...)": by name
            for (i = 1; i < NF; i++) { if ($i == "total" && $(i + 1) + 0 > t) t = $(i + 1) + 0
                                       if ($i == "activations" && $(i + 1) + 0 > a) a = $(i + 1) + 0 } }
        /Maximum resident set size/ { r = $NF / 1024; if (r > rss) rss = r }
        /^step / { n++; loss = $5; ms = $(NF - 1) }
        END { ok = (n == 2 && loss == loss + 0 && loss < 100) ? n : 0
              printf "%d %d %d %.1f %.1f %d %.1f %.1f %d %s %.0f\n", cp, S, S / cp, t, a, Sn, nt, rss, ok, loss, ms }' \
        "$log" >>"$MAX"
    tail -1 "$MAX"
    awk '{ if ($9 != 2) exit 1 }' <(tail -1 "$MAX") || { echo "cp=$cp: did not train 2 finite steps"; tail -20 "$log"; exit 1; }
done

# ---------------------------------------------------------------- (2) speed
PEAK=0
for i in 1 2 3; do
    p=$(./femtotron bench peak --threads 2 --seconds 1 | awk '{ print $2 * 1e9 }')
    PEAK=$(awk -v a="$PEAK" -v b="$p" 'BEGIN { print (b > a ? b : a) }')
done
{ echo "# cp round step step_ms loss"; echo "# meta peak_flops $PEAK seq $SEQ rounds $ROUNDS steps $STEPS"; } >"$SPEED"
for round in $(seq 1 "$ROUNDS"); do
    for cp in 1 2; do
        log="$TMP/speed_cp${cp}_r$round.log"
        threads=$((2 / cp))
        "${MPI[@]}" -np "$cp" ./femtotron train "${COMMON[@]}" \
            --training.seq_length "$SEQ" --model.max_position_embeddings "$SEQ" --parallel.cp "$cp" \
            --training.steps "$STEPS" --training.threads "$threads" \
            --training.peak_flops "$(awk -v p="$PEAK" -v c="$cp" 'BEGIN { print p / c }')" \
            >"$log" 2>&1 || { echo "speed cp=$cp failed:"; tail -20 "$log"; exit 1; }
        awk -v cp="$cp" -v r="$round" '/^step / { split($2, s, "/"); print cp, r, s[1], $(NF - 1), $5 }' "$log" >>"$SPEED"
        [ -n "${FPT:-}" ] || { FPT=$(awk '/model FLOPs\/token/ { print $(NF - 2) }' "$log"); echo "# meta fpt $FPT" >>"$SPEED"; }
        echo "round $round cp $cp: $(awk '/^step / { printf "%s ", $(NF - 1) }' "$log")ms"
    done
done
fi  # REPORT_ONLY

# ---------------------------------------------------------------- summary (from the .dat files)
BUDGET_MIB=$(awk '/^# budget_mib/ { print $3 }' "$MAX")
read -r PEAK SEQ ROUNDS STEPS < <(awk '/^# meta peak_flops/ { print $4, $6, $8, $10 }' "$SPEED")
FPT=$(awk '/^# meta fpt/ { print $4 }' "$SPEED")
# median / best of the timed steps (step >= 2) per cp, optionally of one round
median() { awk -v cp="$1" -v r="${2:-0}" '!/^#/ && $1 == cp && $3 >= 2 && (r == 0 || $2 == r) { print $4 }' "$SPEED" | sort -g |
           awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { awk -v cp="$1" '!/^#/ && $1 == cp && $3 >= 2 { print $4 }' "$SPEED" | sort -g | head -1; }
count() { awk -v cp="$1" '!/^#/ && $1 == cp && $3 >= 2' "$SPEED" | wc -l; }
M1=$(median 1) M2=$(median 2) B1=$(best 1) B2=$(best 2) N1=$(count 1) N2=$(count 2)
PER_ROUND=$(for r in $(seq 1 "$ROUNDS"); do
    awk -v r="$r" -v a="$(median 1 "$r")" -v b="$(median 2 "$r")" 'BEGIN { printf "round %d: %.0f / %.0f ms = %.2f; ", r, a, b, a / b }'; done)
LOSSDIFF=$(awk '!/^#/ && $2 == 1 { l[$1, $3] = $5 } END { d = 0; for (k in l) { split(k, p, SUBSEP)
    if (p[1] == 1 && ((2, p[2]) in l)) { x = l[k] - l[2, p[2]]; x = x < 0 ? -x : x; if (x > d) d = x } } printf "%.2g", d }' "$SPEED")

# ---------------------------------------------------------------- report
{
    echo "# Context parallelism: sequence length per memory budget, and speed"
    echo
    echo "Model: 3.3M parameters (hidden 256, 4 layers, 4 query / 2 key-value heads, intermediate 768,"
    echo "byte vocab 257), micro-batch 1, global batch 1 sequence, fp32. Machine: $(nproc) cores, shared."
    echo
    echo "## Longest sequence within ${BUDGET_MIB} MiB planned per rank"
    echo
    echo "Largest seq_length (multiple of 2·cp·64) whose planned per-rank total (start-up report:"
    echo "params + grads + AdamW state + activations + communication buffers; max over ranks) is <= ${BUDGET_MIB} MiB, found"
    echo "by bisection on the report; the next multiple is shown to exceed it. The winner was then"
    echo "trained for 2 optimizer steps (threads 1, cp ranks oversubscribed on the cores): peak RSS ="
    echo "max over ranks of /usr/bin/time -v \"Maximum resident set size\" (includes code, OpenBLAS,"
    echo "MPI buffers, which the plan does not count)."
    echo
    echo "| cp | max seq | tokens/rank | × cp 1 | planned MiB/rank | of which activations | next seq → planned MiB | peak RSS MiB | RSS − planned | 2 steps | loss step 2 |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
    awk '!/^#/ { if (!s1) s1 = $2
        printf "| %d | %d | %d | %.2f | %.1f | %.1f | %d → %.1f | %.1f | %.1f | %s | %s |\n",
               $1, $2, $3, $2 / s1, $4, $5, $6, $7, $8, $8 - $4, ($9 == 2 ? "ok" : "FAILED"), $10 }' "$MAX"
    echo
    echo "## Tokens/s at seq_length $SEQ: cp 1 (1 rank × 2 threads) vs cp 2 (2 ranks × 1 thread)"
    echo
    echo "Same 2 cores (mpirun --bind-to none: Open MPI would pin a lone rank to one core), same data,"
    echo "global batch 1 × $SEQ tokens. $ROUNDS interleaved rounds (cp 1, cp 2, cp 1, ...) of $STEPS steps,"
    echo "first step of each run dropped; median of the remaining $N1 (cp 1) / $N2 (cp 2) step times."
    echo "MFU = tokens/s × $(awk -v f="$FPT" 'BEGIN { printf "%.3g", f }') FLOPs/token (6·N_matmul + 6·L·S·D) / machine peak"
    echo "$(awk -v p="$PEAK" 'BEGIN { printf "%.1f", p / 1e9 }') GFLOP/s (best of 3 \`femtotron bench peak --threads 2\`)."
    echo "Largest loss difference cp 1 vs cp 2 over the steps of round 1: $LOSSDIFF."
    echo
    echo "| layout | median step ms | tokens/s | MFU | best step ms | tokens/s (best) | MFU (best) | timed steps ms, in order |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
    for cp in 1 2; do
        m=$([ "$cp" = 1 ] && echo "$M1" || echo "$M2")
        b=$([ "$cp" = 1 ] && echo "$B1" || echo "$B2")
        awk -v cp="$cp" -v m="$m" -v b="$b" -v S="$SEQ" -v f="$FPT" -v p="$PEAK" -v sp="$SPEED" 'BEGIN {
            while ((getline l < sp) > 0) { split(l, x, " "); if (x[1] == cp && x[3] >= 2) all = all sprintf("%.0f ", x[4]) }
            t = S / (m / 1000); tb = S / (b / 1000)
            printf "| cp %d (%s) | %.0f | %.0f | %.1f%% | %.0f | %.0f | %.1f%% | %s|\n", cp,
                   cp == 1 ? "1 rank × 2 threads" : "2 ranks × 1 thread", m, t, 100 * t * f / p, b, tb, 100 * tb * f / p, all }'
    done
    echo
    awk -v a="$M1" -v b="$M2" -v c="$B1" -v d="$B2" 'BEGIN {
        printf "**Ratio tokens/s cp 2 / cp 1 = %.2f (medians), %.2f (best steps).**\n", a / b, c / d }'
    echo "Per round, median cp 1 / median cp 2 step time: ${PER_ROUND%; }."
    echo "The machine is shared with other jobs: steps of the same layout vary up to 3x between rounds,"
    echo "so read the ratio with the per-round numbers and the best steps next to the medians."
} >"$RES/cp.md"

gnuplot <<EOF
set terminal pngcairo size 1200,500 noenhanced
set output "$RES/cp.png"
set multiplot layout 1,2
set title "Planned memory per rank vs sequence length"
set xlabel "seq_length (tokens)"
set ylabel "MiB per rank (planned)"
set key bottom right
set grid
plot for [c in "1 2 4"] "$PROBE" using (\$1==c+0 ? \$2 : 1/0):3 smooth unique with linespoints pt 7 title "cp ".c, \
     $BUDGET_MIB with lines dt 2 lw 2 lc rgb "black" title "budget $BUDGET_MIB MiB"
set title "Longest sequence within $BUDGET_MIB MiB per rank"
set xlabel "cp (ranks)"
set ylabel "max seq_length (tokens)"
set xtics (1, 2, 4)
set xrange [0.5:4.5]
set yrange [0:*]
set key bottom right
s1 = real(system("awk '!/^#/ { print \$2; exit }' $MAX"))
plot "$MAX" using 1:2 with linespoints lw 2 pt 7 title "max seq (planned <= budget; trained 2 steps)", \
     x * s1 with lines dt 2 title "cp x max seq at cp 1"
unset multiplot
EOF
cat "$RES/cp.md"
