#!/usr/bin/env bash
# tests/shell/test_peak.sh — the MFU peak (bench/run_peak.h): measured once per node
# and cached with the machine's identity, the line saying where it came from, a
# node's peak shared among its ranks, a corrupt or foreign cache measured again,
# training.peak_flops taking precedence, and the metrics' MFU computed against the
# sum of the ranks' peaks. (parallel.profile as the source: test_calibrate.sh.)
. "$(dirname "$0")/lib.sh"
fortunes_data
PY=/usr/bin/python3
MPI=(mpirun --oversubscribe --allow-run-as-root)
export FEMTOTRON_CACHE="$tmp/cache"
cores=$(nproc)

tiny=(--data.train "$tmp/data/train_*.bin" --training.seq_length 16 --training.micro_batch_size 1
      --training.global_batch_size 4 --model.hidden_size 32 --model.intermediate_size 64
      --model.num_hidden_layers 1 --model.num_attention_heads 2 --model.num_key_value_heads 1
      --training.threads 1 --training.steps 3)

# "MFU peak: A GFLOP/s per rank, B GFLOP/s in all (SOURCE)" -> A B SOURCE
peak_line() { sed -n 's/^MFU peak: \([0-9.]*\) GFLOP\/s per rank, \([0-9.]*\) GFLOP\/s in all (\(.*\))$/\1 \2 \3/p' "$1"; }
per_core() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["per_core_flops"] / 1e9)' "$1"; }
# close A B: |A - B| <= 0.051 + 1e-3 |B| (the line prints one decimal)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.051 + 1e-3 * (b < 0 ? -b : b)) }'; }

# 1. First run on this "node": measured now and cached with the machine's identity.
"$FT" train "${tiny[@]}" --training.global_batch_size 1 >"$tmp/a.log" 2>&1 || { failed "run a: $(tail -3 "$tmp/a.log")"; exit 1; }
cache=$(ls "$tmp"/cache/peak-*.json 2>/dev/null | head -1)
read -r a_rank a_all a_src < <(peak_line "$tmp/a.log")
if [ -n "$cache" ] && grep -q "measured now, cached in $cache" <<<"$a_src" &&
   $PY -c 'import json,sys; o=json.load(open(sys.argv[1])); assert all(k in o for k in ("host","cpu","cores","blas","per_core_flops","measured")) and o["per_core_flops"] > 0 and o["cores"] == int(sys.argv[2])' "$cache" "$cores"; then
    pass "first run measures the peak and caches it with host, CPU, cores and BLAS ($cache)"
else
    failed "first run: cache '$cache', line: $(grep '^MFU peak' "$tmp/a.log")"
fi
pc=$(per_core "$cache")
close "$a_rank" "$pc" && close "$a_all" "$pc" &&
    pass "1 rank x 1 thread: peak = one core's ($a_rank GFLOP/s)" ||
    failed "1 rank x 1 thread: per rank $a_rank, in all $a_all, one core $pc"

# 2. Four ranks of one thread on this node: read from the cache, the node's used
# cores (min(cores, 4)) shared by 4.
"${MPI[@]}" -np 4 "$FT" train "${tiny[@]}" --parallel.dp 4 >"$tmp/b.log" 2>&1 || { failed "run b: $(tail -3 "$tmp/b.log")"; exit 1; }
read -r b_rank b_all b_src < <(peak_line "$tmp/b.log")
used=$(( cores < 4 ? cores : 4 ))
want=$(awk -v p="$pc" -v u="$used" 'BEGIN { print p * u / 4 }')
grep -q "cached in $cache on .*; delete it to measure again; 4 ranks x 1 threads here use $used of them" <<<"$b_src" &&
    pass "4 ranks: the peak comes from the cache, and the line says so and how many cores the ranks use" ||
    failed "4 ranks: source '$b_src'"
close "$b_rank" "$want" && close "$b_all" "$(awk -v w="$want" 'BEGIN { print 4 * w }')" &&
    pass "4 ranks x 1 thread on $cores cores: $b_rank GFLOP/s per rank = one core x $used / 4, $b_all in all" ||
    failed "4 ranks: per rank $b_rank (want $want), in all $b_all"

