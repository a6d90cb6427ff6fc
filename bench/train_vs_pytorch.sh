#!/usr/bin/env bash
# bench/train_vs_pytorch.sh — train the same Llama model with femtotron and with
# PyTorch (fp32, CPU) on the same data on this machine, in one run, and write
# bench/results/train_vs_pytorch.{md,png}: tokens/s, MFU (against one measured
# GEMM peak) and the ratio femtotron / the best PyTorch variant. See bench/README.md.
#
# PyTorch variants (each at every thread count of TORCH_THREADS, the best kept):
#   debian   Debian's python3-torch 1.13, eager, attention in three ops (reference row)
#   sdpa     PyTorch 2.x from PyPI, eager, F.scaled_dot_product_attention (fused, causal)
#   plain    PyTorch 2.x, eager, attention in three ops
#   compile  PyTorch 2.x, torch.compile of the model (SDPA attention)
# PyTorch 2.x comes from a virtual environment, TORCH2_VENV, that this script
# creates with pip when it is missing; where pip cannot install it, those rows say so.
# femtotron builds (FEMTO_BLAS): openblas (./femtotron, the default build) and mkl
# (build-mkl/femtotron: make BLAS=mkl, oneMKL from PyPI by scripts/install_mkl.sh;
# left out with a warning where it cannot be installed). PyPI's PyTorch multiplies
# with oneMKL too, so the mkl row compares everything but the matrix products. Also
# scipy-openblas (make BLAS=scipy-openblas: a recent OpenBLAS, PyPI's scipy-openblas32,
# by scripts/install_scipy_openblas.sh; not run unless asked for).
# PRECISION=bf16: bf16 mixed precision on both sides instead, written to
# bench/results/train_vs_pytorch_bf16.{md,png}: femtotron's oneMKL build with
# training.precision = bf16 (bf16 products through oneMKL's cblas_gemm_bf16bf16f32, on
# AMX where the CPU has it; OpenBLAS's build has none), PyTorch 2.x with
# torch.autocast(cpu, bfloat16) (--dtype bf16: oneDNN's bf16 kernels), fp32 master
# weights and AdamW on both; MFU against the bf16 product's peak (`bench peak
# --precision bf16`).
#
# Environment knobs (defaults in brackets):
#   CONFIGS ["small gpt2"]   ROUNDS [2]   TORCH_THREADS ["1 2"]   FEMTO_THREADS [2]
#   VARIANTS ["debian sdpa plain compile"]   FEMTO_BLAS ["openblas mkl"]
#   PYTHON [/usr/bin/python3: Debian's torch]   PRECISION [fp32; bf16: VARIANTS "sdpa compile", FEMTO_BLAS mkl]
#   TORCH2_VENV [build/torch2env]   SCRATCH [a fresh mktemp -d, removed at the end]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CONFIGS=${CONFIGS:-"small gpt2"}
ROUNDS=${ROUNDS:-2}
TORCH_THREADS=${TORCH_THREADS:-"1 2"}
FEMTO_THREADS=${FEMTO_THREADS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
PRECISION=${PRECISION:-fp32}
case $PRECISION in
    fp32) SUFFIX="" DEFAULT_VARIANTS="debian sdpa plain compile" DEFAULT_BLAS="openblas mkl" ;;
    bf16) SUFFIX="_bf16" DEFAULT_VARIANTS="sdpa compile" DEFAULT_BLAS="mkl" ;;
    *) echo "train_vs_pytorch.sh: PRECISION must be fp32 or bf16 (got '$PRECISION')" >&2; exit 2 ;;
esac
VARIANTS=${VARIANTS:-$DEFAULT_VARIANTS}
FEMTO_BLAS=${FEMTO_BLAS:-$DEFAULT_BLAS}
TORCH2_VENV=${TORCH2_VENV:-build/torch2env}
OUT=bench/results
if [[ -n ${SCRATCH:-} ]]; then mkdir -p "$SCRATCH"; else
    SCRATCH=$(mktemp -d /tmp/train_vs_pytorch.XXXXXX)
    trap 'rm -rf "$SCRATCH"' EXIT
