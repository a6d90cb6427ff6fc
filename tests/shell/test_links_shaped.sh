#!/usr/bin/env bash
# tests/shell/test_links_shaped.sh — `femtotron bench links` on shaped links (issue 22
# item 3). Four hosts are built on this machine from network namespaces
# joined by veth links to a bridge, each with its own address and hostname, as in
# test_hosts.sh; each host's egress is shaped per destination with tc (htb classes
# filtered by destination address): h1<->h2 and h3<->h4 at 400 Mbit/s, every other
# pair at 100 Mbit/s (latency is not shaped: this machine's kernel has no netem
# qdisc). bench links runs one rank per host (Open MPI over TCP, the launcher
# agent entering a host's namespace where a cluster would use ssh), and every measured bandwidth must be within 10% of its shaped rate (the rate itself:
# veth hands the shaper TCP segments of up to 64 KiB, segmentation offload, so
# headers are a fraction of a percent of the bytes it counts). Then
# `plan --links` on the measured matrix, 4 nodes of 1 rank, dp 2 x pp 2: the
# placement must pair the fast links into the data-parallel rings, and training
# on it must be faster than in node order by the margin the planner predicted
# (within 15%, between the fastest and the median steps: see below). Last, train --parallel.auto
# with the measured links in its profile prices the layouts where its ranks run.
# Without the privilege to make namespaces or shape links it says so in one line
# and checks nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns_hosts.sh"
# Shaped rate (Mbit/s) from host i to host j.
rate() { if { [ "$1" -le 2 ] && [ "$2" -le 2 ]; } || { [ "$1" -ge 3 ] && [ "$2" -ge 3 ]; }; then echo 400; else echo 100; fi; }
trap 'netns_hosts_down; rm -rf "$tmp"' EXIT
if ! netns_hosts_up 4 rate; then
    echo "SKIP links_shaped: $NETNS_WHY"
    exit 0
fi
CLUSTER=("${NETNS_MPI[@]}" -np 4)
FTA=$(cd "$(dirname "$FT")" && pwd)/$(basename "$FT")
t0=$(date +%s.%N)
if ! timeout 300 "${CLUSTER[@]}" --map-by ppr:1:node "$FTA" bench links --output "$tmp/links.json" --bytes 2097152 --reps 5 >"$tmp/bench.log" 2>&1; then
    failed "links_shaped: bench links failed: $(tail -5 "$tmp/bench.log" | tr '\n' ' ' | cut -c1-300)"; exit 1
