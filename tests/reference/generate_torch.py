"""generate_torch.py — greedy generation with the independent PyTorch Llama of
llama_torch.py, for tests/shell/test_generate.sh. No key/value cache: every step runs the
whole sequence again (float64), so it checks femtotron's cached, one-token-per-step
forward against the plain definition.

  generate_torch.py make-model DIR:VOCAB:SEED[:tied][:maxpos=P][:moe][:shared] ...
      write small random Hugging Face Llama directories (config.json + model.safetensors);
      moe: a Mixtral (4 experts, top-2), shared: with one shared expert
  generate_torch.py greedy DIR --prompt-ids "1 2 3" --max-new N [--stop ID ...]
      print the greedy continuation's ids on one line, then on a second line
      "min_margin X": the smallest gap between the best and second-best logit met
      (how far the test is from a near tie)
  generate_torch.py encode TOKENIZER.json TEXT
      the prompt ids as `tokenizers` gives them (add_special_tokens=True)
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# numpy, torch and llama_torch are imported where needed: `encode` runs without them.


def make_model(args):
    import llama_torch
    import safetensors_np
    for spec in args.specs:
        parts = spec.split(":")
        d, vocab, seed = parts[0], int(parts[1]), int(parts[2])
        tied = "tied" in parts[3:]
        max_pos = next((int(p[7:]) for p in parts[3:] if p.startswith("maxpos=")), 128)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": vocab, "max_position_embeddings": max_pos,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": tied,
               "hidden_act": "silu", "torch_dtype": "float32"}
        if "moe" in parts[3:]:
            cfg.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                        "num_experts_per_tok": 2, "sliding_window": None,
                        "n_shared_experts": 1 if "shared" in parts[3:] else 0})
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        # std 0.3 makes the logits spread out, so greedy choices are far from ties.
        weights = llama_torch.random_weights(cfg, seed=seed, std=0.3, norm_noise=0.05)
        safetensors_np.write_safetensors(os.path.join(d, "model.safetensors"), weights,
                                         metadata={"format": "pt"})


def greedy(args):
    import numpy as np
    import torch
    import llama_torch
    model = llama_torch.load_hf_model(args.dir, dtype=torch.float64)
    ids = [int(x) for x in args.prompt_ids.split()]
    stops = set(args.stop or [])
    out, min_margin = [], float("inf")
    with torch.no_grad():
        for _ in range(args.max_new):
            logits = model.forward(np.array([ids]))[0, -1]
            top2 = torch.topk(logits, 2).values
            min_margin = min(min_margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(logits))
            if nxt in stops:
                break
            out.append(nxt)
            ids.append(nxt)
    print(" ".join(map(str, out)))
    print(f"min_margin {min_margin:.3e}")


def encode(args):
    from tokenizers import Tokenizer
    print(" ".join(map(str, Tokenizer.from_file(args.tokenizer).encode(args.text).ids)))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("specs", nargs="+")
    g = sub.add_parser("greedy")
    g.add_argument("dir")
    g.add_argument("--prompt-ids", required=True)
    g.add_argument("--max-new", type=int, required=True)
    g.add_argument("--stop", type=int, nargs="*")
    e = sub.add_parser("encode")
    e.add_argument("tokenizer")
    e.add_argument("text")
    args = p.parse_args()
    {"make-model": make_model, "greedy": greedy, "encode": encode}[args.cmd](args)


if __name__ == "__main__":
    main()
