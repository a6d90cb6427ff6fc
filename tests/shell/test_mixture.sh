#!/usr/bin/env bash
# tests/shell/test_mixture.sh — weighted data mixtures (data/mixture.h) in training:
# two sources prepared from different fortunes (0.7 / 0.3) train with the same losses
# under every layout (dp2 ZeRO-1, tp2 with SP, pp2 1f1b, dp2 x pp2 with shuffle:
# relative 1e-5 of one rank); the JSON list gives the losses of the command-line form;
# a resume is bit-exact; the metrics' per-source tokens follow the weights to within
# one sequence at every step over 60 steps; validation scores each data.val source
# on its own and averages them by weight; the start-up report names each source with
# its weight and epochs; a resume with other sources warns.
. "$(dirname "$0")/lib.sh"
MPI=(mpirun --oversubscribe --allow-run-as-root)
F=/usr/share/games/fortunes
cat $F/computers $F/science >"$tmp/a.txt"
cat $F/literature $F/wisdom >"$tmp/b.txt"
for s in a b; do
    "$FT" prepare --input "$tmp/$s.txt" --output "$tmp/$s" --split-on % --val-fraction 0.1 >"$tmp/prep_$s.log" 2>&1 ||
        { failed "prepare $s: $(tail -2 "$tmp/prep_$s.log")"; exit 1; }
done
MIX="$tmp/a/train_*.bin:0.7,$tmp/b/train_*.bin:0.3"
C=(--training.seq_length 32 --training.micro_batch_size 2 --training.global_batch_size 8
   --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 4
   --model.num_attention_heads 4 --model.num_key_value_heads 2 --training.peak_flops 1e10
   --training.threads 1 --training.lr 3e-3 --parallel.timeout_s 60)
train() {  # train NAME NP [--config FILE] ARGS...
    local name=$1 np=$2 conf=(); shift 2
    [ "$1" = --config ] && { conf=(--config "$2"); shift 2; }
    timeout 120 "${MPI[@]}" -np "$np" "$FT" train "${conf[@]}" "${C[@]}" "$@" --logging.metrics "$tmp/$name.jsonl" \
        >"$tmp/$name.log" 2>&1 || { failed "$name: exit $? ($(grep -m1 'femtotron:' "$tmp/$name.log"))"; return 1; }
}
compare() {  # compare NAME REF TOL
    /usr/bin/python3 - "$tmp/$2.jsonl" "$tmp/$1.jsonl" "$1" "$3" <<'PY' || fail=1
import json, sys
steps = lambda path: [r for r in map(json.loads, open(path)) if "event" not in r]  # step records
ref = {r["step"]: r["loss"] for r in steps(sys.argv[1])}
got = {r["step"]: r["loss"] for r in steps(sys.argv[2])}
worst = max(abs(ref[s] - got[s]) / abs(ref[s]) for s in got) if got else float("inf")
ok = got and worst <= float(sys.argv[4])
print("PASS" if ok else "FAIL", sys.argv[3], "steps", min(got, default=0), "..", max(got, default=0),
      "worst_rel_diff=%.3g" % worst, "(tolerance %s)" % sys.argv[4])
PY
}
VAL=(--data.val "$tmp/a/val_*.bin:1,$tmp/b/val_*.bin:1" --logging.val_every 10 --logging.val_batches 2)
train mix_1rank 1 --data.train "$MIX" --training.steps 60 "${VAL[@]}" || exit 1
train mix_ref 1 --data.train "$MIX" --training.steps 20 || exit 1
train mix_dp2 2 --data.train "$MIX" --training.steps 20 --parallel.dp 2 --parallel.zero 1 && compare mix_dp2 mix_ref 1e-5
train mix_tp2 2 --data.train "$MIX" --training.steps 20 --parallel.tp 2 --parallel.sequence_parallel true &&
    compare mix_tp2 mix_ref 1e-5
train mix_pp2 2 --data.train "$MIX" --training.steps 20 --parallel.pp 2 --parallel.pp_schedule 1f1b &&
    compare mix_pp2 mix_ref 1e-5
train mix_shuf_1rank 1 --data.train "$MIX" --training.steps 12 --data.shuffle true
train mix_shuf_dp2pp2 4 --data.train "$MIX" --training.steps 12 --data.shuffle true --parallel.dp 2 --parallel.pp 2 &&
    compare mix_shuf_dp2pp2 mix_shuf_1rank 1e-5
