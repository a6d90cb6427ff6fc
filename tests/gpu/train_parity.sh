#!/usr/bin/env bash
# tests/gpu/train_parity.sh — training on the GPU against the CPU (issue 14), run by
# tests/gpu/run.sh: the parity problem of tests/shell/test_parity.sh (tiny model, 8
# sequences x 32 tokens, 10 steps) trained by ./femtotron on the CPU and by
# ./femtotron-cuda in fp32:
#   1. one rank: every step's loss and gradient norm, and the validation loss of
#      steps 5 and 10, within 1e-5 relative of the CPU;
#   2. the same GPU run twice: losses, gradient norms and validation losses bit-identical (determinism;
#      emulated, the second run in reverse block and thread order);
#   3. the GPU run's memory line equals the planner's prediction, per category;
#   4. one rank accumulating 4 micro-batches per step (each with its own token
#      staging row), and two ranks sharing the GPU (dp 2 ZeRO-1, tp 2 with sequence
#      parallel): within 1e-5 of the CPU's one rank, the two ranks' collectives
#      over MPI staged through pinned host memory;
#   5. the host waits for the device once per step, whatever the micro-batch count
#      (issue 14: scalars read back once per step, token ids uploaded without a
#      wait; issue 21: no host synchronisation in the step but one): the CUDA
#      profile's count of waits, with 2 and 8 micro-batches per step, over 3 and 6
#      steps (skipped by a CPU build).
# Prints PASS/FAIL lines; exit 1 on a failure. GPU_BIN and GPU_ARGS replace the CUDA
# binary and its device keys, PLAN_MEMORY the predictor: GPU_BIN=./femtotron
# GPU_ARGS= PLAN_MEMORY=build/tests/plan_memory_main checks this script on the CPU
# alone (tests/shell/test_cuda_build.sh does).
set -u
cd "$(dirname "$0")/../.." || exit 1
read -r -a GPU_ARGS <<<"${GPU_ARGS---training.device cuda --training.precision fp32}"
# The CUDA build's predictor: its attention needs no per-thread scratch tiles.
PLAN_MEMORY=${PLAN_MEMORY:-build-cuda/tests/plan_memory_main}
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem
[ -x "$PLAN_MEMORY" ] || make -s "$PLAN_MEMORY" >/dev/null 2>&1

parity_corpus
# Validation every 5 steps over 5 micro-batches (more than a step's, so the token
# staging comes round again), compared like the losses.
common=("${PARITY[@]}" --data.val "$tmp/data/train_*.bin" --logging.val_every 5 --logging.val_batches 5)

# run NAME NP BIN ARGS...: train, metrics in $tmp/NAME.jsonl, output in $tmp/NAME.log
run() {
    local name=$1 np=$2 bin=$3; shift 3
    timeout -k 10 300 "${MPIRUN[@]}" -np "$np" "$bin" train "${common[@]}" "$@" --logging.verbose true \
        --logging.metrics "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
        { failed "$name: exit $?: $(tail -3 "$tmp/$name.log")"; return 1; }
}

# compare A B TOL [val]: every step's loss and grad_norm of B within TOL of A (0:
# equal bits); with "val" the validation losses too (the same validation set: the
# same micro-batch size).
compare() {
    "$PYTHON" - "$1" "$2" "$3" "${4:-}" <<'PY'
import json, sys
def steps(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r and "grad_norm" in r]
a, b, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
if len(a) != 10 or len(b) != 10:
    print("%d and %d steps logged, expected 10" % (len(a), len(b))); sys.exit(1)
val = sys.argv[4] == "val"
if val and (sum("val_loss" in x for x in a) != 2 or any(("val_loss" in x) != ("val_loss" in y) for x, y in zip(a, b))):
    print("validation: expected val_loss at steps 5 and 10 of both runs"); sys.exit(1)
worst = 0.0
for x, y in zip(a, b):
    for k in ("loss", "grad_norm", "val_loss") if val else ("loss", "grad_norm"):
        if k not in x: continue
        d = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30)
        worst = max(worst, d)
        if (tol == 0 and x[k] != y[k]) or d > tol:
            print("step %d %s %.17g vs %.17g (rel %.3g)" % (x["step"], k, y[k], x[k], d)); sys.exit(1)
print("10 steps%s, worst relative difference %.3g" % (" and 2 validations" if val else "", worst))
PY
}