fi
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# The matrix in rank order (names from the file): measured against shaped, bytes/s.
report=$(awk -v payload=1000 '
    { text = text $0 } END {
        names = text; sub(/.*"nodes":[^\[]*\[/, "", names); sub(/\].*/, "", names); gsub(/[" \t]/, "", names)
        n = split(names, nm, ",")
        bw = text; sub(/.*"bw":[^\[]*\[/, "", bw); sub(/"lat".*/, "", bw)
        gsub(/[ \t\[\]]/, "", bw); sub(/,*$/, "", bw); k = split(bw, v, ",")
        worst = 0; out = ""
        for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) if (i != j) {
            hi = substr(nm[i], 2) + 0; hj = substr(nm[j], 2) + 0
            fast = (hi <= 2 && hj <= 2) || (hi >= 3 && hj >= 3)
            want = (fast ? 400 : 100) * 1e6 / 8 * payload / 1000
            got = v[(i - 1) * n + j]; e = (got - want) / want; if (e < 0) e = -e
            if (e > worst) worst = e
            out = out sprintf(" %s>%s %.1f/%.1f", nm[i], nm[j], got / 1e6, want / 1e6)
        }
        printf "%d %.3f%s", n * n == k ? n : -1, worst, out }' "$tmp/links.json")
n=${report%% *}; rest=${report#* }; worst=${rest%% *}
if [ "$n" = 4 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 0.10) }'; then
    pass "links_shaped: bench links on 4 shaped hosts in ${secs} s: every pair within $(awk -v w="$worst" 'BEGIN { printf "%.1f", 100 * w }')% of its shaped rate (measured/shaped MB/s:${rest#* })"
else
    failed "links_shaped: measured vs shaped (MB/s), worst $worst, n $n:${rest#* }"
fi
# The placement pairs the fast links into the data-parallel rings (dp 2 x pp 2 over
# 4 nodes of 1 rank: the dp groups are slots {0,2} and {1,3}, the pp chains {0,1},
# {2,3}; with ZeRO-1 a 70B-sized rank's gradients outweigh the pipeline's
# activations, so each dp pair must be h1,h2 or h3,h4).
"$FT" plan --model llama-3.1-70b --gpus 4 --gpus-per-node 1 --hardware h100 --seq-length 8192 \
    --global-batch-tokens 262144 --layout dp=2,pp=2,tp=1,mbs=1,zero=1,sched=1f1b --memory-gb 100000 \
    --links "$tmp/links.json" --placement "$tmp/place" >"$tmp/plan.out" 2>&1
read -r -a h <<< "$(tr '\n' ' ' <"$tmp/place.hosts" 2>/dev/null)"
same() { { [ "${1#h}" -le 2 ] && [ "${2#h}" -le 2 ]; } || { [ "${1#h}" -ge 3 ] && [ "${2#h}" -ge 3 ]; }; }
if [ "${#h[@]}" = 4 ] && same "${h[0]}" "${h[2]}" && same "${h[1]}" "${h[3]}"; then
    pass "links_shaped: plan --links puts the dp rings on the fast pairs: slots ${h[*]}; $(grep -o 'communication between.*' "$tmp/plan.out")"
else failed "links_shaped: placement '${h[*]}': $(tr '\n' ' ' <"$tmp/plan.out" | cut -c1-300)"; fi

# Trained: dp 2 x pp 2 of a small model (4.7 MB of fp32 gradients per rank, so the
# data-parallel all-reduce is what the links decide), in the profile's node order
# (the dp pairs h1,h3 and h2,h4 on the slow links) and on the placement's rankfile.
# The placement's predicted saving (link time in node order less placed) must be
# the measured one within 15%: the fastest step in node order less the fastest
# placed (steps 3-16 of two runs each). The fastest step, because the prediction
# is of an uncontended step: bench links keeps the best of its repetitions, and
# on this shared 2-core machine a step is only ever slowed, by other work taking
# the cores and by TCP's pacing. Traced (logging.trace), the node-order
# all-reduce's wait is 0.41 s at best, the link time predicted, and 0.42-0.48 s
# at the median. So the median-step saving moves with the machine's load (-11%
# to +30% over 9 runs before the yield below; the old bound was 25%), the
# fastest-step saving much less; both are printed. Since the yield, the two
# bracket the prediction: fastest -7.8% to -17.3%, median +4.9% to +7.5% over 5
# quiet runs (2026-11-28; the fastest node-order step is a little faster than
# its link time predicts, some of the all-reduce hiding behind the other stage's
# backward). The check is that the band from one to the other comes within 15%
# of the predicted saving: a placement that saved nothing (-100% both) or a
# prediction off by half fails it; the fastest step alone failed CI once at -17.3%.
# Open MPI's non-blocking all-reduce is asked for its ring (libnbc algorithm 1),
# the collective the planner prices; its default for 2 ranks here is a reduce then
# a broadcast, one direction at a time, twice the ring's time on these links.
for i in $(seq 1 400); do echo "line $i: ranks start where the rankfile puts them, and links differ pair by pair"; done >"$tmp/in.txt"
"$FT" prepare --input "$tmp/in.txt" --output "$tmp/data" --val-fraction 0 >/dev/null 2>&1
cat >"$tmp/run.json" <<JSON
{"model": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 64},
 "data": {"train": "$tmp/data/train_*.bin"},
 "training": {"steps": 16, "seq_length": 32, "micro_batch_size": 2, "global_batch_size": 8, "threads": 1,
              "peak_flops": 1e9},
 "parallel": {"dp": 2, "pp": 2},
 "logging": {"every": 1}}
JSON
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$FT" bench calibrate --quick --output "$tmp/prof.json" \
    >"$tmp/cal.log" 2>&1
"$FT" plan --config "$tmp/run.json" --gpus 4 --gpus-per-node 1 --hardware this --profile "$tmp/prof.json" \
    --layout dp=2,pp=2 --links "$tmp/links.json" --placement "$tmp/small" >"$tmp/small.out" 2>&1
line=$(grep '^placement on 4 measured nodes' "$tmp/small.out")
p_order=$(echo "$line" | sed -n 's/.* \([0-9.e+-]*\) s per step in the profile.s node order.*/\1/p')
p_placed=$(echo "$line" | sed -n 's/.*, \([0-9.e+-]*\) s placed.*/\1/p')
# The fastest and the median step_ms of steps 3.. of the metrics files given, in seconds.
step_stats() {
    sed -nE 's/.*"step": ([0-9]+),.*"step_ms": ([0-9.]+).*/\1 \2/p' "$@" | awk '$1 >= 3 { print $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "nan nan"
              else print v[1] / 1000, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1000 }'
}
# The four hosts share this machine's cores, but each has one slot, so Open MPI
# spins in every wait: mpi_yield_when_idle makes a waiting rank give its core to
# the ranks computing (without it the placed run's forward, backward and
# optimizer took 1.3-1.7x longer than in node order, and the median-step error
# ranged -11% to +30%).
ring=(--mca coll_libnbc_iallreduce_algorithm 1 --mca mpi_yield_when_idle 1)
# Two rounds, interleaved (order, placed, order, placed): a whole run can be
# slowed by other work on the machine.
for round in 1 2; do
    "${CLUSTER[@]}" "${ring[@]}" --map-by ppr:1:node "$FTA" train --config "$tmp/run.json" \
        --logging.metrics "$tmp/order$round.jsonl" >"$tmp/order.log" 2>&1
    "${CLUSTER[@]}" "${ring[@]}" --rankfile "$tmp/small.rankfile" "$FTA" train --config "$tmp/run.json" \
        --logging.metrics "$tmp/placed$round.jsonl" >"$tmp/placed.log" 2>&1
done
read -r f_order m_order <<< "$(step_stats "$tmp"/order[12].jsonl)"
read -r f_placed m_placed <<< "$(step_stats "$tmp"/placed[12].jsonl)"
verdict=$(awk -v po="$p_order" -v pp="$p_placed" -v fo="$f_order" -v fp="$f_placed" -v mo="$m_order" -v mp="$m_placed" 'BEGIN {
    p = po - pp; f = fo - fp; m = mo - mp; e = p > 0 ? (f - p) / p : 9; em = p > 0 ? (m - p) / p : 9
    lo = e < em ? e : em; hi = e < em ? em : e
    printf "%s predicted saving %.3f s (%.3f -> %.3f s of link time), measured %.3f s (fastest step %.3f -> %.3f s), %+.1f%%; median steps %.3f -> %.3f s, %+.1f%%",
        (p > 0 && lo <= 0.15 && hi >= -0.15) ? "ok" : "bad", p, po, pp, f, fo, fp, 100 * e, mo, mp, 100 * em }')
if [ "${verdict%% *}" = ok ]; then
    pass "links_shaped: the placement trains faster by the margin it predicted: ${verdict#* }"
else failed "links_shaped: trained placement vs node order: ${verdict#* } $(tail -2 "$tmp/placed.log" | tr '\n' ' ' | cut -c1-200)"; fi

# train --parallel.auto on the 4 hosts with a profile that holds the measured links
# (bench calibrate's profile and the links bench links measured): it prices every
# layout on the links where its ranks run (rank i on host i+1, the matrix's node
# order) and says so, and its predicted step is plan's for that layout in node
# order on the same links.
/usr/bin/python3 -c "import json, sys; p = json.load(open(sys.argv[1])); p['links'] = json.load(open(sys.argv[2]))['links']; json.dump(p, open(sys.argv[3], 'w'))" \
    "$tmp/prof.json" "$tmp/links.json" "$tmp/prof_links.json"
"${CLUSTER[@]}" --map-by ppr:1:node "$FTA" train --config "$tmp/run.json" --parallel.auto true \
    --parallel.profile "$tmp/prof_links.json" --training.steps 2 >"$tmp/auto.log" 2>&1
auto=$(grep '^parallel.auto:' "$tmp/auto.log" | head -1)
chosen=$(echo "$auto" | sed 's/^parallel.auto: //; s/ (predicted.*//')
a_step=$(echo "$auto" | sed -n 's/.*(predicted \([0-9.e+-]*\) s per step.*/\1/p')
# The layout's name as plan --layout keys: dp2 tp1 pp2 1f1b cp1 z0 mbs2 M2 rc:none.
keys=$(echo "$chosen" | awk '{ for (i = 1; i <= NF; i++) { t = $i
    if (t ~ /^dp[0-9]+$/) o = o "dp=" substr(t, 3)
    else if (t ~ /^tp[0-9]+(sp)?$/) { sp = t ~ /sp$/; sub(/sp$/, "", t); o = o ",tp=" substr(t, 3) ",sp=" sp }
    else if (t ~ /^pp[0-9]+$/) o = o ",pp=" substr(t, 3)
    else if (t ~ /^cp[0-9]+$/) o = o ",cp=" substr(t, 3)
    else if (t ~ /^z[0-9]$/) o = o ",zero=" substr(t, 2)
    else if (t ~ /^mbs[0-9]+$/) o = o ",mbs=" substr(t, 4)
    else if (t ~ /^rc:/) o = o ",recompute=" substr(t, 4)
    else if (t ~ /^interleavedx/) { v = substr(t, 13); sub(/\+/, "", v); o = o ",sched=interleaved,v=" v }
    else if (t !~ /^M[0-9]+$/) o = o ",sched=" t }
    print o }')
"$FT" plan --config "$tmp/run.json" --gpus 4 --gpus-per-node 1 --hardware this --profile "$tmp/prof_links.json" \
    --layout "$keys" --links "$tmp/prof_links.json" --placement "$tmp/auto" >"$tmp/auto_plan.out" 2>&1
p_step=$(grep 'predicted step' "$tmp/auto_plan.out" | sed -n 's/.*: \([0-9.e+-]*\) s in node order.*/\1/p')
if echo "$auto" | grep -q 'collectives on the measured links of nodes h1 h2 h3 h4)' && grep -q 'step     2/2' "$tmp/auto.log" &&
   [ -n "$a_step" ] && [ "$a_step" = "$p_step" ]; then
    pass "links_shaped: train --parallel.auto prices on the measured links where its ranks run: '$chosen', predicted $a_step s = plan --links in node order ($keys)"
else failed "links_shaped: parallel.auto: '$auto', plan in node order '$p_step' ($keys): $(tail -3 "$tmp/auto.log" | tr '\n' ' ' | cut -c1-300)"; fi
exit $fail
