#!/usr/bin/env python3
"""gpu_vs_pytorch_report.py RUNS OUT.md — the table of bench/gpu_vs_pytorch.sh.

Reads the runs directory the script fills (env.txt, notes.txt, and per run
SHAPE.SYSTEM.ROUND.{meta,jsonl,log,mem,trace.json}) and writes the markdown report.
Needs no GPU and no PyTorch: `REPORT_ONLY=1 SCRATCH=DIR bash bench/gpu_vs_pytorch.sh`
rebuilds the report from an earlier run's files.

tok/s = tokens per step / the run's median timed step (warm-up steps dropped); the
best round is kept. MFU = model FLOPs per token x tok/s / the peak (989 TFLOP/s, the
H100 SXM's bf16 dense datasheet figure) by two formulas:
  femtotron's  6 N_matmul + 6 L S D  (matrix weights with the head; causal attention
               counted half: llama_flops_per_token)
  picotron's   6 N + 12 L S D        (N = every parameter, tied embedding once;
               attention counted in full, as picotron's get_mfu does)
"""
import glob
import json
import math
import os
import re
import statistics
import sys

NAMES = {"femtotron": "**femtotron**", "eager": "PyTorch eager + SDPA + fused AdamW",
         "compile": "PyTorch torch.compile", "eager-fp32": "PyTorch eager fp32 + SDPA + fused AdamW"}
ORDER = ["femtotron", "eager", "compile", "eager-fp32"]
GiB = 2.0 ** 30


def read_kv(path):
    out = {}
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def flops(shape):
    D, L, NH, KV, I, V, S = shape[:7]
    hd = D // NH
    layer_mat = D * (NH + 2 * KV) * hd + NH * hd * D + 3 * D * I
    n_matmul = L * layer_mat + V * D                       # + the (tied) head's product
    n_total = V * D + L * (layer_mat + 2 * D) + D           # tied: the embedding once; norms
    return (6.0 * n_matmul + 6.0 * L * S * NH * hd,         # femtotron
            6.0 * n_total + 12.0 * L * S * D,               # picotron
            n_total)


def load_run(base):
    meta = read_kv(base + ".meta")
    warm = int(meta.get("warmup", "0") or 0)
    run = {"meta": meta, "status": meta.get("status", "?"), "why": meta.get("why", "")}
    recs = []
    if os.path.exists(base + ".jsonl"):
        for line in open(base + ".jsonl"):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "step" in r and "step_ms" in r and "event" not in r:
                recs.append(r)
    run["recs"] = recs
    timed = [r for r in recs if r["step"] > warm]
    run["timed"] = timed
    if recs:
        run["loss1"] = recs[0]["loss"]
        warm_recs = [r for r in recs if r["step"] <= warm]
        run["warm_s"] = sum(r["step_ms"] for r in warm_recs) / 1e3
    if timed:
        ms = [r["step_ms"] for r in timed]
        run["ms"] = statistics.median(ms)
        run["ms_min"], run["ms_max"] = min(ms), max(ms)
        run["tps"] = timed[0]["tokens"] * 1e3 / run["ms"]
        # what the warm-up steps took beyond timed steps: torch.compile's compilation, cuBLAS/
        # cuBLASLt plan and autotuning, first touches of memory
        run["warm_extra_s"] = round(run["warm_s"] - warm * run["ms"] / 1e3, 1) + 0.0  # no "-0.0"
    last = recs[-1] if recs else {}
    if "peak_mem_bytes" in last:
        run["alloc"] = last["peak_mem_bytes"] / GiB
        run["reserved"] = last.get("peak_reserved_bytes", 0) / GiB
    if os.path.exists(base + ".log"):
        m = re.search(r"^memory \(rank 0\):.*\| total ([0-9.]+) MiB", open(base + ".log", errors="replace").read(), re.M)
        if m:
            run["planned"] = float(m.group(1)) / 1024
    if os.path.exists(base + ".mem"):
        vals = [int(x) for x in re.findall(r"^\s*(\d+)", open(base + ".mem").read(), re.M)]
        if vals:
            run["smi_peak"] = (max(vals) - int(meta.get("mem_base_mib", "0") or 0)) / 1024
    if os.path.exists(base + ".trace.json") and timed:
        run["split"] = trace_split(base + ".trace.json", timed)
    return run


