#!/usr/bin/env bash
# bench/planner_validation.sh — the planner's predicted step time against the
# measured one, on this machine, for layouts of 1, 2, 4 and 8 ranks (4 and 8 ranks
# share the 2 cores: oversubscribed).
#
# For each world size R: `femtotron bench calibrate` runs with R ranks at once
# (so the GEMM/attention curves and collective costs are those of R ranks sharing
# the machine), then every layout below — plus the planner's own first choice —
# is (a) predicted by `femtotron plan --config RUN --layout L --hardware this` and
# (b) trained for STEPS steps; measured = median step time of steps 3..STEPS.
# Reported: per-layout error, the mean absolute error per world size and overall
# (target <= 15%), and whether the layout the planner ranks first among them is
# within 10% of the fastest measured one.
#
# Output: bench/results/planner_validation.md (and .tsv). Usage: bench/planner_validation.sh
#   (FEMTOTRON=path overrides ./femtotron; STEPS=N, default 6; SIZES="1 2 4 8")
. "$(dirname "$0")/lib.sh"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
STEPS=${STEPS:-6}
SIZES=${SIZES:-"1 2 4 8"}
bench_corpus

# 8 layers, hidden 256, 4 query / 2 key-value heads (head dim 64, as the attention curves), sequence 256, 16 sequences per step.
cat >"$TMP/run.json" <<JSON
{"model": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 8,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 257,
           "max_position_embeddings": 256},
 "data": {"train": "$TMP/data/train_*.bin"},
 "training": {"steps": $STEPS, "seq_length": 256, "micro_batch_size": 4, "global_batch_size": 16,
              "warmup_steps": 2},
 "logging": {"every": 1}}
JSON

layouts_for() {
    case $1 in
    1) printf '%s\n' "dp=1,mbs=4" "dp=1,mbs=8" "dp=1,mbs=16" "dp=1,mbs=4,recompute=selective" \
           "dp=1,mbs=4,recompute=full" ;;
    2) printf '%s\n' "dp=2,mbs=4,zero=0" "dp=2,mbs=4,zero=1" "dp=2,mbs=4,zero=2" "dp=2,mbs=4,zero=3" \
           "tp=2,mbs=4,sp=0" "tp=2,mbs=4,sp=1" "pp=2,mbs=4,sched=1f1b" "pp=2,mbs=4,sched=afab" \
           "pp=2,mbs=2,sched=interleaved,v=2" "cp=2,mbs=4" ;;
    4) printf '%s\n' "dp=4,mbs=4,zero=1" "dp=2,tp=2,mbs=4,sp=1" "dp=2,pp=2,mbs=4" "tp=2,pp=2,mbs=4,sp=1" \
           "dp=2,cp=2,mbs=4" "pp=4,mbs=4" "tp=2,cp=2,mbs=4" ;;
    8) printf '%s\n' "dp=8,mbs=2,zero=1" "dp=4,tp=2,mbs=4,sp=1" "dp=2,tp=2,pp=2,mbs=4,sp=1" \
           "tp=2,cp=2,pp=2,mbs=4,sp=1" "dp=2,pp=4,mbs=4" "dp=4,cp=2,mbs=4" "dp=2,pp=2,cp=2,mbs=4" \
           "dp=2,cp=2,tp=2,mbs=4" "pp=8,mbs=2" "dp=4,pp=2,mbs=2,sched=afab" ;;
    esac
}

# "dp=2,tp=2,..." + world size -> train overrides (unset keys take the 1-rank default).
overrides() {
    local l=$1 dp=1 tp=1 pp=1 cp=1 zero=0 sp=0 mbs=4 sched=1f1b v=1 rc=none
    IFS=, read -r -a kv <<<"$l"
    for x in "${kv[@]}"; do
        case ${x%%=*} in
        dp) dp=${x#*=} ;; tp) tp=${x#*=} ;; pp) pp=${x#*=} ;; cp) cp=${x#*=} ;; zero) zero=${x#*=} ;;
        sp) sp=${x#*=} ;; mbs) mbs=${x#*=} ;; sched) sched=${x#*=} ;; v) v=${x#*=} ;; recompute) rc=${x#*=} ;;
        esac
    done
    local spb=false; [ "$sp" = 1 ] && spb=true
    echo "--parallel.dp $dp --parallel.tp $tp --parallel.pp $pp --parallel.cp $cp --parallel.zero $zero" \
         "--parallel.sequence_parallel $spb --training.micro_batch_size $mbs --training.grad_acc_steps 0" \
         "--parallel.pp_schedule $sched --parallel.pp_virtual $v --training.recompute $rc"
}

