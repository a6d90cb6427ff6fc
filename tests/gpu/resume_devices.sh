#!/usr/bin/env bash
# tests/gpu/resume_devices.sh — issue 14's resume across devices, run by
# tests/gpu/run.sh: a checkpoint written on the GPU resumes on the CPU and one
# written on the CPU resumes on the GPU, the losses going on as the uninterrupted
# run's. The tiny parity model (tests/gpu/train_parity.sh's problem), 10 steps, a
# checkpoint at step 5; each resume gets the step-5 checkpoint alone in a fresh
# directory and trains steps 6..10:
#   1. GPU fp32 -> CPU: steps 6..10 within 1e-5 (relative loss) of the CPU's
#      uninterrupted run;
#   2. CPU -> GPU fp32: the same;
#   3. GPU bf16 -> CPU: within BF16_TOL of the uninterrupted GPU bf16 run (steps
#      6..10 then differ by the precision alone);
#   4. CPU -> GPU bf16: within BF16_TOL of the CPU's uninterrupted run.
# BF16_TOL, unless given, is measured in the run: 5 times the worst relative loss
# difference D between the uninterrupted GPU bf16 and CPU fp32 runs over steps
# 6..10 (at least 1e-5). A resume that changes the precision at step 5 differs
# from its reference by the precision alone, as the two uninterrupted runs do; the
# step-to-step differences are noise of either sign, not a sum, so a resume can sit
# above D (emulated: D 2.3e-5, resumes 2.9e-5 and 3.9e-5), hence 5x. A resume that
# loses state (moments, step, data position) is caught at 1e-5 by the fp32 cases.
# Prints PASS/FAIL lines, D and the tolerance; exit 1 on a failure.
# Environment: GPU_BIN (default ./femtotron-cuda), GPU_ARGS (default
# "--training.device cuda --training.precision fp32"), BF16_ARGS (default
# "--training.device cuda --training.precision bf16"). GPU_BIN=./femtotron
# GPU_ARGS= BF16_ARGS= checks the script on the CPU alone (tests/shell/test_cuda_build.sh).
set -u
cd "$(dirname "$0")/../.." || exit 1
read -r -a GPU_ARGS <<<"${GPU_ARGS---training.device cuda --training.precision fp32}"
read -r -a BF16_ARGS <<<"${BF16_ARGS---training.device cuda --training.precision bf16}"
BF16_TOL=${BF16_TOL:-}
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem

parity_corpus
common=("${PARITY[@]}" --checkpoint.every 5)

# train NAME BIN ARGS...: 10 steps (or 6..10 when resuming), metrics in $tmp/NAME.jsonl,
# checkpoints in $tmp/ck_NAME
train() {
    local name=$1 bin=$2; shift 2
    mkdir -p "$tmp/ck_$name"
    timeout -k 10 300 "$bin" train "${common[@]}" --checkpoint.dir "$tmp/ck_$name" "$@" \
        --logging.metrics "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
        { failed "$name: exit $?: $(tail -3 "$tmp/$name.log")"; return 1; }
}

# resume SAVED NAME REF TOL BIN ARGS...: step 5 of run SAVED alone, resumed by BIN,
# steps 6..10 against run REF
resume() {
    local saved=$1 name=$2 ref=$3 tol=$4 bin=$5; shift 5
    mkdir -p "$tmp/ck_$name"
    cp -r "$tmp/ck_$saved/step_0000005" "$tmp/ck_$name/" 2>/dev/null ||
        { failed "$name: no step-5 checkpoint from $saved"; return 1; }
    train "$name" "$bin" "$@" --checkpoint.resume true || return 1
    "$PYTHON" - "$tmp/$ref.jsonl" "$tmp/$name.jsonl" "$name" "$tol" <<'PY'
import json, sys
steps = lambda path: {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "event" not in r and "loss" in r}
ref, got, name, tol = steps(sys.argv[1]), steps(sys.argv[2]), sys.argv[3], float(sys.argv[4])
if sorted(got) != list(range(6, 11)):
    print("FAIL %s: resumed steps %s, expected 6..10" % (name, sorted(got))); sys.exit(1)
worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in got)
print("%s %s: steps 6..10 worst relative loss difference %.3g (<= %g)" % ("PASS" if worst <= tol else "FAIL", name, worst, tol))
sys.exit(0 if worst <= tol else 1)
PY
    [ $? -eq 0 ] || fail=1
}

train cpu "$CPU_BIN" || exit 1
if train gpu "$GPU_BIN" "${GPU_ARGS[@]}"; then
    resume gpu gpu_to_cpu cpu 1e-5 "$CPU_BIN"
fi
resume cpu cpu_to_gpu cpu 1e-5 "$GPU_BIN" "${GPU_ARGS[@]}"
train gpu_bf16 "$GPU_BIN" "${BF16_ARGS[@]}" || exit 1
if [ -z "$BF16_TOL" ]; then
    BF16_TOL=$("$PYTHON" - "$tmp/cpu.jsonl" "$tmp/gpu_bf16.jsonl" <<'PY'
import json, sys
steps = lambda path: {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "event" not in r and "loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
d = max(abs(b[s] - a[s]) / abs(a[s]) for s in range(6, 11))
print("%.3g" % max(5 * d, 1e-5))
print("bf16 vs fp32 uninterrupted, steps 6..10: worst relative loss difference %.3g" % d, file=sys.stderr)
PY
) || { failed "bf16 tolerance: the uninterrupted runs' losses could not be compared"; exit 1; }
    echo "bf16 resume tolerance: $BF16_TOL (5 x the bf16 vs fp32 difference, at least 1e-5)"
fi
resume gpu_bf16 bf16_gpu_to_cpu gpu_bf16 "$BF16_TOL" "$CPU_BIN"
resume cpu cpu_to_gpu_bf16 cpu "$BF16_TOL" "$GPU_BIN" "${BF16_ARGS[@]}"
exit $fail
