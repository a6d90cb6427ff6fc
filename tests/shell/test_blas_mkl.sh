#!/usr/bin/env bash
# tests/shell/test_blas_mkl.sh — the oneMKL build (make BLAS=mkl build-mkl/femtotron;
# scripts/install_mkl.sh brings PyPI's mkl wheels into build/mklenv): it links oneMKL
# and not OpenBLAS, says so in train's start-up lines, trains the OpenBLAS build's
# losses (another summation order: within 1e-5 relative), repeats itself bit for bit,
# resumes bit-exactly, and keeps the layout invariant: a few rows of
# tests/shell/parity_layouts.txt against its own 1-rank runs (test_parity.sh, 1e-5).
# Where oneMKL cannot be installed (no PyPI), prints SKIP and checks nothing.
. "$(dirname "$0")/lib.sh"
if ! bash scripts/install_mkl.sh >"$tmp/install.log" 2>&1; then
    echo "SKIP oneMKL not installable here: $(tail -n 1 "$tmp/install.log")"; exit 0
fi
make -s -j2 BLAS=mkl build-mkl/femtotron >"$tmp/build.log" 2>&1 || { failed "make BLAS=mkl: $(tail -n 5 "$tmp/build.log")"; exit 1; }
MKL=build-mkl/femtotron
libs=$(ldd "$MKL")
grep -q 'libmkl_core' <<<"$libs" && ! grep -q 'libopenblas' <<<"$libs" &&
    pass "build-mkl/femtotron links oneMKL ($(grep -o 'libmkl_[a-z_0-9]*' <<<"$libs" | sort -u | tr '\n' ' ')) and not OpenBLAS" ||
    failed "build-mkl/femtotron's libraries: $libs"

fortunes_data
common=(--data.train "$tmp/data/train_*.bin" --training.seq_length 64 --training.micro_batch_size 4
        --training.grad_acc_steps 2 --training.warmup_steps 3 --training.threads 2 --training.peak_flops 1e11
        --model.hidden_size 128 --model.intermediate_size 384 --model.num_hidden_layers 3
        --model.num_attention_heads 4 --model.num_key_value_heads 2 --data.shuffle true)
train() {  # train BINARY NAME ARGS...: metrics in $tmp/NAME.jsonl, output in $tmp/NAME.log
    local bin=$1 name=$2; shift 2
    "$bin" train "${common[@]}" --logging.metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
        failed "$name: $(tail -n 3 "$tmp/$name.log")"
}
losses() { python3 -c "import json, sys
print(' '.join(repr(r['loss']) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r and 'step_ms' in r))" "$1"; }

train "$MKL" mkl --training.steps 8 --checkpoint.dir "$tmp/ck_full" --checkpoint.every 4
grep -q '^BLAS: Intel(R) oneAPI Math Kernel Library.*(make BLAS=mkl)' "$tmp/mkl.log" &&
    pass "train's start-up lines name oneMKL: $(grep '^BLAS:' "$tmp/mkl.log" | cut -c1-80)..." ||
    failed "no oneMKL line in train's start-up lines: $(head -n 20 "$tmp/mkl.log")"
train ./femtotron openblas --training.steps 8
python3 - "$tmp/mkl.jsonl" "$tmp/openblas.jsonl" <<'PY' && pass "oneMKL = OpenBLAS over 8 steps (relative 1e-5): $(cat "$tmp/cmp")" || failed "oneMKL vs OpenBLAS: $(cat "$tmp/cmp")"
import json, sys
a, b = ([r for r in map(json.loads, open(p)) if 'step_ms' in r] for p in sys.argv[1:3])
worst = max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ('loss', 'grad_norm'))
ok = len(a) == len(b) == 8 and worst < 1e-5
open(sys.argv[1].rsplit('/', 1)[0] + '/cmp', 'w').write(f"{len(a)} and {len(b)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if ok else 1)
PY

# The same run again, then a resume from its step-4 checkpoint: the same bits (oneMKL's
# sums do not change between runs on the same machine, threads and alignment).
train "$MKL" again --training.steps 8
[ "$(losses "$tmp/again.jsonl")" = "$(losses "$tmp/mkl.jsonl")" ] &&
    pass "oneMKL build: the same 8 losses, bit for bit, run twice" ||
    failed "oneMKL build run twice: $(losses "$tmp/again.jsonl") vs $(losses "$tmp/mkl.jsonl")"
mkdir -p "$tmp/ck"
cp -r "$tmp/ck_full/step_0000004" "$tmp/ck/" 2>/dev/null || failed "no step-4 checkpoint in $tmp/ck_full"
train "$MKL" resumed --training.steps 8 --checkpoint.dir "$tmp/ck" --checkpoint.resume true
[ "$(losses "$tmp/resumed.jsonl")" = "$(losses "$tmp/mkl.jsonl" | cut -d' ' -f5-)" ] &&
    pass "oneMKL build: resumed from the step-4 checkpoint, steps 5-8 bit for bit" ||
    failed "oneMKL resume: $(losses "$tmp/resumed.jsonl") vs $(losses "$tmp/mkl.jsonl")"

# Layouts against the oneMKL build's own 1-rank runs.
FEMTOTRON=$MKL bash tests/shell/test_parity.sh tests/shell/parity_layouts.txt "${MKL_PARITY_ROWS:-^(dp2_zero3|tp2_sp|cp2|dp2_tp2_pp2)$}" >"$tmp/parity.log" 2>&1
rows=$(grep -c '^PASS ' "$tmp/parity.log")
[ "$rows" -ge 8 ] && ! grep -q '^FAIL ' "$tmp/parity.log" &&
    pass "oneMKL build: $rows layout and memory checks of test_parity.sh pass ($(grep '^PASS [^m]' "$tmp/parity.log" | awk '{print $2}' | tr '\n' ' '))" ||
    failed "oneMKL build's layouts: $(grep -E '^(PASS|FAIL)' "$tmp/parity.log" | head -n 8)"
exit $fail
