# tests/shell/blas_build_lib.sh — the checks every other BLAS build of femtotron
# (make BLAS=NAME build-NAME/femtotron) passes against the default OpenBLAS build.
# Source it after lib.sh:
#   blas_build_make NAME INSTALL_SCRIPT   install the library (SKIP and exit 0 where it
#                       cannot be had) and make build-NAME/femtotron: sets BIN
#   train BINARY RUN ARGS...              a small fortunes training run: metrics in
#                       $tmp/RUN.jsonl, output in $tmp/RUN.log
#   losses FILE.jsonl   the timed steps' losses, one line
#   blas_build_checks LABEL LIB_RE NOT_RE NOTE_RE
#       BIN links a library matching LIB_RE and none matching NOT_RE; train's start-up
#       "BLAS:" line matches NOTE_RE; 8 steps train the default build's losses and
#       gradient norms (another library sums in another order: within 1e-5 relative),
#       the same bits run twice and across a resume from step 4; layouts of
#       tests/shell/parity_layouts.txt (the rows PARITY_ROWS matches: at least PARITY_MIN
#       PASS lines) against BIN's own 1-rank runs (test_parity.sh, 1e-5).
PARITY_ROWS=${PARITY_ROWS:-'^(dp2_zero3|tp2_sp|cp2|dp2_tp2_pp2)$'}
PARITY_MIN=${PARITY_MIN:-8}
blas_build_make() {
    local name=$1 install=$2
    if ! bash "$install" >"$tmp/install.log" 2>&1; then
        echo "SKIP $name not installable here: $(tail -n 1 "$tmp/install.log")"; exit 0
    fi
    make -s -j2 BLAS="$name" "build-$name/femtotron" >"$tmp/make.log" 2>&1 ||
        { failed "make BLAS=$name: $(tail -n 5 "$tmp/make.log")"; exit 1; }
    BIN=build-$name/femtotron
    fortunes_data
}

common=(--data.train "$tmp/data/train_*.bin" --training.seq_length 64 --training.micro_batch_size 4
        --training.grad_acc_steps 2 --training.warmup_steps 3 --training.threads 2 --training.peak_flops 1e11
        --model.hidden_size 128 --model.intermediate_size 384 --model.num_hidden_layers 3
        --model.num_attention_heads 4 --model.num_key_value_heads 2 --data.shuffle true)
train() {
    local bin=$1 name=$2; shift 2
    "$bin" train "${common[@]}" --logging.metrics "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 ||
        failed "$name: $(tail -n 3 "$tmp/$name.log")"
}
losses() { python3 -c "import json, sys
print(' '.join(repr(r['loss']) for r in map(json.loads, open(sys.argv[1])) if 'loss' in r and 'step_ms' in r))" "$1"; }

blas_build_checks() {
    local label=$1 lib_re=$2 not_re=$3 note_re=$4 libs rows
    libs=$(ldd "$BIN")
    grep -q "$lib_re" <<<"$libs" && ! grep -q "$not_re" <<<"$libs" &&
        pass "$BIN links $label ($(grep -o "$lib_re[a-z_0-9]*" <<<"$libs" | sort -u | tr '\n' ' ')) and not $not_re" ||
        failed "$BIN's libraries: $libs"

    train "$BIN" build --training.steps 8 --checkpoint.dir "$tmp/ck_full" --checkpoint.every 4
    grep -q "^BLAS: $note_re" "$tmp/build.log" &&
        pass "train's start-up lines name $label: $(grep '^BLAS:' "$tmp/build.log" | cut -c1-100)..." ||
        failed "no '$note_re' BLAS line in train's start-up lines: $(head -n 20 "$tmp/build.log")"
    train ./femtotron openblas --training.steps 8
    python3 - "$tmp/build.jsonl" "$tmp/openblas.jsonl" <<'PY' && pass "$label = OpenBLAS over 8 steps (relative 1e-5): $(cat "$tmp/cmp")" || failed "$label vs OpenBLAS: $(cat "$tmp/cmp")"
import json, sys
a, b = ([r for r in map(json.loads, open(p)) if 'step_ms' in r] for p in sys.argv[1:3])
worst = max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ('loss', 'grad_norm'))
ok = len(a) == len(b) == 8 and worst < 1e-5
open(sys.argv[1].rsplit('/', 1)[0] + '/cmp', 'w').write(f"{len(a)} and {len(b)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if ok else 1)
PY

    # The same run again, then a resume from its step-4 checkpoint: the same bits (a
    # library's sums do not change between runs on the same machine, threads and alignment).
    train "$BIN" again --training.steps 8
    [ "$(losses "$tmp/again.jsonl")" = "$(losses "$tmp/build.jsonl")" ] &&
        pass "$label build: the same 8 losses, bit for bit, run twice" ||
        failed "$label build run twice: $(losses "$tmp/again.jsonl") vs $(losses "$tmp/build.jsonl")"
    mkdir -p "$tmp/ck"
    cp -r "$tmp/ck_full/step_0000004" "$tmp/ck/" 2>/dev/null || failed "no step-4 checkpoint in $tmp/ck_full"
    train "$BIN" resumed --training.steps 8 --checkpoint.dir "$tmp/ck" --checkpoint.resume true
    [ "$(losses "$tmp/resumed.jsonl")" = "$(losses "$tmp/build.jsonl" | cut -d' ' -f5-)" ] &&
        pass "$label build: resumed from the step-4 checkpoint, steps 5-8 bit for bit" ||
        failed "$label resume: $(losses "$tmp/resumed.jsonl") vs $(losses "$tmp/build.jsonl")"

    # Layouts against the build's own 1-rank runs.
    FEMTOTRON=$BIN bash tests/shell/test_parity.sh tests/shell/parity_layouts.txt "$PARITY_ROWS" >"$tmp/parity.log" 2>&1
    rows=$(grep -c '^PASS ' "$tmp/parity.log")
    [ "$rows" -ge "$PARITY_MIN" ] && ! grep -q '^FAIL ' "$tmp/parity.log" &&
        pass "$label build: $rows layout and memory checks of test_parity.sh pass ($(grep '^PASS [^m]' "$tmp/parity.log" | awk '{print $2}' | tr '\n' ' '))" ||
        failed "$label build's layouts: $(grep -E '^(PASS|FAIL)' "$tmp/parity.log" | head -n 8)"
}
