#!/usr/bin/env bash
# tests/shell/test_mixtral_transformers.sh — a femtotron Mixtral (mixture-of-experts)
# checkpoint, written by dp 2 x ep 2 ranks that each hold half the experts, is a
# Hugging Face MixtralForCausalLM: transformers (build/tfenv) loads it
# with no missing or unexpected weights, and on the checkpoint's weights the mean
# cross-entropy of a batch and every parameter's gradient equal femtotron's
# (build/tests/dump_grads, one rank) within 1e-5. The load-balancing loss is left out
# of this comparison (model.output_router_logits false): transformers 4.36's
# load_balancing_loss_func is the formula replaced in 4.38 (a softmax over the top-k
# logits only); femtotron follows the later one, which tests/reference/test_reference.py
# checks against an independent PyTorch implementation of it.
. "$(dirname "$0")/lib.sh"
PY=build/tfenv/bin/python
if ! $PY -c "from transformers import MixtralForCausalLM" >/dev/null 2>&1; then
    failed "transformers with MixtralForCausalLM is not installed in build/tfenv (run scripts/install_deps.sh)"
    exit 1
fi
[ -x build/tests/dump_grads ] || make -s build/tests/dump_grads >/dev/null 2>&1
fortunes_data
model=(--model.hidden_size 48 --model.intermediate_size 64 --model.num_hidden_layers 2
       --model.num_attention_heads 4 --model.num_key_value_heads 2 --model.num_local_experts 4
       --model.num_experts_per_tok 2)
# Two training steps with the load-balancing loss on, so the checkpoint's weights are
# trained ones (the router included), then saved with Hugging Face Mixtral names, by
# two ranks with expert parallelism (dp 2 x ep 2: each rank holds and writes 2 of the
# 4 experts of every layer).
mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" train --data.train "$tmp/data/train_*.bin" "${model[@]}" \
    --model.output_router_logits true --parallel.dp 2 --parallel.ep 2 \
    --training.seq_length 32 --training.micro_batch_size 1 --training.steps 2 --training.lr 3e-3 \
    --training.peak_flops 1e10 --training.threads 1 --checkpoint.dir "$tmp/ck" >"$tmp/train.log" 2>&1 ||
    { failed "train: $(tail -2 "$tmp/train.log")"; exit 1; }
grep -Eq '"model_type":\s*"mixtral"' "$tmp/ck/latest/config.json" &&
    grep -q '"MixtralForCausalLM"' "$tmp/ck/latest/config.json" &&
    pass "checkpoint config.json says MixtralForCausalLM, model_type mixtral" ||
    failed "checkpoint config.json: $(head -c 300 "$tmp/ck/latest/config.json")"
build/tests/dump_grads --model.from "$tmp/ck/latest" --model.output_router_logits false \
    --data.train "$tmp/data/train_*.bin" --training.seq_length 32 --training.micro_batch_size 4 \
    --training.global_batch_size 4 --training.threads 1 --out "$tmp/grads.safetensors" >"$tmp/loss.txt" 2>&1 ||
    { failed "dump_grads: $(tail -2 "$tmp/loss.txt")"; exit 1; }
$PY - "$tmp/ck/latest" "$tmp/loss.txt" "$tmp/grads.safetensors" "$tmp/data/train_*.bin" <<'PY'
import sys, numpy as np, torch
sys.path.insert(0, "tests/reference")
import data_order, safetensors_np
from transformers import MixtralForCausalLM
ck, loss_file, grads_file, shards = sys.argv[1:5]
model, info = MixtralForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
problems = {k: v for k, v in info.items() if v}
print(("PASS" if not problems else "FAIL"), "from_pretrained loads every Mixtral weight, none missing or unexpected",
      problems or "")
inputs, targets = data_order.ShardDataset(shards, 32).step_batch(0, 4)
logits = model(torch.tensor(inputs)).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1))
loss.backward()
fem_loss = float([l.split()[1] for l in open(loss_file) if l.startswith("loss ")][0])
r = abs(loss.item() - fem_loss) / abs(loss.item())
print(("PASS" if r < 1e-5 else "FAIL"), f"loss of 4 x 32 tokens equals transformers' (femtotron {fem_loss:.9g}, "
      f"transformers {loss.item():.9g}, rel {r:.1e})")
fem = safetensors_np.load_safetensors(grads_file)
worst, where, missing = 0.0, None, []
for name, p in model.named_parameters():
    if name not in fem:
        missing.append(name)
        continue
    g = p.grad.double().numpy() if p.grad is not None else np.zeros(tuple(p.shape))
    d = np.linalg.norm(fem[name].astype(np.float64) - g) / max(np.linalg.norm(g), 1e-30)
    if d > worst:
        worst, where = d, name
print(("PASS" if not missing and worst < 1e-5 else "FAIL"),
      f"every gradient ({len(fem)} tensors) equals transformers' within 1e-5 (worst rel {worst:.1e} at {where})",
      f"missing {missing}" if missing else "")
PY
exit $fail
