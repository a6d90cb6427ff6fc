#!/usr/bin/env bash
# tests/shell/test_placement.sh — `femtotron plan --links`: the chosen layout placed
# on a measured link matrix (issue 22 item 2). On paper: 16 nodes of 8 GPUs in two
# racks (45 GB/s inside a rack, 6 GB/s between, racks interleaved in the profile's
# node order), Llama-3.1-70B dp 4 x pp 4 x tp 8: the placement keeps every
# data-parallel ring (the most bytes) inside one rack, says how much link time it
# saves, and writes a rankfile and a Slurm host list that give each node its 8
# ranks. `bench links` on 3 ranks of this host: a full matrix, written into an
# existing profile. Then `train` on the placement: the matrix bench links measured
# on 2 ranks of this host, the printed `mpirun --rankfile` command trains dp 2.
. "$(dirname "$0")/lib.sh"
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}"
export OMP_NUM_THREADS=1

# links N RACK_EXPR HOST...: a "links" profile; node i is in rack (i*5 % N < N/2).
links() {
    awk -v n="$1" -v host="$2" 'BEGIN {
        printf "{\"links\": {\"nodes\": ["
        for (i = 0; i < n; i++) printf "%s\"%s\"", i ? ", " : "", host ? host : sprintf("n%02d", i)
        for (k = 0; k < 2; k++) {
            printf "], \"%s\": [", k ? "lat" : "bw"
            for (i = 0; i < n; i++) {
                printf "%s[", i ? ", " : ""
                for (j = 0; j < n; j++) {
                    same = ((i * 5) % n < n / 2) == ((j * 5) % n < n / 2)
                    v = i == j ? 0 : (k ? (same ? 5e-6 : 2e-5) : (same ? 45e9 : 6e9))
                    printf "%s%g", j ? ", " : "", v
                }
                printf "]"
            }
        }
        print "]}}"
    }'
}
links 16 "" >"$tmp/links16.json"
"$FT" plan --model llama-3.1-70b --gpus 128 --hardware h100 --seq-length 8192 --global-batch-tokens 4194304 \
    --layout dp=4,tp=8,pp=4,cp=1,sp=1,mbs=1,zero=1,sched=1f1b --links "$tmp/links16.json" \
    --placement "$tmp/place" >"$tmp/p.out" 2>&1
line=$(grep '^placement on 16 measured nodes' "$tmp/p.out")
order=$(echo "$line" | sed -n 's/.* \([0-9.e+-]*\) s per step in the profile.s node order.*/\1/p')
placed=$(echo "$line" | sed -n 's/.*, \([0-9.e+-]*\) s placed.*/\1/p')
if [ -n "$order" ] && [ -n "$placed" ] && awk -v a="$placed" -v b="$order" 'BEGIN { exit !(a < 0.5 * b) }'; then
    pass "placement on two racks: $(echo "$line" | grep -o 'communication.*')"
else failed "placement line: $(tr '\n' ' ' <"$tmp/p.out" | cut -c1-400)"; fi
# The table prices the layout's collectives on the links they cross in that
# placement: its step is the placement line's "placed" prediction, and node order
# (dp rings across the racks) predicts a slower step.
pred=$(grep -A1 '^placement on 16 measured nodes' "$tmp/p.out" | grep 'predicted step')
s_order=$(echo "$pred" | sed -n 's/.*: \([0-9.e+-]*\) s in node order.*/\1/p')
s_placed=$(echo "$pred" | sed -n 's/.*, \([0-9.e+-]*\) s placed.*/\1/p')
s_row=$(awk -F'|' '/^ +1  dp4 tp8/ { split($2, a, " "); print a[1] }' "$tmp/p.out")
if [ -n "$s_row" ] && [ "$s_row" = "$s_placed" ] && awk -v a="$s_placed" -v b="$s_order" 'BEGIN { exit !(a < b) }'; then
    pass "the table's step ($s_row s) is the placed prediction; node order predicts $s_order s"
else failed "table vs placement line: row '$s_row', $pred"; fi
# Rank r's host is line r+1 of the host list; node slot s holds ranks 8s..8s+7; the
# dp ring of pipeline stage k is slots k, k+4, k+8, k+12 (grid order dp-pp-cp-tp).
if [ "$(wc -l <"$tmp/place.hosts")" = 128 ] && [ "$(sort "$tmp/place.hosts" | uniq -c | awk '$1 != 8' | wc -l)" = 0 ] &&
   awk 'NR % 8 == 1 { slot = (NR - 1) / 8; host[slot] = $1 }
        END { for (k = 0; k < 4; k++) { r = -1
                  for (d = 0; d < 4; d++) { i = substr(host[k + 4 * d], 2) + 0; x = (i * 5) % 16 < 8
                      if (r >= 0 && x != r) exit 1; r = x } } }' "$tmp/place.hosts"; then
    pass "every node gets 8 ranks, and every data-parallel ring stays inside one rack"
else failed "host list: $(sort "$tmp/place.hosts" | uniq -c | tr '\n' ' ' | cut -c1-300)"; fi
if diff <(awk '{ print $2 }' "$tmp/place.rankfile" | sed 's/=.*//' | tr -d ' ') <(seq 0 127) >/dev/null &&
   diff <(sed 's/^rank [0-9]*=\([^ ]*\) slot=.*/\1/' "$tmp/place.rankfile") "$tmp/place.hosts" >/dev/null &&
   grep -q "mpirun --rankfile $tmp/place.rankfile -np 128 " "$tmp/p.out" &&
   grep -q "SLURM_HOSTFILE=$tmp/place.hosts srun --distribution=arbitrary --ntasks 128 " "$tmp/p.out"; then
    pass "rankfile and host list agree rank by rank; the printed commands start ranks on them"
