#!/usr/bin/env bash
# tests/shell/test_standalone.sh — a checkpoint stands alone. Data prepared with a
# Hugging Face tokenizer.json records it (prepare.json, the tokenizer files copied);
# a run continued from a Hugging Face model directory (tied, over two pipeline
# stages) writes checkpoints whose config.json keeps every key of the source config
# it does not own, whose generation_config.json is the source's, and which carry the
# tokenizer files: transformers' AutoTokenizer and AutoModelForCausalLM open
# CHECKPOINT_DIR/latest, and femtotron generate uses the checkpoint's tokenizer by
# default and refuses one whose vocabulary does not fit the model. With
# checkpoint.dtype bf16 the weights file is bf16, transformers loads it as such,
# and a resume from it is exact.
. "$(dirname "$0")/lib.sh"
PY=build/pyenv/bin/python
TF=build/tfenv/bin/python
MPI=(mpirun --oversubscribe --allow-run-as-root)
$PY tests/reference/hf_tok.py train "$tmp/tok" >/dev/null 2>&1 || { failed "hf_tok.py train"; exit 1; }
mkdir -p "$tmp/tokdir"
# In the format every tokenizers release reads: the checkpoint's copy must open in
# build/tfenv's older tokenizers too.
$PY tests/reference/hf_tok.py legacy "$tmp/tok/gpt2.json" "$tmp/tokdir/tokenizer.json"
echo '{"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 64, "tokenizer_class": "PreTrainedTokenizerFast"}' \
    >"$tmp/tokdir/tokenizer_config.json"
cat /usr/share/games/fortunes/{computers,science} >"$tmp/corpus.txt"
./femtotron prepare --input "$tmp/corpus.txt" --output "$tmp/data" --split-on % --val-fraction 0 \
    --tokenizer "$tmp/tokdir/tokenizer.json" >"$tmp/prep.log" 2>&1 || { failed "prepare: $(tail -2 "$tmp/prep.log")"; exit 1; }
rec=$(tr -d ' \t\n' <"$tmp/data/prepare.json" 2>/dev/null)
if cmp -s "$tmp/data/tokenizer.json" "$tmp/tokdir/tokenizer.json" && [ -f "$tmp/data/tokenizer_config.json" ] &&
    [[ $rec == *'"tokenizer":"tokenizer.json"'* && $rec == *'"eot_token_id":0'* && $rec == *'"bos_token_id":0'* ]]; then
    pass "prepare records its tokenizer: prepare.json ($rec) and the tokenizer files"
else failed "prepare.json / tokenizer copies: $rec"; fi
V=$(echo "$rec" | grep -o '"vocab_size":[0-9]*' | grep -o '[0-9]*$')

# A source model as the hub would give it: keys femtotron does not own, a generation
# config of its own, random weights, tied embeddings.
$PY - "$tmp/src" "$V" <<'PY' || { failed "source model"; exit 1; }
import json, os, sys
sys.path.insert(0, "tests/reference")
import llama_torch, safetensors_np
out, V = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V,
       "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
       "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": None, "use_cache": True,
       "custom_note": "kept by femtotron", "torch_dtype": "bfloat16", "transformers_version": "4.40.0"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
json.dump({"bos_token_id": 0, "eos_token_id": 0, "max_new_tokens": 17, "do_sample": False},
          open(os.path.join(out, "generation_config.json"), "w"), indent=2)
w = llama_torch.random_weights(cfg, seed=5, std=0.05)
safetensors_np.write_safetensors(os.path.join(out, "model.safetensors"), w, metadata={"format": "pt"})
PY
"${MPI[@]}" -np 2 ./femtotron train --model.from "$tmp/src" --data.train "$tmp/data/train_*.bin" \
    --parallel.pp 2 --training.seq_length 64 --training.micro_batch_size 2 --training.steps 2 \
    --training.threads 1 --training.peak_flops 1e10 --checkpoint.dir "$tmp/ck" >"$tmp/train.log" 2>&1 ||
    { failed "train from the source model: $(tail -3 "$tmp/train.log")"; exit 1; }
