#!/usr/bin/env bash
# bench/gemm_in_situ.sh — where issue 21's CPU MFU gap lives: each sgemm shape's rate
# inside a training step (an LD_PRELOAD shim times every call, bench/tools/sgemm_rates.c)
# next to the same shape run alone, warm, best of 10 (bench/tools/sgemm_alone.c), for the
# gpt2 (default) or small config of bench/train_vs_pytorch.sh (CONFIG=small). The attention's tile products (under 2e8
# FLOPs each, one thread each inside OpenMP regions) are one row, in thread-seconds,
# and the attention kernels are timed alone too (bench/tools/attention_alone.c).
# "Alone" is timed twice: warm (the operands stay in the caches from call to call)
# and cold (512 MiB of other memory written before each call, so the operands come
# from DRAM, as a step's do). BLAS=mkl times femtotron's oneMKL build (make BLAS=mkl,
# scripts/install_mkl.sh) with helpers linked against oneMKL. "Alone" multiplies through
# the build's own products (ops/matmul_cpu.c's object), so it cuts a product's rows among
# the threads where the build does (the default build); the shim records thread 0's
# block of such a product as the product.
#
# Output: bench/results/gemm_in_situ.md (gemm_in_situ_small.md for CONFIG=small;
# _mkl before .md for BLAS=mkl).
# Usage: [CONFIG=small] [BLAS=mkl] bench/gemm_in_situ.sh (~2 min)
. "$(dirname "$0")/lib.sh"
bench_private_binary
bench_corpus
CONFIG=${CONFIG:-gpt2}
STEPS=${STEPS:-4}
# hidden layers heads kv_heads intermediate vocab seq micro_batch (as train_vs_pytorch.sh)
case $CONFIG in
    gpt2)  OUT=$RES/gemm_in_situ.md;       read -r D L H KV F V S B <<<"768 12 12 4 2048 32768 512 4" ;;
    small) OUT=$RES/gemm_in_situ_small.md; read -r D L H KV F V S B <<<"512 8 8 4 1536 8192 256 8" ;;
    *) echo "gemm_in_situ.sh: CONFIG=$CONFIG: give gpt2 or small" >&2; exit 2 ;;
esac
. "$(dirname "$0")/blas_lib.sh"
cc -O2 -std=c11 -shared -fPIC -fopenmp bench/tools/sgemm_rates.c -o "$TMP/sgemm_rates.so" -ldl
BLAS=${BLAS:-openblas}
case $BLAS in
    openblas) OBJ=build ;;  # what ./femtotron links
    mkl) FT=$(blas_build mkl "$TMP") || exit 1; OBJ=build-mkl OUT=${OUT%.md}_mkl.md ;;
    *) echo "gemm_in_situ.sh: BLAS=$BLAS: give openblas or mkl" >&2; exit 2 ;;
esac
# the helpers link the BLAS as the build does (the Makefile's blas-libs)
read -r -a BLAS_LINK <<<"$(make -s BLAS="$BLAS" blas-libs) -fopenmp -lm"
# the products, and the attention kernels, alone through the build's own objects (with
# those the products and the attention's bf16 and AMX paths call into: ops/cpu.c's rounding,
# the bf16 operands' planned workspace)
OPS_OBJ=($OBJ/ops/matmul_cpu.o $OBJ/ops/matmul_bf16_cpu.o $OBJ/ops/cuda_workspace.o $OBJ/ops/cpu.o $OBJ/ops/buffers_cpu.o $OBJ/util.o)
cc -O2 -std=c11 -fopenmp -Isrc bench/tools/sgemm_alone.c "${OPS_OBJ[@]}" -o "$TMP/sgemm_alone" "${BLAS_LINK[@]}"
cc -O2 -std=c11 -fopenmp -Isrc bench/tools/attention_alone.c $OBJ/ops/attention_cpu.o $OBJ/ops/attention_amx_cpu.o \
    "${OPS_OBJ[@]}" -o "$TMP/attention_alone" "${BLAS_LINK[@]}"
