#!/usr/bin/env bash
# tests/shell/test_recompute.sh — activation recomputation (training.recompute) changes
# memory, never numbers. On 1 rank, none / selective / full train the same steps:
#   - the metrics' loss/lr/grad_norm lines are byte-identical (recomputed buffers
#     are rebuilt by the same kernels from the same inputs, so they are bit-identical);
#   - the final checkpoint's model.safetensors is byte-identical;
#   - the activation bytes of the start-up memory line fall none > selective > full,
#     by exactly the amounts the activation plan predicts, computed here from the
#     model config (not from the C code).
# Two micro-batches under the AFAB schedule are in flight together, so the shared
# one-layer working set is overwritten by the second forward before the first
# backward recomputes into it.
. "$(dirname "$0")/lib.sh"
fortunes_data

# The model and batch (the byte-count predictions below read these numbers).
D=128 F=384 L=3 H=4 KV=2 S=64 B=2 M=2 STEPS=4
common=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
        --model.hidden_size $D --model.intermediate_size $F --model.num_hidden_layers $L
        --model.num_attention_heads $H --model.num_key_value_heads $KV
        --training.seq_length $S --training.micro_batch_size $B --training.grad_acc_steps $M
        --parallel.pp_schedule afab --training.steps $STEPS --training.warmup_steps 1
        --training.lr 2e-3 --training.threads 2 --training.peak_flops 1e11 --training.seed 7
        --checkpoint.every $STEPS)

for mode in none selective full; do
    ./femtotron train "${common[@]}" --training.recompute $mode --logging.metrics "$tmp/$mode.jsonl" \
        --checkpoint.dir "$tmp/ck_$mode" >"$tmp/$mode.log" 2>&1 ||
        { failed "recompute $mode: train exited with an error"; tail -5 "$tmp/$mode.log"; exit 1; }
done

# Losses, learning rates and gradient norms as printed (%.17g): identical to the bit.
extract() { grep -o '"step": [0-9]*, "loss": [^,]*, "lr": [^,]*, "grad_norm": [^,]*' "$1"; }
ref=$(extract "$tmp/none.jsonl")
[ "$(echo "$ref" | grep -c step)" -eq $STEPS ] || failed "recompute none: expected $STEPS metrics lines"
ck="step_$(printf %07d $STEPS)/model.safetensors"
for mode in selective full; do
    if [ -n "$ref" ] && [ "$(extract "$tmp/$mode.jsonl")" = "$ref" ]; then
        pass "recompute $mode: $STEPS steps of loss/grad_norm bit-identical to none"
    else
        failed "recompute $mode: metrics differ from none:"
        diff <(echo "$ref") <(extract "$tmp/$mode.jsonl") | head -6
    fi
    if [ -f "$tmp/ck_none/$ck" ] && cmp -s "$tmp/ck_none/$ck" "$tmp/ck_$mode/$ck"; then
        pass "recompute $mode: final model.safetensors byte-identical to none"
    else
        failed "recompute $mode: final weights differ from none (or no checkpoint)"
    fi
done

# Activation bytes: "memory (rank 0): ... (activations N bytes)".
act_bytes() { sed -n 's/^memory (rank 0):.*(activations \([0-9]*\) bytes).*/\1/p' "$tmp/$1.log"; }
none=$(act_bytes none) sel=$(act_bytes selective) full=$(act_bytes full)
if [ -z "$none" ] || [ -z "$sel" ] || [ -z "$full" ]; then
    failed "memory line with exact activation bytes missing (none='$none' selective='$sel' full='$full')"
    exit 1
fi
# Prediction. The plan rounds every buffer up to 16 floats (64 bytes); one rank holds
# all nl = L layers; AFAB keeps M micro-batches' saved buffers (slots), and ONE set of
# scratch buffers shared by them. Per layer and slot (N = B*S tokens, fp32):
#   lse (B, H, S); ln1 (N, D) + rstd (N); qkv (N, (H+2KV)*hd); attn (N, H*hd);
#   ln2 (N, D) + rstd (N); gate|up (N, 2F); mlp_h (N, F).
# selective drops the per-layer lse of every slot and adds one layer's lse to the
# scratch; full drops every buffer above, adds one layer of each, and keeps the
# residual stream per layer (L + 1 slots of (N, D)) where the others keep one.
read -r exp_sel exp_full <<<"$(awk -v D=$D -v F=$F -v L=$L -v H=$H -v KV=$KV -v S=$S -v B=$B -v M=$M '
    function r16(n) { return int((n + 15) / 16) * 16 }
    BEGIN {
        N = B * S; hd = D / H
        n[1] = B * H * S                          # lse
        n[2] = N * D; n[3] = N                    # ln1, ln1_rstd
        n[4] = N * (H + 2 * KV) * hd              # qkv
        n[5] = N * H * hd                         # attn
        n[6] = N * D; n[7] = N                    # ln2, ln2_rstd
        n[8] = N * 2 * F; n[9] = N * F            # gate|up, mlp_h
        sel = 4 * (M * r16(L * n[1]) - r16(n[1]))
        for (k = 1; k <= 9; k++) full += 4 * (M * r16(L * n[k]) - r16(n[k]))
        full -= 4 * M * (r16((L + 1) * N * D) - r16(N * D))  # the stream per layer
        printf "%d %d\n", sel, full
    }')"
echo "activation bytes: none $none, selective $sel (predicted drop $exp_sel), full $full (predicted drop $exp_full)"
if [ "$full" -lt "$sel" ] && [ "$sel" -lt "$none" ]; then
    pass "activation bytes fall: full $full < selective $sel < none $none"
else
    failed "activation bytes do not fall: full $full, selective $sel, none $none"
fi
[ $((none - sel)) -eq "$exp_sel" ] && pass "selective saves exactly $exp_sel bytes (the per-layer lse of $M slots, less one layer's)" ||
    failed "selective saves $((none - sel)) bytes, predicted $exp_sel"
[ $((none - full)) -eq "$exp_full" ] && pass "full saves exactly $exp_full bytes (all but the stream, less one layer's working set and the stream's other layers)" ||
    failed "full saves $((none - full)) bytes, predicted $exp_full"
exit $fail