# The single source alone differs: the mixture is really read.
train only_a 1 --data.train "$tmp/a/train_*.bin" --training.steps 3
/usr/bin/python3 - "$tmp/only_a.jsonl" "$tmp/mix_1rank.jsonl" <<'PY' && pass "source a alone gives other losses than the mixture" || failed "source a alone gives the mixture's losses"
import json, sys
steps = lambda path: [r for r in map(json.loads, open(path)) if "event" not in r]  # step records
a = [r["loss"] for r in steps(sys.argv[1])][:3]
m = [r["loss"] for r in steps(sys.argv[2])][:3]
sys.exit(0 if a != m else 1)
PY

# The JSON list form.
cat >"$tmp/run.json" <<EOF2
{"data": {"train": [{"path": "$tmp/a/train_*.bin", "weight": 0.7}, {"path": "$tmp/b/train_*.bin", "weight": 0.3}]}}
EOF2
train mix_json 1 --config "$tmp/run.json" --training.steps 20 && compare mix_json mix_ref 0

# Per-source tokens, validation per source, the start-up report.
/usr/bin/python3 - "$tmp/mix_1rank.jsonl" <<'PY' || fail=1
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "event" not in r]  # step records
G, S, w = 8, 32, (0.7, 0.3)
worst = max(abs(r["source_tokens"][k] / S - w[k] * r["step"] * G) for r in rows for k in (0, 1))
ok = len(rows) == 60 and worst <= 1 and all(sum(r["source_tokens"]) == r["step"] * G * S for r in rows)
print("PASS" if ok else "FAIL", "source_tokens follow the weights 0.7/0.3 to within %g sequences at every one of %d steps "
      "(%d sequences in all)" % (worst, len(rows), rows[-1]["step"] * G))
vals = [r for r in rows if "val_loss" in r]
ok = len(vals) == 6 and all(len(r["val_loss_by_source"]) == 2 and r["val_loss_by_source"][0] != r["val_loss_by_source"][1]
                            and abs(r["val_loss"] - sum(r["val_loss_by_source"]) / 2) < 1e-12 for r in vals)
print("PASS" if ok else "FAIL", "validation scores each data.val source on its own (%s at step %d) and val_loss is their "
      "weighted mean" % (vals[-1].get("val_loss_by_source") if vals else None, vals[-1]["step"] if vals else 0))
PY
if grep -q "data.train: a mixture of 2 sources" "$tmp/mix_1rank.log" &&
    grep -Eq "source 1: .*/a/train_\*\.bin \| weight 0\.7000 \| [0-9]+ sequences \| [0-9.e+-]+ epochs over the run" "$tmp/mix_1rank.log" &&
    grep -q "val_loss .* (by source: " "$tmp/mix_1rank.log"; then
    pass "the start-up report names each source, its weight, sequences and epochs: $(grep -m1 'source 2:' "$tmp/mix_1rank.log")"
else failed "start-up report: $(grep -A3 mixture "$tmp/mix_1rank.log" | head -4)"; fi

# Resume: bit-exact, and a changed mixture is said.
train full 1 --data.train "$MIX" --training.steps 12 --checkpoint.dir "$tmp/ck_full"
train part 1 --data.train "$MIX" --training.steps 6 --checkpoint.dir "$tmp/ck_part"
train resumed 1 --data.train "$MIX" --training.steps 12 --checkpoint.dir "$tmp/ck_part" --checkpoint.resume true &&
    compare resumed full 0
mkdir -p "$tmp/ck_other" && cp -r "$tmp/ck_part/step_0000006" "$tmp/ck_other/"
train changed 1 --data.train "$tmp/a/train_*.bin:0.5,$tmp/b/train_*.bin:0.5" --training.steps 8 \
    --checkpoint.dir "$tmp/ck_other" --checkpoint.resume true
if grep -q "is not what the checkpoint's run read" "$tmp/changed.log"; then
    pass "a resume with other mixture weights warns: $(grep -m1 "not what" "$tmp/changed.log" | cut -c1-150)"
else failed "no warning for a changed mixture"; fi
exit $fail
