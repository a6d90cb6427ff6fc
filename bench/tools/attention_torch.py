#!/usr/bin/env python3
"""bench/tools/attention_torch.py B S H KV hd runs [device] — PyTorch's causal attention
(torch.nn.functional.scaled_dot_product_attention, bf16, GQA through enable_gqa), the
peer of bench/tools/attention_gpu.c on the same shape, timed and counted the same way:
forward, then backward of a random output gradient, medians over `runs` after two
warm-ups (CUDA events on a GPU), FLOPs by FlashAttention's convention (forward 4 hd,
backward 10 hd per causal pair; S(S+1)/2 pairs per sequence and head). Prints one
line in attention_gpu's format, kernel "torch-sdpa-<backend>" (the backend PyTorch
dispatched to, read from its profiler's kernel names where it can tell)."""
import statistics
import sys

import torch
import torch.nn.functional as F


def main():
    if len(sys.argv) not in (7, 8):
        sys.exit(__doc__)
    B, S, H, KV, hd, runs = map(int, sys.argv[1:7])
    device = sys.argv[7] if len(sys.argv) == 8 else ("cuda" if torch.cuda.is_available() else "cpu")
    dt = torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(1)
    q = (torch.rand(B, H, S, hd, generator=g) * 3 - 1.5).to(device, dt).requires_grad_()
    k = (torch.rand(B, KV, S, hd, generator=g) * 3 - 1.5).to(device, dt).requires_grad_()
    v = (torch.rand(B, KV, S, hd, generator=g) * 3 - 1.5).to(device, dt).requires_grad_()
    dout = (torch.rand(B, H, S, hd, generator=g) * 2 - 1).to(device, dt)
    gqa = {"enable_gqa": True} if KV != H else {}
    cuda = device.startswith("cuda")

    def clock():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        import time
        return time.perf_counter()

    def since(a, b):
        if cuda:
            torch.cuda.synchronize()
            return a.elapsed_time(b) / 1e3
        return b - a

    fwd, bwd = [], []
    for r in range(runs + 2):
        q.grad = k.grad = v.grad = None
        t0 = clock()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        t1 = clock()
        out.backward(dout)
        t2 = clock()
        if r >= 2:
            fwd.append(since(t0, t1))
            bwd.append(since(t1, t2))
    backend = "unknown"
    if cuda:
        try:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
                torch.cuda.synchronize()
            names = " ".join(e.key.lower() for e in prof.key_averages())
            for key, name in (("flash", "flash"), ("cudnn", "cudnn"), ("fmha", "efficient"), ("efficient", "efficient")):
                if key in names:
                    backend = name
                    break
            else:
                backend = "math"
        except Exception:  # the profiler is optional: the timing stands without it
            pass
    f, b = statistics.median(fwd), statistics.median(bwd)
    pairs = B * H * S * (S + 1) / 2
    print(f"attention B {B} S {S} H {H} KV {KV} hd {hd} precision bf16 kernel torch-sdpa-{backend} "
          f"fwd_ms {f * 1e3:.3f} bwd_ms {b * 1e3:.3f} fwd_tflops {4 * hd * pairs / f / 1e12:.4g} "
          f"bwd_tflops {10 * hd * pairs / b / 1e12:.4g}")


if __name__ == "__main__":
    main()
