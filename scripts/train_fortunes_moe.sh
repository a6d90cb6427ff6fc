#!/usr/bin/env bash
# scripts/train_fortunes_moe.sh — the mixture-of-experts demo: a small Mixtral (8
# experts, top-2, the load-balancing loss on; configs/fortunes_moe.json) trained on
# the Debian `fortunes` corpus by 4 MPI ranks = data 2 x tensor 2 (sequence
# parallel), the two data-parallel ranks forming an expert-parallel group of 2
# (parallel.ep: each computes 4 of the 8 experts for both ranks' tokens, exchanged
# by all-to-all(v)). RANKS=1 trains the same model on one rank (same losses).
# Extra arguments are config overrides, e.g. --training.steps 50. The checkpoint is
# a Hugging Face MixtralForCausalLM directory (runs/fortunes_moe/latest); the
# metrics (with aux_loss and ep_ms per step) are drawn into
# runs/fortunes_moe/metrics.png (femtotron plot, with gnuplot); then a few lines are
# sampled from it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f data/fortunes/train_000000.bin ]; then
    inputs=$(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$')
    # shellcheck disable=SC2086
    ./femtotron prepare --input $inputs --split-on % --output data/fortunes
fi
if [ -e runs/fortunes_moe/latest ] || [ -L runs/fortunes_moe/latest ]; then
    echo "runs/fortunes_moe already holds a finished run; moving it to runs/fortunes_moe.old"
    rm -rf runs/fortunes_moe.old && mv runs/fortunes_moe runs/fortunes_moe.old
fi
mkdir -p runs/fortunes_moe
ranks=${RANKS:-4}
layout=()
[ "$ranks" = 1 ] && layout=(--parallel.dp 1 --parallel.ep 1 --parallel.tp 1 --training.grad_acc_steps 2)
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
mpirun --oversubscribe --bind-to none "${root[@]}" -np "$ranks" ./femtotron train --config configs/fortunes_moe.json \
    "${layout[@]}" "$@"
if command -v gnuplot >/dev/null; then
    ./femtotron plot runs/fortunes_moe/metrics.jsonl
fi

# What did it learn? Sample from the last checkpoint (byte-level tokens).
for prompt in "The secret of life is" "Q: Why did the programmer"; do
    echo
    echo "--- generate: \"$prompt\""
    ./femtotron generate --model runs/fortunes_moe --prompt "$prompt" --max-new-tokens 160 \
        --temperature 0.8 --top-k 40 --seed 1
    echo
done
