#!/usr/bin/env bash
# tests/shell/test_transformers.sh — a femtotron checkpoint is a Hugging Face model:
# LlamaForCausalLM.from_pretrained (transformers 4.36, in build/tfenv, installed by
# scripts/install_deps.sh) loads it with no missing or unexpected weights, and its
# greedy continuation of a prompt equals femtotron generate's, token for token, and the
# loss of a batch equals femtotron's within 1e-6 (ignoring the RoPE scaling is 1e-5 off): for
# an untied model on one rank, and for a tied model with linear RoPE scaling
# trained over two pipeline stages; the checkpoint is opened as CHECKPOINT_DIR/latest
# (a link to the newest step), as a Hugging Face user would.
set -u
cd "$(dirname "$0")/../.."
PY=build/tfenv/bin/python
if ! $PY -c "import transformers" >/dev/null 2>&1; then
    echo "FAIL transformers is not installed in build/tfenv (run scripts/install_deps.sh)"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A fixed corpus (Debian's fortunes package, installed by scripts/install_deps.sh):
# the training data must not change when the code does.
cat /usr/share/games/fortunes/{computers,science,literature,wisdom,linux} > "$tmp/corpus.txt"
./femtotron prepare --input "$tmp/corpus.txt" --output "$tmp/data" --val-fraction 0 >/dev/null 2>&1 ||
    { echo "FAIL prepare"; exit 1; }
# variant NAME NP ARGS...: two steps of a small model, a checkpoint, femtotron's greedy
# continuation, then transformers on the same checkpoint.
variant() {
    local name=$1 np=$2; shift 2
    mpirun --oversubscribe --allow-run-as-root -np "$np" ./femtotron train --data.train "$tmp/data/train_*.bin" \
        --model.hidden_size 64 --model.intermediate_size 160 --model.num_hidden_layers 2 \
        --model.num_attention_heads 4 --model.num_key_value_heads 2 --training.seq_length 64 \
        --training.micro_batch_size 2 --training.steps 2 --training.lr 3e-3 --training.peak_flops 1e10 \
        --training.threads 1 --checkpoint.dir "$tmp/ck_$name" "$@" >"$tmp/train_$name.log" 2>&1 ||
        { echo "FAIL $name: train: $(tail -2 "$tmp/train_$name.log")"; return 1; }
    ./femtotron generate --model "$tmp/ck_$name" --prompt "int main(void) {" --max-new-tokens 48 \
        --temperature 0 --ignore-eos --print-ids >"$tmp/gen_$name.txt" 2>&1 ||
        { echo "FAIL $name: generate: $(tail -2 "$tmp/gen_$name.txt")"; return 1; }
    # The loss of 4 sequences under the checkpoint's weights, as femtotron computes it
    # (dump_grads: the trainer's step-0 batch): far more sensitive than greedy tokens
    # to how positions are rotated.
    build/tests/dump_grads --model.from "$tmp/ck_$name/latest" --data.train "$tmp/data/train_*.bin" \
        --training.seq_length 64 --training.micro_batch_size 4 --training.global_batch_size 4 \
        --training.threads 1 --out "$tmp/grads_$name.safetensors" >"$tmp/loss_$name.txt" 2>&1 ||
        { echo "FAIL $name: dump_grads: $(tail -2 "$tmp/loss_$name.txt")"; return 1; }
    $PY - "$tmp/ck_$name/latest" "$tmp/gen_$name.txt" "$name" "$tmp/loss_$name.txt" "$tmp/data/train_*.bin" \
        >"$tmp/py_$name.txt" 2>&1 <<'PY'
import sys, torch
sys.path.insert(0, "tests/reference")
import data_order
from transformers import LlamaForCausalLM
ck, gen, name, loss_file, shards = sys.argv[1:6]
model, info = LlamaForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
problems = {k: v for k, v in info.items() if v}
print(("PASS" if not problems else "FAIL"), name + ": from_pretrained loads every weight, none missing or unexpected", problems or "")
prompt = "int main(void) {"
ids = torch.tensor([list(prompt.encode())])
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, do_sample=False,
                         pad_token_id=0)
hf = out[0, ids.shape[1]:].tolist()
line = [l for l in open(gen, errors="replace") if l.startswith("generated ids:")]
fem = [int(x) for x in line[0].split(":")[1].split()] if line else []
same = hf == fem
print(("PASS" if same else "FAIL"), name + ": greedy continuation identical to femtotron generate (48 tokens)",
      "" if same else f"hf {hf[:12]} femtotron {fem[:12]}")
inputs, targets = data_order.ShardDataset(shards, 64).step_batch(0, 4)
with torch.no_grad():
    logits = model(torch.tensor(inputs)).logits.double()
hf_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1)).item()
fem_loss = float([l.split()[1] for l in open(loss_file) if l.startswith("loss ")][0])
r = abs(hf_loss - fem_loss) / abs(hf_loss)
print(("PASS" if r < 1e-6 else "FAIL"), name + f": loss of 4 x 64 tokens equals transformers' (femtotron {fem_loss:.9g}, "
      f"transformers {hf_loss:.9g}, rel {r:.1e})")
PY
    grep -E '^(PASS|FAIL)' "$tmp/py_$name.txt"
    if [ "$(grep -c '^PASS' "$tmp/py_$name.txt")" -ne 3 ]; then
        echo "FAIL $name: transformers check did not complete: $(grep -v -E '^(PASS|FAIL)' "$tmp/py_$name.txt" | tail -3)"
        return 1
    fi
}
fail=0
# Untied, one rank.
variant untied 1 || fail=1
# Tied embeddings trained over two pipeline stages (saved once, no lm_head.weight),
# with linear RoPE scaling (written as {"type": "linear", "factor": 2}: transformers
# 4.36's LlamaLinearScalingRotaryEmbedding must rotate exactly as femtotron does).
variant tied_pp2_linear_rope 2 --parallel.pp 2 --model.tie_word_embeddings true \
    --model.rope_type linear --model.rope_factor 2 || fail=1
exit $fail
