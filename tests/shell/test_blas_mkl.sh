#!/usr/bin/env bash
# tests/shell/test_blas_mkl.sh — the oneMKL build (make BLAS=mkl build-mkl/femtotron;
# scripts/install_mkl.sh brings PyPI's mkl wheels into build/mklenv): it links oneMKL
# and not OpenBLAS, says so in train's start-up lines, trains the OpenBLAS build's
# losses (another summation order: within 1e-5 relative), repeats itself bit for bit,
# resumes bit-exactly, and keeps the layout invariant: a few rows of
# tests/shell/parity_layouts.txt against its own 1-rank runs (test_parity.sh, 1e-5).
# Its bf16 products (training.precision = bf16: ops/matmul_bf16_cpu.c): every product
# and the attention against naive loops on rounded operands (tests/mkl/
# test_bf16_products.c); training near the fp32 run but not equal to it, bit for bit
# twice and across a resume, the MFU against the bf16 product's peak, and the same
# layouts against bf16 1-rank runs (relative 2^-10, as the GPU's bf16 layouts); the
# zero-bubble split backward = the fused one with bf16 products (test_split_backward).
# Where oneMKL cannot be installed (no PyPI), prints SKIP and checks nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/blas_build_lib.sh"
PARITY_ROWS=${MKL_PARITY_ROWS:-$PARITY_ROWS}
blas_build_make mkl scripts/install_mkl.sh
MKL=$BIN
blas_build_checks oneMKL libmkl_core libopenblas 'Intel(R) oneAPI Math Kernel Library.*(make BLAS=mkl)'
# ---- bf16 products (training.precision = bf16)
if make -s -j2 BLAS=mkl build-mkl/tests/test_bf16_products >"$tmp/build16.log" 2>&1; then
    build-mkl/tests/test_bf16_products >"$tmp/products.log" 2>&1 || fail=1
    grep -E '^(PASS|FAIL) ' "$tmp/products.log"
    grep -q '^0 failed\|passed, 0 failed' "$tmp/products.log" || failed "test_bf16_products: $(tail -n 3 "$tmp/products.log")"
else
    failed "make build-mkl/tests/test_bf16_products: $(tail -n 5 "$tmp/build16.log")"
fi
# The zero-bubble split backward against the fused one, bit for bit, with bf16
# products too (the residual stream's gradient kept as bf16 in the stash)
if make -s -j2 BLAS=mkl build-mkl/tests/test_split_backward >"$tmp/buildsb.log" 2>&1; then
    build-mkl/tests/test_split_backward >"$tmp/split.log" 2>&1
    grep -E '^(PASS|FAIL) ' "$tmp/split.log" | grep 'bf16 products'
    grep -q 'bf16 products' "$tmp/split.log" && grep -q 'passed, 0 failed' "$tmp/split.log" ||
        failed "oneMKL build's test_split_backward: $(grep -m 3 '^FAIL' "$tmp/split.log"; tail -n 1 "$tmp/split.log")"
else
    failed "make build-mkl/tests/test_split_backward: $(tail -n 5 "$tmp/buildsb.log")"
fi
FEMTOTRON_CACHE=$tmp/cache train "$MKL" bf16 --training.steps 8 --training.precision bf16 --training.peak_flops 0 \
    --checkpoint.dir "$tmp/ck16_full" --checkpoint.every 4
python3 - "$tmp/bf16.jsonl" "$tmp/openblas.jsonl" <<'PY' && pass "bf16 products: 8 steps within 2% of fp32's losses and gradient norms, and not equal to them: $(cat "$tmp/cmp16")" || failed "bf16 vs fp32: $(cat "$tmp/cmp16")"
import json, sys
a, b = ([r for r in map(json.loads, open(p)) if 'step_ms' in r] for p in sys.argv[1:3])
d = [abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ('loss', 'grad_norm')]
ok = len(a) == len(b) == 8 and max(d) < 0.02 and max(d) > 1e-6
open(sys.argv[1].rsplit('/', 1)[0] + '/cmp16', 'w').write(f"worst relative difference {max(d):.2e}, least {min(d):.2e}")
sys.exit(0 if ok else 1)
PY
grep -q '^MFU peak: .*node bf16 product peak .*peak-[^ ]*-bf16.json' "$tmp/bf16.log" &&
    pass "bf16 run: MFU against the bf16 product's peak, cached apart ($(grep -o 'node bf16 product peak [0-9.]* GFLOP/s' "$tmp/bf16.log"))" ||
    failed "bf16 run's MFU peak line: $(grep '^MFU peak' "$tmp/bf16.log")"