fi
mkdir -p "$OUT" "$SCRATCH/runs"

# Each config: model/batch sizes, then warm-up steps and timed steps per run.
# Fields: hidden layers heads kv_heads intermediate vocab seq micro_batch warmup timed
declare -A CFG=(
    [small]="512 8 8 4 1536 8192 256 8 3 5"
    [gpt2]="768 12 12 4 2048 32768 512 4 2 3"
)

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== build"
if ! make -s femtotron; then
    [[ -x femtotron ]] || exit 1
    echo "WARNING: make failed; benchmarking the existing ./femtotron" >&2
fi
FEMTO="$SCRATCH/femtotron"  # a private copy: others may rebuild ./femtotron meanwhile
cp femtotron "$FEMTO"
. bench/blas_lib.sh
declare -A FEMTO_BIN=([openblas]="$FEMTO")
BUILDS=""
for b in $FEMTO_BLAS; do
    case $b in
        openblas | mkl | scipy-openblas) ;;
        *) echo "train_vs_pytorch.sh: FEMTO_BLAS: unknown build '$b' (openblas, mkl, scipy-openblas)" >&2; exit 2 ;;
    esac
    [[ $b == mkl || $PRECISION == fp32 ]] || { echo "train_vs_pytorch.sh: OpenBLAS's builds have no bf16 products (FEMTO_BLAS=mkl)" >&2; exit 2; }
    if [[ $b == openblas ]]; then
        BUILDS="$BUILDS openblas"
    elif bin=$(blas_build "$b" "$SCRATCH"); then
        FEMTO_BIN[$b]=$bin
        BUILDS="$BUILDS $b"
        [[ $b != scipy-openblas ]] ||
            SCIPY_OPENBLAS="OpenBLAS $(scipy_openblas_version)"
    fi
done
[[ -n $BUILDS ]] || { echo "train_vs_pytorch.sh: no femtotron build to run" >&2; exit 1; }
FIRST_BUILD=$(awk '{print $1}' <<<"$BUILDS")

echo "== data: fortunes -> $SCRATCH/data"
mapfile -t TEXTS < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
"$FEMTO" prepare --input "${TEXTS[@]}" --split-on % --output "$SCRATCH/data" --force | tail -n 1
DATA="$SCRATCH/data/train_*.bin"

echo "== GEMM peak (2 threads, $PRECISION)"
PEAK_GFLOPS=$("${FEMTO_BIN[$FIRST_BUILD]}" bench peak --threads 2 --seconds 5 --precision "$PRECISION" | awk '{print $2}')
PEAK=$(awk -v g="$PEAK_GFLOPS" 'BEGIN{printf "%.6e", g * 1e9}')
echo "peak $PEAK_GFLOPS GFLOP/s"

# The OpenBLAS kernels femtotron runs (ops/blas_cores.c chooses them in OpenBLAS's place
# where OpenBLAS falls back to SSE on a CPU it does not know): Debian's PyTorch links
# the same OpenBLAS, and gets the same kernels (PyPI's links MKL).
BLAS_CORE=$(openblas_core "$FEMTO")
echo "OpenBLAS kernels: ${BLAS_CORE:-unknown}"

run_femto() {  # config round build
    local c=$1 r=$2 b=$3 H L NH KV I V S B W T
    read -r H L NH KV I V S B W T <<<"${CFG[$c]}"
    "${FEMTO_BIN[$b]}" train --data.train "$DATA" --model.hidden_size "$H" --model.num_hidden_layers "$L" \
        --model.num_attention_heads "$NH" --model.num_key_value_heads "$KV" \
        --model.intermediate_size "$I" --model.vocab_size "$V" --model.max_position_embeddings "$S" \
        --training.seq_length "$S" --training.micro_batch_size "$B" --training.steps $((W + T)) \
        --training.threads "$FEMTO_THREADS" --training.peak_flops "$PEAK" --training.precision "$PRECISION" \
        --logging.metrics "$SCRATCH/runs/$c.femto-$b.$FEMTO_THREADS.$r.jsonl" | grep '^step' | tail -n 1
}

