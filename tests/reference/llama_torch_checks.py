"""llama_torch_checks.py — checks of tests/reference/llama_torch.py itself, independent
of femtotron: the loss again with explicit per-token, per-head loops in numpy float64
(naive_loss: a cross-check of the vectorised forward's reshapes, RoPE, GQA indexing and
the experts' routing), the gradients against central finite differences
(finite_difference_check), and the LR schedule. Used by tests/reference/test_reference.py;
run this file directly for the self-check (exit status 0 when it holds).
"""
import math

import numpy as np
import torch

from llama_torch import build_model, lr_at, random_weights


def naive_loss(model, inputs, targets):
    """The same loss with explicit per-token / per-head loops in numpy float64 (a
    cross-check of the vectorised forward's reshapes, RoPE and GQA indexing)."""
    P = {k: v.detach().cpu().double().numpy() for k, v in model.params.items()}
    D, H, KV, hd, eps = model.D, model.H, model.KV, model.hd, model.eps
    theta = float(model.cfg["rope_theta"])
    inputs, targets = np.asarray(inputs), np.asarray(targets)

    def norm(x, w):
        return x / math.sqrt(float(np.mean(x * x)) + eps) * w

    def rope(vec, pos):
        out = np.empty_like(vec)
        half = hd // 2
        for i in range(half):
            a = pos / theta ** (2 * i / hd)
            c, s = math.cos(a), math.sin(a)
            out[i] = vec[i] * c - vec[i + half] * s
            out[i + half] = vec[i + half] * c + vec[i] * s
        return out

    total, count, aux_sum = 0.0, 0, 0.0
    for b in range(inputs.shape[0]):
        S = inputs.shape[1]
        probs_seq, chosen_seq = [], []   # every (layer, token) of the sequence
        xs = [P["model.embed_tokens.weight"][inputs[b, s]].copy() for s in range(S)]
        for l in range(model.L):
            pre = f"model.layers.{l}."
            hs = [norm(x, P[pre + "input_layernorm.weight"]) for x in xs]
            Wq, Wk, Wv = (P[pre + f"self_attn.{n}_proj.weight"] for n in "qkv")
            qs = [[rope(Wq[h * hd:(h + 1) * hd] @ hs[s], s) for h in range(H)] for s in range(S)]
            ks = [[rope(Wk[g * hd:(g + 1) * hd] @ hs[s], s) for g in range(KV)] for s in range(S)]
            vs = [[Wv[g * hd:(g + 1) * hd] @ hs[s] for g in range(KV)] for s in range(S)]
            new = []
            for s in range(S):
                heads = []
                for h in range(H):
                    g = h // (H // KV)
                    sc = np.array([qs[s][h] @ ks[u][g] / math.sqrt(hd) for u in range(s + 1)])
                    pr = np.exp(sc - sc.max())
                    pr /= pr.sum()
                    heads.append(sum(pr[u] * vs[u][g] for u in range(s + 1)))
                new.append(xs[s] + P[pre + "self_attn.o_proj.weight"] @ np.concatenate(heads))
            xs = new
            for s in range(S):
                h2 = norm(xs[s], P[pre + "post_attention_layernorm.weight"])
                if not model.E:
                    gt = P[pre + "mlp.gate_proj.weight"] @ h2
                    up = P[pre + "mlp.up_proj.weight"] @ h2
                    xs[s] = xs[s] + P[pre + "mlp.down_proj.weight"] @ (gt / (1 + np.exp(-gt)) * up)
                    continue
                # Mixtral: softmax router, the K most probable experts, weights over the K.
                z = P[pre + "block_sparse_moe.gate.weight"] @ h2
                pr = np.exp(z - z.max())
                pr /= pr.sum()
                top = sorted(range(model.E), key=lambda e: (-pr[e], e))[:model.K]
                probs_seq.append(pr)
                chosen_seq.append(top)
                y = np.zeros_like(h2)
                for e in top:
                    ex = pre + f"block_sparse_moe.experts.{e}."
                    gt, up = P[ex + "w1.weight"] @ h2, P[ex + "w3.weight"] @ h2
                    y += pr[e] / sum(pr[i] for i in top) * (P[ex + "w2.weight"] @ (gt / (1 + np.exp(-gt)) * up))
                if model.cfg["n_shared_experts"]:
                    sh = pre + "block_sparse_moe.shared_experts."
                    gt, up = P[sh + "gate_proj.weight"] @ h2, P[sh + "up_proj.weight"] @ h2
                    y += P[sh + "down_proj.weight"] @ (gt / (1 + np.exp(-gt)) * up)
                xs[s] = xs[s] + y
        W = P["model.embed_tokens.weight" if model.tied else "lm_head.weight"]
        for s in range(S):
            z = W @ norm(xs[s], P["model.norm.weight"])
            m = z.max()
            total += m + math.log(np.exp(z - m).sum()) - z[targets[b, s]]
            count += 1
        if model.E and model.aux_on:  # E * sum_e (fraction choosing e) * (mean probability of e)
            T = len(probs_seq)
            aux_sum += model.E * sum(sum(e in c for c in chosen_seq) / T * sum(p[e] for p in probs_seq) / T
                                     for e in range(model.E))
    return total / count + model.aux_coef * aux_sum / inputs.shape[0]


