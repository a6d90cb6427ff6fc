#!/usr/bin/env bash
# tests/gpu/generate.sh — `femtotron generate` on the CUDA build (issue 14: generate
# with a key/value cache on the GPU), run by tests/gpu/run.sh: a small model trained
# on the CPU (the parity problem's shape, 150 steps, a checkpoint at the end) writes
# the same text from the GPU build as from the CPU build, greedy (40 tokens) and
# sampled with the default temperature and seed (80 tokens): the fp32 products
# differ in their last bits, which moves no argmax and no draw of these lengths;
# a GPU op whose result the host read before it finished (the logits) changes the
# text. Every op of a forward is queued, the key/value cache and the attention over
# it included (the flash attention's block ops), so the host waits once per
# token, for the logits: counted with FEMTOTRON_CUDA_PROFILE.
# Prints PASS/FAIL lines; exit 1 on a failure. GPU_BIN (default ./femtotron-cuda).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem
parity_corpus
if ! "$CPU_BIN" train "${PARITY[@]}" --training.steps 150 --training.lr 3e-3 --training.seq_length 64 \
    --checkpoint.dir "$tmp/ck" --checkpoint.every 150 >"$tmp/train.log" 2>&1; then
    failed "training the model to generate from: $(tail -3 "$tmp/train.log")"
    exit 1
fi
for mode in greedy sampled; do
    args=(--model "$tmp/ck" --prompt "The computer" --max-new-tokens 80)
    [ "$mode" = greedy ] && args=(--model "$tmp/ck" --prompt "The computer" --max-new-tokens 40 --temperature 0)
    "$CPU_BIN" generate "${args[@]}" >"$tmp/cpu_$mode.txt" 2>"$tmp/cpu_$mode.err" ||
        { failed "generate ($mode) on the CPU: $(tail -2 "$tmp/cpu_$mode.err")"; continue; }
    if ! timeout -k 10 300 "$GPU_BIN" generate "${args[@]}" >"$tmp/gpu_$mode.txt" 2>"$tmp/gpu_$mode.err"; then
        failed "generate ($mode) on the GPU build: $(tail -2 "$tmp/gpu_$mode.err")"
    elif cmp -s "$tmp/cpu_$mode.txt" "$tmp/gpu_$mode.txt"; then
        echo "PASS generate ($mode, $(wc -c <"$tmp/gpu_$mode.txt") bytes) on the GPU build writes the CPU's text: $(head -c 60 "$tmp/gpu_$mode.txt" | tr '\n' ' ')"
    else
        failed "generate ($mode): the GPU build's text differs from the CPU's ($(cmp "$tmp/cpu_$mode.txt" "$tmp/gpu_$mode.txt" | head -1))"
    fi
done

# The host waits for the device once per generated token (the logits it samples
# from): the CUDA profile's count of waits for 10 and 40 greedy tokens differs by
# 30 (skipped by a CPU build, which has no profile).
gen_waits() {  # TOKENS: the count of waits
    FEMTOTRON_CUDA_PROFILE=1 timeout -k 10 300 "$GPU_BIN" generate --model "$tmp/ck" --prompt "The computer" \
        --max-new-tokens "$1" --temperature 0 --ignore-eos 2>&1 >/dev/null |
        profile_waits
}
w10=$(gen_waits 10) w40=$(gen_waits 40)
if [ -z "$w10$w40" ]; then
    echo "(no CUDA profile from $GPU_BIN: the wait count did not run)"
elif [ -n "$w10" ] && [ -n "$w40" ] && [ "$((w40 - w10))" = 30 ]; then
    echo "PASS generate waits for the device once per token: $w10 waits for 10 tokens, $w40 for 40"
else
    failed "generate's waits: '$w10' for 10 tokens, '$w40' for 40 (expected 30 more)"
fi
exit $fail
