#!/usr/bin/env python3
"""gpu_floor.py RUNS [--attention-md FILE] [--sdpa SHAPE=FWD_MS,BWD_MS ...] [--gemm TFLOPS ...] [--bw TBPS ...]

How fast femtotron's GPU step could be with its present passes, and whether that
reaches issue 21's targets: the planner (`femtotron plan`, plan/step_time.c, which
prices every matrix product, the attention, each element-wise pass and AdamW) run
on idealised copies of a measured profile instead of the measured one:
  - every matrix product at one rate (--gemm, TFLOP/s: e.g. the best point of
    `bench calibrate`'s curve, or the 8192^3 rate PyTorch reaches on the card);
  - the attention at PyTorch's flash SDPA speed (forward and backward ms a layer and
    micro-batch: --sdpa, or the torch rows of bench/attention_gpu.sh's table given
    with --attention-md), and at cuDNN's as measured there (its femtotron cudnn-kept
    row) or, without one, at twice SDPA's (what cuDNN's fused kernels are said to
    reach on Hopper);
  - the element-wise passes and AdamW at a copy bandwidth (--bw, TB/s; a
    device-to-device copy moves about 4.3 on an H200).
Each floor is split by running the planner again with the products, then the
attention, made free. Compared with the targets: 1.2x the fastest PyTorch run of
the shape in RUNS (its median step / 1.2) and 55% MFU against 989 TFLOP/s.

RUNS is a bench/gpu_vs_pytorch.sh runs directory (unpack
bench/results/gpu_vs_pytorch_runs.tar.gz): its profile.json, each shape's
SHAPE.femtotron.1.run.json and the PyTorch runs' metrics. Needs no GPU: any femtotron
binary plans (--femtotron, default ./femtotron).
"""
import argparse
import copy
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpu_vs_pytorch_report as report  # noqa: E402  (flops, load_run)

FREE = 1e30  # a rate that makes a kind of work cost nothing


def flat(rate):
    return {"work": [1.0, 1e18], "rate": [rate, rate]}


def plan_ms(binary, config, mbs, profile, scratch):
    """The planner's step and optimizer milliseconds for config at micro-batch mbs on one GPU."""
    json.dump(profile, open(scratch, "w"))
    out = subprocess.run([binary, "plan", "--config", config, "--gpus", "1", "--hardware", "this",
                          "--profile", scratch, "--layout", f"dp=1,mbs={mbs}", "--tsv"],
                         capture_output=True, text=True)
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) < 2:
        sys.exit(f"gpu_floor.py: femtotron plan failed on {config}: {out.stderr.strip()[-300:]}")
    row = dict(zip(lines[0].split("\t"), lines[1].split("\t")))
    return 1e3 * float(row["step_s"]), 1e3 * float(row["optimizer_s"])


def attention_rows(path):
    """{shape: {system: (fwd ms, bwd ms)}} from bench/attention_gpu.sh's table."""
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and "(" in cells[0]:
            try:
                rows.setdefault(cells[0].split()[0], {})[cells[1]] = (float(cells[2]), float(cells[3]))
            except ValueError:
                pass  # the header
    return rows


