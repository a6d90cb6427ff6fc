#!/usr/bin/env bash
# bench/cp_ring_overlap.sh — the ring-attention backward's gradient hop overlapped
# with compute, against a binary without it (A/B on the same machine, same runs).
#
# Before: each step of the backward's ring computed its block's dk|dv contribution
# into the travelling block, THEN sent the block on, and waited for the next one:
# one hop per block on the critical path, plus a separate homing exchange at the
# end. After: the next block's k|v travels while this one is computed (as in the
# forward), the contribution is computed into a zeroed buffer while the partial sum
# it joins is still arriving, and the last hop is the way home
# (parallel_layers/context_parallel.c: ring_attention_backward).
#
# The model of bench/cp.sh (hidden 256, 4 layers, 4/2 heads, SwiGLU 768) at SEQ
# tokens, micro-batch 1, cp 2 on 2 ranks x 1 thread (and cp 4 on 4 ranks, 2 cores
# oversubscribed, when CP4=1); BASELINE and ./femtotron alternate ROUNDS times,
# STEPS steps each, the first step dropped. Reported: median step ms, median
# backward event ms (logging.trace: the whole stage backward of a micro-batch,
# ring included) per rank, and the largest loss difference (the summation order of
# dk|dv changed, so equal to fp32 rounding, not bit for bit).
#
# With LINK_MBIT set, cp 2 runs on two hosts built from network namespaces
# (tests/shell/netns_hosts.sh) joined by a link shaped to LINK_MBIT Mbit/s each way,
# one rank per host, Open MPI over TCP: a hop then costs what a network makes it
# cost (2 MiB of k|v at 4096 tokens: about 42 ms at 400 Mbit/s) instead of a
# shared-memory copy. Needs root for the namespaces; says so otherwise.
#
# Usage: BASELINE=/path/to/old/femtotron bench/cp_ring_overlap.sh
#   (env: SEQ=8192 ROUNDS=3 STEPS=4 CP4=0 LINK_MBIT=). Output:
#   bench/results/cp_ring_overlap.md, or cp_ring_overlap_link.md with LINK_MBIT.
. "$(dirname "$0")/lib.sh"
bench_private_binary
[ -n "${BASELINE:-}" ] && [ -x "$BASELINE" ] || { echo "set BASELINE to a femtotron binary built without the overlap"; exit 1; }
cp "$BASELINE" "$TMP/baseline"
bench_corpus
SEQ=${SEQ:-8192} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-4}
MODEL=(--model.hidden_size 256 --model.num_hidden_layers 4 --model.num_attention_heads 4
       --model.num_key_value_heads 2 --model.intermediate_size 768 --model.vocab_size 257)
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
OUT="$TMP/rows.dat"
: >"$OUT"
cps="2"; [ "${CP4:-0}" = 1 ] && cps="2 4"
LINK_MBIT=${LINK_MBIT:-}
RESULT=cp_ring_overlap.md
if [ -n "$LINK_MBIT" ]; then
    tmp=$TMP
    . tests/shell/netns_hosts.sh
    link_rate() { echo "$LINK_MBIT"; }
    trap 'netns_hosts_down; rm -rf "$TMP"' EXIT
    netns_hosts_up 2 link_rate || { echo "no shaped link: $NETNS_WHY"; exit 1; }
    MPI=("${NETNS_MPI[@]}" --map-by ppr:1:node)
    FT=$(cd "$(dirname "$FT")" && pwd)/$(basename "$FT")
    cps="2"
    RESULT=cp_ring_overlap_link.md
fi
for round in $(seq 1 "$ROUNDS"); do
    for cp in $cps; do
        for which in baseline overlap; do
            bin="$TMP/baseline"; [ "$which" = overlap ] && bin="$FT"
            "${MPI[@]}" -np "$cp" "$bin" train --data.train "$TMP/data/train_*.bin" "${MODEL[@]}" \
                --training.seq_length "$SEQ" --model.max_position_embeddings "$SEQ" --parallel.cp "$cp" \
                --training.micro_batch_size 1 --training.global_batch_size 1 --training.warmup_steps 1 \
                --training.steps "$STEPS" --training.threads 1 --training.peak_flops 1e10 \
                --logging.trace "$TMP/t.json" --logging.metrics "$TMP/m.jsonl" >"$TMP/run.log" 2>&1 ||
                { echo "cp=$cp $which failed:"; tail -5 "$TMP/run.log"; exit 1; }
            /usr/bin/python3 - "$TMP/t.json" "$TMP/m.jsonl" "$cp" "$which" "$round" >>"$OUT" <<'PY'
import json, statistics, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["name"] == "backward"
      and e["args"]["step"] > 1]
recs = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l and '"event"' not in l]
step_ms = statistics.median(r["step_ms"] for r in recs[1:])
bwd = statistics.median(e["dur"] for e in ev) / 1e3
print(sys.argv[3], sys.argv[4], sys.argv[5], f"{step_ms:.0f}", f"{bwd:.0f}", " ".join(f"{r['loss']:.9f}" for r in recs))
PY
            tail -1 "$OUT"
        done
    done
done
{
    echo "# Ring-attention backward: the gradient hop overlapped with compute"
    echo
    [ -n "$LINK_MBIT" ] && echo "cp 2 on two hosts (network namespaces) joined by a link shaped to $LINK_MBIT Mbit/s (htb), one rank each, Open MPI over TCP."
    [ -n "$LINK_MBIT" ] && echo
    echo "bench/cp_ring_overlap.sh: the model of bench/cp.sh at $SEQ tokens, micro-batch 1, $STEPS steps"
    echo "(first dropped), threads 1, BASELINE (no overlap) and this binary alternating, $ROUNDS rounds."
    echo "backward ms: median duration of a micro-batch's stage backward (trace), ring included."
    echo
    echo "| cp | binary | median step ms (per round) | median of rounds | backward ms (per round) | median of rounds |"
    echo "|---:|---|---|---:|---|---:|"
    for cp in $cps; do
        for which in baseline overlap; do
            awk -v cp="$cp" -v w="$which" '$1 == cp && $2 == w { s = s " " $4; b = b " " $5; n++; S[n] = $4; Bk[n] = $5 }
                function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                               return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
                END { printf "| %d | %s |%s | %.0f |%s | %.0f |\n", cp, w, s, med(S, n), b, med(Bk, n) }' "$OUT"
        done
    done
    echo
    awk '{ k = $1 " " $3; for (i = 6; i <= NF; i++) L[$2, k, i] = $i; keys[k] = NF }
         END { for (k in keys) for (i = 6; i <= keys[k]; i++) { d = L["baseline", k, i] - L["overlap", k, i]; if (d < 0) d = -d
                                                                r = d / L["baseline", k, i]; if (r > w) w = r }
               printf "Largest relative loss difference, overlap vs baseline, same cp and round: %.2g\n", w }' "$OUT"
} >"$RES/$RESULT"
cat "$RES/$RESULT"
