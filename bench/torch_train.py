#!/usr/bin/env python3
"""torch_train.py — the PyTorch side of bench/train_vs_pytorch.sh (CPU) and
bench/gpu_vs_pytorch.sh (one GPU).

Trains the Llama model femtotron trains, in idiomatic eager PyTorch fp32 on CPU
(by default; --device cuda, --dtype bf16, --fused-adamw, --tie-embeddings for the
GPU benchmark):
embedding; per layer RMSNorm -> fused q/k/v (no bias) -> HF rotate-half RoPE ->
causal grouped-query attention -> o_proj -> residual -> RMSNorm -> SwiGLU
down(silu(gate(x)) * up(x)) -> residual; final RMSNorm; untied head (or tied to
the embedding: --tie-embeddings); mean
cross-entropy; global-norm gradient clipping and torch.optim.AdamW every step,
with femtotron's LR schedule (linear warmup, cosine to min_lr) and init (every
matrix N(0, 0.02), norm weights 1).

Data: llm.c token shards (256 int32 header, uint16 or uint32 tokens), read in
femtotron's order without shuffle: sequence j of a shard is tokens[j*S : j*S+S+1],
step t uses sequences t*B .. t*B+B-1, so both trainers see the same batches.

Prints one line per step and, with --metrics FILE, writes one JSON object per
step with femtotron's keys: step, loss, lr, grad_norm, tokens, tokens_per_s,
mfu, step_ms (MFU = flops/token * tokens/s / --peak-flops, with femtotron's
formula 6*N_matmul + 6*L*S*D). On cuda the last step's record also has
peak_mem_bytes (torch.cuda.max_memory_allocated) and peak_reserved_bytes
(max_memory_reserved: what the caching allocator took from the GPU); running out
of GPU memory prints "out of memory" and exits with status 3.

--dtype bf16 is the mixed precision PyTorch users run: fp32 parameters, gradients
and AdamW state, torch.autocast(device, bfloat16) around forward and loss, backward
outside it.
"""
import argparse
import contextlib
import glob
import json
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--data", required=True, help="training shards: file or glob (llm.c .bin)")
    a("--threads", type=int, default=os.cpu_count(), help="intra-op threads (OpenMP and BLAS)")
    a("--steps", type=int, default=10, help="optimizer steps")
    a("--warmup-steps", type=int, default=3, help="first steps left out of the timing summary")
    a("--hidden", type=int, default=512)
    a("--layers", type=int, default=8)
    a("--heads", type=int, default=8)
    a("--kv-heads", type=int, default=4)
    a("--intermediate", type=int, default=1536)
    a("--vocab", type=int, default=8192)
    a("--seq", type=int, default=256)
    a("--batch", type=int, default=8, help="sequences per micro-batch")
    a("--accum", type=int, default=1, help="micro-batches per optimizer step (gradient accumulation: "
      "femtotron's global_batch_size / micro_batch_size); step t's micro-batch j reads sequences "
      "((t-1) accum + j) batch onwards, femtotron's order")
    a("--lr", type=float, default=3e-4)
    a("--min-lr", type=float, default=3e-5)
    a("--lr-warmup", type=int, default=10, help="LR warmup steps (femtotron's training.warmup_steps)")
    a("--weight-decay", type=float, default=0.1)
    a("--grad-clip", type=float, default=1.0)
    a("--init-std", type=float, default=0.02)
    a("--eps", type=float, default=1e-5, help="RMSNorm epsilon")
    a("--rope-theta", type=float, default=10000.0)
    a("--seed", type=int, default=1234)
    a("--peak-flops", type=float, default=0.0, help="FLOP/s for MFU (0: MFU not reported)")
    a("--metrics", default="", help="JSON-lines metrics file")
    a("--attention", choices=("plain", "sdpa"), default="plain",
      help="plain: softmax(q k^T + mask) v in three ops; sdpa: F.scaled_dot_product_attention "
           "(PyTorch >= 2.0's fused kernel, causal)")
    a("--compile", action="store_true", help="torch.compile the model (PyTorch >= 2.0; the first "
      "steps compile, so keep them among the warm-up steps)")
    a("--compile-scope", choices=("model", "layers"), default="model",
      help="with --compile: model = torch.compile of the whole model (one graph, every layer "
           "unrolled: the longest compile); layers = each decoder layer and the final norm + head "
           "+ loss compiled on their own (torchtitan's way; identical layers share one compiled "
           "graph, so compiling is much shorter)")
    a("--device", choices=("cpu", "cuda"), default="cpu",
      help="cpu (the default: the tuned CPU environment below) or cuda (the current GPU)")
    a("--dtype", choices=("fp32", "bf16"), default="fp32",
      help="fp32, or bf16 mixed precision: torch.autocast(device, bfloat16) around forward and "
           "loss, fp32 master weights, gradients and optimizer state")
    a("--fused-adamw", action="store_true",
      help="torch.optim.AdamW(fused=True) (one fused kernel; PyTorch >= 2.0 on cuda, >= 2.4 on cpu) "
           "instead of foreach=True")
    a("--tie-embeddings", action="store_true",
      help="the output head shares the embedding matrix (model.tie_word_embeddings)")
    args = p.parse_args()
    if args.accum < 1 or args.batch < 1:
        p.error("--batch and --accum must be at least 1")
    return args