# PyTorch 2.x in its own virtual environment (PyPI's wheel, about 5 GB with its CUDA
# libraries; the CPU is what runs here).
TORCH2_PY=$TORCH2_VENV/bin/python
if [[ " $VARIANTS " =~ \ (sdpa|plain|compile)\  ]] && ! "$TORCH2_PY" -c 'import torch, numpy' 2>/dev/null; then
    echo "== installing PyTorch 2.x into $TORCH2_VENV (pip)"
    { python3 -m venv "$TORCH2_VENV" && "$TORCH2_VENV/bin/pip" install -q torch numpy; } ||
        echo "WARNING: could not install PyTorch 2.x; its rows are left out" >&2
fi
variant_python() {  # the interpreter of a variant, or nothing when it is not installed
    case $1 in
        debian) "$PYTHON" -c 'import torch' 2>/dev/null && echo "$PYTHON" ;;
        *) "$TORCH2_PY" -c 'import torch' 2>/dev/null && echo "$TORCH2_PY" ;;
    esac
}
variant_args() {
    case $1 in
        sdpa) echo "--attention sdpa" ;;
        compile) echo "--attention sdpa --compile" ;;
        *) echo "--attention plain" ;;
    esac
}

run_torch() {  # config variant threads round
    local c=$1 v=$2 t=$3 r=$4 H L NH KV I V S B W T py
    read -r H L NH KV I V S B W T <<<"${CFG[$c]}"
    py=$(variant_python "$v") || true
    if [[ -z $py ]]; then echo "(PyTorch variant $v is not installed: skipped)"; return; fi
    # torch.compile spends its first two steps compiling: two more warm-up steps.
    [[ $v == compile ]] && W=$((W + 2))
    local blas=()
    [[ $v == debian && -n $BLAS_CORE ]] && blas=("OPENBLAS_CORETYPE=$BLAS_CORE")
    # shellcheck disable=SC2046
    env "${blas[@]}" "$py" bench/torch_train.py --data "$DATA" --hidden "$H" --layers "$L" --heads "$NH" \
        --kv-heads "$KV" --intermediate "$I" --vocab "$V" --seq "$S" --batch "$B" \
        --steps $((W + T)) --warmup-steps "$W" --threads "$t" --peak-flops "$PEAK" --dtype "$PRECISION" $(variant_args "$v") \
        --metrics "$SCRATCH/runs/$c.torch-$v.$t.$r.jsonl" | grep '^step' | tail -n 1
    echo "$W" >"$SCRATCH/runs/$c.torch-$v.warmup"
}

# Interleaved so that the machine's noise hits every system alike.
# The GEMM peak is measured again before every round, with every build (each BLAS
# has its own peak, and a build's MFU is against the best any of them reached): one
# reading taken while another tenant was busy would inflate every MFU, so the table
# divides by the highest of them all (the runs themselves log MFU against the first).
PEAKS="$FIRST_BUILD:$PEAK_GFLOPS"
for c in $CONFIGS; do
    for r in $(seq 1 "$ROUNDS"); do
        for b in $BUILDS; do
            p=$("${FEMTO_BIN[$b]}" bench peak --threads 2 --seconds 3 --precision "$PRECISION" | awk '{print $2}')
            PEAKS="$PEAKS $b:$p"
            echo "== $c round $r: GEMM peak $p GFLOP/s ($b)"
        done
        for b in $BUILDS; do
            echo "== $c round $r: femtotron ($b), $FEMTO_THREADS threads ($(cut -d' ' -f1 /proc/loadavg) load)"
            run_femto "$c" "$r" "$b"
        done
        for v in $VARIANTS; do
            for t in $TORCH_THREADS; do
                echo "== $c round $r: PyTorch $v, $t threads ($(cut -d' ' -f1 /proc/loadavg) load)"
                run_torch "$c" "$v" "$t" "$r"
            done
        done
    done
