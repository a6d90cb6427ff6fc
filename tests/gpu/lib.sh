# tests/gpu/lib.sh — sourced by the GPU test scripts that train the parity problem
# of tests/shell/test_parity.sh (a tiny model, 8 sequences of 32 tokens, 10 steps):
# parity_corpus prepares its corpus into $tmp/data with $CPU_BIN (fatal through
# the script's `failed` when that fails); PARITY holds its training keys. Needs
# tmp, CPU_BIN and failed from the script. FORTUNES_DIR (default Debian's
# /usr/share/games/fortunes; gpu-bundle/env.sh points it at the bundle's copy) is
# where the fortunes corpus is; PYTHON the python3 the comparisons run with.
FORTUNES=${FORTUNES_DIR:-/usr/share/games/fortunes}
PYTHON=${PYTHON:-python3}
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