args = parse_args()
# PyTorch's best CPU settings, fixed before torch loads (an already set variable wins):
# - thread counts: Debian's torch does its GEMMs in the system OpenBLAS (pthreads),
#   which reads its own variable;
# - OMP_WAIT_POLICY=PASSIVE: torch's OpenMP workers must not spin after a parallel
#   region while OpenBLAS's threads need the same cores (2x on a 2-core machine);
# - glibc malloc keeps freed memory instead of unmapping every large tensor and
#   faulting it in again on the next step (the tunables are read at process start,
#   hence the re-exec).
TUNED_ENV = {"OMP_NUM_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads),
             "OMP_WAIT_POLICY": "PASSIVE",
             "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"}
if args.device == "cpu" and any(k not in os.environ for k in TUNED_ENV):  # on cuda: as users run it
    os.execve(sys.executable, [sys.executable] + sys.argv, {**TUNED_ENV, **os.environ})

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)
if args.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
    sys.exit(f"--attention sdpa needs PyTorch >= 2.0 (this is {torch.__version__})")
if args.compile and not hasattr(torch, "compile"):
    sys.exit(f"--compile needs PyTorch >= 2.0 (this is {torch.__version__})")
if args.device == "cuda" and not torch.cuda.is_available():
    sys.exit(f"--device cuda: this PyTorch ({torch.__version__}) sees no CUDA GPU")
DEVICE = torch.device(args.device)
AUTOCAST_DTYPE = torch.bfloat16 if args.dtype == "bf16" else None
SDPA_GQA = False  # enable_gqa (PyTorch >= 2.5): grouped query heads inside the kernel
if args.attention == "sdpa" and DEVICE.type == "cpu":
    try:
        _q, _kv = torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 1, 4)
        F.scaled_dot_product_attention(_q, _kv, _kv, enable_gqa=True)
        SDPA_GQA = True
    except (TypeError, RuntimeError):
        pass