def trace_split(path, timed):
    """femtotron's logging.trace: per timed step the host wall time of forward, backward,
    reduce-wait and optimizer (every CUDA op synchronises its stream, so each phase's
    time is its kernels' time plus the gaps between launches), the rest of step_ms is
    the step's other host work (data, loss and norm reductions, logging); medians."""
    try:
        events = json.load(open(path))["traceEvents"]
    except (ValueError, KeyError, OSError):
        return None
    per = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        s = e.get("args", {}).get("step")
        per.setdefault(s, {}).setdefault(e["name"], 0.0)
        per[s][e["name"]] += e["dur"] / 1e3
    kinds = ("forward", "backward", "reduce-wait", "optimizer")
    rows = []
    for r in timed:
        ev = per.get(r["step"], {})
        row = {k: ev.get(k, 0.0) for k in kinds}
        row["rest"] = r["step_ms"] - sum(row.values())
        rows.append(row)
    if not rows:
        return None
    return {k: statistics.median(x[k] for x in rows) for k in kinds + ("rest",)}


def fmt(x, f="{:.0f}", none=""):
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else f.format(x)


def main():
    runs_dir, out = sys.argv[1:3]
    env = read_kv(os.path.join(runs_dir, "env.txt"))
    peak = float(env.get("peak_flops", "989e12"))
    # The shapes of env.txt, then any other shape with runs here (runs of several calls
    # unpacked into one directory: each run's meta has its shape's fields).
    metas = [read_kv(p) for p in sorted(glob.glob(os.path.join(runs_dir, "*.meta")))]
    shapes = env.get("shapes", "").split()
    for m in metas:
        if m.get("shape") and m["shape"] not in shapes:
            shapes.append(m["shape"])
        if m.get("shape") and m.get("fields"):
            env.setdefault(f"shape_{m['shape']}", m["fields"])
    known = ["smollm-1.7b", "smollm-360m", "llama-3.2-1b"]
    shapes.sort(key=lambda x: known.index(x) if x in known else len(known))
    systems = env.get("systems", "").split()
    systems += [m["system"] for m in metas if m.get("system") and m["system"] not in systems]
    systems = [s for s in ORDER if s in systems] + [s for s in systems if s not in ORDER]
    systems = [s for s in systems if s != "profile"]  # its own table (op_profile_rows)
    notes = [l.strip() for l in open(os.path.join(runs_dir, "notes.txt"))] \
        if os.path.exists(os.path.join(runs_dir, "notes.txt")) else []

    head, rows, split_rows, shape_lines, plan_rows, prof_rows, op_rows, prod_rows = [], [], [], [], [], [], [], []
    for shape in shapes:
        fields = [int(x) for x in env.get(f"shape_{shape}", "").split()]
        if len(fields) < 8:
            continue
        D, L, NH, KV, I, V, S, _ = fields
        f_ft, f_pico, n_total = flops(fields)
        shape_lines.append(f"- **{shape}**: hidden {D}, {L} layers, {NH} heads / {KV} kv (head dim {D // NH}), "
                           f"intermediate {I}, vocab {V}, tied embeddings, seq {S}; {n_total / 1e9:.3f} B "
                           f"parameters; {f_ft / 1e9:.2f} GFLOP/token by femtotron's formula, "
                           f"{f_pico / 1e9:.2f} by picotron's")
        best = {}
        for sys_ in systems:
            runs = [load_run(p[:-5]) for p in sorted(glob.glob(os.path.join(runs_dir, f"{shape}.{sys_}.*.meta")))]
            if not runs:
                continue
            good = [r for r in runs if "tps" in r]
            best[sys_] = max(good, key=lambda r: r["tps"]) if good else runs[-1]
            if len(runs) > 1:  # every round's figure beside the best
                best[sys_]["rounds"] = "/".join(f"{r['tps']:.0f}" if "tps" in r else r["status"] for r in runs)
        ft = best.get("femtotron", {})
        pred = ft.get("meta", {}).get("predicted_step_s", "") if ft else ""
        if pred and "ms" in ft:
            err = float(pred) / (ft["ms"] / 1e3) - 1
            plan_rows.append(f"| {shape} | {ft['meta'].get('batch', '')} | {float(pred):.3f} | {ft['ms'] / 1e3:.3f} "
                             f"| {100 * err:+.1f}% |")
        for p in sorted(glob.glob(os.path.join(runs_dir, f"{shape}.profile.*.meta")))[-1:]:
            pm = read_kv(p)
            line = pm.get("op_profile", "")
            kinds = dict(re.findall(r"; ([a-z -]+) [0-9.]+ s \(([0-9.]+)%", line))
            host = re.search(r"; host -?[0-9.]+ s \((-?[0-9.]+)%\)", line)
            if not line:
                prof_rows.append(f"| {shape} | {pm.get('status', '?')}: {pm.get('why', '').replace('|', '/')} "
                                 f"| | | | | | | |")
                continue
            cells = " | ".join(kinds.get(k, "") for k in
                               ["matrix products", "attention", "element-wise", "optimizer", "copies", "waits"])
            prof_rows.append(f"| {shape} | {pm.get('batch', '')} | {cells} | {host.group(1) if host else ''} |")
            # the ten ops with the most GPU time
            for name, secs, pct, calls in re.findall(r"(?:^|; )([^;]+?) ([0-9.]+) s \(([0-9.]+)%, (\d+)\)",
                                                     pm.get("op_profile_by_op", ""))[:10]:
                op_rows.append(f"| {shape} | {name} | {float(secs) * 1e3:.1f} | {pct} | {calls} |")
            # the matrix products by shape, with the rate each ran at (the ten costliest)
            for name, secs, pct, calls, rate in re.findall(
                    r"(?:^|; )([^;]+?) ([0-9.]+) s \(([0-9.]+)%, (\d+), ([0-9.e+-]+) TFLOP/s\)",
                    pm.get("op_profile_by_product", ""))[:10]:
                prod_rows.append(f"| {shape} | {name} | {float(secs) * 1e3:.1f} | {pct} | {calls} | {float(rate):.0f} |")
        for sys_ in systems:
            r = best.get(sys_)
            if r is None:
                continue
            m = r["meta"]
            status = r["status"]
            if "tps" not in r:
                why = r["why"].replace("|", "/")
                rows.append(f"| {shape} | {NAMES.get(sys_, sys_)} | {m.get('precision', '')} | {m.get('batch', '')} "
                            f"| {status}: {why} | | | | | | | | |")
                continue
            tps = r["tps"]
            cut = "" if status == "ok" else f" ({status}: {len(r['timed'])} timed steps)"
            if "rounds" in r:
                cut += f" (rounds: {r['rounds']})"
            ratio = fmt(ft.get("tps", 0) / tps if "tps" in ft else None, "{:.2f}x")
            mem_alloc = (f"{r['alloc']:.1f} (reserved {r['reserved']:.1f})" if "alloc" in r
                         else (f"{r['planned']:.1f} planned" if "planned" in r else ""))
            warm = fmt(r.get("warm_extra_s"), "{:.1f}")
            rows.append(f"| {shape} | {NAMES.get(sys_, sys_)} | {m.get('precision', '')} | {m.get('batch', '')} "
                        f"| {tps:.0f}{cut} | {100 * f_ft * tps / peak:.1f}% | {100 * f_pico * tps / peak:.1f}% "
                        f"| {fmt(r.get('smi_peak'), '{:.1f}')} | {mem_alloc} | {ratio} "
                        f"| {r['ms']:.1f} ({r['ms_min']:.1f}–{r['ms_max']:.1f}) | {warm} | {m.get('wall_s', '')} "
                        f"| {r['loss1']:.3f} |")
            if sys_ == "femtotron" and r.get("split"):
                sp = r["split"]
                split_rows.append(f"| {shape} | {m.get('precision', '')} | {sp['forward']:.1f} | {sp['backward']:.1f} | "
                                  f"{sp['reduce-wait']:.1f} | {sp['optimizer']:.1f} | {sp['rest']:.1f} | {r['ms']:.1f} |")
            elif sys_ == "femtotron":
                split_rows.append(f"| {shape} | {m.get('precision', '')} | no trace ({status}: the trace is written "
                                  f"when the run ends) | | | | | |")
        torch_best = [(s, best[s]) for s in best if s != "femtotron" and "tps" in best[s]]
        if torch_best:
            bs, br = max(torch_best, key=lambda x: x[1]["tps"])
            if "tps" in ft:
                head.append(f"| {shape} | {ft['meta'].get('batch', '')} | {ft['meta'].get('precision', '')} "
                            f"| {ft['tps']:.0f} | {100 * f_ft * ft['tps'] / peak:.1f}% / {100 * f_pico * ft['tps'] / peak:.1f}% "
                            f"| {NAMES[bs]}: {br['tps']:.0f} ({100 * f_ft * br['tps'] / peak:.1f}%) "
                            f"| **{ft['tps'] / br['tps']:.2f}x** |")
            else:
                head.append(f"| {shape} | {br['meta'].get('batch', '')} | | {ft.get('status', 'not run')} "
                            f"| | {NAMES[bs]}: {br['tps']:.0f} ({100 * f_ft * br['tps'] / peak:.1f}%) | |")
        elif "tps" in ft:
            head.append(f"| {shape} | {ft['meta'].get('batch', '')} | {ft['meta'].get('precision', '')} | {ft['tps']:.0f} "
                        f"| {100 * f_ft * ft['tps'] / peak:.1f}% / {100 * f_pico * ft['tps'] / peak:.1f}% | no PyTorch row | |")
        else:
            head.append(f"| {shape} | | | {ft.get('status', 'not run')} | | no PyTorch row | |")

    sw = [f"driver {env.get('driver', '?')}", f"CUDA {env.get('cuda_driver', '?')} (driver API)"]
    if env.get("nvcc"):
        sw.append(f"nvcc {env['nvcc']}")
    if env.get("cublaslt"):
        sw.append(f"femtotron's cuBLASLt {env['cublaslt']}")
    if env.get("torch"):
        sw.append(f"PyTorch {env['torch']} (CUDA {env.get('torch_cuda')}, cuDNN {env.get('cudnn')}, "
                  f"NCCL {env.get('nccl')}, Triton {env.get('triton')})")
    md = f"""# femtotron vs PyTorch on one GPU: training throughput

{env.get('date', '?')} · {env.get('gpu', '?')} · {' · '.join(sw)} ·
max SM/memory clock, power limit, temperature at start: {env.get('clocks', '?')} ·
host {env.get('cpu', '?')}, load average at start {env.get('load_start', '?')}, at end {env.get('load_end', '?')} ·
GPU at start: utilisation, memory used {env.get('gpu_util_start', '?')}; other processes: {env.get('gpu_apps_start', '') or 'none'} ·
femtotron {env.get('femtotron_rev', '?')} · MFU against {peak / 1e12:.0f} TFLOP/s (bf16 dense datasheet peak)

Against the fastest PyTorch variant (targets of issue 21: ≥55% MFU on smollm-1.7b, ≥1.2x on every shape):

| shape | micro-batch | femtotron precision | femtotron tok/s | femtotron MFU (femtotron's / picotron's formula) | fastest PyTorch tok/s (MFU, femtotron's formula) | femtotron / fastest PyTorch |
|---|---|---|---|---|---|---|
""" + "\n".join(head) + """

Every run (the best round of each):

| shape | system | precision | micro-batch | tok/s | MFU femtotron's formula | MFU picotron's formula | device memory peak GiB (nvidia-smi) | allocator peak GiB | femtotron / this | step ms median (min–max) | warm-up beyond timed steps, s | run wall s | step-1 loss |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + f"""

