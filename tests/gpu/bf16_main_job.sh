#!/usr/bin/env bash
# tests/gpu/bf16_main_job.sh — issue 14's bf16 check, run by tests/gpu/run.sh: the
# README main job's model and data (configs/fortunes.json, the fortunes corpus,
# 500 steps) trained on the GPU by one rank twice, in fp32 and in bf16
# (training.precision: bf16 matrix-product operands, fp32 sums and everything
# else). The layout is one rank: every layout trains the same numbers, and one
# rank keeps the check to the precision alone.
#   1. the bf16 run's final validation loss is within 1% of the fp32 run's;
#   2. the bf16 run is not the fp32 run (some logged loss differs: the precision
#      key reached the products).
# Prints PASS/FAIL lines and the two curves' figures; exit 1 on a failure.
# Environment: GPU_BIN (default ./femtotron-cuda), DEVICE_ARGS (default
# "--training.device cuda"), FP32_ARGS / BF16_ARGS (default "--training.precision
# fp32" / "... bf16"), STEPS (default the config's 500; the last validation is at
# STEPS), MPIRUN, FORTUNES_DIR (the corpus; default /usr/share/games/fortunes),
# PYTHON (default python3). GPU_BIN=./femtotron DEVICE_ARGS= BF16_ARGS="--training.lr 0.00101"
# STEPS=3 checks the script on the CPU alone (tests/shell/test_cuda_build.sh does).
set -u
cd "$(dirname "$0")/../.." || exit 1
read -r -a DEVICE_ARGS <<<"${DEVICE_ARGS---training.device cuda}"
read -r -a FP32_ARGS <<<"${FP32_ARGS---training.precision fp32}"
read -r -a BF16_ARGS <<<"${BF16_ARGS---training.precision bf16}"
STEPS=${STEPS:-500}
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem

mapfile -t texts < <(find "${FORTUNES_DIR:-/usr/share/games/fortunes}" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
"$CPU_BIN" prepare --input "${texts[@]}" --split-on % --output "$tmp/data" >"$tmp/prepare.log" 2>&1 ||
    { failed "prepare the fortunes corpus: $(tail -3 "$tmp/prepare.log")"; exit 1; }

# run NAME ARGS...: the main job on one rank, metrics in $tmp/NAME.jsonl
run() {
    local name=$1; shift
    timeout -k 10 900 "${MPIRUN[@]}" -np 1 "$GPU_BIN" train --config configs/fortunes.json \
        --parallel.tp 1 --parallel.cp 1 --parallel.pp 1 \
        --data.train "$tmp/data/train_*.bin" --data.val "$tmp/data/val_*.bin" \
        --checkpoint.dir "$tmp/ckpt_$name" --checkpoint.every 0 --logging.metrics "$tmp/$name.jsonl" \
        --training.steps "$STEPS" --logging.val_every "$STEPS" "${DEVICE_ARGS[@]}" "$@" >"$tmp/$name.log" 2>&1 ||
        { failed "$name run: exit $?: $(tail -3 "$tmp/$name.log")"; return 1; }
}

run fp32 "${FP32_ARGS[@]}" || exit 1
run bf16 "${BF16_ARGS[@]}" || exit 1
"${PYTHON:-python3}" - "$tmp/fp32.jsonl" "$tmp/bf16.jsonl" <<'PY'
import json, sys
def recs(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r]
a, b = recs(sys.argv[1]), recs(sys.argv[2])
va = [r["val_loss"] for r in a if "val_loss" in r]
vb = [r["val_loss"] for r in b if "val_loss" in r]
if not va or not vb:
    print("FAIL no validation loss logged (fp32 %d, bf16 %d values)" % (len(va), len(vb))); sys.exit(1)
rel = abs(vb[-1] - va[-1]) / va[-1]
line = "final validation loss bf16 %.6f vs fp32 %.6f (rel. %.2e; last training loss %.6f vs %.6f)" % (
    vb[-1], va[-1], rel, b[-1]["loss"], a[-1]["loss"])
print(("PASS " if rel <= 0.01 else "FAIL ") + line + (" <= 1%" if rel <= 0.01 else " > 1%"))
same = all(x["loss"] == y["loss"] for x, y in zip(a, b))
if same:
    print("FAIL the bf16 run logged the same losses as the fp32 run: the precision did not reach the products")
else:
    first = next(x["step"] for x, y in zip(a, b) if x["loss"] != y["loss"])
    print("PASS the bf16 run differs from the fp32 run (first at logged step %d)" % first)
sys.exit(0 if rel <= 0.01 and not same else 1)
PY
[ $? -eq 0 ] || fail=1
exit $fail