done
VERSIONS="debian $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
VERSIONS="$VERSIONS;pypi $("$TORCH2_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"

# Where femtotron's step time goes: two more runs of each config under `perf record`
# (CPU samples of every thread, so OpenMP threads waiting at a barrier count), the
# second with twice the timed steps; the difference of their profiles is those extra
# steps alone, without start-up, summed by kind of op (bench/profile_ops.py).
# Skipped without perf.
PROFILE="$SCRATCH/profile.md"
: >"$PROFILE"
if command -v perf >/dev/null && perf record -o /dev/null -q -- true 2>/dev/null; then
    for c in $CONFIGS; do
      for b in $BUILDS; do
        read -r H L NH KV I V S B W T <<<"${CFG[$c]}"
        for steps in $((W + T)) $((W + 2 * T)); do
            echo "== $c: femtotron ($b) under perf record, $steps steps"
            perf record -q -F 499 -o "$SCRATCH/$c.$steps.perf" -- "${FEMTO_BIN[$b]}" train --data.train "$DATA" \
                --model.hidden_size "$H" --model.num_hidden_layers "$L" --model.num_attention_heads "$NH" \
                --model.num_key_value_heads "$KV" --model.intermediate_size "$I" --model.vocab_size "$V" \
                --model.max_position_embeddings "$S" --training.seq_length "$S" --training.micro_batch_size "$B" \
                --training.steps "$steps" --training.threads "$FEMTO_THREADS" --training.peak_flops "$PEAK" \
                --training.precision "$PRECISION" >/dev/null 2>&1
            perf report -i "$SCRATCH/$c.$steps.perf" --stdio -n --sort dso,symbol >"$SCRATCH/$c.$steps.txt" 2>/dev/null
        done
        python3 bench/profile_ops.py "$c, $b" "$SCRATCH/$c.$((W + T)).txt" "$SCRATCH/$c.$((W + 2 * T)).txt" >>"$PROFILE"
      done
    done
else
    echo "(perf is not available here: no profile by op)"
fi

echo "== summary"
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
# How busy the shared machine was (others' work slows runs): 0 at start is quiet.
LOAD="load average at start $LOAD0, at end $(cut -d' ' -f1-3 /proc/loadavg)"
SCIPY_OPENBLAS="${SCIPY_OPENBLAS:-}" PRECISION="$PRECISION" SUFFIX="$SUFFIX" CONFIGS="$CONFIGS" VARIANTS="$VARIANTS" BUILDS="$BUILDS" VERSIONS="$VERSIONS" PROFILE="$PROFILE" BLAS_CORE="${BLAS_CORE:-unknown}" \
    CFGS="$(for c in $CONFIGS; do echo "$c ${CFG[$c]}"; done)" \
    python3 - "$SCRATCH/runs" "$OUT" "$PEAK_GFLOPS" "$CPU ($(nproc) cores)" "$LOAD" "$PEAKS" <<'EOF'
import glob, json, math, os, statistics, sys, datetime
runs, out, peak_logged, cpu, load, peaks = sys.argv[1:]
peak_readings = [(x.split(":")[0], float(x.split(":")[1])) for x in peaks.split()]  # (build, GFLOP/s)
peaks = [g for _, g in peak_readings]
peak = f"{max(peaks):.1f}"
rescale = float(peak_logged) / max(peaks)  # the runs logged MFU against the first reading
versions = dict(v.split(" ", 1) for v in os.environ["VERSIONS"].split(";"))
NAMES = {"debian": f"PyTorch {versions['debian']} (Debian) eager",
         "sdpa": f"PyTorch {versions['pypi']} eager + SDPA",
         "plain": f"PyTorch {versions['pypi']} eager, plain attention",
         "compile": f"PyTorch {versions['pypi']} torch.compile"}
