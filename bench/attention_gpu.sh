#!/usr/bin/env bash
# bench/attention_gpu.sh — femtotron's attention ops against PyTorch's on one GPU
# (issue 21: the attention kernels' share of the step): causal forward and backward,
# bf16 products, on the attention shapes of the models bench/gpu_vs_pytorch.sh
# trains, each run as femtotron's two tensor-core kernel families (FEMTOTRON_ATTENTION
# = mma, the default, and wmma: build-cuda/tests/attention_gpu, bench/tools/
# attention_gpu.c), as cuDNN's fused attention through femtotron's ops
# (FEMTOTRON_ATTENTION=cudnn, training.attention = cudnn: the bf16 copies in and out
# included), as cuDNN's on the bf16 q|k|v and output a cudnn training run keeps
# (cudnn-kept: attention_forward_bf16 / attention_backward_bf16, only dout
# rounded) and as PyTorch's scaled_dot_product_attention in bf16 (bench/
# tools/attention_torch.py, whichever backend PyTorch dispatches to), rounds
# interleaved. Writes bench/results/attention_gpu.md: per shape and system the
# median forward and backward times, TFLOP/s by FlashAttention's convention (causal
# pairs; forward 4 hd, backward 10 hd a pair), and the time of each against
# PyTorch's (forward + backward). femtotron's ops take the fp32 q|k|v a training
# step holds and write fp32, as they run in training; PyTorch's take bf16.
#
# Knobs: ATT_SHAPES ["smollm-1.7b llama-3.2-1b llama-3.1-8b"] (or "tiny", for the
# emulation), ATT_SYSTEMS ["mma cudnn-kept torch cudnn wmma": the rows a capped run needs most first], ROUNDS [2], RUNS [20] timed calls a run, ATT_BIN
# [build-cuda/tests/attention_gpu], TORCH_PYTHON [python3], RES [bench/results],
# LIMIT_S [60] a run. Without an NVIDIA GPU it says so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RES=${RES:-bench/results}
ATT=${ATT_BIN:-build-cuda/tests/attention_gpu}
PY=${TORCH_PYTHON:-python3}
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-20}
LIMIT=${LIMIT_S:-60}
SHAPES=${ATT_SHAPES:-"smollm-1.7b llama-3.2-1b llama-3.1-8b"}
# B S H KV hd: the sequences of one micro-batch of bench/gpu_vs_pytorch.sh's runs
declare -A SHAPE=(
    [smollm-1.7b]="4 2048 32 32 64"
    [llama-3.2-1b]="4 2048 32 8 64"
    [llama-3.1-8b]="1 8192 32 8 128"
    [tiny]="1 96 4 2 64"
)
for s in $SHAPES; do
    [[ -n ${SHAPE[$s]:-} ]] || { echo "attention_gpu.sh: unknown shape $s (known: ${!SHAPE[*]})" >&2; exit 2; }
done
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "SKIP no NVIDIA GPU here (nvidia-smi lists none): bench/attention_gpu.sh did not run"
    exit 0
fi
[[ -x $ATT ]] || { echo "SKIP no $ATT (make cuda builds it): bench/attention_gpu.sh did not run"; exit 0; }
torch_ok=0
"$PY" -c 'import torch, torch.nn.functional as F; assert torch.cuda.is_available() and hasattr(F, "scaled_dot_product_attention")' \
    2>/dev/null && torch_ok=1

runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
notes=()
for r in $(seq 1 "$ROUNDS"); do
    for s in $SHAPES; do
        read -r B S H KV hd <<<"${SHAPE[$s]}"
        systems=${ATT_SYSTEMS:-"mma cudnn-kept torch cudnn wmma"}
        ((r % 2 == 0)) && systems=$(tr ' ' '\n' <<<"$systems" | tac | tr '\n' ' ')  # interleaved: each first in turn
        for sys in $systems; do
            if [[ $sys == torch ]]; then
                ((torch_ok)) || continue
                line=$(timeout -k 5 "$LIMIT" "$PY" bench/tools/attention_torch.py "$B" "$S" "$H" "$KV" "$hd" "$RUNS" 2>&1 | tail -n 1)
            elif [[ $sys == cudnn-kept ]]; then
                line=$(env -u FEMTOTRON_ATTENTION timeout -k 5 "$LIMIT" "$ATT" "$B" "$S" "$H" "$KV" "$hd" "$RUNS" bf16-kept 2>&1 | tail -n 1)
            else
                line=$(FEMTOTRON_ATTENTION=$sys timeout -k 5 "$LIMIT" "$ATT" "$B" "$S" "$H" "$KV" "$hd" "$RUNS" bf16 2>&1 | tail -n 1)
            fi
            if [[ $line == attention\ * ]]; then
                echo "$s $line" | tee -a "$runs"
            else
                notes+=("$s $sys round $r failed: ${line:0:300}")
                echo "NOTE $s $sys round $r failed: ${line:0:300}"
            fi
        done
    done
done
((torch_ok)) || notes+=("no PyTorch with CUDA and scaled_dot_product_attention under $PY: the PyTorch rows are left out")

mkdir -p "$RES"
out=$RES/attention_gpu.md
python3 - "$runs" "$out" "$(nvidia-smi -L 2>/dev/null | head -n 1)" "$ROUNDS" "$RUNS" "${notes[@]}" <<'PY'
import statistics, sys, collections, datetime
runs, out, gpu, rounds, calls, notes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
rows = collections.OrderedDict()
for line in open(runs):
    w = line.split()
    shape, kv = w[0], dict(zip(w[2::2], w[3::2]))
    key = (shape, kv["kernel"].split("-")[0] if kv["kernel"].startswith("torch") else kv["kernel"])
    rows.setdefault(key, {"shape": shape, "kernel": kv["kernel"], "dims": f'B {kv["B"]} S {kv["S"]} H {kv["H"]}/{kv["KV"]} hd {kv["hd"]}',
                          "fwd": [], "bwd": [], "ft": [], "bt": []})
    r = rows[key]
    r["fwd"].append(float(kv["fwd_ms"])); r["bwd"].append(float(kv["bwd_ms"]))
    r["ft"].append(float(kv["fwd_tflops"])); r["bt"].append(float(kv["bwd_tflops"]))
with open(out, "w") as f:
    f.write(f"# Attention on one GPU: femtotron's kernels against PyTorch's\n\n"
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {gpu}; `bash bench/attention_gpu.sh`, "
            f"{rounds} rounds interleaved, medians of {calls} calls a run (the table: medians over the rounds). "
            "Causal, bf16 products; TFLOP/s by FlashAttention's convention (forward 4 hd, backward 10 hd per "
            "causal pair). femtotron's ops read and write fp32 activations (as in training), PyTorch's bf16.\n\n")
    f.write("| shape | system | fwd ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s | fwd+bwd vs PyTorch |\n")
    f.write("| --- | --- | --- | --- | --- | --- | --- |\n")
    for (shape, sysname), r in rows.items():
        med = lambda v: statistics.median(v)
        t = med(r["fwd"]) + med(r["bwd"])
        peer = rows.get((shape, "torch"))
        ratio = f"{(med(peer['fwd']) + med(peer['bwd'])) / t:.2f}x" if peer and sysname != "torch" else "—"
        name = r["kernel"] if sysname == "torch" else f"femtotron {sysname}"
        f.write(f"| {shape} ({r['dims']}) | {name} | {med(r['fwd']):.3f} | {med(r['bwd']):.3f} | "
                f"{med(r['ft']):.1f} | {med(r['bt']):.1f} | {ratio} |\n")
    if notes:
        f.write("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    f.write("\n(x > 1: femtotron faster than PyTorch by that factor.)\n")
print(open(out).read())
PY
echo "wrote $out"