ck="$tmp/ck/latest"
$PY - "$ck" "$tmp/src" "$tmp/data" <<'PY'
import json, os, sys
ck, src, data = sys.argv[1:4]
c = json.load(open(os.path.join(ck, "config.json")))
ok = c.get("custom_note") == "kept by femtotron" and c.get("use_cache") is True and c.get("bos_token_id") == 0 \
     and c.get("eos_token_id") == 0 and "pad_token_id" in c and c.get("torch_dtype") == "float32" \
     and c.get("tie_word_embeddings") is True
print("PASS" if ok else "FAIL", "config.json keeps the source's other keys (custom_note, use_cache, bos/eos/pad ids) "
      "and says torch_dtype float32", "" if ok else c)
g = json.load(open(os.path.join(ck, "generation_config.json")))
print("PASS" if g == json.load(open(os.path.join(src, "generation_config.json"))) else "FAIL",
      "generation_config.json is the source's", g)
same = all(open(os.path.join(ck, f), "rb").read() == open(os.path.join(data, f), "rb").read()
           for f in ("tokenizer.json", "tokenizer_config.json"))
print("PASS" if same else "FAIL", "the checkpoint carries the data's tokenizer.json and tokenizer_config.json")
names = [f["name"] for f in json.load(open(os.path.join(ck, "manifest.json")))["files"]]
want = {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}
print("PASS" if want <= set(names) else "FAIL", "the manifest checksums them too:", names)
PY
# transformers opens the checkpoint as a Hugging Face model directory.
$TF - "$ck" "$tmp/data/tokenizer.json" >"$tmp/tf.txt" 2>&1 <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from tokenizers import Tokenizer
ck, tj = sys.argv[1:3]
tok = AutoTokenizer.from_pretrained(ck)
text = "A fortune cookie for the computer scientist."
same = tok(text)["input_ids"] == Tokenizer.from_file(tj).encode(text).ids
print("PASS" if same else "FAIL", "AutoTokenizer.from_pretrained(CHECKPOINT_DIR/latest) encodes as the data's tokenizer")
m, info = AutoModelForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, output_loading_info=True)
bad = {k: v for k, v in info.items() if v}
print("PASS" if not bad else "FAIL", "AutoModelForCausalLM.from_pretrained(CHECKPOINT_DIR/latest): every weight, none missing", bad or "")
PY
grep -E '^(PASS|FAIL)' "$tmp/tf.txt"
grep -q '^FAIL' "$tmp/tf.txt" && fail=1
[ "$(grep -c '^PASS' "$tmp/tf.txt")" = 2 ] || failed "transformers did not open the checkpoint: $(tail -2 "$tmp/tf.txt" | tr '\n' ' ')"
# checkpoint.dtype bf16: the weights file halves, transformers loads it as bfloat16,
# and a resume from it is exact (the fp32 master weights in optimizer.safetensors):
# stopping after step 1 and resuming gives step 2's files byte for byte.
BF=(--model.from "$tmp/src" --data.train "$tmp/data/train_*.bin" --parallel.pp 2 --training.seq_length 64
    --training.micro_batch_size 2 --training.threads 1 --training.peak_flops 1e10 --checkpoint.dtype bf16)
"${MPI[@]}" -np 2 ./femtotron train "${BF[@]}" --training.steps 2 --checkpoint.every 1 --checkpoint.dir "$tmp/bfa" \
    >"$tmp/bfa.log" 2>&1 || failed "bf16 run: $(tail -3 "$tmp/bfa.log")"
"${MPI[@]}" -np 2 ./femtotron train "${BF[@]}" --training.steps 1 --checkpoint.dir "$tmp/bfb" \
    >"$tmp/bfb.log" 2>&1 || failed "bf16 run to step 1: $(tail -3 "$tmp/bfb.log")"
