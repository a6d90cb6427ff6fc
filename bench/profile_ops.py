#!/usr/bin/env python3
"""profile_ops.py — where femtotron's step time goes, by kind of op, from `perf record`
of two training runs of the same config that differ only in their number of steps
(bench/train_vs_pytorch.sh runs them): the difference of the two profiles' sample
counts is the extra steps alone, without start-up (initialisation, first touch of
the planned buffers, data) and its page faults.

Reads two `perf report --stdio -n --sort dso,symbol` texts (the shorter run's file,
then the longer one's) and prints one Markdown table row per category with its share
of the extra steps' samples: the matrix products (OpenBLAS, oneMKL or BLIS), each family of
femtotron's own kernels (attention, RMSNorm, SwiGLU, RoPE, cross-entropy and
embedding, AdamW, other element-wise), the OpenMP runtime (threads waiting at the
end of parallel regions, or for the other thread of a GEMM), memset/memcpy and the
operating system. Samples are CPU samples of every thread. Usage:
  profile_ops.py CONFIG SHORT.txt LONG.txt
"""
import re
import sys

# First match wins: (category, dso regex, symbol regex).
RULES = [
    ("matrix products (oneMKL's bf16 product)", r"libmkl", r"bf16"),
    ("matrix products (BLAS sgemm)", r"libopenblas|libscipy_openblas|libmkl|libblis", r"."),
    ("bf16 rounding of product operands and outputs", r"femtotron", r"^(round_to_bf16|rounded_operand|kept_copy)"),
    ("start-up: init, RoPE tables, data", r"femtotron", r"^(llama_init|init_|philox|rope_freq|rope_frequencies|prepare|tok)"),
    ("start-up: init, RoPE tables, data", r"libm\.", r"."),
    ("attention (flash-style blocks)", r"femtotron", r"^(attention|ring_attention|online_softmax|probs_and_gradient|amx_)"),
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

LINE = re.compile(r"^\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[[.k]\]\s+(\S+)")


def categories(path):
    """{category: samples} of one perf report."""
    count = {}
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        n, dso, sym = int(m.group(1)), m.group(2), m.group(3).split("._omp_fn")[0]
        for cat, dre, sre in RULES:
            if re.search(dre, dso) and re.search(sre, sym):
                count[cat] = count.get(cat, 0) + n
                break
    return count


def main():
    config, short, long = sys.argv[1], categories(sys.argv[2]), categories(sys.argv[3])
    extra = {c: long.get(c, 0) - short.get(c, 0) for c in set(short) | set(long)}
    total = sum(v for v in extra.values() if v > 0)
    if total <= 0:
        print(f"| {config} | (no samples in the extra steps) | |")
        return
    order = [r[0] for r in RULES]
    for cat in sorted(extra, key=lambda c: (-extra[c], order.index(c))):
        if extra[cat] > 0 and 100.0 * extra[cat] / total >= 0.05:
            print(f"| {config} | {cat} | {100.0 * extra[cat] / total:.1f}% |")


if __name__ == "__main__":
    main()
