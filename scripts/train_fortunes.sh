#!/usr/bin/env bash
# scripts/train_fortunes.sh — the main job: turn the Debian `fortunes` corpus (real
# English text: quotations, jokes, literature) into byte-level token shards, then
# train the default model on it with all four kinds of parallelism at once:
# 8 MPI ranks = tensor 2 (with sequence parallel) x context 2 x pipeline 2
# (configs/fortunes.json), a few minutes on 2 cores, then generates a few lines
# from the trained model. RANKS=1 runs the same
# training on one rank (same losses: the layout does not change the numbers).
# Extra arguments are config overrides, e.g. --training.steps 100. The metrics are
# drawn into runs/fortunes/metrics.png at the end (femtotron plot, with gnuplot).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f data/fortunes/train_000000.bin ]; then
    inputs=$(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$')
    # shellcheck disable=SC2086
    ./femtotron prepare --input $inputs --split-on % --output data/fortunes
fi
if [ -e runs/fortunes/latest ] || [ -L runs/fortunes/latest ]; then  # latest is a link to the newest step
    echo "runs/fortunes already holds a finished run; moving it to runs/fortunes.old"
    rm -rf runs/fortunes.old && mv runs/fortunes runs/fortunes.old
fi
mkdir -p runs/fortunes
ranks=${RANKS:-8}
layout=()
[ "$ranks" = 1 ] && layout=(--parallel.tp 1 --parallel.cp 1 --parallel.pp 1)
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
mpirun --oversubscribe --bind-to none "${root[@]}" -np "$ranks" ./femtotron train --config configs/fortunes.json \
    "${layout[@]}" "$@"

# The curves: loss and val_loss against steps and tokens, lr, grad norm, tok/s, MFU.
if command -v gnuplot >/dev/null; then
    ./femtotron plot runs/fortunes/metrics.jsonl
fi

# What did it learn? Sample a few lines from the last checkpoint (byte-level tokens).
for prompt in "The secret of life is" "Q: Why did the programmer"; do
    echo
    echo "--- generate: \"$prompt\""
    ./femtotron generate --model runs/fortunes --prompt "$prompt" --max-new-tokens 160 \
        --temperature 0.8 --top-k 40 --seed 7
    echo
done