"${MPI[@]}" -np 2 ./femtotron train "${BF[@]}" --training.steps 2 --checkpoint.dir "$tmp/bfb" --checkpoint.resume true \
    >"$tmp/bfc.log" 2>&1 || failed "bf16 resume: $(tail -3 "$tmp/bfc.log")"
if cmp -s "$tmp/bfa/step_0000002/model.safetensors" "$tmp/bfb/step_0000002/model.safetensors" &&
    cmp -s "$tmp/bfa/step_0000002/optimizer.safetensors" "$tmp/bfb/step_0000002/optimizer.safetensors"; then
    pass "checkpoint.dtype bf16: resumed at step 1, step 2's model and optimizer files equal the uninterrupted run's"
else failed "bf16 resume is not exact (step 2 files differ)"; fi
f32=$(stat -c %s "$tmp/ck/latest/model.safetensors") b16=$(stat -c %s "$tmp/bfa/step_0000002/model.safetensors")
if [ "$b16" -lt $((f32 * 52 / 100)) ]; then pass "bf16 model.safetensors is $b16 bytes against $f32 in fp32"
else failed "bf16 model.safetensors is $b16 bytes against $f32 in fp32"; fi
$TF - "$tmp/bfa/latest" >"$tmp/tfb.txt" 2>&1 <<'PY'
import json, os, sys, torch
from transformers import AutoModelForCausalLM
ck = sys.argv[1]
m, info = AutoModelForCausalLM.from_pretrained(ck, torch_dtype="auto", output_loading_info=True)
bad = {k: v for k, v in info.items() if v}
dt = json.load(open(os.path.join(ck, "config.json"))).get("torch_dtype")
ok = not bad and m.dtype == torch.bfloat16 and dt == "bfloat16"
print("PASS" if ok else "FAIL", "transformers loads the bf16 checkpoint as torch.bfloat16 (torch_dtype %s), every weight" % dt,
      bad or "")
PY
grep -E '^(PASS|FAIL)' "$tmp/tfb.txt"
grep -q '^PASS' "$tmp/tfb.txt" || failed "transformers and the bf16 checkpoint: $(tail -2 "$tmp/tfb.txt" | tr '\n' ' ')"
# generate: the checkpoint's tokenizer by default; a mismatched one is refused.
./femtotron generate --model "$tmp/ck" --prompt "The computer" --max-new-tokens 8 --temperature 0 \
    >"$tmp/gen.txt" 2>&1
if [ $? -eq 0 ] && grep -q "^The computer" "$tmp/gen.txt"; then
    pass "generate --model CHECKPOINT_DIR decodes with the checkpoint's tokenizer: $(head -1 "$tmp/gen.txt" | cut -c1-60)"
else failed "generate with the checkpoint's tokenizer: $(head -c 300 "$tmp/gen.txt")"; fi
./femtotron generate --model "$tmp/ck" --tokenizer "$tmp/tok/wide.json" --prompt "x" >/dev/null 2>"$tmp/e1"
rc=$?
if [ $rc -ne 0 ] && grep -q "ids but the model's vocab_size is $V: not this model's tokenizer" "$tmp/e1"; then
    pass "generate refuses a tokenizer with more ids than the model: $(head -1 "$tmp/e1" | cut -c1-120)"
else failed "mismatched tokenizer: exit $rc: $(head -c 300 "$tmp/e1")"; fi
./femtotron generate --model "$tmp/src" --prompt "x" >/dev/null 2>"$tmp/e2"
rc=$?
if [ $rc -ne 0 ] && grep -q "has no tokenizer.json and the model's vocab_size $V is not a byte-level vocabulary" "$tmp/e2"; then
    pass "generate refuses to decode a $V-token model as bytes when it has no tokenizer"
else failed "no tokenizer: exit $rc: $(head -c 300 "$tmp/e2")"; fi
exit $fail
