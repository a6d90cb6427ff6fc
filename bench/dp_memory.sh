#!/usr/bin/env bash
# bench/dp_memory.sh — memory per rank of parameters + gradients + optimizer state
# for ZeRO stages 0..3 and dp = 1, 2, 4, 8, next to the fp32 formulas of
# Rajbhandari et al. (2020): 16Ψ (stage 0), 4Ψ+4Ψ+8Ψ/N (1), 4Ψ+12Ψ/N (2), 16Ψ/N (3).
#
# "Measured" is what femtotron's start-up report says every rank allocated
# (src/engines/data_parallel.c, printed per rank with
# --logging.verbose true); the max over ranks is kept. As a cross-check the peak
# resident set of every rank is taken with /usr/bin/time (max over ranks): it also
# holds activations, the batch, code, BLAS and MPI buffers.
#
# One optimizer step per configuration (threads 1, ranks oversubscribed on the
# cores), so that every buffer has been touched once when the RSS is read.
#
# Output: bench/results/dp_memory.md (table), bench/results/dp_memory.png (plot),
# bench/results/dp_memory.dat (raw numbers). Usage: bench/dp_memory.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RES=bench/results
mkdir -p "$RES"
[ -x ./femtotron ] || make -j2 >/dev/null

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat src/*.c src/*/*.c >"$TMP/corpus.txt"
./femtotron prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null

# ~34M parameters (8192 x 512 embedding and untied head, 8 layers of 3.1M).
MODEL=(--model.hidden_size 512 --model.num_hidden_layers 8 --model.intermediate_size 1536
       --model.vocab_size 8192 --model.num_attention_heads 8 --model.num_key_value_heads 4)
BUCKET_MB=25

DAT="$RES/dp_memory.dat"
echo "# zero dp psi measured_mib formula_mib ratio activations_mib rss_max_mib params_mib grads_mib optim_mib comm_mib" >"$DAT"
for zero in 0 1 2 3; do
    for dp in 1 2 4 8; do
        log="$TMP/z${zero}_dp${dp}.log"
        mpirun --oversubscribe --allow-run-as-root -np "$dp" \
            /usr/bin/time -f "peak_rss_kib %M" ./femtotron train \
            --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
            --training.steps 1 --training.threads 1 --training.peak_flops 1e10 \
            --training.seq_length 128 --training.micro_batch_size 1 \
            --parallel.dp "$dp" --parallel.zero "$zero" --parallel.bucket_mb "$BUCKET_MB" \
            --logging.verbose true >"$log" 2>&1 || { echo "run zero=$zero dp=$dp failed:"; tail -5 "$log"; exit 1; }
        # memory (rank R): params X MiB | grads X MiB | optimizer X MiB | activations X MiB | comm X MiB | total X MiB
        awk -v zero="$zero" -v dp="$dp" '
            /^model: / { psi = $2 }
            /^memory \(rank / {
                p = $5; g = $9; o = $13; a = $17; c = $21; s = p + g + o
                if (s > best) { best = s; bp = p; bg = g; bo = o; bc = c }
                if ($3 == "0):") act = a
            }
            # ranks share stderr, so a report may land mid-line: find it anywhere
            match($0, /peak_rss_kib [0-9]+/) {
                r = substr($0, RSTART + 13, RLENGTH - 13) / 1024; if (r > rss) rss = r
            }
            END {
                MiB = 1048576; n = dp
                if (zero == 0) f = 16 * psi
                else if (zero == 1) f = 8 * psi + 8 * psi / n
                else if (zero == 2) f = 4 * psi + 12 * psi / n
                else f = 16 * psi / n
                f /= MiB
                printf "%d %d %d %.1f %.1f %.3f %.1f %.1f %.1f %.1f %.1f %.1f\n",
                       zero, dp, psi, best, f, best / f, act, rss, bp, bg, bo, bc
            }' "$log" >>"$DAT"
        tail -1 "$DAT"
    done
done

PSI=$(awk '!/^#/ { print $3; exit }' "$DAT")
{
    echo "# ZeRO memory per rank (fp32)"
    echo
    echo "Model: Ψ = $PSI parameters (hidden 512, 8 layers, intermediate 1536, vocab 8192, untied head),"
    echo "parallel.bucket_mb $BUCKET_MB, seq 128 x micro-batch 1 per rank, one step, threads 1."
    echo "Measured = params + grads + optimizer of femtotron's start-up report (max over ranks);"
    echo "formula: 16Ψ (stage 0), 4Ψ+4Ψ+8Ψ/N (1), 4Ψ+12Ψ/N (2), 16Ψ/N (3), N = dp."
    echo "Activations (rank 0) and communication buffers (the rank's comm: ZeRO-2/3 gradient and"
    echo "parameter windows, pipeline messages) are not in the measured column. Peak RSS = max over"
    echo "ranks of /usr/bin/time %M (everything: activations, code, BLAS, MPI)."
    echo
    echo "| ZeRO | dp | params MiB | grads MiB | optimizer MiB | measured MiB | formula MiB | measured/formula | comm MiB | activations MiB | peak RSS MiB |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    awk '!/^#/ { printf "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f |\n", $1, $2, $9, $10, $11, $4, $5, $6, $12, $7, $8 }' "$DAT"
} >"$RES/dp_memory.md"

gnuplot <<EOF
set terminal pngcairo size 900,600 noenhanced
set output "$RES/dp_memory.png"
set title "ZeRO: params + grads + optimizer per rank, Psi = $PSI (fp32)"
set xlabel "dp (ranks)"
set ylabel "MiB per rank"
set logscale x 2
set logscale y 2
set xtics (1, 2, 4, 8)
set xrange [0.8:10]
set key outside right
set grid
plot for [z=0:3] "$DAT" using (\$1==z ? \$2 : 1/0):4 with linespoints lw 2 pt 7 lc z+1 title sprintf("ZeRO-%d measured", z), \
     for [z=0:3] "$DAT" using (\$1==z ? \$2 : 1/0):5 with lines dt 2 lw 2 lc z+1 title sprintf("ZeRO-%d formula", z)
EOF
cat "$RES/dp_memory.md"