femtotron's step split (`logging.trace`, median over the timed steps, ms; while a trace is
written the host waits for the GPU at each phase's start and end, so a phase holds its kernels'
time; rest = step time − the phases: data, loss and norm reductions, host work):

| shape | precision | forward | backward | reduce-wait | optimizer | rest | step |
|---|---|---|---|---|---|---|---|
""" + "\n".join(split_rows) + f"""

femtotron's time by kind of op (`FEMTOTRON_CUDA_PROFILE=1`, a separate run of the same shape and
micro-batch for {env.get('profile_steps', '?')} steps, start-up and the first step's cuBLASLt
heuristics included; % of the wall time from the first op to the end; each op timed on the GPU by
CUDA events at its first launch and after its last kernel; host = the wall less the ops: the GPU
without an op of ours to run (launches the host was late with, data, MPI, bookkeeping); waits = the
host blocked in its once-a-step waits, the GPU busy meanwhile, so not part of that sum):

| shape | micro-batch | matrix products % | attention % | element-wise % | optimizer % | copies % | waits % | host % |
|---|---|---|---|---|---|---|---|---|
""" + "\n".join(prof_rows) + f"""

The ops with the most GPU time in that run (ten a shape):

| shape | op | ms | % of the wall | calls |
|---|---|---|---|---|
""" + "\n".join(op_rows) + f"""

