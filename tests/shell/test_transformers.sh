#!/usr/bin/env bash
# tests/shell/test_transformers.sh — a femtotron checkpoint is a Hugging Face model:
# LlamaForCausalLM.from_pretrained (transformers 4.36, in build/tfenv, installed by
# scripts/install_deps.sh) loads it with no missing or unexpected weights, and its
# greedy continuation of a prompt equals femtotron generate's, token for token.
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
# Two steps of a small untied model, then a checkpoint (step 2 has learned a little).
./femtotron train --data.train "$tmp/data/train_*.bin" --model.hidden_size 64 \
    --model.intermediate_size 160 --model.num_hidden_layers 2 --model.num_attention_heads 4 \
    --model.num_key_value_heads 2 --training.seq_length 64 --training.micro_batch_size 2 \
    --training.steps 2 --training.lr 3e-3 --training.peak_flops 1e10 --training.threads 1 \
    --checkpoint.dir "$tmp/ck" --logging.metrics "$tmp/m.jsonl" >"$tmp/train.log" 2>&1 ||
    { echo "FAIL train: $(tail -2 "$tmp/train.log")"; exit 1; }
./femtotron generate --model "$tmp/ck" --prompt "int main(void) {" --max-new-tokens 48 \
    --temperature 0 --ignore-eos --print-ids >"$tmp/gen.txt" 2>&1 ||
    { echo "FAIL generate: $(tail -2 "$tmp/gen.txt")"; exit 1; }
$PY - "$tmp/ck/step_0000002" "$tmp/gen.txt" >"$tmp/py.txt" 2>&1 <<'PY'
import sys, torch
from transformers import LlamaForCausalLM
ck, gen = sys.argv[1], sys.argv[2]
model, info = LlamaForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
problems = {k: v for k, v in info.items() if v}
print(("PASS" if not problems else "FAIL"), "from_pretrained loads every weight, none missing or unexpected", problems or "")
prompt = "int main(void) {"
ids = torch.tensor([list(prompt.encode())])
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48, do_sample=False,
                         pad_token_id=0)
hf = out[0, ids.shape[1]:].tolist()
line = [l for l in open(gen, errors="replace") if l.startswith("generated ids:")]
fem = [int(x) for x in line[0].split(":")[1].split()] if line else []
same = hf == fem
print(("PASS" if same else "FAIL"), "greedy continuation identical to femtotron generate (48 tokens)",
      "" if same else f"hf {hf[:12]} femtotron {fem[:12]}")
PY
grep -E '^(PASS|FAIL)' "$tmp/py.txt"
n_pass=$(grep -c '^PASS' "$tmp/py.txt")
if [ "$n_pass" -ne 2 ]; then
    echo "FAIL transformers check did not complete: $(grep -v -E '^(PASS|FAIL)' "$tmp/py.txt" | tail -3)"
    exit 1
fi
exit 0
