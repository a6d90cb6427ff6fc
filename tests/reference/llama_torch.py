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

Its own checks (a naive loop forward, finite differences, the LR schedule):
tests/reference/llama_torch_checks.py.
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
