#!/usr/bin/env bash
# bench/moe_ep.sh — expert parallelism on this machine: throughput, memory per rank
# and the time in dispatch and combine of a small Mixtral (hidden 256, 4 layers, 4
# heads / 2 kv, 8 experts of width 512, top-2, the load-balancing loss on, byte
# vocabulary; seq 256 x micro-batch 4 per rank) at
#   ep 1: dp 2, 2 ranks x 1 thread (one per core): every rank computes all 8 experts
#   ep 2: dp 2 x ep 2, 2 ranks x 1 thread: each computes 4 experts for both ranks'
#         tokens, rows exchanged by all-to-all(v)
#   ep 4: dp 4 x ep 4, 4 ranks x 1 thread oversubscribed on the 2 cores (its
#         throughput measures time-sharing as much as expert parallelism)
# Same global batch (8 sequences at dp 2, 16 at dp 4: per-rank work is the same).
# tokens/s: the fastest of steps 2..STEPS (the machine is shared) and the median;
# dispatch + combine: rank 0's milliseconds per step in the all-to-all exchanges
# (metrics.jsonl "ep_ms", median of steps 2..STEPS), and its share of the step.
# Memory: femtotron's start-up report (max over ranks). A rank holds E/ep experts
# (README, "Mixture of experts"), so the experts' share of params/grads/optimizer
# falls as 1/ep; the activations grow with the dispatch buffers planned for the
# worst case (ep * tokens * min(k, E/ep) rows per layer).
# Output: bench/results/moe_ep.md. Usage: bench/moe_ep.sh (STEPS [6]; RES)
. "$(dirname "$0")/lib.sh"
STEPS=${STEPS:-6}
bench_private_binary
cat /usr/share/games/fortunes/{computers,science,literature,wisdom,linux} >"$TMP/corpus.txt"
"$FT" prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
MODEL=(--model.hidden_size 256 --model.num_hidden_layers 4 --model.num_attention_heads 4
       --model.num_key_value_heads 2 --model.intermediate_size 512 --model.num_local_experts 8
       --model.num_experts_per_tok 2 --model.output_router_logits true --training.seq_length 256
       --training.micro_batch_size 4 --training.peak_flops 1e10)
run() {  # run NAME NP BIND ARGS...
    local name=$1 np=$2 bind=$3; shift 3
    mpirun --oversubscribe --allow-run-as-root --bind-to "$bind" -np "$np" "$FT" train \
        --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" --training.steps "$STEPS" --training.threads 1 \
        --logging.verbose true --logging.metrics "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1 ||
        { echo "run $name failed:"; tail -5 "$TMP/$name.log"; exit 1; }
    grep '^step' "$TMP/$name.log" | tail -1 | sed "s/^/$name: /"
}
run ep1 2 core --parallel.dp 2
run ep2 2 core --parallel.dp 2 --parallel.ep 2
run ep4 4 none --parallel.dp 4 --parallel.ep 4
python3 - "$TMP" "$RES" "$STEPS" <<'PY'
import json, re, statistics, sys
tmp, res, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
MEM = re.compile(r"^memory \(rank (\d+)\): params ([\d.]+) MiB \| grads ([\d.]+) MiB \| optimizer ([\d.]+) MiB"
                 r" \| activations ([\d.]+) MiB(?: \| comm [\d.]+ MiB)? \| total ([\d.]+) MiB")
L = ["# Expert parallelism: throughput, dispatch + combine time and memory per rank", "",
     "Small Mixtral: hidden 256, 4 layers, 4 heads / 2 kv, 8 experts of width 512, top-2, load-balancing loss on,",
     "vocab 257; seq 256 x micro-batch 4 per rank, fortunes corpus. ep 1 and ep 2: 2 ranks x 1 thread (one per",
     "core); ep 4: 4 ranks x 1 thread on the same 2 cores (oversubscribed). tokens/s: fastest and median of steps",
     f"2..{steps}; dispatch + combine: rank 0's all-to-all(v) time per step (median). Memory: start-up report, max",
     "over ranks; each rank holds E/ep of the experts (weights, gradients, AdamW moments).", "",
     "| ep | ranks | tokens/s (fastest) | tokens/s (median) | step ms (median) | dispatch + combine ms | share |"
     " params MiB | grads MiB | optimizer MiB | activations MiB | total MiB | loss step 1 |",
     "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for name, ep, ranks in (("ep1", 1, 2), ("ep2", 2, 2), ("ep4", 4, 4)):
    recs = [x for x in map(json.loads, open(f"{tmp}/{name}.jsonl")) if "event" not in x]
    timed = [x for x in recs if x["step"] >= 2]
    fast = max(x["tokens_per_s"] for x in timed)
    med = statistics.median(x["tokens_per_s"] for x in timed)
    step_ms = statistics.median(x["step_ms"] for x in timed)
    ep_ms = statistics.median(x.get("ep_ms", 0.0) for x in timed)
    mem = [0.0] * 5
    for line in open(f"{tmp}/{name}.log"):
        m = MEM.match(line)
        if m: mem = [max(a, float(b)) for a, b in zip(mem, m.groups()[1:])]
    L.append(f"| {ep} | {ranks} | {fast:.0f} | {med:.0f} | {step_ms:.1f} | {ep_ms:.1f} | {100 * ep_ms / step_ms:.1f}% | "
             + " | ".join(f"{v:.1f}" for v in mem) + f" | {recs[0]['loss']:.6f} |")
open(f"{res}/moe_ep.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