# 3. MFU in the metrics file = model FLOPs per token x tokens/s / the peak in all.
"$FT" train "${tiny[@]}" --logging.metrics "$tmp/m.jsonl" >"$tmp/m.log" 2>&1 || { failed "run m: $(tail -3 "$tmp/m.log")"; exit 1; }
fpt=$(sed -n 's/^threads .* | \([0-9.e+]*\) model FLOPs\/token$/\1/p' "$tmp/m.log")
read -r m_rank m_all m_src < <(peak_line "$tmp/m.log")
if out=$($PY - "$tmp/m.jsonl" "$fpt" "$m_all" <<'PY' 2>&1
import json, sys
fpt, total = float(sys.argv[2]), float(sys.argv[3]) * 1e9
for r in (json.loads(l) for l in open(sys.argv[1])):
    if "event" in r: continue
    want = fpt * r["tokens_per_s"] / total
    assert abs(r["mfu"] - want) <= 0.02 * want, (r["step"], r["mfu"], want)
print("ok")
PY
); then pass "metrics: mfu = FLOPs/token x tokens/s / $m_all GFLOP/s on every step"; else failed "metrics mfu: $out"; fi

# 4. A corrupt cache, then one from another machine: each said, measured again, rewritten.
echo '{"host": "vm", "per_core_flops": ' >"$cache"
"$FT" train "${tiny[@]}" --training.global_batch_size 1 >"$tmp/c.log" 2>&1
grep -q "^MFU peak: .*measured now ($cache is not a peak cache file (unreadable, or a key is missing)), cached in $cache" "$tmp/c.log" &&
    $PY -c 'import json,sys; json.load(open(sys.argv[1]))' "$cache" &&
    pass "a corrupt cache file is named, measured again and rewritten" ||
    failed "corrupt cache: $(grep '^MFU peak' "$tmp/c.log")"
$PY -c 'import json,sys; o=json.load(open(sys.argv[1])); o["cpu"]="Some Other CPU"; o["per_core_flops"]=1e9; json.dump(o, open(sys.argv[1],"w"))' "$cache"
"$FT" train "${tiny[@]}" --training.global_batch_size 1 >"$tmp/d.log" 2>&1
read -r d_rank d_all d_src < <(peak_line "$tmp/d.log")
grep -q "measured on another machine (.*, Some Other CPU, $cores cores)" <<<"$d_src" &&
    awk -v x="$d_rank" 'BEGIN { exit !(x != 1.0) }' && [ "$(per_core "$cache")" != 1 ] &&
    pass "a cache from another CPU is not used: measured again ($d_rank GFLOP/s, not the file's 1.0)" ||
    failed "foreign cache: $d_src ($d_rank)"

# 5. training.peak_flops wins over the cache, per rank, summed over ranks.
"${MPI[@]}" -np 2 "$FT" train "${tiny[@]}" --parallel.dp 2 --training.peak_flops 2.5e9 >"$tmp/e.log" 2>&1
grep -qx "MFU peak: 2.5 GFLOP/s per rank, 5.0 GFLOP/s in all (training.peak_flops)" "$tmp/e.log" &&
    ! grep -q "finding the GEMM peak" "$tmp/e.log" &&
    pass "training.peak_flops 2.5e9 on 2 ranks: 2.5 per rank, 5.0 in all, nothing measured" ||
    failed "peak_flops: $(grep -i 'peak' "$tmp/e.log")"

# 6. A cache directory that cannot be written: measured, said, the run goes on.
FEMTOTRON_CACHE=/proc/femtotron-cache "$FT" train "${tiny[@]}" --training.global_batch_size 1 >"$tmp/f.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "^MFU peak: .*measured now; could not cache it in /proc/femtotron-cache/peak-.*json (.*), so the next run measures again" "$tmp/f.log" &&
    pass "an unwritable cache directory: measured, named, the run completes" ||
    failed "unwritable cache: exit $rc, $(grep -i 'peak' "$tmp/f.log")"
exit $fail
