#!/usr/bin/env bash
# scripts/train_fortunes.sh — the main job: turn the Debian `fortunes` corpus (real
# English text: quotations, jokes, literature) into byte-level token shards, then
# train the default model on it (configs/fortunes.json, ~2 minutes on 2 cores).
# Extra arguments are config overrides, e.g. --training.steps 100.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f data/fortunes/train_000000.bin ]; then
    inputs=$(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$')
    # shellcheck disable=SC2086
    ./femtotron prepare --input $inputs --split-on % --output data/fortunes
fi
if [ -f runs/fortunes/latest ]; then
    echo "runs/fortunes already holds a finished run; moving it to runs/fortunes.old"
    rm -rf runs/fortunes.old && mv runs/fortunes runs/fortunes.old
fi
mkdir -p runs/fortunes
exec mpirun --oversubscribe --allow-run-as-root -np 1 ./femtotron train --config configs/fortunes.json "$@"