train "$MKL" bf16_again --training.steps 8 --training.precision bf16
[ "$(losses "$tmp/bf16_again.jsonl")" = "$(losses "$tmp/bf16.jsonl")" ] &&
    pass "bf16 products: the same 8 losses, bit for bit, run twice" ||
    failed "bf16 run twice: $(losses "$tmp/bf16_again.jsonl") vs $(losses "$tmp/bf16.jsonl")"
# training.keep_bf16_inputs keeps the norms' and SwiGLU's bf16 outputs, which the
# backward otherwise rebuilds: the same losses, and exactly 2 (2 N D + N F) bytes a
# layer more activations (N = 4 x 64 tokens, D 128, F 384, 3 layers).
train "$MKL" bf16_keep --training.steps 8 --training.precision bf16 --training.keep_bf16_inputs true
act() { grep -o '^memory bytes (rank 0): .* activations [0-9]*' "$tmp/$1.log" | awk '{print $NF}'; }
kept=$((3 * 2 * (2 * 256 * 128 + 256 * 384)))
[ "$(losses "$tmp/bf16_keep.jsonl")" = "$(losses "$tmp/bf16.jsonl")" ] &&
    [ -n "$(act bf16)" ] && [ $(($(act bf16_keep) - $(act bf16))) -eq "$kept" ] &&
    pass "bf16 products: training.keep_bf16_inputs (the norms' and SwiGLU's bf16 outputs kept, not rebuilt), 8 losses bit for bit, $kept bytes more activations" ||
    failed "bf16 keep_bf16_inputs: $(losses "$tmp/bf16_keep.jsonl") vs $(losses "$tmp/bf16.jsonl"); activations $(act bf16_keep) vs $(act bf16), want $kept more"
mkdir -p "$tmp/ck16"
cp -r "$tmp/ck16_full/step_0000004" "$tmp/ck16/" 2>/dev/null || failed "no step-4 checkpoint in $tmp/ck16_full"
train "$MKL" bf16_resumed --training.steps 8 --training.precision bf16 --checkpoint.dir "$tmp/ck16" --checkpoint.resume true
[ "$(losses "$tmp/bf16_resumed.jsonl")" = "$(losses "$tmp/bf16.jsonl" | cut -d' ' -f5-)" ] &&
    pass "bf16 products: resumed from the step-4 checkpoint, steps 5-8 bit for bit (the weights' bf16 copy rounded afresh)" ||
    failed "bf16 resume: $(losses "$tmp/bf16_resumed.jsonl") vs $(losses "$tmp/bf16.jsonl")"
make -s BLAS=mkl build-mkl/tests/plan_memory_main >/dev/null 2>&1
ROW_ARGS="--training.precision bf16" REF_ARGS="--training.precision bf16" PARITY_TOL=9.8e-4 FEMTOTRON=$MKL \
    PLAN_MEMORY=build-mkl/tests/plan_memory_main bash tests/shell/test_parity.sh tests/shell/parity_layouts.txt \
    "$PARITY_ROWS" >"$tmp/parity16.log" 2>&1
rows=$(grep -c '^PASS ' "$tmp/parity16.log")
[ "$rows" -ge 8 ] && ! grep -q '^FAIL ' "$tmp/parity16.log" &&
    pass "bf16 products: $rows layout and memory checks against bf16 1-rank runs ($(grep '^PASS [^m]' "$tmp/parity16.log" | awk '{print $2, $3}' | tr '\n' ' '))" ||
    failed "bf16 layouts: $(grep -E '^(PASS|FAIL)' "$tmp/parity16.log" | head -n 8)"
exit $fail