def finite_difference_check(model, inputs, targets, n_entries=3, h=1e-5, seed=0):
    """Central differences of the mean loss for a few entries of every tensor (model
    must be float64). Returns the worst relative error |fd - autograd| / max(|autograd|, 1e-3*scale)."""
    rng = np.random.default_rng(seed)
    model_loss = lambda: float(model.loss(inputs, targets).detach())
    for p in model.parameters():
        p.grad = None
    model.loss(inputs, targets).backward()
    for p in model.parameters():   # an expert no token chose has no gradient: zero
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    worst, worst_name = 0.0, None
    with torch.no_grad():
        for name, p in model.params.items():
            scale = float(p.grad.abs().max()) + 1e-30
            flat = p.view(-1)
            for idx in rng.choice(flat.numel(), size=min(n_entries, flat.numel()), replace=False):
                idx = int(idx)
                old = float(flat[idx])
                flat[idx] = old + h
                lp = model_loss()
                flat[idx] = old - h
                lm = model_loss()
                flat[idx] = old
                fd = (lp - lm) / (2 * h)
                ag = float(p.grad.view(-1)[idx])
                err = abs(fd - ag) / max(abs(ag), 1e-3 * scale)
                if err > worst:
                    worst, worst_name = err, f"{name}[{idx}]"
    return worst, worst_name


def _selfcheck():
    cfg = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 11, "max_position_embeddings": 16, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False}
    ok = True
    for tied in (False, True):
        cfg["tie_word_embeddings"] = tied
        model = build_model(cfg, random_weights(cfg, seed=3, std=0.3), dtype=torch.float64)
        rng = np.random.default_rng(1)
        inputs, targets = rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 6))
        a, b = float(model.loss(inputs, targets)), naive_loss(model, inputs, targets)
        worst, where = finite_difference_check(model, inputs, targets)
        print(f"tied={tied}: loss {a:.15f} naive {b:.15f} (rel {abs(a - b) / abs(b):.2e}); "
              f"finite differences worst rel {worst:.2e} at {where}")
        ok &= abs(a - b) / abs(b) < 1e-12 and worst < 1e-6
    moe = dict(cfg, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
               router_aux_loss_coef=0.3, tie_word_embeddings=False, n_shared_experts=1)
    model = build_model(moe, random_weights(moe, seed=6, std=0.3), dtype=torch.float64)
    rng = np.random.default_rng(5)
    inputs, targets = rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 6))
    a, b = float(model.loss(inputs, targets)), naive_loss(model, inputs, targets)
    worst, where = finite_difference_check(model, inputs, targets)
    print(f"mixtral: loss {a:.15f} naive {b:.15f} (rel {abs(a - b) / abs(b):.2e}); "
          f"finite differences worst rel {worst:.2e} at {where}")
    ok &= abs(a - b) / abs(b) < 1e-12 and worst < 1e-6
    t = {"steps": 5, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2}
    got = [lr_at(s, t) for s in range(1, 6)]
    want = [5e-3, 1e-2, 1e-3 + 0.5 * 9e-3 * (1 + math.cos(math.pi / 3)),
            1e-3 + 0.5 * 9e-3 * (1 + math.cos(2 * math.pi / 3)), 1e-3]
    print("lr schedule", got)
    ok &= all(abs(x - y) < 1e-15 for x, y in zip(got, want))
    print("selfcheck", "OK" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if _selfcheck() else 1)
