#!/usr/bin/env bash
# tests/shell/test_memory_line.sh — the start-up memory lines: rank 0's (exact bytes,
# which test_parity.sh compares with the planner), and the maximum over ranks of each
# kind with the rank that has it, and the largest total with its grid position
# (pipeline stages differ). Checked against every rank's own exact line
# (logging.verbose) on pp 2 and on dp 2 x pp 2 with an untied head that makes the
# last stage the largest.
. "$(dirname "$0")/lib.sh"
fortunes_data
PY=/usr/bin/python3
MPI=(mpirun --oversubscribe --allow-run-as-root)
base=(--data.train "$tmp/data/train_*.bin" --training.seq_length 32 --training.micro_batch_size 1
      --training.global_batch_size 4 --model.hidden_size 64 --model.intermediate_size 128
      --model.num_hidden_layers 2 --model.num_attention_heads 4 --model.num_key_value_heads 2
      --training.threads 1 --training.steps 1 --training.peak_flops 1e10)

# check LOG NP ORDER_ARGS...: the max line agrees with the per-rank exact lines.
check() {
    local log=$1 np=$2 what=$3
    local out
    if out=$($PY - "$log" "$np" <<'PY' 2>&1
import re, sys
text = open(sys.argv[1]).read(); n = int(sys.argv[2])
kinds = ["params", "grads", "optimizer", "activations", "comm"]
ranks = {}
for m in re.finditer(r"^memory bytes \(rank (\d+)\): (.*)$", text, re.M):
    f = m.group(2).split()
    ranks[int(m.group(1))] = {f[i]: int(f[i + 1]) for i in range(0, len(f), 2)}
assert sorted(ranks) == list(range(n)), "per-rank lines for %s" % sorted(ranks)
lines = re.findall(r"^memory \(max over (\d+) ranks\): (.*)$", text, re.M)
assert len(lines) == 1 and int(lines[0][0]) == n, "max lines: %s" % lines
body = lines[0][1]
MiB = 1024.0 * 1024.0
for k in kinds:
    m = re.search(r"\b%s ([0-9.]+) MiB \(rank (\d+)\)" % k, body)
    assert m, "no %s in %s" % (k, body)
    best = max(ranks[r][k] for r in ranks)
    first = min(r for r in ranks if ranks[r][k] == best)
    assert abs(float(m.group(1)) - best / MiB) <= 0.051, (k, m.group(1), best / MiB)
    assert int(m.group(2)) == first, (k, "rank", m.group(2), "want", first)
tot = {r: sum(ranks[r].values()) for r in ranks}
best = max(tot.values()); first = min(r for r in tot if tot[r] == best)
m = re.search(r"total ([0-9.]+) MiB on rank (\d+) \(pp stage (\d+) of (\d+), dp (\d+), cp (\d+), tp (\d+)\)", body)
assert m and int(m.group(2)) == first and abs(float(m.group(1)) - best / MiB) <= 0.051, (body, first, best)
print("total %.1f MiB on rank %d (stage %s); rank 0 %.1f MiB" % (best / MiB, first, m.group(3), tot[0] / MiB))
print("STAGE %s" % m.group(3))
PY
    ); then
        pass "$what: max line = max over the ranks' exact lines, with the right rank: $(head -1 <<<"$out")"
        stage=$(sed -n 's/^STAGE //p' <<<"$out")
    else
        failed "$what: $out"
        stage=
    fi
}

"${MPI[@]}" -np 2 "$FT" train "${base[@]}" --parallel.pp 2 --logging.verbose true >"$tmp/a.log" 2>&1 ||
    { failed "pp 2 run: $(tail -3 "$tmp/a.log")"; exit 1; }
check "$tmp/a.log" 2 "pp 2"

# dp 2 x pp 2, untied 4096-token vocabulary: the last stage (head + logits) is the
# largest, and its position is printed.
"${MPI[@]}" -np 4 "$FT" train "${base[@]}" --parallel.pp 2 --parallel.dp 2 --model.vocab_size 4096 \
    --model.tie_word_embeddings false --logging.verbose true >"$tmp/b.log" 2>&1 ||
    { failed "dp 2 x pp 2 run: $(tail -3 "$tmp/b.log")"; exit 1; }
check "$tmp/b.log" 4 "dp 2 x pp 2, vocab 4096"
[ "$stage" = 1 ] && pass "dp 2 x pp 2, vocab 4096: the largest rank is on the last stage (stage 1)" ||
    failed "dp 2 x pp 2: largest total on stage '$stage', want 1"

# Without verbose: rank 0's two lines and the max line, once each.
"${MPI[@]}" -np 2 "$FT" train "${base[@]}" --parallel.pp 2 >"$tmp/c.log" 2>&1
n0=$(grep -c '^memory (rank 0)' "$tmp/c.log"); n1=$(grep -c '^memory\( bytes\)\? (rank 1)' "$tmp/c.log")
nm=$(grep -c '^memory (max over 2 ranks)' "$tmp/c.log")
[ "$n0" = 1 ] && [ "$n1" = 0 ] && [ "$nm" = 1 ] &&
    pass "without verbose: rank 0's line and one max line" || failed "without verbose: rank 0 $n0, rank 1 $n1, max $nm"

# One rank: its own line is the whole story; no max line.
"$FT" train "${base[@]}" >"$tmp/d.log" 2>&1
! grep -q '^memory (max over' "$tmp/d.log" && grep -q '^memory (rank 0)' "$tmp/d.log" &&
    pass "1 rank: no max line" || failed "1 rank: $(grep '^memory' "$tmp/d.log")"
exit $fail
