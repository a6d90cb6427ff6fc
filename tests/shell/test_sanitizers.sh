#!/usr/bin/env bash
# tests/shell/test_sanitizers.sh — femtotron built with AddressSanitizer and
# UndefinedBehaviorSanitizer (-O1, every UB report fatal) into build-asan/:
#   1. the C unit tests again;
#   2. the program end to end, with leak checking on: threaded prepare, a 2-rank
#      training run (tp 2 with sequence parallel) writing checkpoints in the
#      background, a resume of it under another layout (dp 2, ZeRO-1), generate, and
#      a 4-rank Mixtral run (ep 2 x pp 2, load-balancing loss, shared experts, full
#      recomputation).
# An out-of-bounds access, a use after free, undefined behaviour or a leak of
# femtotron's own in a kernel, the model, the engines, the parsers or the checkpoint
# code fails here even when the numbers happen to come out right.
set -u
cd "$(dirname "$0")/../.."
flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if ! make -s -j2 BUILD=build-asan OPT="$flags" EXTRA_LDFLAGS="-fsanitize=address,undefined" \
        tests-bin build-asan/femtotron >build-asan.log 2>&1; then
    echo "FAIL sanitizer build: $(grep -m3 -E 'error' build-asan.log)"
    exit 1
fi
rm -f build-asan.log
export UBSAN_OPTIONS=print_stacktrace=1
fail=0

# --- 1. unit tests (leak checking off: their children die on purpose mid-parse) --------
# Two at a time (each is one process; tests/shell/pool.sh), their lines in order.
unit() {  # unit BINARY: prints its PASS/FAIL line, status 1 on a failure
    local name out rc
    name=$(basename "$1")
    out=$(ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 "$1" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q -E 'ERROR: AddressSanitizer|runtime error' <<<"$out"; then
        echo "PASS $name under ASan+UBSan ($(tail -1 <<<"$out"))"
    else
        echo "FAIL $name under ASan+UBSan (exit $rc): $(grep -m2 -E 'AddressSanitizer|runtime error|^FAIL' <<<"$out")"
        return 1
    fi
}
. tests/shell/pool.sh
pool_init 2
for t in build-asan/tests/test_*; do
    [ -x "$t" ] || continue  # programs only, as tests/run_all.sh
    pool_run "$(basename "$t")" unit "$t"
done
pool_finish || fail=1

# --- 2. the program, leaks checked ------------------------------------------------------
# MPI, OpenMP and OpenBLAS keep allocations alive at exit in their own code: a leak
# counts only when the frame that called the allocator is femtotron's (frame #1 is
# in a src/ file; the leak report's own exit code is switched off for that reason).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ASAN=build-asan/femtotron
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0 LSAN_OPTIONS=exitcode=0
MPI=(mpirun --oversubscribe --allow-run-as-root -x ASAN_OPTIONS -x UBSAN_OPTIONS -x LSAN_OPTIONS)
own_leaks() {  # own_leaks LOG: the leak reports whose allocator's caller is ours
    awk '/^(Direct|Indirect) leak/ { block = $0; want = 1; next }
         want && /^ *#1 / { if ($0 ~ / src\/[a-z_\/]+\.c:[0-9]+/) print block " <- " $0; want = 0 }' "$1"
}
check() {  # check NAME LOG RC: exit 0, no sanitizer error, no leak of ours
    local name=$1 log=$2 rc=$3 leaks
    leaks=$(own_leaks "$log")
    if [ "$rc" -eq 0 ] && ! grep -q -E 'ERROR: AddressSanitizer|runtime error' "$log" && [ -z "$leaks" ]; then
        echo "PASS $name under ASan+UBSan with leak checking"
    else
        echo "FAIL $name under ASan+UBSan (exit $rc): $(grep -m2 -E 'ERROR: AddressSanitizer|runtime error|error:' "$log" | tr '\n' ' ') $(head -3 <<<"$leaks" | tr '\n' ' ')"
        fail=1
    fi
}
cat /usr/share/games/fortunes/{computers,science} >"$T/corpus.txt"
"$ASAN" prepare --input "$T/corpus.txt" --output "$T/data" --val-fraction 0.05 --threads 2 >"$T/prepare.log" 2>&1
check "prepare (2 threads)" "$T/prepare.log" $?
mkdir -p "$T/inputs/sub"
gzip -c /usr/share/games/fortunes/science >"$T/inputs/science.txt.gz"
zstd -q -c /usr/share/games/fortunes/computers >"$T/inputs/sub/computers.txt.zst"
printf '{"text": "one"}\n{"text": "two"}\n' >"$T/inputs/sub/few.jsonl"
cp "$T/corpus.txt" "$T/inputs/corpus.txt"
head -c 5000 "$T/inputs/science.txt.gz" >"$T/truncated.txt.gz"
zstd -q -c "$T/corpus.txt" | "$ASAN" prepare --input "$T/inputs" - "$T/inputs/*.gz" --split-on % \
    --output "$T/data_in" --threads 2 >"$T/inputs.log" 2>&1
check "prepare of a directory, standard input and a glob (gzip, zstd, JSONL)" "$T/inputs.log" $?
"$ASAN" prepare --input "$T/truncated.txt.gz" --output "$T/data_bad" >"$T/bad.log" 2>&1
grep -q 'ends early' "$T/bad.log"
check "prepare refusing a truncated .gz" "$T/bad.log" $?
model=(--data.train "$T/data/train_*.bin" --model.hidden_size 64 --model.intermediate_size 128
       --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2
       --training.seq_length 32 --training.global_batch_size 8 --training.micro_batch_size 4
       --training.threads 1 --training.peak_flops 1e10 --checkpoint.dir "$T/ck")
"${MPI[@]}" -np 2 "$ASAN" train "${model[@]}" --training.steps 4 --parallel.tp 2 \
    --parallel.sequence_parallel true --checkpoint.every 2 --checkpoint.async true >"$T/train.log" 2>&1
check "2-rank training, tp 2 SP, async checkpoints" "$T/train.log" $?
"${MPI[@]}" -np 2 "$ASAN" train "${model[@]}" --training.steps 6 --parallel.dp 2 --parallel.zero 1 \
    --training.micro_batch_size 4 --checkpoint.resume true >"$T/resume.log" 2>&1
rc=$?
grep -q "resumed from .*step_0000004" "$T/resume.log" || rc=99
check "2-rank resume under dp 2 ZeRO-1" "$T/resume.log" $rc
"$ASAN" generate --model "$T/ck" --prompt "The" --max-new-tokens 20 --threads 2 >"$T/gen.log" 2>&1
check "generate from the checkpoint" "$T/gen.log" $?
# Mixture of experts: expert parallelism (all-to-all(v)), the load-balancing loss over
# two pipeline stages, shared experts and full recomputation on 4 ranks.
"${MPI[@]}" -np 4 "$ASAN" train "${model[@]}" --training.steps 2 --model.num_local_experts 4 \
    --model.output_router_logits true --model.n_shared_experts 1 --parallel.dp 2 --parallel.ep 2 \
    --parallel.pp 2 --training.recompute full --training.micro_batch_size 2 --checkpoint.dir "$T/ck_moe" >"$T/moe.log" 2>&1
check "4-rank Mixtral training, ep 2 x pp 2, aux loss, shared experts, full recomputation" "$T/moe.log" $?
exit $fail