else failed "rankfile/commands: $(head -3 "$tmp/place.rankfile" | tr '\n' ' ')"; fi
# Bad inputs.
links 4 "" >"$tmp/links4.json"
if "$FT" plan --model llama-3.1-70b --gpus 128 --hardware h100 --seq-length 8192 --global-batch-tokens 4194304 \
        --layout dp=4,tp=8,pp=4 --links "$tmp/links4.json" --placement "$tmp/x" >"$tmp/e.out" 2>&1; then
    failed "a 4-node matrix for 16 nodes was accepted"
elif grep -q 'fill 16 nodes of 8 GPUs (--gpus-per-node), the link matrix has 4 nodes' "$tmp/e.out"; then
    pass "a matrix of the wrong size: $(grep -o 'the layout.*' "$tmp/e.out" | head -1)"
else failed "wrong-size matrix: $(tr '\n' ' ' <"$tmp/e.out" | cut -c1-300)"; fi
echo '{"name": "x"}' >"$tmp/nolinks.json"
if ! "$FT" plan --model llama-3.1-70b --gpus 128 --hardware h100 --seq-length 8192 --global-batch-tokens 4194304 \
        --layout dp=4,tp=8,pp=4 --links "$tmp/nolinks.json" >"$tmp/e.out" 2>&1 && grep -q 'bench links' "$tmp/e.out"; then
    pass "a profile without links says how to measure them"
else failed "profile without links: $(tr '\n' ' ' <"$tmp/e.out" | cut -c1-300)"; fi

# train on the placement: 2 "nodes" of 1 rank on this host.
for i in $(seq 1 200); do echo "line $i: ranks start where the rankfile puts them"; done >"$tmp/in.txt"
"$FT" prepare --input "$tmp/in.txt" --output "$tmp/data" --val-fraction 0 >/dev/null 2>&1
cat >"$tmp/run.json" <<JSON
{"model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 64},
 "data": {"train": "$tmp/data/train_*.bin"},
 "training": {"steps": 2, "seq_length": 32, "micro_batch_size": 2, "global_batch_size": 8, "threads": 1,
              "peak_flops": 1e9},
 "logging": {"every": 1}}
JSON
# Measured: bench links on 3 ranks writes a full matrix into an existing profile
# (its other keys kept; plan's links_load refuses a zero bandwidth off the
# diagonal, so every pair was measured); the 2-rank measurement is what the run below is placed on.
echo '{"name": "kept"}' >"$tmp/links3.json"
if "${MPIRUN[@]}" -np 3 "$FT" bench links --output "$tmp/links3.json" --bytes 262144 >"$tmp/b3.out" 2>&1 &&
   grep -q '"name":[[:space:]]*"kept"' "$tmp/links3.json" &&
   "$FT" plan --model smollm-135m --gpus 3 --gpus-per-node 1 --hardware h100 --seq-length 32 --global-batch-tokens 96 \
       --layout dp=3 --links "$tmp/links3.json" --placement "$tmp/three" >"$tmp/p3.out" 2>&1 &&
   grep -q '^placement on 3 measured nodes' "$tmp/p3.out" && [ "$(wc -l <"$tmp/three.rankfile")" = 3 ]; then
    pass "bench links on 3 ranks: $(head -1 "$tmp/b3.out" | cut -c1-120); plan --links places dp 3 on it"
else failed "bench links 3 ranks: $(tr '\n' ' ' <"$tmp/b3.out" | cut -c1-300) $(tr '\n' ' ' <"$tmp/p3.out" 2>/dev/null | cut -c1-200)"; fi
if "${MPIRUN[@]}" -np 1 "$FT" bench links --output "$tmp/one.json" >"$tmp/b1.out" 2>&1; then
    failed "bench links on 1 rank exited 0"
elif grep -q 'needs at least 2 ranks, one per node' "$tmp/b1.out"; then pass "bench links on 1 rank: $(grep -o 'needs.*' "$tmp/b1.out" | head -1)"
else failed "bench links 1 rank: $(tr '\n' ' ' <"$tmp/b1.out" | cut -c1-300)"; fi
"${MPIRUN[@]}" -np 2 "$FT" bench links --output "$tmp/links2.json" --bytes 262144 >/dev/null 2>&1
"$FT" plan --model smollm-135m --gpus 2 --gpus-per-node 1 --hardware h100 --seq-length 32 --global-batch-tokens 256 \
    --layout dp=2,mbs=2 --links "$tmp/links2.json" --placement "$tmp/two" >"$tmp/two.out" 2>&1
cmd=$(grep -A1 '^train it (Open MPI):' "$tmp/two.out" | tail -1 | sed 's/^ *mpirun //')
read -r -a args <<< "$cmd"
# Keep the placement and the layout keys; the run config is this test's tiny model.
keep=(); skip=0
for a in "${args[@]}"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    case "$a" in --config|--training.seq_length) skip=1 ;; ./femtotron) ;; train) ;; *) keep+=("$a") ;; esac
done
if [ "${#keep[@]}" -gt 4 ] && "${MPIRUN[@]}" "${keep[@]:0:4}" "$FT" train --config "$tmp/run.json" "${keep[@]:4}" \
        >"$tmp/train.out" 2>&1 && grep -q '^layout: 2 ranks = dp 2 x pp 1 x cp 1 x tp 1' "$tmp/train.out" &&
   grep -q 'step     2/2' "$tmp/train.out"; then
    pass "train runs on the placement's rankfile: mpirun ${keep[*]:0:4} ... ($(grep '^layout:' "$tmp/train.out" | cut -c1-50))"
else failed "train on the rankfile (${keep[*]:0:4}): $(tail -5 "$tmp/train.out" | tr '\n' ' ' | cut -c1-400)"; fi
exit $fail