rows, best_rows, plot = [], [], []
for line in os.environ["CFGS"].splitlines():
    c, H, L, NH, KV, I, V, S, B, W, T = line.split()
    def stats(system):
        """{threads: (tok/s, MFU, step-1 loss, per-round tok/s)}: tok/s from the median
        timed step of each run, best run over the rounds (noise only slows runs down)."""
        res, warm = {}, int(W)
        wf = f"{runs}/{c}.{system}.warmup"
        if os.path.exists(wf): warm = int(open(wf).read())
        for f in sorted(glob.glob(f"{runs}/{c}.{system}.*.jsonl")):
            th = int(os.path.basename(f).split(".")[2])
            recs = [r for r in map(json.loads, open(f)) if "event" not in r]  # step records
            timed = [r for r in recs if r["step"] > warm]
            if not timed: continue
            tps = timed[0]["tokens"] * 1e3 / statistics.median(r["step_ms"] for r in timed)
            mfu = tps * timed[0]["mfu"] / timed[0]["tokens_per_s"] * rescale
            res.setdefault(th, []).append((tps, mfu, recs[0]["loss"]))
        return {th: max(v) + ("/".join(f"{x[0]:.0f}" for x in v),) for th, v in res.items()}
    # each femtotron build at its best thread count; the ratios use the faster build
    BUILD_NAMES = {"openblas": "OpenBLAS", "mkl": "oneMKL", "scipy-openblas": "OpenBLAS from PyPI"}
    fb = {}
    for b in os.environ["BUILDS"].split():
        f = stats(f"femto-{b}")
        if f:
            ft = max(f, key=lambda k: f[k][0])
            fb[b] = (ft,) + f[ft]  # (threads, tok/s, MFU, step-1 loss, per-round tok/s)
    if not fb: continue
    F = fb[max(fb, key=lambda b: fb[b][1])]
    best = None
    for v in os.environ["VARIANTS"].split():
        t = stats(f"torch-{v}")
        if not t:
            rows.append(f"| {c} | {NAMES[v]} | not installed | | | | | |")
            continue
        tt = max(t, key=lambda k: t[k][0])
        tried = ", ".join(f"{k}: {t[k][0]:.0f}" for k in sorted(t))  # best run per thread count
        rows.append(f"| {c} | {NAMES[v]} | {t[tt][0]:.0f} | {F[1] / t[tt][0]:.2f}x | {100 * t[tt][1]:.1f}% | "
                    f"{tt} (by threads: {tried}) | {t[tt][3]} | {t[tt][2]:.3f} |")
        if best is None or t[tt][0] > best[1]: best = (v, t[tt][0])
    for b, (ft, tps, mfu, loss, per_round) in fb.items():
        rows.append(f"| {c} | **femtotron ({BUILD_NAMES[b]})** | **{tps:.0f}** | {F[1] / tps:.2f}x | **{100 * mfu:.1f}%** "
                    f"| {ft} | {per_round} | {loss:.3f} (ln V = {math.log(int(V)):.3f}) |")
        if best:
            best_rows.append(f"| {c} | {BUILD_NAMES[b]} | {tps:.0f} | {NAMES[best[0]]}: {best[1]:.0f} | "
                             f"**{tps / best[1]:.2f}x** | {100 * mfu:.1f}% |")
    if best: plot.append(f"{c} {F[1]:.1f} {best[1]:.1f}")
date = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
bf16 = os.environ["PRECISION"] == "bf16"
title = " in bf16 mixed precision" if bf16 else ""
what = ("the bf16 product, 2 threads, `femtotron bench peak --precision bf16`" if bf16 else
        "fp32 sgemm, 2 threads, `femtotron bench peak`")
