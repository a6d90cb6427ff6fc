#!/usr/bin/env bash
# bench/recompute.sh — activation recomputation (training.recompute none / selective /
# full) on 1 rank: the activation bytes the rank plans, next to the bytes the fp32
# per-layer formula of bench/README.md predicts, and the step time each mode pays.
#
# Model "small" (hidden 512, 8 layers, 8 heads / 4 kv heads, intermediate 1536,
# vocab 8192, untied head), seq 512 x micro-batch 4 = 2048 tokens per step, 1 rank x
# 2 threads, gradient accumulation 1 (one micro-batch in flight).
#   - activation bytes measured: the start-up line "memory (rank 0): ...
#     (activations N bytes)" — every activation buffer allocated before step 1
#     (src/model/llama.c activation_floats, the token positions, and the token
#     buffers of src/engines/pipeline.c and src/engines/rank.c);
#   - predicted: L x the per-layer formula (what each mode keeps per layer), plus one
#     layer's working set in the backward scratch for selective (the lse) and full
#     (everything but the layer input), plus the terms no mode changes (RoPE tables,
#     the stage output, final norm and logits, the backward scratch, the token and
#     position buffers), every plan buffer rounded up to 16 floats as the plan does;
#   - step time: ROUNDS rounds of the three modes, interleaved (the machine is shared
#     and drifts); of all steps 2..STEPS of a mode (step 1 warms up) the fastest (the
#     least disturbed) and the median. The losses of every step must be identical.
#
# Output: bench/results/recompute.md. Usage: bench/recompute.sh
# (FEMTOTRON=path overrides ./femtotron; STEPS [3]; ROUNDS [3]; RES [bench/results])
. "$(dirname "$0")/lib.sh"
STEPS=${STEPS:-3}
ROUNDS=${ROUNDS:-3}
bench_private_binary
bench_corpus
D=512 L=8 H=8 KV=4 F=1536 V=8192 S=512 B=4 THREADS=2
MODEL=(--model.hidden_size $D --model.num_hidden_layers $L --model.num_attention_heads $H
       --model.num_key_value_heads $KV --model.intermediate_size $F --model.vocab_size $V
       --model.max_position_embeddings $S --training.seq_length $S --training.micro_batch_size $B
       --training.grad_acc_steps 1 --training.threads $THREADS --training.peak_flops 1e11)

run() {  # run MODE ROUND
    local log="$TMP/$1.r$2.log"
    "$FT" train --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" --training.recompute "$1" \
        --training.steps "$STEPS" --logging.metrics "$TMP/$1.r$2.jsonl" >"$log" 2>&1 ||
        { echo "run $1 (round $2) failed:"; tail -5 "$log"; exit 1; }
    grep '^step' "$log" | tail -1 | sed "s/^/$1 r$2: /"
}
for r in $(seq 1 "$ROUNDS"); do
    for mode in none selective full; do run "$mode" "$r"; done
done

python3 - "$TMP" "$RES" "$STEPS" "$ROUNDS" $D $L $H $KV $F $V $S $B $THREADS <<'EOF'
import json, os, re, statistics, sys
tmp, res = sys.argv[1], sys.argv[2]
steps, rounds, D, L, H, KV, F, V, S, B, T = map(int, sys.argv[3:])
hd, N, R = D // H, B * S, B * H * S
r16 = lambda n: (n + 15) // 16 * 16           # the plan keeps every buffer 64-byte aligned
# One layer's buffers in floats (1 rank: N tokens, all heads local).
layer = {"ln1": N * D, "ln1_rstd": N, "qkv": N * (H + 2 * KV) * hd, "lse": R, "attn": N * H * hd,
         "ln2": N * D, "ln2_rstd": N, "gu": 2 * N * F, "mlp_h": N * F}
