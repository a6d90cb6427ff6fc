"""llama_torch.py — a plain PyTorch Llama (Hugging Face LlamaForCausalLM semantics)
and Mixtral (MixtralForCausalLM: model_type "mixtral", a sparse mixture-of-experts MLP),
written from the math, independent of femtotron, trained with torch autograd and
torch.optim.AdamW. Used by tests/reference/test_reference.py (float64) and reusable by
benchmarks (float32, any device).

Parameters live in a dict keyed by Hugging Face names:
  model.embed_tokens.weight                         (V, D)
  model.layers.{l}.input_layernorm.weight           (D,)
  model.layers.{l}.self_attn.{q,k,v,o}_proj.weight  (H*hd, D) (KV*hd, D) x2 (D, H*hd)
  model.layers.{l}.post_attention_layernorm.weight  (D,)
  model.layers.{l}.mlp.{gate,up}_proj.weight        (I, D)
  model.layers.{l}.mlp.down_proj.weight             (D, I)
  model.norm.weight                                 (D,)
  lm_head.weight                                    (V, D)  absent when tied
A Mixtral layer has, in place of the mlp tensors (E = num_local_experts):
  model.layers.{l}.block_sparse_moe.gate.weight          (E, D)  the router
  model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight (I, D)  gate
  model.layers.{l}.block_sparse_moe.experts.{e}.w3.weight (I, D)  up
  model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight (D, I)  down
Routing as MixtralSparseMoeBlock: softmax of the router logits, top-k, weights
renormalised over the chosen k. With output_router_logits the loss adds
router_aux_loss_coef * the load-balancing loss, taken per sequence as transformers'
load_balancing_loss_func (>= 4.38) computes it for a batch of one (the sequence's
router logits of every layer concatenated) and averaged over the step's sequences.

Main entry points:
  load_hf_model(dir, dtype, device)         -> LlamaTorch (config.json + safetensors)
  build_model(config_dict, weights, dtype)  -> LlamaTorch
  model.loss(inputs, targets)               mean cross-entropy of a batch
  batch_gradients(model, micro_batches)     -> (loss, {name: grad}) of one step
  make_optimizer(model, tcfg) / train_step(model, opt, micro_batches, step, tcfg)
  lr_at(step, tcfg)                         the LR schedule (step is 1-based)

Run this file directly for a self-check (finite differences, a naive loop
forward, the LR schedule).
"""
import math
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

try:
    from . import safetensors_np
except ImportError:  # imported as a top-level module from tests/reference
    import safetensors_np


# ---------------------------------------------------------------- configuration

_CONFIG_DEFAULTS = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,   # None -> num_attention_heads (HF default)
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "num_local_experts": 0,        # 0: dense Llama MLP (MixtralConfig's default, 8, applies to "mixtral")
    "num_experts_per_tok": 2,
    "router_aux_loss_coef": 0.001,
    "output_router_logits": False,
    "n_shared_experts": 0,         # DeepSeek-style shared experts: one SwiGLU of n * I, no gate
}


def normalize_config(cfg):
    """A HF LlamaConfig dict with every key this model uses filled in."""
    c = dict(_CONFIG_DEFAULTS)
    c.update({k: v for k, v in cfg.items() if k in _CONFIG_DEFAULTS or k in ("head_dim", "rope_scaling", "model_type")})
    if cfg.get("model_type", "llama") != "mixtral":
        c["num_local_experts"] = 0
    elif "num_local_experts" not in cfg:
        c["num_local_experts"] = 8
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    if not c.get("head_dim"):
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    assert c["num_attention_heads"] % c["num_key_value_heads"] == 0
    return c