# Full layout string of the planner's first choice (from its TSV row).
planner_first() {
    "$FT" plan --config "$TMP/run.json" --gpus "$1" --hardware this --profile "$2" --tsv --top 1 |
        awk -F'\t' 'NR == 2 { printf "dp=%s,tp=%s,pp=%s,cp=%s,zero=%s,sp=%s,mbs=%s,sched=%s,v=%s,recompute=%s\n",
                              $3, $4, $5, $6, $7, $8, $9, $11, $12, $13 }'
}

TSV=$RES/planner_validation.tsv
printf 'ranks\tlayout\tpredicted_s\tmeasured_s\terror\tplanner_rank\n' >"$TSV"
for R in $SIZES; do
    prof=$TMP/profile_$R.json
    "${MPIRUN[@]}" -np "$R" "$FT" bench calibrate --head-dim 64 --output "$prof" </dev/null >"$TMP/calib_$R.log"
    first=$(planner_first "$R" "$prof")
    { layouts_for "$R"; echo "$first"; } | awk '!seen[$0]++' >"$TMP/layouts_$R"
    while read -r L; do
        pred=$("$FT" plan --config "$TMP/run.json" --gpus "$R" --hardware this --profile "$prof" \
               --layout "$L" --tsv | awk -F'\t' 'NR == 2 { print $21 }')
        rm -f "$TMP/m.jsonl"
        # shellcheck disable=SC2046
        "${MPIRUN[@]}" -np "$R" "$FT" train --config "$TMP/run.json" $(overrides "$L") \
            --logging.metrics "$TMP/m.jsonl" </dev/null >"$TMP/train.log" 2>&1 || { echo "FAILED: $L"; cat "$TMP/train.log"; exit 1; }
        meas=$(python3 -c "
import json, statistics
r = [x for x in map(json.loads, open('$TMP/m.jsonl')) if 'event' not in x]
print(statistics.median(x['step_ms'] for x in r[2:]) / 1e3)")
        tag=""; [ "$L" = "$first" ] && tag=first
        awk -v R="$R" -v L="$L" -v p="$pred" -v m="$meas" -v t="$tag" \
            'BEGIN { printf "%s\t%s\t%.4f\t%.4f\t%+.3f\t%s\n", R, L, p, m, (p - m) / m, t }' | tee -a "$TSV"
    done <"$TMP/layouts_$R"
done

python3 - "$TSV" "$RES/planner_validation.md" "$(uptime)" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
out = ["# Planner: predicted vs measured step time on this machine", "",
       "Model: 8 layers, hidden 256, 4/2 heads (head dim 64), intermediate 768, byte vocab; sequence 256, 16 sequences",
       "per step. Calibration (`femtotron bench calibrate`) ran with the same number of ranks as the",
       "layouts it predicts (4 and 8 ranks share the 2 cores). Measured: median step time of steps 3..N.",
       f"Load at the end: `{sys.argv[3].strip()}`.", "",
       "| ranks | layout | predicted s | measured s | error |", "|---|---|---|---|---|"]
for r in rows:
    mark = " (planner's first choice)" if r["planner_rank"] == "first" else ""
    out.append(f"| {r['ranks']} | `{r['layout']}`{mark} | {float(r['predicted_s']):.3f} | "
               f"{float(r['measured_s']):.3f} | {100 * float(r['error']):+.1f}% |")
out += ["", "| ranks | layouts | mean abs. error | planner's top (predicted) | its measured time vs fastest measured |",
        "|---|---|---|---|---|"]
allerr = []
for R in sorted({r["ranks"] for r in rows}, key=int):
    rs = [r for r in rows if r["ranks"] == R]
    errs = [abs(float(r["error"])) for r in rs]
    allerr += errs
    top = min(rs, key=lambda r: float(r["predicted_s"]))
    fastest = min(float(r["measured_s"]) for r in rs)
    out.append(f"| {R} | {len(rs)} | {100 * sum(errs) / len(errs):.1f}% | `{top['layout']}` | "
               f"{100 * (float(top['measured_s']) / fastest - 1):+.1f}% |")
out += ["", f"Overall mean absolute error: {100 * sum(allerr) / len(allerr):.1f}% over {len(allerr)} layouts."]
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