elif args.attention == "sdpa":
    # On a GPU, enable_gqa only where a fused kernel (flash, cuDNN, memory-efficient)
    # takes it, forward and backward; else K/V repeated, which they all take (the math
    # fallback would materialise every (S, S) score matrix).
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        _dt = torch.bfloat16 if args.dtype == "bf16" else torch.float32
        _q = torch.randn(1, 4, 128, 64, device=DEVICE, dtype=_dt, requires_grad=True)
        _kv = torch.randn(1, 2, 128, 64, device=DEVICE, dtype=_dt, requires_grad=True)
        with sdpa_kernel([b for b in (getattr(SDPBackend, n, None) for n in
                                      ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")) if b]):
            F.scaled_dot_product_attention(_q, _kv, _kv, is_causal=True, enable_gqa=True).sum().backward()
        SDPA_GQA = True
    except (ImportError, TypeError, RuntimeError):
        pass


# ---------------------------------------------------------------- data

class Shards:
    """femtotron's sequence order over llm.c shards (sorted paths, no shuffle)."""

    def __init__(self, pattern, S):
        self.S, self.shards = S, []
        for path in sorted(glob.glob(pattern)) or [pattern]:
            header = np.fromfile(path, dtype="<i4", count=256)
            dtype = {20240520: "<u2", 20240801: "<u4"}.get(int(header[0]))
            if dtype is None:
                sys.exit(f"{path}: not an llm.c token shard (magic {header[0]})")
            toks = np.memmap(path, dtype=dtype, mode="r", offset=1024, shape=(int(header[2]),))
            if (len(toks) - 1) // S > 0:
                self.shards.append(toks)
        self.counts = [(len(t) - 1) // S for t in self.shards]
        self.n_seq = sum(self.counts)
        if self.n_seq == 0:
            sys.exit(f"{pattern}: shorter than one sequence of {S + 1} tokens")

    def sequence(self, j):
        j %= self.n_seq
        for toks, n in zip(self.shards, self.counts):
            if j < n:
                return np.asarray(toks[j * self.S: j * self.S + self.S + 1], dtype=np.int64)
            j -= n

    def batch(self, step, B):
        """(inputs, targets), each (B, S) int64, of 0-based step `step`."""
        seqs = torch.from_numpy(np.stack([self.sequence(step * B + b) for b in range(B)]))
        return seqs[:, :-1], seqs[:, 1:]


# ---------------------------------------------------------------- model

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, D, H, KV):
        super().__init__()
        self.H, self.KV, self.hd = H, KV, D // H
        self.qkv = nn.Linear(D, (H + 2 * KV) * self.hd, bias=False)  # q, k, v stacked
        self.o = nn.Linear(H * self.hd, D, bias=False)

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        H, KV, hd = self.H, self.KV, self.hd
        if args.attention == "sdpa":
            return self.forward_sdpa(x, cos, sin)
        q, k, v = self.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
        q = q.view(B, S, H, hd).transpose(1, 2)                      # (B, H, S, hd)
        k = k.view(B, S, KV, hd).transpose(1, 2)                     # (B, KV, S, hd)
        v = v.view(B, S, KV, hd).transpose(1, 2)                     # (B, KV, S, hd)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)                  # bf16 under autocast
        q = (q * cos + rotate_half(q) * sin) * (1.0 / math.sqrt(hd))  # scale folded into q
        k = k * cos + rotate_half(k) * sin
        # GQA without copying K/V: the H/KV query heads that share a kv head are
        # stacked along the row axis, one (rep*S, hd) @ (hd, S) GEMM per kv head.
        rep = H // KV
        scores = q.reshape(B, KV, rep * S, hd) @ k.transpose(-1, -2)  # (B, KV, rep*S, S)
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v                       # (B, KV, rep*S, hd)
        return self.o(out.view(B, H, S, hd).transpose(1, 2).reshape(B, S, H * hd))

    def forward_sdpa(self, x, cos, sin):
        """The same attention through F.scaled_dot_product_attention (causal; grouped
        query heads by enable_gqa where this PyTorch has it, else K/V repeated)."""
        B, S, _ = x.shape
        H, KV, hd = self.H, self.KV, self.hd
        q, k, v = self.qkv(x).split([H * hd, KV * hd, KV * hd], dim=-1)
        q = q.view(B, S, H, hd).transpose(1, 2)
        k = k.view(B, S, KV, hd).transpose(1, 2)
        v = v.view(B, S, KV, hd).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if SDPA_GQA:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            rep = H // KV
            out = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1),
                                                 v.repeat_interleave(rep, dim=1), is_causal=True)
        return self.o(out.transpose(1, 2).reshape(B, S, H * hd))


class MLP(nn.Module):
    def __init__(self, D, I):
        super().__init__()
        self.I = I
        self.gate_up = nn.Linear(D, 2 * I, bias=False)  # gate, up stacked
        self.down = nn.Linear(I, D, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).split(self.I, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(a.hidden, a.eps), RMSNorm(a.hidden, a.eps)
        self.attn = Attention(a.hidden, a.heads, a.kv_heads)
        self.mlp = MLP(a.hidden, a.intermediate)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.ln1(x), cos, sin, mask)
        return x + self.mlp(self.ln2(x))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, a.eps)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        if a.tie_embeddings:
            self.head.weight = self.embed.weight  # one (vocab, hidden) matrix, counted once
        hd, S, rep = a.hidden // a.heads, a.seq, a.heads // a.kv_heads
        inv_freq = 1.0 / a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(S, dtype=torch.float64), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)  # (S, hd)
        self.register_buffer("sin", ang.sin().float(), persistent=False)  # (S, hd)
        causal = torch.ones(S, S, dtype=torch.bool).triu(1)               # True = masked
        self.register_buffer("mask", causal.repeat(rep, 1), persistent=False)  # (rep*S, S)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, a.init_std)

    def forward(self, inputs, targets):
        x = self.embed(inputs)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.head_loss(x, targets)

    def head_loss(self, x, targets):
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def flops_per_token(a):
    """femtotron's llama_flops_per_token: 6 * matmul weights (+ head) + 6 * L * S * D."""
    hd = a.hidden // a.heads
    per_layer = a.hidden * (a.heads + 2 * a.kv_heads) * hd + a.heads * hd * a.hidden \
        + 3 * a.hidden * a.intermediate
    return 6.0 * (a.layers * per_layer + a.vocab * a.hidden) + 6.0 * a.layers * a.seq * a.hidden


def lr_at(s, a):
    """femtotron's schedule (1-based step s): linear warmup, cosine to min_lr at the last step."""
    if s <= a.lr_warmup:
        return a.lr * s / a.lr_warmup
    if a.steps <= a.lr_warmup:
        return a.min_lr
    progress = min(1.0, (s - a.lr_warmup) / (a.steps - a.lr_warmup))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1.0 + math.cos(math.pi * progress))