def param_shapes(cfg):
    """Ordered dict name -> shape of every trainable tensor (lm_head only if untied)."""
    c = normalize_config(cfg)
    D, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    shapes = {"model.embed_tokens.weight": (V, D)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes[p + "input_layernorm.weight"] = (D,)
        shapes[p + "self_attn.q_proj.weight"] = (H * hd, D)
        shapes[p + "self_attn.k_proj.weight"] = (KV * hd, D)
        shapes[p + "self_attn.v_proj.weight"] = (KV * hd, D)
        shapes[p + "self_attn.o_proj.weight"] = (D, H * hd)
        shapes[p + "post_attention_layernorm.weight"] = (D,)
        if c["num_local_experts"]:
            shapes[p + "block_sparse_moe.gate.weight"] = (c["num_local_experts"], D)
            for e in range(c["num_local_experts"]):
                shapes[p + f"block_sparse_moe.experts.{e}.w1.weight"] = (I, D)
                shapes[p + f"block_sparse_moe.experts.{e}.w3.weight"] = (I, D)
                shapes[p + f"block_sparse_moe.experts.{e}.w2.weight"] = (D, I)
            Is = c["n_shared_experts"] * I
            if Is:
                shapes[p + "block_sparse_moe.shared_experts.gate_proj.weight"] = (Is, D)
                shapes[p + "block_sparse_moe.shared_experts.up_proj.weight"] = (Is, D)
                shapes[p + "block_sparse_moe.shared_experts.down_proj.weight"] = (D, Is)
        else:
            shapes[p + "mlp.gate_proj.weight"] = (I, D)
            shapes[p + "mlp.up_proj.weight"] = (I, D)
            shapes[p + "mlp.down_proj.weight"] = (D, I)
    shapes["model.norm.weight"] = (D,)
    if not c["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    return shapes


def random_weights(cfg, seed=0, std=0.1, norm_noise=0.05):
    """Random fp32 weights (numpy): matrices N(0, std), norm weights 1 + N(0, norm_noise)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            out[name] = (1.0 + norm_noise * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (std * rng.standard_normal(shape)).astype(np.float32)
    return out


# ---------------------------------------------------------------- the model

def _compute_dtype(dtype):
    """Norms / softmax run in fp32 at least (HF upcasts half precision to fp32)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def rms_norm(x, w, eps):
    """x * rsqrt(mean(x^2) + eps) * w, computed in fp32 (or wider)."""
    xf = x.to(_compute_dtype(x.dtype))
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_inv_freq(head_dim, theta, rope_scaling=None):
    """Inverse frequencies (head_dim/2,) in float64: plain RoPE, or rope_scaling of
    type "linear" (every frequency / factor) or "llama3", written from Meta's
    published apply_scaling (llama-models, Llama 3.1): a frequency whose wavelength
    2*pi/f is below original_max_position_embeddings / high_freq_factor is kept,
    one above .../low_freq_factor is divided by factor, and one in between is
    blended with smooth = (L / wavelength - low) / (high - low)."""
    inv_freq = [1.0 / theta ** (i / head_dim) for i in range(0, head_dim, 2)]
    rs = rope_scaling or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv_freq = [f / rs["factor"] for f in inv_freq]
    elif kind == "llama3":
        scale, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old_len = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        new = []
        for f in inv_freq:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                new.append(f)
            elif wavelen > low_wavelen:
                new.append(f / scale)
            else:
                smooth = (old_len / wavelen - low) / (high - low)
                new.append((1 - smooth) * f / scale + smooth * f)
        inv_freq = new
    elif kind != "default":
        raise ValueError(f"rope_scaling type {kind!r} is not implemented by this reference")
    return torch.tensor(inv_freq, dtype=torch.float64)


def rope_tables(head_dim, n_pos, theta, dtype, device, rope_scaling=None):
    """cos, sin (n_pos, head_dim): angle pos * inv_freq, duplicated to both halves.
    Computed in float64, then cast."""
    inv_freq = rope_inv_freq(head_dim, theta, rope_scaling)
    pos = torch.arange(n_pos, dtype=torch.float64)
    ang = torch.outer(pos, inv_freq)
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


class LlamaTorch:
    """Functional Llama over a dict of leaf tensors (requires_grad)."""

    def __init__(self, config, weights, dtype=torch.float64, device="cpu"):
        self.cfg = normalize_config(config)
        self.dtype, self.device = dtype, torch.device(device)
        c = self.cfg
        self.D, self.I, self.V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        self.L, self.H, self.KV = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd, self.eps, self.tied = c["head_dim"], float(c["rms_norm_eps"]), bool(c["tie_word_embeddings"])
        self.E, self.K = int(c["num_local_experts"]), int(c["num_experts_per_tok"])
        self.aux_on, self.aux_coef = self.E > 0 and bool(c["output_router_logits"]), float(c["router_aux_loss_coef"])
        self.aux_total = 0.0   # sum of the per-sequence load-balancing losses of every loss_sum call
        self._router_logits = []
        self.params = {}
        for name, shape in param_shapes(c).items():
            if name not in weights:
                raise KeyError(f"missing weight {name}")
            w = weights[name]
            w = w.detach().cpu().numpy() if isinstance(w, torch.Tensor) else np.asarray(w)
            if tuple(w.shape) != tuple(shape):
                raise ValueError(f"{name}: shape {tuple(w.shape)}, expected {shape}")
            self.params[name] = torch.tensor(w, dtype=dtype, device=self.device).requires_grad_(True)
        self._rope_cache = None

    # -- helpers
    def parameters(self):
        return list(self.params.values())

    def named_parameters(self):
        return list(self.params.items())

    def head_weight(self):
        return self.params["model.embed_tokens.weight" if self.tied else "lm_head.weight"]

    def _rope(self, S):
        if self._rope_cache is None or self._rope_cache[0].shape[0] < S:
            n = max(S, self.cfg["max_position_embeddings"])
            self._rope_cache = rope_tables(self.hd, n, float(self.cfg["rope_theta"]), self.dtype, self.device,
                                           self.cfg.get("rope_scaling"))
        cos, sin = self._rope_cache
        return cos[:S], sin[:S]

    # -- forward
    def attention(self, x, l, cos, sin):
        B, S, _ = x.shape
        p, H, KV, hd = self.params, self.H, self.KV, self.hd
        pre = f"model.layers.{l}.self_attn."
        q = F.linear(x, p[pre + "q_proj.weight"]).view(B, S, H, hd).transpose(1, 2)   # (B,H,S,hd)
        k = F.linear(x, p[pre + "k_proj.weight"]).view(B, S, KV, hd).transpose(1, 2)  # (B,KV,S,hd)
        v = F.linear(x, p[pre + "v_proj.weight"]).view(B, S, KV, hd).transpose(1, 2)  # (B,KV,S,hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV                      # query head h uses kv head h // rep
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)               # (B,H,S,S)
        mask = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores.to(_compute_dtype(scores.dtype)), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, H * hd)            # (B,S,H*hd)
        return F.linear(out, p[pre + "o_proj.weight"])

    def mlp(self, x, l):
        p, pre = self.params, f"model.layers.{l}.mlp."
        return F.linear(F.silu(F.linear(x, p[pre + "gate_proj.weight"])) * F.linear(x, p[pre + "up_proj.weight"]),
                        p[pre + "down_proj.weight"])

    def moe(self, x, l):
        """MixtralSparseMoeBlock: x (B, S, D) -> (B, S, D); the router logits (B, S, E)
        are kept for the load-balancing loss."""
        p, pre = self.params, f"model.layers.{l}.block_sparse_moe."
        B, S, D = x.shape
        h = x.reshape(-1, D)
        logits = F.linear(h, p[pre + "gate.weight"])                                   # (N, E)
        self._router_logits.append(logits.view(B, S, self.E))
        probs = torch.softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
        weights, chosen = torch.topk(probs, self.K, dim=-1)                            # (N, K)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(self.E):
            tok, slot = torch.where(chosen == e)
            if tok.numel() == 0:
                continue
            xe = h[tok]
            ye = F.linear(F.silu(F.linear(xe, p[pre + f"experts.{e}.w1.weight"])) *
                          F.linear(xe, p[pre + f"experts.{e}.w3.weight"]), p[pre + f"experts.{e}.w2.weight"])
            out = out.index_add(0, tok, ye * weights[tok, slot, None])
        if self.cfg["n_shared_experts"]:  # every token also goes through the shared experts
            sh = pre + "shared_experts."
            out = out + F.linear(F.silu(F.linear(h, p[sh + "gate_proj.weight"])) * F.linear(h, p[sh + "up_proj.weight"]),
                                 p[sh + "down_proj.weight"])
        return out.view(B, S, D)

    def aux_losses(self):
        """(B,) load-balancing loss of each sequence of the last forward: transformers'
        load_balancing_loss_func on that sequence's router logits of every layer,
        concatenated: E * sum_{k,e} mean(one_hot(topk)) * mean(softmax)."""
        logits = torch.stack(self._router_logits, dim=1)                               # (B, L, S, E)
        B = logits.shape[0]
        out = []
        for b in range(B):
            g = logits[b].reshape(-1, self.E)                                          # (L*S, E)
            routing = torch.softmax(g.to(_compute_dtype(g.dtype)), dim=-1)
            _, sel = torch.topk(routing, self.K, dim=-1)
            mask = F.one_hot(sel, self.E).to(routing.dtype)                            # (L*S, K, E)
            tokens_per_expert = mask.mean(dim=0)                                       # (K, E)
            router_prob = routing.mean(dim=0)                                          # (E,)
            out.append(torch.sum(tokens_per_expert * router_prob.unsqueeze(0)) * self.E)
        return torch.stack(out)

    def forward(self, inputs):
        """inputs (B, S) int token ids -> logits (B, S, V). Positions start at 0."""
        inputs = torch.as_tensor(inputs, dtype=torch.long, device=self.device)
        p = self.params
        B, S = inputs.shape
        cos, sin = self._rope(S)
        x = F.embedding(inputs, p["model.embed_tokens.weight"])
        self._router_logits = []
        for l in range(self.L):
            pre = f"model.layers.{l}."
            x = x + self.attention(rms_norm(x, p[pre + "input_layernorm.weight"], self.eps), l, cos, sin)
            mlp = self.moe if self.E else self.mlp
            x = x + mlp(rms_norm(x, p[pre + "post_attention_layernorm.weight"], self.eps), l)
        x = rms_norm(x, p["model.norm.weight"], self.eps)
        return F.linear(x, self.head_weight())

    def loss_sum(self, inputs, targets):
        """Summed cross-entropy over every target token of the batch; with the
        load-balancing loss on, + coef * S * (sum of the sequences' aux losses), so
        that dividing by the step's tokens gives coef * (mean over sequences)."""
        logits = self.forward(inputs)
        targets = torch.as_tensor(targets, dtype=torch.long, device=self.device)
        S = targets.shape[-1]
        logits = logits.reshape(-1, self.V)
        ce = F.cross_entropy(logits.to(_compute_dtype(logits.dtype)), targets.reshape(-1), reduction="sum")
        if not self.aux_on:
            return ce
        aux = self.aux_losses()
        self.aux_total += float(aux.sum().detach())
        return ce + self.aux_coef * S * aux.sum()

    def loss(self, inputs, targets):
        """Mean cross-entropy of a batch."""
        return self.loss_sum(inputs, targets) / np.asarray(targets).size

    def state_numpy(self):
        """Weights as a dict of numpy arrays (HF names)."""
        return {k: v.detach().cpu().numpy() for k, v in self.params.items()}

    def save_safetensors(self, path, dtype="F32"):
        safetensors_np.write_safetensors(path, self.state_numpy(), dtype=dtype)