how = ("""
bf16 mixed precision on both sides: femtotron `training.precision bf16` (every product's
operands rounded to bf16, fp32 sums, fp32 master weights, gradients and AdamW), PyTorch
`torch.autocast("cpu", bfloat16)` around forward and loss (`bench/torch_train.py --dtype bf16`),
fp32 parameters, gradients and AdamW.
""" if bf16 else "")
blas_note = ("oneMKL on both sides (femtotron's `make BLAS=mkl` build, PyPI's PyTorch through oneDNN)" if bf16 else
             f"OpenBLAS's {os.environ['BLAS_CORE']} kernels (femtotron's default build and Debian's PyTorch; "
             "PyPI's PyTorch and femtotron's `make BLAS=mkl` build run oneMKL" +
             (f"; `make BLAS=scipy-openblas` runs {os.environ['SCIPY_OPENBLAS']}" if os.environ.get("SCIPY_OPENBLAS") else "") + ")")
md = f"""# femtotron vs PyTorch: training throughput{title}

{date} · {cpu} · GEMM peak {peak} GFLOP/s ({what}; the
highest of the readings before the runs and, with every build, before each round: {", ".join(f"{b} {x:.1f}" for b, x in peak_readings)}),
the MFU denominator of every row · {blas_note} · {load}
{how}
Against the fastest PyTorch variant:

| config | femtotron's BLAS | femtotron tok/s | best PyTorch tok/s | femtotron / best PyTorch | femtotron MFU |
|---|---|---|---|---|---|
""" + "\n".join(best_rows) + """

Every run:

| config | system | tok/s | faster femtotron / this | MFU | threads (best) | tok/s per round | step-1 loss |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + """

Configs: small = hidden 512, 8 layers, 8 heads / 4 kv, intermediate 1536, vocab 8192,
seq 256, micro-batch 8; gpt2 = hidden 768, 12 layers, 12 heads / 4 kv, intermediate 2048,
vocab 32768, seq 512, micro-batch 4. Runs interleaved: each femtotron build, each PyTorch variant at
each thread count, ... per round; tok/s = tokens per step / the run's median timed step
(warm-up steps dropped; torch.compile two more, its compilation), best round kept (other
users' load only slows a run down). MFU = model FLOPs/token (6 N_matmul + 6 L S D) x
tok/s / GEMM peak.
"""
prof = open(os.environ["PROFILE"]).read().strip()
if prof:
    md += """
Where femtotron's step time goes (`perf record` of two more runs per config, the second with
twice the timed steps: the difference is those steps alone, without start-up; CPU samples of
every thread; bench/profile_ops.py sorts the symbols into kinds of op):

| config | kind | share of samples |
|---|---|---|
""" + prof + "\n"
sfx = os.environ["SUFFIX"]
open(f"{out}/train_vs_pytorch{sfx}.md", "w").write(md)
open(f"{out}/train_vs_pytorch.dat", "w").write("# config femtotron best-pytorch\n" + "\n".join(plot) + "\n")
print(md)
EOF

gnuplot <<EOF
set terminal pngcairo size 720,420 noenhanced
set output "$OUT/train_vs_pytorch$SUFFIX.png"
set title "Training throughput, $PRECISION CPU ($CPU, peak $(tr ' ' '\n' <<<"$PEAKS" | cut -d: -f2 | sort -g | tail -n 1) GFLOP/s)"
set ylabel "tokens/s"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set xrange [-0.6:$(($(wc -w <<<"$CONFIGS") - 1)).6]
set key top right
set grid ytics
plot "$OUT/train_vs_pytorch.dat" using 2:xtic(1) title "femtotron" lc rgb "#1f77b4", \
     "" using 3 title "fastest PyTorch variant" lc rgb "#ff7f0e"
EOF
rm -f "$OUT/train_vs_pytorch.dat"
echo "wrote $OUT/train_vs_pytorch$SUFFIX.md and $OUT/train_vs_pytorch$SUFFIX.png"