run cpu 1 "$CPU_BIN" || exit 1
if run gpu 1 "$GPU_BIN" "${GPU_ARGS[@]}"; then
    if r=$(compare "$tmp/cpu.jsonl" "$tmp/gpu.jsonl" 1e-5 val); then echo "PASS one rank on the GPU equals the CPU within 1e-5: $r"
    else failed "one rank on the GPU against the CPU: $r"; fi
    # Under the emulation (tests/emu) the second run takes each launch's blocks, and
    # each round of a block's threads, in reverse order (CUDA_EMU_ORDER; a GPU's
    # runtime ignores it), so its bits must not depend on the order either.
    if CUDA_EMU_ORDER=down run gpu_again 1 "$GPU_BIN" "${GPU_ARGS[@]}"; then
        if r=$(compare "$tmp/gpu.jsonl" "$tmp/gpu_again.jsonl" 0 val); then echo "PASS the GPU run twice: bit-identical losses, gradient norms and validation losses"
        else failed "the GPU run twice differs: $r"; fi
    fi
    pred=$("$PLAN_MEMORY" --world 1 "${common[@]}" "${GPU_ARGS[@]}" 2>&1 | grep '^memory bytes' | sed 's/ *$//')
    got=$(grep '^memory bytes' "$tmp/gpu.log" | sed 's/ *$//')
    if [ -n "$got" ] && [ "$pred" = "$got" ]; then echo "PASS the GPU run's memory line equals the planner's: $got"
    else failed "memory: predicted '$pred', allocated '$got'"; fi
fi
for row in "acc4:1:--training.micro_batch_size 2" \
           "dp2_zero1:2:--parallel.dp 2 --parallel.zero 1 --training.micro_batch_size 4" \
           "tp2_sp:2:--parallel.tp 2 --parallel.sequence_parallel true --training.micro_batch_size 8"; do
    name=${row%%:*} rest=${row#*:}
    np=${rest%%:*}
    read -r -a args <<<"${rest#*:}"
    if run "$name" "$np" "$GPU_BIN" "${GPU_ARGS[@]}" "${args[@]}"; then
        if r=$(compare "$tmp/cpu.jsonl" "$tmp/$name.jsonl" 1e-5); then echo "PASS $name, $np rank(s) on the GPU, equals the CPU's one rank within 1e-5: $r"
        else failed "$name on the GPU against the CPU: $r"; fi
        # Ranks sharing the GPU carry their collectives over MPI through pinned host
        # memory (dist/comm_stage.h), which each rank's last line reports.
        if [ "$np" -gt 1 ] && [[ " ${GPU_ARGS[*]} " == *" cuda "* ]]; then
            if [ "$(grep -c 'of collectives over MPI staged through pinned host memory' "$tmp/$name.log")" = "$np" ]; then
                echo "PASS $name: every rank staged its collectives through pinned host memory"
            else
                failed "$name: not every rank reports collectives staged through pinned host memory"
            fi
        fi
    fi
done

# 5. Host waits per step: the profile's "waits ... (P%, COUNT)" of runs that differ
# in micro-batches (micro-batch 4 or 1 of the global 8) and steps (3 or 6), without
# validation (whose waits depend on the micro-batches: one each time its staging
# comes round).
waits() {  # waits MICRO STEPS: the count, or "" without a CUDA profile
    FEMTOTRON_CUDA_PROFILE=1 timeout -k 10 300 "$GPU_BIN" train "${PARITY[@]}" "${GPU_ARGS[@]}" \
        --training.micro_batch_size "$1" --training.steps "$2" 2>&1 |
        profile_waits
}
w43=$(waits 4 3) w13=$(waits 1 3) w46=$(waits 4 6) w16=$(waits 1 6)
if [ -z "$w43$w13$w46$w16" ]; then
    echo "(no CUDA profile from $GPU_BIN: the host-wait count did not run)"
elif [ -n "$w43" ] && [ "$w43" = "$w13" ] && [ "$w46" = "$w16" ] && [ "$((w46 - w43))" = 3 ]; then
    echo "PASS the host waits for the device once per step, whatever the micro-batches: $w43 and $w13 waits" \
        "over 3 steps with 2 and 8 micro-batches, $w46 and $w16 over 6"
else
    failed "host waits: 3 steps with 2 and 8 micro-batches: '$w43' '$w13'; 6 steps: '$w46' '$w16'"
fi
exit $fail