def build_model(config, weights, dtype=torch.float64, device="cpu"):
    """A model from a HF config dict and a dict of weights (numpy or torch)."""
    return LlamaTorch(config, weights, dtype=dtype, device=device)


def load_hf_model(directory, dtype=torch.float64, device="cpu"):
    """A model from a Hugging Face directory (config.json + model.safetensors)."""
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    return build_model(cfg, safetensors_np.load_hf_dir_weights(directory), dtype, device)


# ---------------------------------------------------------------- training

_TRAIN_DEFAULTS = {"steps": 1, "lr": 3e-4, "min_lr": 0.0, "warmup_steps": 0, "weight_decay": 0.1,
                   "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}


def training_config(tcfg):
    t = dict(_TRAIN_DEFAULTS)
    t.update(tcfg or {})
    return t


def lr_at(step, tcfg):
    """Learning rate of 1-based optimizer step `step`: linear warmup lr*s/warmup for
    s <= warmup, then cosine from lr to min_lr reached at the last step."""
    t = training_config(tcfg)
    lr, min_lr, warmup, steps = float(t["lr"]), float(t["min_lr"]), int(t["warmup_steps"]), int(t["steps"])
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if steps <= warmup:
        return min_lr
    progress = min(1.0, (step - warmup) / (steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model, tcfg):
    """torch.optim.AdamW with weight decay only on tensors with ndim >= 2."""
    t = training_config(tcfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": float(t["weight_decay"])},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=float(t["lr"]), betas=(float(t["beta1"]), float(t["beta2"])),
                             eps=float(t["eps"]))


def accumulate_gradients(model, micro_batches):
    """Zero grads, run forward+backward over the micro-batches; the loss is the mean
    over all target tokens of the step (sum over micro-batches / total tokens).
    Returns that loss (python float); gradients are left in p.grad."""
    for p in model.parameters():
        p.grad = None
    n_tokens = sum(int(np.asarray(t).size) for _, t in micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        l = model.loss_sum(inputs, targets) / n_tokens
        l.backward()
        total += float(l.detach())
    return total


def batch_gradients(model, micro_batches):
    """(loss, {name: gradient as numpy}) of one step's global batch."""
    loss = accumulate_gradients(model, micro_batches)
    return loss, {k: (v.grad.detach().cpu().numpy() if v.grad is not None else np.zeros(tuple(v.shape)))
                  for k, v in model.params.items()}


def global_grad_norm(model):
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))


def train_step(model, optimizer, micro_batches, step, tcfg):
    """One optimizer step (step is 1-based). Returns {"step", "loss", "lr", "grad_norm"}
    with grad_norm the pre-clip global L2 norm (what clip_grad_norm_ returns)."""
    t = training_config(tcfg)
    loss = accumulate_gradients(model, micro_batches)
    if float(t["grad_clip"]) > 0:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float(t["grad_clip"])))
    else:
        grad_norm = global_grad_norm(model)
    lr = lr_at(step, t)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.step()
    return {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm}


# ---------------------------------------------------------------- self-check

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
