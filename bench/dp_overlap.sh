#!/usr/bin/env bash
# bench/dp_overlap.sh — gradient reduction overlapped with backward, against the
# same reduction done after backward: dp = 2 (2 ranks on the 2 cores, 1 thread
# each), parallel.overlap true vs false, runs interleaved, median step time of the
# timed steps. Writes bench/results/dp_overlap.md.
#
# On one node the all-reduce goes through shared memory and is cheap next to the
# compute, and Open MPI progresses non-blocking collectives only inside MPI calls
# (femtotron tests its requests after every layer's backward), so the gain here is
# a lower bound of what a network between the ranks would show.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-6}
make -s femtotron
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$' | xargs ./femtotron prepare --split-on % \
    --output "$tmp/data" --val-fraction 0 --input >/dev/null 2>&1
MODEL=(--model.hidden_size 512 --model.intermediate_size 1536 --model.num_hidden_layers 8
       --model.num_attention_heads 8 --model.num_key_value_heads 4 --model.vocab_size 8192)
run() {  # run OVERLAP BUCKET_MB ROUND -> median step ms of steps 2..STEPS
    mpirun --oversubscribe --allow-run-as-root -np 2 ./femtotron train --data.train "$tmp/data/train_*.bin" \
        "${MODEL[@]}" --training.seq_length 128 --training.micro_batch_size 4 --training.steps "$STEPS" \
        --training.threads 1 --training.peak_flops 1e11 --parallel.dp 2 --parallel.overlap "$1" \
        --parallel.bucket_mb "$2" --logging.metrics "$tmp/m_$1_$2_$3.jsonl" >/dev/null 2>&1
    /usr/bin/python3 -c "
import json, statistics, sys
ms = [r['step_ms'] for r in map(json.loads, open(sys.argv[1])) if 'event' not in r][1:]
print('%.1f' % statistics.median(ms))" "$tmp/m_$1_$2_$3.jsonl"
}
declare -A med
for bucket in 4 25; do
    for r in $(seq 1 "$ROUNDS"); do
        for ov in true false; do
            med[$bucket,$ov,$r]=$(run "$ov" "$bucket" "$r")
            echo "bucket ${bucket} MiB overlap $ov round $r: ${med[$bucket,$ov,$r]} ms"
        done
    done
done
out=bench/results/dp_overlap.md
{
    echo "# Gradient reduction: overlapped with backward vs after it"
    echo
    echo "dp = 2 (2 ranks, 1 thread each, on 2 cores), model hidden 512, 8 layers, vocab 8192"
    echo "(33.6M parameters, 134 MB of fp32 gradients per step), seq 128 x micro-batch 4 per rank."
    echo "Median step time of steps 2..$STEPS, runs interleaved (overlap on, off, on, ...), $ROUNDS rounds; $(date -u +%F)."
    echo
    echo "| bucket MiB | overlap on (ms, per round) | overlap off (ms, per round) | median on | median off | off / on |"
    echo "|---:|---|---|---:|---:|---:|"
    for bucket in 4 25; do
        on=(); off=()
        for r in $(seq 1 "$ROUNDS"); do on+=("${med[$bucket,true,$r]}"); off+=("${med[$bucket,false,$r]}"); done
        /usr/bin/python3 -c "
import statistics, sys
b = sys.argv[1]; on = [float(x) for x in sys.argv[2].split()]; off = [float(x) for x in sys.argv[3].split()]
mo, mf = statistics.median(on), statistics.median(off)
print('| %s | %s | %s | %.1f | %.1f | %.3f |' % (b, ' '.join(sys.argv[2].split()), ' '.join(sys.argv[3].split()), mo, mf, mf / mo))
" "$bucket" "${on[*]}" "${off[*]}"
    done
} >"$out"
cat "$out"
