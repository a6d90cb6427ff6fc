#!/usr/bin/env bash
# scripts/hf_demo.sh [HF_MODEL_DIR] — continued pre-training as a Hugging Face user
# knows it: a Hugging Face Llama directory (config.json, model.safetensors,
# tokenizer.json) goes in; femtotron continues pre-training it on the fortunes
# corpus on 2 ranks as a 2-stage pipeline (SmolLM2 ties its embeddings: the last
# stage holds a copy of the embedding), and the checkpoint comes out as a Hugging
# Face directory: transformers loads RUN/latest and its greedy continuation of a
# prompt is femtotron generate's, token for token.
#
# Without HF_MODEL_DIR it makes one: SmolLM2-135M's published config.json (30
# layers, width 576, 9 heads, 3 kv heads, tied) with random weights and a BPE
# tokenizer trained on the corpus (no real weights or hub access here), the
# vocabulary set to that tokenizer's size.
# Environment: DEMO_LAYERS (default 30), DEMO_STEPS (20), DEMO_SEQ (128),
# DEMO_OUT (runs/hf_demo). Needs scripts/install_deps.sh (build/pyenv, build/tfenv).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-runs/hf_demo}
LAYERS=${DEMO_LAYERS:-30}
STEPS=${DEMO_STEPS:-20}
SEQ=${DEMO_SEQ:-128}
PY=build/pyenv/bin/python
TF=build/tfenv/bin/python
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
[ -x ./femtotron ] || make -s femtotron
rm -rf "$OUT" && mkdir -p "$OUT"
model=${1:-}
if [ -z "$model" ]; then
    model="$OUT/smollm2_shaped"
    echo "hf_demo: making a SmolLM2-135M-shaped model with random weights ($LAYERS layers) in $model"
    $PY - "$model" "$LAYERS" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "tests/reference")
import hf_tok, llama_torch, safetensors_np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
out, layers = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
files = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*")) if os.path.isfile(f) and not f.endswith((".dat", ".u8"))]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
tok.train(files, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
path = os.path.join(out, "tokenizer.json")
tok.save(path)
hf_tok.legacy(path, path)  # a format every tokenizers release (build/tfenv's too) reads
json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 8192,
           "tokenizer_class": "GPT2Tokenizer"}, open(os.path.join(out, "tokenizer_config.json"), "w"))
# HuggingFaceTB/SmolLM2-135M's config.json, as published, but the vocabulary.
cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
       "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
       "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
       "num_attention_heads": 9, "num_hidden_layers": layers, "num_key_value_heads": 3, "pretraining_tp": 1,
       "rms_norm_eps": 1e-05, "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000,
       "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
       "vocab_size": tok.get_vocab_size()}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
w = llama_torch.random_weights(cfg, seed=3, std=0.04)
safetensors_np.write_safetensors(os.path.join(out, "model.safetensors"), w, metadata={"format": "pt"})
print("hf_demo: vocabulary", cfg["vocab_size"], "ids")
PY
fi
[ -f "$model/tokenizer.json" ] || { echo "hf_demo: $model has no tokenizer.json" >&2; exit 1; }

echo "hf_demo: preparing the fortunes corpus with $model/tokenizer.json"
inputs=$(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$')
# shellcheck disable=SC2086
./femtotron prepare --input $inputs --split-on % --output "$OUT/data" --tokenizer "$model/tokenizer.json" \
    --val-fraction 0 | tail -2

echo "hf_demo: continuing pre-training for $STEPS steps on 2 ranks, pipeline of 2 stages, tied embeddings"
mpirun --oversubscribe --bind-to none "${root[@]}" -np 2 ./femtotron train --model.from "$model" \
    --data.train "$OUT/data/train_*.bin" --parallel.pp 2 --training.seq_length "$SEQ" \
    --training.micro_batch_size 2 --training.grad_acc_steps 4 --training.steps "$STEPS" \
    --training.lr 1e-3 --training.min_lr 1e-4 --training.warmup_steps 2 --training.lr_schedule wsd \
    --training.decay_fraction 0.25 --checkpoint.dir "$OUT/run" --logging.every 5

prompt="A fortune for the computer scientist:"
./femtotron generate --model "$OUT/run" --prompt "$prompt" --max-new-tokens 24 --temperature 0 \
    --ignore-eos --print-ids >"$OUT/femtotron_generate.txt" 2>&1
echo "hf_demo: femtotron generate: $(head -1 "$OUT/femtotron_generate.txt")"
$TF - "$OUT/run/latest" "$OUT/femtotron_generate.txt" "$prompt" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
ck, gen, prompt = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(ck)
model = AutoModelForCausalLM.from_pretrained(ck, torch_dtype=torch.float32)
ids = tok(prompt, return_tensors="pt").input_ids
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                         pad_token_id=tok.eos_token_id, eos_token_id=None)
hf = out[0, ids.shape[1]:].tolist()
line = [l for l in open(gen, errors="replace") if l.startswith("generated ids:")]
fem = [int(x) for x in line[0].split(":")[1].split()] if line else []
print("hf_demo: transformers:       " + prompt + tok.decode(hf))
if hf == fem:
    print(f"hf_demo: PASS transformers' greedy tokens equal femtotron's ({len(hf)} tokens) from {ck}")
else:
    print(f"hf_demo: FAIL transformers {hf} vs femtotron {fem}")
    sys.exit(1)
PY
