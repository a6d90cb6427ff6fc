#!/usr/bin/env bash
# tests/gpu/layouts_bf16.sh — issue 14's layouts in bf16, ranks sharing the GPU,
# against one rank in bf16 on the GPU, within a tolerance measured first:
#   1. the spread: the parity problem (tests/shell/test_parity.sh's 12 steps) in bf16
#      on one rank with the global batch of 8 split into micro-batches 2 x 4 and
#      1 x 8 instead of 8 x 1, for each model the selected rows train (2 and 4 layers). The numbers are the same up to the order of fp32
#      sums (gradient accumulation), which bf16's rounding of the next step's
#      operands then amplifies; the worst relative loss or gradient-norm difference
#      over the steps of every split is the spread S.
#   2. the tolerance: 4 S (a layout changes the order of the same fp32 sums, as the
#      splits do, and the ring's tiles; 4x leaves room for layouts that reorder more
#      than a split; an indexing error moves the loss by far more), and at least
#      2^-10, a quarter of bf16's rounding unit. Printed, with S. The floor is for the
#      emulated build: there the host's BLAS gives every token's values the same bits
#      at any micro-batch size, so its splits reorder only the weight gradients'
#      sums and S (5e-5) misses the per-token reordering a layout does (the ring's
#      tiles, tensor parallelism's partial sums), which the roundings of activations
#      and their gradients to bf16 amplify; since down's input gradient is rounded
#      too, cp 2 measured 5.9e-4 (1.2e-4 at step 1, the weights still the same; 1.7e-5
#      before). On an H200 S was 9.2e-4 (cuBLASLt's sums change with the micro-batch),
#      so 4 S = 3.7e-3 is above the floor. An indexing error moves the loss by 1e-2
#      and more, 10x the floor.
#   3. the rows of tests/gpu/layouts.sh, in bf16, within that tolerance of the
#      one-rank bf16 run (and the memory line per rank, as in fp32, the bf16 copy of
#      the weights included);
#   4. the bf16 copy of the weights changes no bit: dp 2 ZeRO-1, whose products read
#      it, trains the losses of ZeRO-3, whose gathered weights are rounded for every
#      product;
#   5. cuDNN's attention (training.attention = cudnn) on one rank and on dp 2 x tp 2
#      within 20 S (at least the floor above) of the one-rank bf16 run on femtotron's kernels: that run keeps
#      q|k|v, the attention output and the q|k|v gradient in fp32, rounding each
#      once where a product reads it; cudnn keeps them as bf16 (LlamaModel.att_bf16),
#      so q|k|v is rounded before RoPE and again after it, and the gradient by cuDNN
#      and again by RoPE's backward. That moved the gradient norm by 3.9e-4 (7.6 S)
#      in the emulated build, whose stand-in for cuDNN (tests/emu) computes by the
#      definition (2.3e-4 when only cuDNN's gradient was rounded); an indexing or
#      mask error moves the loss by 1e-2 and more (200 S).
# Run by tests/gpu/run.sh; tests/shell/test_cuda_emu.sh runs it on the emulated
# build. Environment: GPU_BIN, PLAN_MEMORY, LAYOUTS (as tests/gpu/layouts.sh),
# LAYOUTS_CUDNN (5's rows), LAYOUTS_ONLY (below), LAYOUT_FILE (the rows' file, default
# tests/shell/parity_layouts.txt).
set -u
cd "$(dirname "$0")/../.." || exit 1
GPU_BIN=${GPU_BIN:-./femtotron-cuda}
PLAN_MEMORY=${PLAN_MEMORY:-build-cuda/tests/plan_memory_main}
BF16="--training.device cuda --training.precision bf16"
LAYOUT_FILE=${LAYOUT_FILE:-tests/shell/parity_layouts.txt}  # the rows LAYOUTS selects from
DEFAULT='^(dp2_zero[0-3]|tp2_sp|pp2_afab_m8|pp2_1f1b_m8|pp2_int_m4|zb_pp2_m4|zbv_pp2_m4|cp2|dp2_tp2_pp2|tp2_cp2_pp2|recompute_(sel|full)_tp2_cp2_pp2)$'
parity() {  # parity TOL REGEX [ROWS]: test_parity.sh's rows (parity_layouts.txt) on the GPU binary, bf16 references
    FEMTOTRON=$GPU_BIN REF_FEMTOTRON=$GPU_BIN ROW_ARGS=$BF16 REF_ARGS=$BF16 PLAN_MEMORY=$PLAN_MEMORY \
        PARITY_TOL=$1 bash tests/shell/test_parity.sh "${3:-$LAYOUT_FILE}" "$2"
}

