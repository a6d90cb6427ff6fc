#!/usr/bin/env bash
# tests/gpu/calibrate.sh — `femtotron bench calibrate` and the MFU peak on the CUDA
# build (issue 14: a hardware profile of the GPU for `--hardware this`; issue 21:
# MFU against the datasheet peak), run by tests/gpu/run.sh:
#   1. one rank, --quick, bf16 (the CUDA build's default): exit 0, a profile whose
#      precision is bf16, node_cores 0 (a GPU rank does not share host cores),
#      mem_bytes the device's memory, a GEMM curve, and the device named;
#   2. the same in fp32: precision fp32; on a real GPU (not the emulation) the
#      bf16 GEMM peak above the fp32 one (tensor cores);
#   3. `femtotron plan --hardware this` ranks layouts with the bf16 profile;
#   4. two ranks sharing the GPU (collectives over MPI through host memory):
#      collective fits in the profile;
#   5. a training run without training.peak_flops takes its MFU peak from the
#      GPU: the datasheet's for an H100/H200/A100 SXM in the run's precision (an
#      fp32 run's the CUDA cores' fp32 peak, below a quarter of bf16's), else
#      measured; with CUDA_EMU_DEVICE_NAME (the emulation only) a GPU no table
#      knows is measured;
#   6. FEMTOTRON_CUDA_PROFILE=1: the run's op time by kind (issue 21's step split)
#      on stderr at exit, every kind of a training step present, the kinds and the
#      host adding up to the wall time; nothing without it;
#   7. parallel.pp_costs = "measure" (zero-bubble lists from the passes' measured
#      times) waits for the device around each pass: emulated, where a pass's
#      kernels take milliseconds and its launches microseconds, every F and I
#      pass is measured at 1 ms or more (without the waits: 0.01-0.02 ms); on a
#      GPU the measured costs are shown.
# Prints PASS/FAIL lines; exit 1 on a failure. Environment: GPU_BIN (default
# ./femtotron-cuda), CPU_BIN (./femtotron), MPIRUN.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem

# key FILE EXPR: a python expression over the profile d, printed.
key() { "$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

calibrate() {  # NAME ARGS...: one rank's quick calibration into $tmp/NAME.json
    local name=$1; shift
    timeout -k 10 300 "$GPU_BIN" bench calibrate --quick --output "$tmp/$name.json" "$@" >"$tmp/$name.log" 2>&1
}

if calibrate bf16; then
    read -r prec cores mem points peak fastest <<<"$(key "$tmp/bf16.json" \
        "d['precision'], d['node_cores'], int(d['mem_bytes']), len(d['gemm']['work']), d['peak_flops'], max(d['gemm']['rate'] + d['attn_fwd']['rate'] + d['attn_bwd']['rate'])")"
    device=$(sed -n 's/^device *//p' "$tmp/bf16.log")
    # No rate above what the device can do (2 PFLOP/s: twice an H100's dense bf16
    # peak; 5 TFLOP/s for the emulation's host): a timing that does not wait for the
    # GPU's queued work reports far more.
    limit=2e15
    grep -q cuda_emu <<<"$device" && limit=5e12
    if ! awk -v r="$fastest" -v l="$limit" 'BEGIN{exit !(r < l)}'; then
        failed "calibrate bf16: a rate of $fastest FLOP/s, above the device's possible $limit: the timing does not wait for the GPU"
    elif [ "$prec" = bf16 ] && [ "$cores" = 0 ] && [ "$mem" -gt 1000000000 ] && [ "$points" -ge 8 ] && [ -n "$device" ]; then
        echo "PASS calibrate on $device: bf16 profile, $points GEMM points, peak $(awk -v p="$peak" 'BEGIN{printf "%.1f", p/1e12}') TFLOP/s, memory $mem B"
    else
        failed "calibrate bf16 profile: precision $prec node_cores $cores mem_bytes $mem gemm points $points device '$device'"
    fi
else
    failed "calibrate bf16 exited with an error: $(tail -3 "$tmp/bf16.log")"
fi

# --attention cudnn: the attention curves time the bf16 ops a cudnn run calls
# (attention_forward_bf16 / attention_backward_bf16), and the profile says so.
if calibrate cudnn --attention cudnn; then
    read -r att nf nb fastest <<<"$(key "$tmp/cudnn.json" \
        "d.get('attention'), len(d['attn_fwd']['work']), len(d['attn_bwd']['work']), max(d['attn_fwd']['rate'] + d['attn_bwd']['rate'])")"
    if [ "$att" = cudnn ] && [ "$nf" -ge 3 ] && [ "$nb" -ge 3 ] && awk -v r="$fastest" -v l="${limit:-2e15}" 'BEGIN{exit !(r > 0 && r < l)}'; then
        echo "PASS calibrate --attention cudnn: attention \"cudnn\" in the profile, $nf forward and $nb backward points on cuDNN's bf16 ops"
    else
        failed "calibrate --attention cudnn profile: attention $att, $nf/$nb attention points, fastest $fastest"
    fi
else
    failed "calibrate --attention cudnn exited with an error: $(tail -3 "$tmp/cudnn.log")"
fi

if calibrate fp32 --precision fp32; then
    read -r prec peak32 <<<"$(key "$tmp/fp32.json" "d['precision'], d['peak_flops']")"
    if [ "$prec" != fp32 ]; then
        failed "calibrate --precision fp32 wrote precision $prec"
    elif grep -q cuda_emu "$tmp/bf16.log" || [ ! -f "$tmp/bf16.json" ]; then
        echo "PASS calibrate --precision fp32 writes an fp32 profile (emulated: the peaks are not compared)"
    else
        peak16=$(key "$tmp/bf16.json" "d['peak_flops']")
        if awk -v a="$peak16" -v b="$peak32" 'BEGIN{exit !(a > 2 * b)}'; then
            echo "PASS bf16 GEMM peak $peak16 above twice the fp32 one $peak32 (tensor cores)"
        else
            failed "bf16 GEMM peak $peak16 is not above twice the fp32 one $peak32: are the bf16 products on tensor cores?"
        fi
    fi
else
    failed "calibrate --precision fp32 exited with an error: $(tail -3 "$tmp/fp32.log")"
fi

if [ -f "$tmp/bf16.json" ] && "$CPU_BIN" plan --model smollm-360m --gpus 1 --hardware this --profile "$tmp/bf16.json" \
    --seq-length 2048 --global-batch-tokens 16384 >"$tmp/plan.log" 2>&1 && grep -qE '^ +1 +dp1 tp1' "$tmp/plan.log"; then
    echo "PASS femtotron plan --hardware this ranks layouts with the GPU's profile"
else
    failed "plan with the GPU's profile: $(tail -3 "$tmp/plan.log" 2>/dev/null)"
fi

if timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" bench calibrate --quick --precision fp32 \
    --output "$tmp/two.json" >"$tmp/two.log" 2>&1; then
    n=$(key "$tmp/two.json" "len(d.get('collectives', []))")
    if [ "$n" -ge 4 ]; then echo "PASS calibrate on 2 ranks sharing the GPU: $n collective fits"
    else failed "calibrate on 2 ranks: $n collective fits in the profile (expected all-reduce, reduce-scatter, all-gather, p2p)"; fi
else
    failed "calibrate on 2 ranks exited with an error: $(tail -3 "$tmp/two.log")"
fi

# 5. The MFU peak of a training run on the GPU.
parity_corpus
train_peak() {  # NAME [PRECISION]: the MFU peak line of a 2-step run (no training.peak_flops)
    local args=() a
    for a in "${PARITY[@]}"; do [ "$a" = --training.peak_flops ] || [ "$a" = 1e10 ] || args+=("$a"); done
    timeout -k 10 300 "$GPU_BIN" train "${args[@]}" --training.steps 2 --training.device cuda \
        --training.precision "${2:-bf16}" >"$tmp/$1.log" 2>&1 && grep '^MFU peak' "$tmp/$1.log"
}
tflops() { sed -n 's/.*GPU peak \([0-9.]*\) TFLOP\/s.*/\1/p' <<<"$1"; }
line=$(train_peak known)
if [ -n "$line" ] && { printf '%s' "$line" | grep -q 'datasheet' || ! grep -qE 'H100|H200|A100' <<<"$device"; }; then
    echo "PASS training's MFU peak on $device: ${line#MFU peak: }"
else
    failed "training's MFU peak on ${device:-the GPU}: '${line:-no MFU peak line}' $(tail -2 "$tmp/known.log")"
fi
if grep -qE 'H100|H200|A100' <<<"$device" && ! grep -qE 'PCIe|NVL' <<<"$device"; then
    line32=$(train_peak known32 fp32)
    p16=$(tflops "$line") p32=$(tflops "$line32")
    if printf '%s' "$line32" | grep -q 'datasheet.s dense fp32 peak' && [ -n "$p16" ] && [ -n "$p32" ] &&
        awk -v a="$p16" -v b="$p32" 'BEGIN{exit !(b > 0 && a > 4 * b)}'; then
        echo "PASS an fp32 run's MFU peak is the datasheet's fp32 one: $p32 TFLOP/s (bf16: $p16)"
    else
        failed "an fp32 run's MFU peak: '${line32:-no MFU peak line}' (bf16: '$line')"
    fi
fi
if grep -q cuda_emu <<<"${device:-}"; then
    line=$(CUDA_EMU_DEVICE_NAME="Emulated GPU" train_peak unknown)
    if printf '%s' "$line" | grep -q 'measured on Emulated GPU'; then
        echo "PASS a GPU no table knows: its peak is measured (${line#MFU peak: })"
    else
        failed "a GPU no table knows: '${line:-no MFU peak line}' $(tail -2 "$tmp/unknown.log")"
    fi
fi

# 6. The op-time profile (ops/op_profile_cuda.cu).
profile_line() { grep '^femtotron: cuda profile:' "$tmp/$1.log"; }
if FEMTOTRON_CUDA_PROFILE=1 train_peak profiled >/dev/null; then
    line=$(profile_line profiled)
    by_op=$(grep '^femtotron: cuda profile by op:' "$tmp/profiled.log")
    by_product=$(grep '^femtotron: cuda profile by product:' "$tmp/profiled.log")
    if "$PYTHON" - "$line" "$by_op" "$by_product" <<'PY'; then
import re, sys
line, by_op, by_product = sys.argv[1], sys.argv[2], sys.argv[3]
wall = float(re.search(r"wall ([0-9.]+) s", line).group(1))
kinds = {m[0]: (float(m[1]), int(m[2])) for m in re.findall(r"; ([a-z -]+) ([0-9.]+) s \([0-9.]+%, (\d+)\)", line)}
waits = kinds.pop("waits", (0, 0))
host = float(re.search(r"; host (-?[0-9.]+) s", line).group(1))
need = ["matrix products", "attention", "element-wise", "optimizer"]
ops = [float(m) for m in re.findall(r" ([0-9.]+) s \([0-9.]+%, \d+\)", by_op)]
gpu = sum(v[0] for v in kinds.values())
# every kind of a step with calls; the kinds (GPU time, events) and host add up to the
# wall, host not negative; the host waited (once a step); the ops by name, most
# first, adding up to the kinds (the 24 shown hold nearly all of it)
ok = all(kinds.get(k, (0, 0))[1] > 0 for k in need) and abs(gpu + host - wall) < 0.01 and host >= -0.01 \
    and waits[1] > 0 and len(ops) >= 5 and ops == sorted(ops, reverse=True) and 0.9 * gpu - 0.01 <= sum(ops) <= gpu + 0.01
# the products by shape: named by op and cuBLASLt's m x n x k, most time first, each
# with calls and a rate (2 m n k a call over its time), adding up to the matrix
# products' kind (the 24 shown hold nearly all of it); their operands' rounding is
# an element-wise op of its own
prods = re.findall(r"(?:^|; )(matmul[^;]*? (\d+)x(\d+)x(\d+) [NT][NT] [^;]*?) ([0-9.]+) s \([0-9.]+%, (\d+), ([0-9.e+-]+) TFLOP/s\)",
                   by_product.split(":", 1)[-1].lstrip())
secs = [float(p[4]) for p in prods]
mm = kinds.get("matrix products", (0, 0))[0]
# (the seconds are printed to 1 ms, the rate to 4 digits)
rates_ok = all(float(p[6]) > 0 and abs(2 * int(p[1]) * int(p[2]) * int(p[3]) * int(p[5]) / float(p[4]) / 1e12 - float(p[6]))
               <= float(p[6]) * (0.0005 / float(p[4]) + 0.001) for p in prods if float(p[4]) >= 0.001)
ok = ok and len(prods) >= 4 and secs == sorted(secs, reverse=True) and 0.9 * mm - 0.01 <= sum(secs) <= mm + 0.01 \
    and rates_ok and "product operand rounding" in by_op
if not ok:
    print(f"products: {len(prods)} shapes, {sum(secs):.3f} s against matrix products {mm:.3f} s, rates ok {rates_ok}")
sys.exit(0 if ok else 1)
PY
        echo "PASS FEMTOTRON_CUDA_PROFILE=1: ${line#femtotron: cuda profile: }"
        echo "PASS its ops by name: ${by_op#femtotron: cuda profile by op: }" | cut -c1-400
        echo "PASS its products by shape: ${by_product#femtotron: cuda profile by product: }" | cut -c1-400
    else
        failed "the op profile: '$line' / '$by_op' (every kind of a step with calls, the kinds and host adding up to the wall, the ops by name adding up to the kinds)"
    fi
    profile_line known >/dev/null && failed "a run without FEMTOTRON_CUDA_PROFILE printed a profile" ||
        echo "PASS no profile without FEMTOTRON_CUDA_PROFILE"
else
    failed "a run with FEMTOTRON_CUDA_PROFILE=1 failed: $(tail -2 "$tmp/profiled.log")"
fi

# 7. The pipeline's measured pass costs time the device's work.
if timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${PARITY[@]}" --training.steps 3 --training.device cuda \
    --training.precision fp32 --training.micro_batch_size 2 --model.num_hidden_layers 4 --parallel.pp 2 \
    --parallel.pp_schedule zb-h1 --parallel.pp_costs measure >"$tmp/zb.log" 2>&1; then
    costs=$(grep -o 'F:I:W ms per virtual stage [0-9.:,]*' "$tmp/zb.log" | sed 's/.* //')
    if [ -z "$costs" ]; then
        failed "pp_costs = measure printed no measured costs: $(tail -2 "$tmp/zb.log")"
    elif grep -q cuda_emu <<<"${device:-}"; then
        if awk -v c="$costs" 'BEGIN { n = split(c, st, ","); for (i = 1; i <= n; i++) { split(st[i], f, ":");
                if (f[1] < 1 || f[2] < 1) exit 1 } }'; then
            echo "PASS pp_costs = measure times the passes' kernels (emulated F:I:W ms $costs)"
        else
            failed "pp_costs = measure: F:I:W ms $costs: a pass under 1 ms times its launches, not its kernels"
        fi
    else
        echo "PASS pp_costs = measure on the GPU: F:I:W ms per virtual stage $costs"
    fi
else
    failed "pp2 zb-h1 with pp_costs = measure: $(tail -2 "$tmp/zb.log")"
fi
exit "$fail"
