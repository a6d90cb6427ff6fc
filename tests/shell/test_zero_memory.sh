#!/usr/bin/env bash
# tests/shell/test_zero_memory.sh — ZeRO-3 saves memory whatever the vocabulary
# (engines/data_parallel.c, model/param_access.h): under ZeRO-2/3 the embedding and
# the head are handed out in pieces no larger than a layer, so ZeRO-3's windows (one
# parameter window, two gradient windows, or one when two would cost more than
# ZeRO-3 saves) are layer-sized, and the largest rank of a ZeRO-3 run never needs
# more memory than the largest rank of the same run under ZeRO-1. Checked with the
# planner's per-rank prediction (build/tests/plan_memory_main), which
# tests/shell/test_parity.sh proves equal to what real runs allocate, byte for
# byte, including rows with this 49,152-token vocabulary.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
PLAN=build/tests/plan_memory_main
[ -x "$PLAN" ] || make -s "$PLAN" >/dev/null 2>&1
[ -x "$PLAN" ] || { failed "setup: $PLAN not built"; exit 1; }
cat /usr/share/games/fortunes/computers >"$tmp/c.txt"
"$FT" prepare --input "$tmp/c.txt" --output "$tmp/d" --val-fraction 0 >/dev/null 2>&1 || { failed "prepare"; exit 1; }

# name | D F L H KV | model args | layout args (world = dp x pp x tp)
# (the tiny models are the parity tests'; SmolLM2-135M's shape is the one whose
# ZeRO-3 needed 1149.7 MiB against ZeRO-1's 663.7 when windows were embedding-sized)
cases=(
  "tiny-v257|64 128 2 4 2|--model.vocab_size 257|--parallel.dp 2"
  "tiny-v257-tied|64 128 2 4 2|--model.vocab_size 257 --model.tie_word_embeddings true|--parallel.dp 2"
  "tiny-v49152|64 128 2 4 2|--model.vocab_size 49152|--parallel.dp 2"
  "tiny-v49152-tied|64 128 2 4 2|--model.vocab_size 49152 --model.tie_word_embeddings true|--parallel.dp 2"
  "tiny-v49152-dp4|64 128 2 4 2|--model.vocab_size 49152|--parallel.dp 4"
  "tiny-v49152-tp2|64 128 2 4 2|--model.vocab_size 49152|--parallel.dp 2 --parallel.tp 2"
  "8-layer-v49152-pp4|64 128 8 4 2|--model.vocab_size 49152 --model.tie_word_embeddings true|--parallel.dp 2 --parallel.pp 4"
  "SmolLM2-135M|576 1536 30 9 3|--model.vocab_size 49152 --model.tie_word_embeddings true|--parallel.dp 2"
  "SmolLM2-135M-pp2|576 1536 30 9 3|--model.vocab_size 49152 --model.tie_word_embeddings true|--parallel.dp 2 --parallel.pp 2"
)
for c in "${cases[@]}"; do
    IFS='|' read -r name shape margs largs <<<"$c"
    read -r D F L H KV <<<"$shape"
    world=$($PY -c 'import re,sys; a=sys.argv[1]; g=lambda k: int((re.search(r"--parallel\.%s (\d+)" % k, a) or [0,1])[1]); print(g("dp")*g("pp")*g("tp"))' "$largs")
    tp=$($PY -c 'import re,sys; m=re.search(r"--parallel\.tp (\d+)", sys.argv[1]); print(m.group(1) if m else 1)' "$largs")
    for z in 1 3; do
        # shellcheck disable=SC2086
        "$PLAN" --world "$world" --data.train "$tmp/d/train_*.bin" --model.hidden_size "$D" \
            --model.intermediate_size "$F" --model.num_hidden_layers "$L" --model.num_attention_heads "$H" \
            --model.num_key_value_heads "$KV" $margs $largs --parallel.zero $z --training.seq_length 64 \
            --training.micro_batch_size 1 --training.global_batch_size 8 --training.threads 1 \
            >"$tmp/$name.z$z" 2>&1 || { failed "$name zero $z: $(tail -2 "$tmp/$name.z$z")"; continue 2; }
    done
    if out=$($PY - "$tmp/$name.z1" "$tmp/$name.z3" "$D" "$F" "$H" "$KV" "$tp" <<'PY' 2>&1
import re, sys
def ranks(path):
    out = []
    for line in open(path):
        m = re.match(r"memory bytes \(rank (\d+)\): (.*)", line)
        if m:
            f = m.group(2).split()
            out.append({f[i]: int(f[i + 1]) for i in range(0, len(f), 2)})
    assert out, "no prediction in " + path
    return out
z1, z3 = ranks(sys.argv[1]), ranks(sys.argv[2])
D, F, H, KV, tp = map(int, sys.argv[3:8])
hd = D // H
layer = 2 * D + (D * (H + 2 * KV) * hd + H * hd * D + 3 * D * F) // tp  # one layer's elements on a tp rank (norms whole)
max1, max3 = max(sum(r.values()) for r in z1), max(sum(r.values()) for r in z3)
MiB = 1048576.0
assert max3 <= max1, "ZeRO-3 %.2f MiB > ZeRO-1 %.2f MiB" % (max3 / MiB, max1 / MiB)
win = [r3["comm"] - r1["comm"] for r1, r3 in zip(z1, z3)]  # ZeRO-1 has no windows; the pipeline's buffers are alike
for w in win:  # 1 parameter + 1 or 2 gradient windows of one layer
    assert w in (2 * 4 * layer, 3 * 4 * layer), "ZeRO-3 windows %d bytes are not 2 or 3 layers (%d each)" % (w, 4 * layer)
print("largest rank: ZeRO-3 %.2f MiB <= ZeRO-1 %.2f MiB; windows %s layer(s) of %.2f MiB" %
      (max3 / MiB, max1 / MiB, "/".join(sorted({str(w // (4 * layer)) for w in win})), 4 * layer / MiB))
PY
    ); then pass "$name ($largs): $out"; else failed "$name ($largs): $out"; fi
done

# What a run says at start-up about its windows: layer-sized with the embedding and
# head in pieces; one gradient window where two would cost more than ZeRO-3 saves.
fortunes_data
run=(--data.train "$tmp/data/train_*.bin" --model.hidden_size 64 --model.intermediate_size 128
     --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2
     --training.seq_length 32 --training.micro_batch_size 4 --training.global_batch_size 8
     --training.threads 1 --training.peak_flops 1e10 --training.steps 2 --parallel.dp 2 --parallel.zero 3)
mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" train "${run[@]}" --model.vocab_size 49152 >"$tmp/r1.log" 2>&1
grep -qx "ZeRO-3 windows: 2 gradient + 1 parameter of 0.14 MiB each (the largest bucket; embedding and head in pieces)" "$tmp/r1.log" &&
    pass "vocab 49152 run: 2 gradient + 1 parameter window of one layer (0.14 MiB), embedding and head in pieces" ||
    failed "vocab 49152 run: $(grep -E 'ZeRO|error' "$tmp/r1.log")"
mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" train "${run[@]}" --model.vocab_size 257 >"$tmp/r2.log" 2>&1
grep -q "^ZeRO-3 windows: 1 gradient + 1 parameter of 0.14 MiB each .*; one gradient window, so reductions do not overlap backward: a second would cost more than ZeRO-3 saves over ZeRO-1 here$" "$tmp/r2.log" &&
    pass "vocab 257 run (2 layers on dp 2): one gradient window, said with the reason" ||
    failed "vocab 257 run: $(grep -E 'ZeRO|error' "$tmp/r2.log")"
exit $fail
