#!/usr/bin/env python3
"""profile_ops.py — where femtotron's time goes, by kind of op, from a `perf record`
of a training run (bench/train_vs_pytorch.sh runs it on each config).

Reads `perf report --stdio --sort dso,symbol` text on stdin and prints one Markdown
table row per category, with the share of all samples: the matrix products
(OpenBLAS), each family of femtotron's own kernels (attention, RMSNorm, SwiGLU,
RoPE, cross-entropy and embedding, AdamW, other element-wise), the OpenMP runtime
(threads waiting at the end of parallel regions), the kernel (page faults, thread
switches) and the start-up (initialisation, RoPE tables, data). Usage:
  perf report -i perf.data --stdio --sort dso,symbol | profile_ops.py CONFIG
"""
import re
import sys

# First match wins: (category, dso regex, symbol regex).
RULES = [
    ("matrix products (OpenBLAS sgemm)", r"libopenblas", r"."),
    ("start-up: init, RoPE tables, data", r"femtotron", r"^(llama_init|init_|philox|rope_freq|rope_frequencies|prepare|tok)"),
    ("start-up: init, RoPE tables, data", r"libm\.", r"."),
    ("attention (flash-style blocks)", r"femtotron", r"^attention|ring_attention"),
    ("RMSNorm", r"femtotron", r"^rmsnorm|norm_"),
    ("SwiGLU", r"femtotron", r"^swiglu"),
    ("RoPE", r"femtotron", r"^rope"),
    ("cross-entropy, embedding", r"femtotron", r"^(cross_entropy|embedding|logits|head_)"),
    ("AdamW, gradient norm", r"femtotron", r"^(adamw|sum_squares|scale_inplace|clip)"),
    ("other element-wise (residual, copies)", r"femtotron", r"."),
    ("OpenMP runtime (threads waiting)", r"libgomp", r"."),
    ("memset / memcpy (libc)", r"libc\.", r"^(__mem|mem)"),
    ("operating system (page faults, scheduling)", r"kernel", r"."),
    ("other", r".", r"."),
]

LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(\S+)")


def main():
    config = sys.argv[1] if len(sys.argv) > 1 else ""
    share = {}
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        pct, dso, sym = float(m.group(1)), m.group(2), m.group(3)
        sym = sym.split("._omp_fn")[0]
        for cat, dre, sre in RULES:
            if re.search(dre, dso) and re.search(sre, sym):
                share[cat] = share.get(cat, 0.0) + pct
                break
    order = [r[0] for r in RULES]
    for cat in sorted(share, key=lambda c: (-share[c], order.index(c))):
        if share[cat] >= 0.05:
            print(f"| {config} | {cat} | {share[cat]:.1f}% |")


if __name__ == "__main__":
    main()