def predicted(mode):
    kept = {k: L for k in layer}                 # layer slots of each buffer
    if mode == "selective": kept["lse"] = 1      # one layer's lse, in the scratch
    if mode == "full": kept = {k: 1 for k in layer}  # one layer's working set, in the scratch
    f = r16(((L + 1) if mode == "full" else 1) * N * D)  # resid: each layer's input + the output (full), else the stream
    f += sum(r16(kept[k] * n) for k, n in layer.items())
    f += 2 * r16(S * hd // 2)                    # RoPE cos, sin
    f += 2 * r16(N * D) + r16(N) + r16(N * V)    # final norm (output, xhat, rstd), logits
    f += 2 * r16(N * D)                          # resid_mid, normed (scratch)
    f += 2 * r16(N * D) + r16(N * (H + 2 * KV) * hd) + 3 * r16(R)  # dresid, dbuf_d, dqkv, att_m/l/rowdot
    f += r16(T * 2 * 64 * 64)                    # attention tiles per thread
    f += r16(2 * N * F) + r16(N * max(F, H * hd))  # dgu, dbuf_i
    f += 2 * S                                   # token positions, (cp + 1, S) ints
    return 4 * f + 2 * 4 * N + 2 * 4 * N         # + tokens, targets of the slot and of the trainer
def per_layer(mode):                             # bytes kept per layer (the README formula)
    n = sum(layer.values())                      # the stream is kept once, not per layer
    if mode == "selective": n -= R
    if mode == "full": n = N * D
    return 4 * n
MEM = re.compile(r"^memory \(rank 0\):.*\(activations (\d+) bytes\)")
out, losses = {}, {}
for mode in ("none", "selective", "full"):
    meas = [int(m.group(1)) for line in open(f"{tmp}/{mode}.r1.log") if (m := MEM.match(line))]
    if len(meas) != 1: sys.exit(f"{mode}: no memory line with the exact activation bytes")
    ms = []
    for r in range(1, rounds + 1):
        recs = [x for x in map(json.loads, open(f"{tmp}/{mode}.r{r}.jsonl")) if "event" not in x]
        losses.setdefault(mode, [x["loss"] for x in recs])
        if [x["loss"] for x in recs] != losses[mode]: sys.exit(f"{mode}: losses differ between rounds")
        ms += [x["step_ms"] for x in recs if x["step"] >= 2]
    out[mode] = dict(meas=meas[0], pred=predicted(mode), fast=min(ms), med=statistics.median(ms))
same = all(losses[m] == losses["none"] for m in out)
MiB = 1024 * 1024
base = out["none"]
try: load = os.getloadavg()[0]
except OSError: load = float("nan")
Lines = ["# Activation recomputation: memory and step time", "",
    f"Model \"small\": hidden {D}, {L} layers, {H} heads / {KV} kv heads, intermediate {F}, vocab {V}, untied head;",
    f"seq {S} x micro-batch {B} = {N} tokens per step, 1 rank x {T} threads, one micro-batch in flight.",
    "Measured: the rank's start-up memory line (every activation buffer allocated before step 1, with",
    "the token buffers). Predicted: L x the per-layer fp32 formula of bench/README.md, plus one layer's",
    "working set in the backward scratch (selective: its lse; full: all but the layer input), plus the",
    "terms no mode changes (RoPE tables, stage output, final norm, logits, backward scratch, token and",
    "position buffers), each plan buffer rounded up to 16 floats as the plan rounds it.",
    f"Step time: the fastest of steps 2..{steps} over {rounds} interleaved runs per mode (the machine is shared;",
    f"the fastest step is the least disturbed), median in brackets; load average at the end {load:.1f}.",
    f"Losses of all {steps} steps bit-identical across the modes: {'yes' if same else 'NO'}.", "",
    "| recompute | activation bytes measured | predicted by the formula | MiB | vs none | kept per layer (formula) | step time | time vs none |",
    "|---|---:|---:|---:|---:|---:|---:|---:|"]
for mode, o in out.items():
    Lines.append(f"| {mode} | {o['meas']:,} | {o['pred']:,}{'' if o['pred'] == o['meas'] else ' (differs)'} | "
                 f"{o['meas'] / MiB:.1f} | {o['meas'] / base['meas']:.2f} | {per_layer(mode):,} B | "
                 f"{o['fast']:.0f} ms ({o['med']:.0f}) | {o['fast'] / base['fast']:.2f} |")
open(f"{res}/recompute.md", "w").write("\n".join(Lines) + "\n")
print("\n".join(Lines))
if not same: sys.exit("losses differ between recompute modes")
EOF
