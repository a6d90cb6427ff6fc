#!/usr/bin/env bash
# bench/gemm_in_situ.sh — where issue 21's CPU MFU gap lives: each sgemm shape's rate
# inside a training step (an LD_PRELOAD shim times every call, bench/tools/sgemm_rates.c)
# next to the same shape run alone, warm, best of 10 (bench/tools/sgemm_alone.c), for the
# gpt2 config of bench/train_vs_pytorch.sh. The attention's tile products (under 2e8
# FLOPs each, one thread each inside OpenMP regions) are one row, in thread-seconds,
# and the attention kernels are timed alone too (bench/tools/attention_alone.c).
#
# Output: bench/results/gemm_in_situ.md. Usage: bench/gemm_in_situ.sh (~2 min)
. "$(dirname "$0")/lib.sh"
bench_private_binary
bench_corpus
OUT=$RES/gemm_in_situ.md
STEPS=${STEPS:-4}
cc -O2 -std=c11 -shared -fPIC -fopenmp bench/tools/sgemm_rates.c -o "$TMP/sgemm_rates.so" -ldl
cc -O2 -std=c11 bench/tools/sgemm_alone.c -o "$TMP/sgemm_alone" -lopenblas
# the attention kernels alone, on the same shapes (build/ops is what ./femtotron links)
OBLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
cc -O2 -std=c11 -fopenmp -Isrc bench/tools/attention_alone.c build/ops/attention_cpu.o build/ops/buffers_cpu.o \
    -o "$TMP/attention_alone" -L"$OBLAS" -Wl,-rpath,"$OBLAS" -lopenblas -lm
PEAK=$("$FT" bench peak --threads 2 --seconds 5 | awk '{print $2}')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
LD_PRELOAD="$TMP/sgemm_rates.so" "$FT" train --data.train "$TMP/data/train_*.bin" \
    --model.hidden_size 768 --model.num_hidden_layers 12 --model.num_attention_heads 12 \
    --model.num_key_value_heads 4 --model.intermediate_size 2048 --model.vocab_size 32768 \
    --model.max_position_embeddings 512 --training.seq_length 512 --training.micro_batch_size 4 \
    --training.grad_acc_steps 1 --training.threads 2 --training.steps "$STEPS" \
    --training.peak_flops "${PEAK}e9" --logging.metrics "$TMP/m.jsonl" >"$TMP/train.log" 2>"$TMP/rates.txt"
{
echo "# sgemm in a training step vs alone (gpt2 config, 1 rank x 2 threads)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') · GEMM peak $PEAK GFLOP/s (\`bench peak --threads 2\`) · load average $load0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end"
echo
echo "Steps (ms): $(python3 -c "
import json
print(', '.join(str(round(x['step_ms'])) for x in map(json.loads, open('$TMP/m.jsonl')) if 'event' not in x))")"
echo "(step 1 included below: the shim counts every call)"
echo
echo "| M | N | K | op | calls | in the step GFLOP/s | alone GFLOP/s | in step / alone | seconds |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|---:|"
} >"$OUT"
total_s=0
while read -r tag m n k tr calls s; do
    [ "$tag" = sgemm ] || continue
    alone=$(OPENBLAS_NUM_THREADS=2 "$TMP/sgemm_alone" "$m" "$n" "$k" "${tr:0:1}" "${tr:1:1}")
    awk -v m="$m" -v n="$n" -v k="$k" -v tr="$tr" -v c="$calls" -v s="$s" -v a="$alone" 'BEGIN {
        r = 2 * m * n * k * c / s / 1e9
        printf "| %d | %d | %d | %s | %d | %.1f | %.1f | %.2f | %.2f |\n", m, n, k, tr, c, r, a, r / a, s }' >>"$OUT"
done <"$TMP/rates.txt"
awk '$1 == "sgemm" { f += 2 * $2 * $3 * $4 * $6; s += $7 }
     $1 == "sgemm_small" { printf "\nAttention tiles: %d calls, %.2f thread-seconds, %.1f GFLOP/s per thread.\n", $2, $3, $4 / $3 / 1e9 }
     END { printf "Large products: %.2f s at %.1f GFLOP/s over all shapes.\n", s, f / s / 1e9 }' "$TMP/rates.txt" >>"$OUT"
echo "Attention kernels alone (forward + backward of one layer, B 4, S 512, 12/4 heads of 64, 2 threads, best of 5; GFLOP/s of the causal FLOPs): $(OMP_NUM_THREADS=2 "$TMP/attention_alone" 4 512 12 4 64 5)." >>"$OUT"
cat "$OUT"