def compile_model(model, a):
    """The callable that trains: the model itself, or compiled (--compile, --compile-scope)."""
    if not a.compile:
        return model
    if a.compile_scope == "model":
        return torch.compile(model)  # same parameters, compiled forward/backward
    # One compiled graph per decoder layer, shared by the identical layers (their
    # parameters are graph inputs), and one for the final norm + head + loss.
    import torch._dynamo as dynamo  # (not `import torch._dynamo`: that makes torch local here)
    dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, a.layers + 8)
    for i, layer in enumerate(model.layers):
        if hasattr(layer, "compile"):  # nn.Module.compile (PyTorch >= 2.2): in place
            layer.compile()
        else:
            model.layers[i] = torch.compile(layer)
    model.head_loss = torch.compile(model.head_loss)
    return model


def main():
    a = args
    cuda = DEVICE.type == "cuda"
    torch.manual_seed(a.seed)
    if cuda:
        with torch.device(DEVICE):  # parameters and buffers made (and initialised) on the GPU
            model = Llama(a)
        torch.cuda.reset_peak_memory_stats()
    else:
        model = Llama(a)
    data = Shards(a.data, a.seq)
    params = list(model.parameters())
    run = compile_model(model, a)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kind = {"fused": True} if a.fused_adamw else {"foreach": True}
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, **kind)
    fpt, tokens = flops_per_token(a), a.batch * a.seq * a.accum
    where = f"{torch.cuda.get_device_name(DEVICE)}" if cuda else f"threads {torch.get_num_threads()}"
    print(f"torch {torch.__version__} | {where} | attention {a.attention}"
          f"{' (GQA in the kernel)' if a.attention == 'sdpa' and SDPA_GQA else ''} | "
          f"{'torch.compile (' + a.compile_scope + ')' if a.compile else 'eager'} | {a.dtype}"
          f"{' autocast' if AUTOCAST_DTYPE else ''} | AdamW {'fused' if a.fused_adamw else 'foreach'}"
          f"{' | tied embeddings' if a.tie_embeddings else ''} | "
          f"{sum(p.numel() for p in params)} parameters | {fpt:.3g} model FLOPs/token", flush=True)
    metrics = open(a.metrics, "w") if a.metrics else None
    timed = []
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        try:
            opt.zero_grad(set_to_none=True)
            loss = 0.0
            for j in range(a.accum):  # each micro-batch's mean loss over accum: the step's mean
                inputs, targets = data.batch((step - 1) * a.accum + j, a.batch)
                if cuda:
                    inputs = inputs.pin_memory().to(DEVICE, non_blocking=True)
                    targets = targets.pin_memory().to(DEVICE, non_blocking=True)
                with torch.autocast(DEVICE.type, dtype=AUTOCAST_DTYPE) if AUTOCAST_DTYPE else \
                        contextlib.nullcontext():
                    part = run(inputs, targets) / a.accum
                part.backward()
                loss = loss + part.detach()
            grad_norm = float(nn.utils.clip_grad_norm_(params, a.grad_clip)) if a.grad_clip > 0 else \
                float(torch.norm(torch.stack([p.grad.norm() for p in params])))
            lr = lr_at(step, a)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
            loss = loss.item()
            if cuda:
                torch.cuda.synchronize()  # every kernel of the step has finished
        except torch.cuda.OutOfMemoryError as e:  # noqa: F841 (the caller halves the batch)
            print(f"out of memory at step {step} (micro-batch {a.batch} x {a.accum}, seq {a.seq}): "
                  f"{str(e).splitlines()[0]}", flush=True)
            sys.exit(3)
        dt = time.perf_counter() - t0
        tps = tokens / dt
        mfu = fpt * tps / a.peak_flops if a.peak_flops > 0 else float("nan")
        if step > a.warmup_steps:
            timed.append(dt)
        print(f"step {step:5d}/{a.steps} | loss {loss:.6f} | lr {lr:.3e} | grad_norm {grad_norm:.4f} | "
              f"{tps:7.0f} tok/s | mfu {100 * mfu:5.1f}% | {1e3 * dt:7.1f} ms", flush=True)
        if metrics:
            rec = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                   "tokens": tokens, "tokens_per_s": tps, "mfu": mfu, "step_ms": 1e3 * dt}
            if cuda and step == a.steps:
                rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated(DEVICE)
                rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(DEVICE)
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
    if timed:
        med = float(np.median(timed))
        print(f"median of {len(timed)} timed steps: {1e3 * med:.1f} ms, {tokens / med:.0f} tok/s")
    if cuda:
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated(DEVICE) / 2**30:.2f} GiB allocated, "
              f"{torch.cuda.max_memory_reserved(DEVICE) / 2**30:.2f} GiB reserved")


if __name__ == "__main__":
    main()