Its matrix products by shape (cuBLASLt's column-major m x n x k: for a forward product
out_dim x tokens x in_dim; N/T the operands' transposes; types of the operands and the
output, +C where the product adds into its output), each with the rate it ran at
(2 m n k a call over its GPU time, the product's kernel alone; the rounding of its
operands to bf16 is the op "product operand rounding" above):

| shape | product | ms | % of the wall | calls | TFLOP/s |
|---|---|---|---|---|---|
""" + "\n".join(prod_rows) + f"""

The planner's step time for femtotron's run (`femtotron plan --config RUN --gpus 1 --hardware this
--layout dp=1,mbs=B` with the profile `bench calibrate --precision {env.get('precision_calibrated', '?')}` measured on this
GPU at the start of the run; issue 21's target: within 10%):

| shape | micro-batch | predicted step s | measured step s (median) | error |
|---|---|---|---|---|
""" + "\n".join(plan_rows) + f"""

Shapes (bf16 runs; femtotron: `training.device cuda`, `training.precision` as in the table,
`model.tie_word_embeddings true`; PyTorch: bench/torch_train.py `--device cuda --dtype bf16
--fused-adamw --tie-embeddings --attention sdpa`, torch.autocast(bfloat16) around forward and
loss with fp32 master weights, gradients and AdamW state; torch.compile with `--compile-scope
{env.get('compile_scope', '?')}`):

""" + "\n".join(shape_lines) + f"""

Method: one process per run, {env.get('warmup', '?')} warm-up + {env.get('timed', '?')} timed steps
of {env.get('accum', '1')} micro-batches each (gradient accumulation, the same in every system: the
optimizer once per {env.get('accum', '1')} micro-batches, as in pre-training, where the batch is
millions of tokens) (torch.compile 2 more warm-up steps: its compilation), runs interleaved shape by shape
(femtotron, then each PyTorch variant); tok/s = tokens per step / the run's median timed step;
"warm-up beyond timed steps" = the warm-up steps' time less as many median steps (compilation,
autotuning, first touches of memory); "run wall" includes start-up (model init, imports).
Device memory peak = the largest `nvidia-smi` memory.used sampled every 200 ms during the run
less the reading before it (CUDA context and every allocation, femtotron's managed memory as
resident on the GPU); allocator peak = `torch.cuda.max_memory_allocated` (reserved: what
PyTorch's caching allocator held) or femtotron's planned buffers from its start-up memory line
(params + grads + AdamW + activations; without the cuBLASLt workspace and kernel scratch).

Data: {env.get('corpus', '?')}, prepared by `femtotron prepare` with the byte-level tokenizer, so
every token id is below 257; model.vocab_size is set to the shape's vocabulary, so the
embedding, the head and the loss do the full vocabulary's work. This is a throughput benchmark:
the losses only show that both systems train the same problem from a similar start (near ln V).
"""
    if notes:
        md += "\nNotes from this run:\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    open(out, "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