# The helpers link OpenBLAS without femtotron's constructor (ops/blas_cores.c): give
# them, and the run, the kernels femtotron's binary runs (OpenBLAS's own fallback on a
# CPU it does not know would time SSE kernels "alone").
core=$(openblas_core "$FT")
[ -n "$core" ] && export OPENBLAS_CORETYPE=$core
blas_name="OpenBLAS's ${core:-default} kernels"
[ "$BLAS" = mkl ] && blas_name="oneMKL (make BLAS=mkl)"
PEAK=$("$FT" bench peak --threads 2 --seconds 5 | awk '{print $2}')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
LD_PRELOAD="$TMP/sgemm_rates.so" "$FT" train --data.train "$TMP/data/train_*.bin" \
    --model.hidden_size "$D" --model.num_hidden_layers "$L" --model.num_attention_heads "$H" \
    --model.num_key_value_heads "$KV" --model.intermediate_size "$F" --model.vocab_size "$V" \
    --model.max_position_embeddings "$S" --training.seq_length "$S" --training.micro_batch_size "$B" \
    --training.grad_acc_steps 1 --training.threads 2 --training.steps "$STEPS" \
    --training.peak_flops "${PEAK}e9" --logging.metrics "$TMP/m.jsonl" >"$TMP/train.log" 2>"$TMP/rates.txt"
{
echo "# sgemm in a training step vs alone ($CONFIG config, 1 rank x 2 threads)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC') · $blas_name · GEMM peak $PEAK GFLOP/s (\`bench peak --threads 2\`) · load average $load0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end"
echo
echo "Steps (ms): $(python3 -c "
import json
print(', '.join(str(round(x['step_ms'])) for x in map(json.loads, open('$TMP/m.jsonl')) if 'event' not in x))")"
echo "(step 1 included below: the shim counts every call)"
echo
echo "| M | N | K | op | calls | in the step GFLOP/s | alone, warm GFLOP/s | in step / warm | alone, cold GFLOP/s | in step / cold | seconds |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$OUT"
alone_rate() {  # reps cold: this row's shape alone, 2 threads, through the build's products (bench/tools/sgemm_alone.c)
    OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 "$TMP/sgemm_alone" "$m" "$n" "$k" "${tr:0:1}" "${tr:1:1}" "$@"
}
while read -r tag m n k tr calls s; do
    [ "$tag" = sgemm ] || continue
    alone=$(alone_rate 10 0)
    cold=$(alone_rate 10 1)
    awk -v m="$m" -v n="$n" -v k="$k" -v tr="$tr" -v c="$calls" -v s="$s" -v a="$alone" -v co="$cold" 'BEGIN {
        r = 2 * m * n * k * c / s / 1e9
        printf "| %d | %d | %d | %s | %d | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f |\n", m, n, k, tr, c, r, a, r / a, co, r / co, s }' >>"$OUT"
done <"$TMP/rates.txt"
awk '$1 == "sgemm" { f += 2 * $2 * $3 * $4 * $6; s += $7 }
     $1 == "sgemm_small" { printf "\nAttention tiles: %d calls, %.2f thread-seconds, %.1f GFLOP/s per thread.\n", $2, $3, $4 / $3 / 1e9 }
     END { printf "Large products: %.2f s at %.1f GFLOP/s over all shapes.\n", s, f / s / 1e9 }' "$TMP/rates.txt" >>"$OUT"
echo "Attention kernels alone (forward + backward of one layer, B $B, S $S, $H/$KV heads of $((D / H)), 2 threads, best of 5; GFLOP/s of the causal FLOPs): $(OMP_NUM_THREADS=2 "$TMP/attention_alone" "$B" "$S" "$H" "$KV" $((D / H)) 5)." >>"$OUT"
cat "$OUT"
