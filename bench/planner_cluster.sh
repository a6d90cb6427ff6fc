#!/usr/bin/env bash
# bench/planner_cluster.sh — the planner at cluster scale, on paper: its predicted
# step time for published large runs, next to the published figure, and its own
# choice of layout for the same cluster and batch.
#
#  * Korthikanti et al. 2022 (Reducing Activation Recomputation in Large
#    Transformer Models), Table 5: GPT 22B / 175B / 530B / 1T on A100-80GB
#    (Selene), sequence 2048, micro-batch 1, TP 8, PP 1 / 8 / 35 / 64, DP 1,
#    global batch 4 / 64 / 280 / 512; iteration time with sequence parallel +
#    selective recomputation, and with full recomputation. Schedule assumed:
#    1F1B (the paper does not interleave these runs).
#  * Llama 3 (Dubey et al. 2024, Table 4): Llama-3.1-405B on H100, TP8 CP1 PP16
#    DP64 (8,192 GPUs) and DP128 (16,384 GPUs) at sequence 8192, and TP8 CP16
#    PP16 DP8 at sequence 131,072, each 16M tokens per step; published BF16 MFU
#    43% / 41% / 38%. Schedule assumed: interleaved 1F1B with 2 chunks per rank,
#    ZeRO-1 over dp x cp, no recomputation (the paper names none).
# MFU here uses femtotron's FLOP count (6 x matmul parameters + 6*L*S*D per token,
# causal attention) against 989 TFLOP/s; Llama 3's own count differs slightly.
#
# Output: bench/results/planner_cluster.md. Usage: bench/planner_cluster.sh
. "$(dirname "$0")/lib.sh"
OUT=$RES/planner_cluster.md

field() { awk -F'\t' -v c="$1" 'NR == 2 { print $c }'; }  # column c of the first row
# plan_row MODEL GPUS HW SEQ TOKENS LAYOUT -> "step_s mfu total_bytes fits name"
plan_row() {
    "$FT" plan --model "$1" --gpus "$2" --hardware "$3" --seq-length "$4" --global-batch-tokens "$5" \
        ${6:+--layout "$6"} --tsv --top 1 | awk -F'\t' 'NR == 2 { printf "%s %s %s %s %s\n", $21, $30, $19, $20, $2 }'
}

{
echo "# The planner at cluster scale: predicted vs published"
echo
echo "## Megatron-LM, Korthikanti et al. 2022 (A100-80GB, sequence 2048, TP 8, DP 1)"
echo
echo "| model | GPUs | PP | batch | recompute | published s | predicted s | error | predicted MFU | memory GiB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT"
sum=0; n=0
while read -r model gpus pp batch sel full; do
    for rc in selective full; do
        pub=$sel; [ $rc = full ] && pub=$full
        read -r step mfu bytes fits _ < <(plan_row "$model" "$gpus" a100 2048 $((batch * 2048)) \
            "dp=1,tp=8,pp=$pp,cp=1,sp=1,mbs=1,zero=0,sched=1f1b,recompute=$rc")
        err=$(awk -v p="$step" -v q="$pub" 'BEGIN { printf "%+.1f%%", 100 * (p - q) / q }')
        sum=$(awk -v s="$sum" -v p="$step" -v q="$pub" 'BEGIN { d = (p - q) / q; print s + (d < 0 ? -d : d) }'); n=$((n + 1))
        printf '| %s | %s | %s | %s | %s | %s | %.2f | %s | %.1f%% | %.1f%s |\n' "$model" "$gpus" "$pp" "$batch" "$rc" \
            "$pub" "$step" "$err" "$(awk -v m="$mfu" 'BEGIN { print 100 * m }')" \
            "$(awk -v b="$bytes" 'BEGIN { print b / 2^30 }')" "$([ "$fits" = 1 ] || echo ' (does not fit)')" >>"$OUT"
    done
done <<'ROWS'
gpt-22b 8 1 4 1.10 1.42
gpt-175b 64 8 64 13.75 18.13
gpt-530b 280 35 280 37.83 49.05
gpt-1t 512 64 512 71.49 94.42
ROWS
echo >>"$OUT"
echo "Mean absolute error over the $n rows: $(awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.1f%%", 100 * s / n }')." >>"$OUT"

