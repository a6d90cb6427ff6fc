# tests/gpu/lib.sh — sourced by the GPU test scripts: their common start (the
# binaries CPU_BIN and GPU_BIN, the launcher MPIRUN as an array, a scratch
# directory $tmp removed at exit, `failed` printing a FAIL line and setting
# fail=1; each kept where the script set it before sourcing), and the parity
# problem of tests/shell/test_parity.sh (a tiny model, 8 sequences of 32 tokens,
# 10 steps): parity_corpus prepares its corpus into $tmp/data with $CPU_BIN (fatal
# through `failed` when that fails); PARITY holds its training keys. FORTUNES_DIR
# (default Debian's /usr/share/games/fortunes; gpu-bundle/env.sh points it at the
# bundle's copy) is where the fortunes corpus is; PYTHON the python3 the
# comparisons run with. profile_waits reads a run's host-wait count.
CPU_BIN=${CPU_BIN:-./femtotron}
GPU_BIN=${GPU_BIN:-./femtotron-cuda}
[[ "$(declare -p MPIRUN 2>/dev/null)" == "declare -a"* ]] ||
    read -r -a MPIRUN <<<"${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}"
if [ -z "${tmp:-}" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi
fail=${fail:-0}
declare -F failed >/dev/null || failed() { echo "FAIL $*"; fail=1; }
FORTUNES=${FORTUNES_DIR:-/usr/share/games/fortunes}
PYTHON=${PYTHON:-python3}
# The host waits of the first CUDA profile line on stdin (FEMTOTRON_CUDA_PROFILE=1:
# "...; waits S s (P%, COUNT)"): COUNT, or nothing without a profile.
profile_waits() {
    sed -n 's/.*cuda profile:.*; waits [^(]*([^,]*, \([0-9]*\)).*/\1/p' | head -n 1
}
parity_corpus() {
    cat "$FORTUNES"/{computers,science,literature,wisdom,linux} >"$tmp/corpus.txt"
    "$CPU_BIN" prepare --input "$tmp/corpus.txt" --output "$tmp/data" --val-fraction 0 >"$tmp/prepare.log" 2>&1 ||
        { failed "prepare corpus: $(tail -3 "$tmp/prepare.log")"; exit 1; }
}
PARITY=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
        --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 32 --training.global_batch_size 8 --training.steps 10
        --training.lr 2e-3 --training.min_lr 3e-5 --training.warmup_steps 2
        --training.threads 1 --training.peak_flops 1e10 --training.seed 1234)