def attention_speeds(a):
    """{shape: [(label, fwd ms, bwd ms), ...]}: every --sdpa shape, and the attention table's
    shapes with a femtotron run in RUNS (the table has more). PyTorch's SDPA as measured,
    then cuDNN's kept-bf16 ops as measured (femtotron cudnn-kept), or where there is no
    such row twice SDPA's speed (what GPU_NOTES gives cuDNN's kernels on Hopper)."""
    sdpa, cudnn = {}, {}
    for item in a.sdpa:
        try:
            shape, times = item.split("=")
            fwd_ms, bwd_ms = (float(x) for x in times.split(","))
        except ValueError:
            sys.exit(f"gpu_floor.py: --sdpa {item}: expected SHAPE=FWD_MS,BWD_MS, e.g. smollm-1.7b=0.241,0.552")
        sdpa[shape] = (fwd_ms, bwd_ms)
    if a.attention_md:
        if not os.path.exists(a.attention_md):
            sys.exit(f"gpu_floor.py: no {a.attention_md} (bench/attention_gpu.sh writes it)")
        for shape, systems in attention_rows(a.attention_md).items():
            if not os.path.exists(os.path.join(a.runs, f"{shape}.femtotron.1.run.json")):
                continue
            for name, times in systems.items():
                if name.startswith("torch") and shape not in sdpa:
                    sdpa[shape] = times
                elif name == "femtotron cudnn-kept":
                    cudnn[shape] = times
    speeds = {}
    for shape, (f, b) in sdpa.items():
        speeds[shape] = [("PyTorch's SDPA", f, b),
                         ("cuDNN (measured)", *cudnn[shape]) if shape in cudnn else ("2x SDPA", f / 2, b / 2)]
    return speeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs")
    ap.add_argument("--sdpa", action="append", default=[], metavar="SHAPE=FWD_MS,BWD_MS")
    ap.add_argument("--attention-md", help="bench/attention_gpu.sh's attention_gpu.md: its SDPA and cudnn-kept rows")
    ap.add_argument("--gemm", type=float, nargs="+", default=None, help="TFLOP/s (default: the profile's best, 790)")
    ap.add_argument("--bw", type=float, nargs="+", default=[3.5, 4.3], help="TB/s")
    ap.add_argument("--femtotron", default="./femtotron")
    ap.add_argument("--peak", type=float, default=989e12)
    a = ap.parse_args()
    speeds = attention_speeds(a)
    profile = os.path.join(a.runs, "profile.json")
    if not os.path.exists(profile):
        sys.exit(f"gpu_floor.py: no {profile}: RUNS must be a bench/gpu_vs_pytorch.sh runs directory")
    if not speeds:
        sys.exit("gpu_floor.py: no attention speeds: give --sdpa SHAPE=FWD_MS,BWD_MS or --attention-md FILE")
    for shape in speeds:
        if not os.path.exists(os.path.join(a.runs, f"{shape}.femtotron.1.run.json")):
            sys.exit(f"gpu_floor.py: no {shape}.femtotron.1.run.json in {a.runs}: no femtotron run of {shape} there")
    base = json.load(open(profile))
    gemms = [g * 1e12 for g in a.gemm] if a.gemm else [max(base["gemm"]["rate"]), 790e12]
    fd, scratch = tempfile.mkstemp(suffix=".json", prefix="gpu_floor_profile.")  # each idealised profile
    os.close(fd)
    try:
        table(a, speeds, base, gemms, scratch)
    finally:
        os.remove(scratch)


def table(a, speeds, base, gemms, scratch):
    """Prints the floors: per shape, product rate, bandwidth and attention speed."""
    print("| shape | products TFLOP/s | element-wise TB/s | attention | products ms | attention ms "
          "| element-wise ms | AdamW ms | floor ms | 1.2x target ms | 55% MFU ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape, variants in speeds.items():
        config = os.path.join(a.runs, f"{shape}.femtotron.1.run.json")
        cfg = json.load(open(config))
        m, t = cfg["model"], cfg["training"]
        B, S, H = t["micro_batch_size"], t["seq_length"], m["num_attention_heads"]
        hd = m["hidden_size"] // H
        # the planner's attention work of one (sequence, head), causal, as plan/step_time.c
        # (attention_block_work) counts it: a call does B * H of them
        work = 4.0 * hd * S * (S + 1) / 2 * B * H
        fields = [m["hidden_size"], m["num_hidden_layers"], H, m["num_key_value_heads"],
                  m["intermediate_size"], m["vocab_size"], S, B]
        tokens = t["global_batch_size"] * S
        mfu55_ms = 1e3 * report.flops(fields)[0] * tokens / (0.55 * a.peak)
        torch = [report.load_run(p[:-5]) for p in glob.glob(os.path.join(a.runs, f"{shape}.*.meta"))
                 if ".femtotron." not in p and ".profile." not in p]
        steps = [r["ms"] for r in torch if "ms" in r]
        target = f"{min(steps) / 1.2:.1f}" if steps else "no PyTorch run"
        for gemm in gemms:
            for bw in (x * 1e12 for x in a.bw):
                for name, fwd_ms, bwd_ms in variants:
                    p = copy.deepcopy(base)
                    p.update(gemm=flat(gemm), attn_fwd=flat(work / (fwd_ms * 1e-3)),
                             attn_bwd=flat(2 * work / (bwd_ms * 1e-3)), mem_bw=bw)
                    floor, adam = plan_ms(a.femtotron, config, B, p, scratch)
                    p.update(gemm=flat(FREE))
                    no_gemm, _ = plan_ms(a.femtotron, config, B, p, scratch)
                    p.update(attn_fwd=flat(FREE), attn_bwd=flat(FREE))
                    passes, _ = plan_ms(a.femtotron, config, B, p, scratch)
                    print(f"| {shape} | {gemm / 1e12:.0f} | {bw / 1e12:.1f} | {name} | {floor - no_gemm:.1f} "
                          f"| {no_gemm - passes:.1f} | {passes - adam:.1f} | {adam:.1f} | **{floor:.1f}** "
                          f"| {target} | {mfu55_ms:.1f} |")


if __name__ == "__main__":
    main()