{
echo
echo "The planner's own choice for the same GPUs and batch (A100, sequence 2048):"
echo
echo "| model | GPUs | planner's layout | predicted s | vs published layout (selective) |"
echo "|---|---|---|---|---|"
} >>"$OUT"
while read -r model gpus pp batch sel; do
    read -r step _ _ _ name < <(plan_row "$model" "$gpus" a100 2048 $((batch * 2048)) "")
    name=$("$FT" plan --model "$model" --gpus "$gpus" --hardware a100 --seq-length 2048 \
        --global-batch-tokens $((batch * 2048)) --tsv --top 1 | field 2)
    read -r pstep _ < <(plan_row "$model" "$gpus" a100 2048 $((batch * 2048)) \
        "dp=1,tp=8,pp=$pp,cp=1,sp=1,mbs=1,zero=0,sched=1f1b,recompute=selective")
    printf '| %s | %s | `%s` | %.2f | %s |\n' "$model" "$gpus" "$name" "$step" \
        "$(awk -v a="$step" -v b="$pstep" 'BEGIN { printf "%+.1f%%", 100 * (a - b) / b }')" >>"$OUT"
done <<'ROWS'
gpt-22b 8 1 4 1.10
gpt-175b 64 8 64 13.75
gpt-530b 280 35 280 37.83
gpt-1t 512 64 512 71.49
ROWS

{
echo
echo "## Llama-3.1-405B on H100 (Llama 3 paper, Table 4; 16M tokens per step)"
echo
budget=$("$FT" plan --model llama-3.1-405b --gpus 8192 --hardware h100 --seq-length 8192 \
    --global-batch-tokens 16777216 --top 1 | grep -o 'budget [0-9.]*' | head -1 | cut -d' ' -f2)
echo "| GPUs | layout | sequence | micro-batches | published MFU | predicted MFU | error | predicted s | memory GiB (budget $budget) |"
echo "|---|---|---|---|---|---|---|---|---|"
} >>"$OUT"
# The last row: the 8,192-GPU step as it fits in 80 GB. Interleaved 1F1B with 32
# micro-batches keeps 46 chunk-micro-batches in flight on the first rank (108 GiB);
# at most 16 micro-batches at a time fit, so the step runs as two 16-micro-batch
# pipelines, each with its fill and drain: priced as half the batch (8M tokens),
# whose MFU is the step's (each half also pays its own gradient reduction, ~4% of
# its step, so this reading is a lower bound by that much).
while read -r gpus dp cp seq pub tokens; do
    read -r step mfu bytes fits _ < <(plan_row llama-3.1-405b "$gpus" h100 "$seq" "$tokens" \
        "dp=$dp,tp=8,pp=16,cp=$cp,sp=1,mbs=1,zero=1,sched=interleaved,v=2,recompute=none")
    mb=$((tokens / seq / dp)); [ "$tokens" = 16777216 ] || mb="2 x $mb"
    printf '| %s | TP8 CP%s PP16 DP%s | %s | %s | %s%% | %.1f%% | %s | %.2f | %.1f%s |\n' "$gpus" "$cp" "$dp" "$seq" "$mb" "$pub" \
        "$(awk -v m="$mfu" 'BEGIN { print 100 * m }')" \
        "$(awk -v m="$mfu" -v p="$pub" 'BEGIN { printf "%+.1f points", 100 * m - p }')" \
        "$(awk -v s="$step" -v t="$tokens" 'BEGIN { print s * 16777216 / t }')" \
        "$(awk -v b="$bytes" 'BEGIN { print b / 2^30 }')" "$([ "$fits" = 1 ] || echo ' (does not fit)')" >>"$OUT"
done <<'ROWS'
8192 64 1 8192 43 16777216
16384 128 1 8192 41 16777216
16384 8 16 131072 38 16777216
8192 64 1 8192 43 8388608
ROWS
{
echo
echo "The planner's own choice for Llama-3.1-405B (H100, 16M tokens per step):"
echo
echo "| GPUs | sequence | planner's layout | predicted s | predicted MFU | memory GiB |"
echo "|---|---|---|---|---|---|"
} >>"$OUT"
while read -r gpus seq; do
    read -r step mfu bytes fits name < <(plan_row llama-3.1-405b "$gpus" h100 "$seq" 16777216 "")
    name=$("$FT" plan --model llama-3.1-405b --gpus "$gpus" --hardware h100 --seq-length "$seq" \
        --global-batch-tokens 16777216 --tsv --top 1 | field 2)
    printf '| %s | %s | `%s` | %.2f | %.1f%% | %.1f |\n' "$gpus" "$seq" "$name" "$step" \
        "$(awk -v m="$mfu" 'BEGIN { print 100 * m }')" "$(awk -v b="$bytes" 'BEGIN { print b / 2^30 }')" >>"$OUT"
done <<'ROWS'
8192 8192
16384 8192
16384 131072
ROWS
cat "$OUT"