# The splits, for every model the selected rows train (a row's third field: the
# pipeline rows use 4 layers), in a layout file of their own.
regex=${LAYOUTS:-$DEFAULT}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -F'|' -v re="$regex" '/^[[:space:]]*#/ || NF < 2 { next }
    { name = $1; gsub(/[[:space:]]/, "", name); m = (NF >= 3 ? $3 : ""); gsub(/^[[:space:]]+|[[:space:]]+$/, "", m)
      if (name ~ re && !(m in seen)) { seen[m] = 1; k++
          printf "split%d_b2_a4 | -np 1 --training.micro_batch_size 2 --training.grad_acc_steps 4 | %s\n", k, m
          printf "split%d_b1_a8 | -np 1 --training.micro_batch_size 1 --training.grad_acc_steps 8 | %s\n", k, m } }' \
    "$LAYOUT_FILE" >"$tmp/splits.txt"
nsplit=$(wc -l <"$tmp/splits.txt")
out=$(parity 1 "." "$tmp/splits.txt")
spread=$(printf '%s\n' "$out" | awk -v want="$nsplit" '/^PASS split/ {
    for (i = 1; i <= NF; i++) if ($i ~ /^(worst_rel_diff|grad_norm_rel_diff)=/) { split($i, kv, "="); if (kv[2] + 0 > s) s = kv[2] + 0 }
    n++ } END { if (n == want && n > 0) printf "%.3g", s }')
if [ -z "$spread" ]; then
    echo "FAIL bf16 spread: not every gradient-accumulation split ran:"
    printf '%s\n' "$out" | grep -v '^PASS ' | tail -5
    exit 1
fi
if awk -v s="$spread" 'BEGIN { exit !(s > 0) }'; then
    echo "PASS bf16 spread of one rank's gradient-accumulation splits (2x4, 1x8 vs 8x1; $((nsplit / 2)) models): $spread (not 0: the splits reorder sums)"
else
    echo "FAIL bf16 spread is 0: the splits gave identical numbers, so it says nothing about order (bf16 not on?)"
    exit 1
fi
tol=$(awk -v s="$spread" 'BEGIN { t = 4 * s; f = 0.0009765625; printf "%.3g", (t > f ? t : f) }')
echo "bf16 layout tolerance: the larger of 4 x $spread and 2^-10 = $tol"
parity "$tol" "$regex" | sed -E 's/^(PASS|FAIL) ([A-Za-z0-9_.-]+) /\1 bf16 \2 /'
rc=${PIPESTATUS[0]}

# 5. cuDNN's attention against femtotron's, both bf16: the rows LAYOUTS_CUDNN (a
#    regex, default all) names; LAYOUTS_CUDNN=0 leaves them out.
if [ "${LAYOUTS_CUDNN:-.}" != 0 ]; then
    cat >"$tmp/cudnn.txt" <<'ROWS'
cudnn_r1        | -np 1 --training.attention cudnn --training.micro_batch_size 8
cudnn_dp2_tp2   | -np 4 --training.attention cudnn --parallel.dp 2 --parallel.tp 2 --training.micro_batch_size 4
ROWS
    tol_cudnn=$(awk -v s="$spread" 'BEGIN { t = 20 * s; f = 0.0009765625; printf "%.3g", (t > f ? t : f) }')
    echo "cuDNN attention tolerance: the larger of 20 x $spread and 2^-10 = $tol_cudnn"
    parity "$tol_cudnn" "${LAYOUTS_CUDNN:-.}" "$tmp/cudnn.txt" | sed -E 's/^(PASS|FAIL) ([A-Za-z0-9_.-]+) /\1 bf16 \2 /'
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi

# LAYOUTS_ONLY=1: the spread and the rows alone (1-3, and 5 where LAYOUTS_CUDNN asks),
# for a second call on other rows whose spread is their own models'.
[ "${LAYOUTS_ONLY:-0}" = 1 ] && exit "$rc"

# 4. The kept bf16 copy of the weights changes no bit: dp 2 with ZeRO-0 (products
#    read the copy AdamW wrote) and ZeRO-1 (the copy of the gathered half rounded
#    once per step) against ZeRO-3 (gathered weights, rounded for every product):
#    every step's loss bit for bit. (Not the gradient norm: the
#    two stages group its double sum of squares differently, a last-bit difference
#    in fp32 as well.)
CPU_BIN=$GPU_BIN
failed() { echo "FAIL $*"; rc=1; }
. tests/gpu/lib.sh
parity_corpus
for z in 0 1 3; do
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${PARITY[@]}" $BF16 --parallel.dp 2 --parallel.zero $z \
        --training.micro_batch_size 4 --logging.metrics "$tmp/zero$z.jsonl" >"$tmp/zero$z.log" 2>&1 ||
        failed "bf16 dp2 ZeRO-$z run: $(tail -3 "$tmp/zero$z.log")"
done
for z in 0 1; do
    [ -s "$tmp/zero$z.jsonl" ] && [ -s "$tmp/zero3.jsonl" ] || continue
    a=$(grep -o '"loss": [^,}]*' "$tmp/zero$z.jsonl"); b=$(grep -o '"loss": [^,}]*' "$tmp/zero3.jsonl")
    how=$([ "$z" = 0 ] && echo "copy written by AdamW" || echo "kept copy")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        echo "PASS bf16 weight copy changes no bit: dp2 ZeRO-$z ($how) = ZeRO-3 (rounded per product), $(printf '%s\n' "$a" | wc -l) losses"
    else
        failed "bf16 weight copy: dp2 ZeRO-$z and ZeRO-3 differ: $(diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | head -3 | tr '\n' ' ')"
    fi
done

# 6. training.keep_bf16_inputs (the norms' and SwiGLU's bf16 outputs kept for the
#    weight gradients, not rebuilt) changes no bit either: tp 2 with sequence
#    parallelism (the kept norm outputs gathered as they are) on cuDNN's attention,
#    every step's loss and gradient norm; each rank's activations the larger.
for k in false true; do
    timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${PARITY[@]}" $BF16 --parallel.tp 2 \
        --parallel.sequence_parallel true --training.attention cudnn --training.micro_batch_size 4 \
        --training.keep_bf16_inputs $k --logging.metrics "$tmp/keep_$k.jsonl" >"$tmp/keep_$k.log" 2>&1 ||
        failed "bf16 tp2 sp keep_bf16_inputs $k run: $(tail -3 "$tmp/keep_$k.log")"
done
a=$(grep -o '"\(loss\|grad_norm\)": [^,}]*' "$tmp/keep_true.jsonl" 2>/dev/null)
b=$(grep -o '"\(loss\|grad_norm\)": [^,}]*' "$tmp/keep_false.jsonl" 2>/dev/null)
act() { grep -o '^memory bytes (rank 0): .* activations [0-9]*' "$tmp/keep_$1.log" | awk '{print $NF}'; }
if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$(act true)" ] && [ "$(act true)" -gt "$(act false)" ]; then
    echo "PASS bf16 keep_bf16_inputs changes no bit: tp2 sp on cuDNN, $(printf '%s\n' "$a" | wc -l) losses and gradient norms; activations $(act false) -> $(act true) bytes"
else
    failed "bf16 keep_bf16_inputs: $(diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | head -3 | tr '\n' ' '); activations $(act false) vs $(act true)"
fi
exit "$rc"
