#!/usr/bin/env bash
# tests/shell/test_plan.sh — `femtotron plan` and `train --parallel.auto` end to end:
# the ranked table for presets and Hugging Face configs, the exact memory of
# femtotron's own runs through the CLI, the automatic layout (chosen as `plan`
# ranks it, then trained), and a clear error for every bad input.
# Prints PASS/FAIL lines (tests/run_all.sh counts them).
set -u
cd "$(dirname "$0")/../.." || exit 1
FT=${FEMTOTRON:-./femtotron}
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}"
T=$(mktemp -d /tmp/femtotron_test_plan.XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
oneline() { tr '\n' ' ' <"$1" | cut -c1-300; }

# --- the table on paper -------------------------------------------------------
GPU=(--seq-length 8192 --global-batch-tokens 4194304)
if "$FT" plan --model llama-3.1-8b --gpus 64 --hardware h100 "${GPU[@]}" --top 5 >"$T/p.out" 2>&1; then
    rows=$(grep -cE '^ +[0-9]+  dp' "$T/p.out")
    if [ "$rows" = 5 ] && grep -q 'wins at' "$T/p.out" && grep -E '^ +1  ' "$T/p.out" | grep -q ' yes '; then
        pass "plan llama-3.1-8b on 64 h100: 5 ranked rows, the first fits, the winner explained"
    else fail "plan table: $(oneline "$T/p.out")"; fi
else fail "plan llama-3.1-8b exited non-zero: $(oneline "$T/p.out")"; fi

# The three hardware of a model planned at once (each plan is one process on one core).
for m in smollm-135m smollm-360m smollm-1.7b llama-3.1-8b llama-3.1-70b llama-3.1-405b; do
    for hw in h100 h200 a100; do
        "$FT" plan --model "$m" --gpus 64 --gpus-per-node 8 --hardware "$hw" "${GPU[@]}" --top 1 >"$T/q_$hw.out" 2>&1 &
    done
    bad=
    for hw in h100 h200 a100; do
        wait -n || bad=1
    done
    if [ -n "$bad" ]; then
        fail "plan $m: $(for hw in h100 h200 a100; do echo "$hw: $(oneline "$T/q_$hw.out")"; done)"
    else
        pass "plan $m on h100, h200 and a100"
    fi
done

# 405B on 8 GPUs cannot fit: every row is marked and the sentence says so.
"$FT" plan --model llama-3.1-405b --gpus 8 --hardware h100 "${GPU[@]}" --top 50 >"$T/n.out" 2>&1
if grep -q 'No layout fits' "$T/n.out" && ! grep -E '^ +[0-9]+  dp' "$T/n.out" | grep -q ' yes '; then
    pass "405B on 8 GPUs: no layout fits, and the table says NO on every row"
else fail "405B on 8 GPUs: $(oneline "$T/n.out")"; fi

# Budgets: 95% of the device's memory less 2 GiB (H100 81,559 MiB, H200 143,771 MiB,
# what nvidia-smi reports: 0.95 x 79.65 - 2 = 73.7 GiB, 0.95 x 140.4 - 2 = 131.4).
"$FT" plan --model llama-3.1-70b --gpus 8 --hardware h100 --seq-length 4096 --global-batch-tokens 1048576 --top 1 >"$T/a.out" 2>&1
"$FT" plan --model llama-3.1-70b --gpus 8 --hardware h200 --seq-length 4096 --global-batch-tokens 1048576 --top 1 >"$T/b.out" 2>&1
if grep -q 'budget 73.7 GiB' "$T/a.out" && grep -q 'budget 131.4 GiB' "$T/b.out"; then
    pass "h200's budget (141 GB) is used: $(grep -o 'budget [0-9.]* GiB' "$T/b.out") vs $(grep -o 'budget [0-9.]* GiB' "$T/a.out")"
else fail "h200 budget: $(oneline "$T/b.out")"; fi

# Published runs (bench/planner_cluster.sh's rows, priced on their own layouts):
# Korthikanti et al.'s Megatron iteration times within 5% mean absolute error, and
# Llama 3's 405B MFU within 5 points (the 8,192-GPU step as it fits: two pipelines
# of 16 micro-batches, priced as half the batch).
mae=$(while read -r model gpus pp batch rc pub; do
    "$FT" plan --model "$model" --gpus "$gpus" --hardware a100 --seq-length 2048 --global-batch-tokens $((batch * 2048)) \
        --layout "dp=1,tp=8,pp=$pp,cp=1,sp=1,mbs=1,zero=0,sched=1f1b,recompute=$rc" --tsv --top 1 |
        awk -F'\t' -v q="$pub" 'NR == 2 { d = ($21 - q) / q; print d < 0 ? -d : d }'
done <<'ROWS' | awk '{ s += $1; n++ } END { printf "%d %.1f", n, 100 * s / n }'
gpt-22b 8 1 4 selective 1.10
gpt-22b 8 1 4 full 1.42
gpt-175b 64 8 64 selective 13.75
gpt-175b 64 8 64 full 18.13
gpt-530b 280 35 280 selective 37.83
gpt-530b 280 35 280 full 49.05
gpt-1t 512 64 512 selective 71.49
gpt-1t 512 64 512 full 94.42
ROWS
)
if [ "${mae%% *}" = 8 ] && awk -v e="${mae#* }" 'BEGIN { exit !(e <= 5) }'; then
    pass "Megatron-LM's 8 published runs (Korthikanti et al.) predicted within ${mae#* }% mean absolute error (<= 5%)"
else fail "Megatron-LM rows: '$mae' (rows, mean absolute error %), want 8 rows within 5%"; fi
llama=$(while read -r gpus dp cp seq pub tokens; do
    "$FT" plan --model llama-3.1-405b --gpus "$gpus" --hardware h100 --seq-length "$seq" --global-batch-tokens "$tokens" \
        --layout "dp=$dp,tp=8,pp=16,cp=$cp,sp=1,mbs=1,zero=1,sched=interleaved,v=2,recompute=none" --tsv --top 1 |
        awk -F'\t' -v p="$pub" 'NR == 2 { printf "%.1f/%s/%s/%.1f ", 100 * $30, p, $20, $19 / 2^30 }'
done <<'ROWS'
16384 128 1 8192 41 16777216
16384 8 16 131072 38 16777216
8192 64 1 8192 43 8388608
ROWS
)
# ... and each fits the H100's budget, as it did Meta's GPUs (a layer keeps one
# tensor per norm and the residual stream once: plan/memory_model.c).
if [ "$(echo "$llama" | wc -w)" = 3 ] && echo "$llama" | tr ' ' '\n' | awk -F/ 'NF == 4 { d = $1 - $2; if (d < -5 || d > 5 || $3 != 1) bad = 1 } END { exit bad }'; then
    pass "Llama-3.1-405B published layouts within 5 MFU points and within the 80 GB budget (predicted/published/fits/GiB): $llama"
else fail "Llama-3.1-405B (predicted/published MFU/fits/GiB): '$llama', want each within 5 points and fitting"; fi

# A Hugging Face config.json gives the same model as the preset.
mkdir -p "$T/smol"
cat >"$T/smol/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
 "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "hidden_act": "silu"}
JSON
"$FT" plan --model smollm-135m --gpus 8 --hardware h100 --seq-length 2048 --global-batch-tokens 1048576 --tsv --top 3 | cut -f2- | sed 1d >"$T/preset.tsv"
"$FT" plan --model "$T/smol/config.json" --gpus 8 --hardware h100 --seq-length 2048 --global-batch-tokens 1048576 --tsv --top 3 | cut -f2- | sed 1d >"$T/hf.tsv"
if [ -s "$T/preset.tsv" ] && cmp -s "$T/preset.tsv" "$T/hf.tsv"; then
    pass "an HF config.json plans exactly like the smollm-135m preset"
else fail "HF config vs preset differ: $(head -c 300 "$T/hf.tsv")"; fi
# Mixtral-8x7B's config.json (model_type mixtral) plans like the mixtral-8x7b preset,
# and the header gives total and active parameters.
mkdir -p "$T/mixtral"
cat >"$T/mixtral/config.json" <<'JSON'
{"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
 "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
 "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "hidden_act": "silu"}
JSON
MOE=(--gpus 64 --hardware h100 --seq-length 4096 --global-batch-tokens 262144)  # 64 sequences: a quick search
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --tsv --top 3 | cut -f2- | sed 1d >"$T/mpreset.tsv"
"$FT" plan --model "$T/mixtral/config.json" "${MOE[@]}" --tsv --top 3 | cut -f2- | sed 1d >"$T/mhf.tsv"
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --top 1 >"$T/mixtral.out" 2>&1
if [ -s "$T/mpreset.tsv" ] && cmp -s "$T/mpreset.tsv" "$T/mhf.tsv" &&
   grep -q '46.7 B parameters, 12.9 B active per token: 8 experts, top-2' "$T/mixtral.out"; then
    pass "Mixtral-8x7B's config.json plans like the mixtral-8x7b preset (46.7 B parameters, 12.9 B active)"
else fail "Mixtral config vs preset: $(head -c 300 "$T/mhf.tsv") $(head -1 "$T/mixtral.out")"; fi

# Expert parallelism (a mixture of experts only): the search tries ep in the
# divisors of E = 8 that divide dp*cp, the table shows an ep column and epN labels,
# the legend says what they mean, and the command to train carries parallel.ep.
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --tsv --top 1000000 >"$T/ep.tsv"
eps=$(awk -F'\t' 'NR > 1 { print $31 }' "$T/ep.tsv" | sort -n | uniq | tr '\n' ' ')
badep=$(awk -F'\t' 'NR > 1 && (8 % $31 || ($3 * $6) % $31) { n++ } END { print n + 0 }' "$T/ep.tsv")
if [ "$eps" = "1 2 4 8 " ] && [ "$badep" = 0 ]; then
    pass "mixtral-8x7b on 64 GPUs: the search tries ep = $eps(each divides E = 8 and dp*cp)"
else fail "mixtral ep search: ep values '$eps', $badep rows where ep divides neither E nor dp*cp"; fi
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --layout dp=64,ep=8,zero=1,recompute=full >"$T/ep.out" 2>&1
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --layout dp=64,ep=1,zero=1,recompute=full --tsv >"$T/ep1.tsv" 2>&1
"$FT" plan --model mixtral-8x7b "${MOE[@]}" --layout dp=64,ep=8,zero=1,recompute=full --tsv >"$T/ep8.tsv" 2>&1
p1=$(awk -F'\t' 'NR == 2 { print $14 }' "$T/ep1.tsv"); p8=$(awk -F'\t' 'NR == 2 { print $14 }' "$T/ep8.tsv")
a2a=$(awk -F'\t' 'NR == 2 { print ($32 > 0) }' "$T/ep8.tsv")
if grep -qE '^ +1  dp64 tp1 pp1 cp1 ep8 z1 ' "$T/ep.out" && grep -qE 'optim +ep +tok/s/rank' "$T/ep.out" &&
   grep -q '^  epN = expert parallelism (parallel.ep)' "$T/ep.out" && grep -q '^  ep = expert-parallel all-to-alls' "$T/ep.out" &&
   grep -A1 '^train it' "$T/ep.out" | grep -qE -- '--parallel.ep 8( |$)' && [ "$a2a" = 1 ] &&
   awk -v a="$p1" -v b="$p8" 'BEGIN { exit !(a / b > 5) }'; then
    pass "--layout dp=64,ep=8: labelled ep8, ep column and legend, --parallel.ep 8 to train; bf16 weights per rank $p8 B vs $p1 B at ep1"
else fail "ep table: params $p1 -> $p8, all-to-all > 0: '$a2a': $(oneline "$T/ep.out")"; fi
# A dense model never shows ep: no column, no label, no legend line.
if grep -q 'wins at' "$T/p.out" && ! grep -qE ' ep[0-9]| ep +tok/s|^  epN' "$T/p.out"; then
    pass "a dense model's table has no ep column, label or legend"
else fail "dense table mentions ep: $(oneline "$T/p.out")"; fi

# TSV: 32 columns on every line.
"$FT" plan --model smollm-360m --gpus 16 --hardware a100 "${GPU[@]}" --tsv --top 20 >"$T/t.tsv"
if awk -F'\t' 'NF != 32 { bad = 1 } END { exit bad || NR != 21 }' "$T/t.tsv" &&
   awk -F'\t' 'NR > 1 && ($31 != 1 || $32 != 0) { bad = 1 } END { exit bad }' "$T/t.tsv"; then
    pass "--tsv: header + 20 rows of 32 columns (a dense model's ep = 1, ep_s = 0)"
else fail "--tsv columns: $(head -c 300 "$T/t.tsv")"; fi

# --- bad inputs: a clear message naming the problem ----------------------------
bad() {  # bad NAME EXPECTED_REGEX ARGS...
    local name=$1 want=$2; shift 2
    if "$FT" plan "$@" >"$T/e.out" 2>&1; then fail "$name: exited 0"; return; fi
    if grep -qE -- "$want" "$T/e.out"; then pass "$name: $(head -1 "$T/e.out" | cut -c1-150)"
    else fail "$name: expected /$want/, got: $(oneline "$T/e.out")"; fi
}
bad "unknown preset" "not a preset.*smollm-135m" --model llama-9 --gpus 8 --hardware h100 "${GPU[@]}"
bad "unknown hardware" "--hardware tpu: unknown" --model smollm-135m --gpus 8 --hardware tpu "${GPU[@]}"
bad "missing --gpus" "--gpus is required" --model smollm-135m --hardware h100 "${GPU[@]}"
bad "batch not a multiple of the sequence" "not a multiple of the sequence length" --model smollm-135m --gpus 8 --hardware h100 --seq-length 8192 --global-batch-tokens 10000
bad "missing profile" "bench calibrate" --model smollm-135m --gpus 2 --hardware this --profile "$T/none.json" "${GPU[@]}"
bad "layout of the wrong size" "dp\*tp\*pp\*cp = 4, but --gpus is 8" --model smollm-135m --gpus 8 --hardware h100 "${GPU[@]}" --layout dp=2,tp=2
bad "bad layout key" "unknown key \"foo\"" --model smollm-135m --gpus 8 --hardware h100 "${GPU[@]}" --layout foo=2
bad "ep not dividing E" "cannot run: ep = 16 does not divide the 8 experts per layer" --model mixtral-8x7b "${MOE[@]}" --layout dp=64,ep=16
bad "ep not dividing dp*cp" "cannot run: ep = 4 does not divide dp \\* cp = 2 \\* 1 = 2" --model mixtral-8x7b "${MOE[@]}" --layout dp=2,tp=8,pp=4,ep=4
bad "ep on a dense model" "cannot run: ep = 2 needs a mixture-of-experts model" --model smollm-135m --gpus 8 --hardware h100 "${GPU[@]}" --layout dp=8,ep=2
bad "unknown option" "unknown option \"--bogus\"" --model smollm-135m --gpus 8 --hardware h100 --bogus 1

# --- femtotron's own runs: profile, exact memory, parallel.auto ----------------
for i in $(seq 1 300); do echo "line $i: the planner picks a layout and the trainer runs it"; done >"$T/in.txt"
"$FT" prepare --input "$T/in.txt" --output "$T/data" --val-fraction 0 >/dev/null 2>&1
cat >"$T/run.json" <<JSON
{"model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 64},
 "data": {"train": "$T/data/train_*.bin"},
 "training": {"steps": 4, "seq_length": 32, "micro_batch_size": 2, "global_batch_size": 8, "threads": 1,
              "peak_flops": 1e9},
 "logging": {"every": 1}}
JSON
if "${MPIRUN[@]}" -np 2 "$FT" bench calibrate --quick --head-dim 16 --output "$T/prof.json" >"$T/cal.out" 2>&1; then
    pass "bench calibrate --quick on 2 ranks wrote a profile"
else fail "calibrate: $(oneline "$T/cal.out")"; fi

# Attention curves of another head dim than the model's: planned, with a note.
"$FT" plan --config "$T/run.json" --gpus 2 --hardware this --profile "$T/prof.json" --top 1 >/dev/null 2>"$T/hd16.err"
/usr/bin/python3 -c "import json, sys; p = json.load(open(sys.argv[1])); p['attn_head_dim'] = 32; json.dump(p, open(sys.argv[2], 'w'))" \
    "$T/prof.json" "$T/prof32.json"
"$FT" plan --config "$T/run.json" --gpus 2 --hardware this --profile "$T/prof32.json" --top 1 >/dev/null 2>"$T/hd32.err"
if [ ! -s "$T/hd16.err" ] && grep -q "head dim 32, the model's is 16" "$T/hd32.err"; then
    pass "plan notes a profile measured at another head dim (32 vs the model's 16), not the matching one"
else fail "head-dim note: matching: '$(oneline "$T/hd16.err")', other: '$(oneline "$T/hd32.err")'"; fi

bad "GPT model on femtotron" "GPT-style" --model gpt-22b --gpus 1 --hardware this --profile "$T/prof.json" --seq-length 2048 --global-batch-tokens 2048

# The CLI's memory for a given layout is the most loaded rank's measured bytes.
"$FT" plan --config "$T/run.json" --gpus 2 --hardware this --profile "$T/prof.json" --layout dp=2,zero=1 --tsv >"$T/m.tsv"
pred=$(awk -F'\t' 'NR == 2 { print $19 }' "$T/m.tsv")
"${MPIRUN[@]}" -np 2 "$FT" train --config "$T/run.json" --parallel.dp 2 --parallel.zero 1 --training.steps 1 \
    --logging.verbose true >"$T/v.out" 2>&1
meas=$(grep -E '^memory bytes' "$T/v.out" | awk '{ s = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $(i-1) != "(rank") s += $i; if (s > m) m = s } END { print m }')
if [ -n "$pred" ] && [ "$pred" = "$meas" ]; then pass "plan --layout dp=2,zero=1: $pred bytes = the largest rank's measured total"
else fail "own-run memory: predicted '$pred', measured '$meas': $(grep -E '^memory' "$T/v.out" | tr '\n' ' ')"; fi

# parallel.auto trains with the layout `plan` ranks first. The profile also holds
# links that bench links measured between 2 ranks of this host: they describe 2
# nodes, the job runs on 1, so the start-up line says they are not used and why
# (test_links_shaped.sh trains on hosts the matrix names).
cp "$T/prof.json" "$T/prof_links.json"
"${MPIRUN[@]}" -np 2 "$FT" bench links --output "$T/prof_links.json" --bytes 65536 >/dev/null 2>&1
# bench links keeps the profile's other values bit for bit (cJSON's own printer
# rounded them to 15 digits, which flipped plan's near-ties between the two files).
if python3 -c 'import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); sys.exit(not (b.pop("links", None) and a == b))' \
    "$T/prof.json" "$T/prof_links.json"; then pass "bench links adds its matrix and keeps every other profile value bit for bit"
else fail "bench links changed the profile's other values: $(diff "$T/prof.json" "$T/prof_links.json" | head -4 | tr '\n' ' ')"; fi
first=$("$FT" plan --config "$T/run.json" --gpus 2 --hardware this --profile "$T/prof.json" --top 1 --tsv | awk -F'\t' 'NR == 2 { print $2 }')
if "${MPIRUN[@]}" -np 2 "$FT" train --config "$T/run.json" --parallel.auto true --parallel.profile "$T/prof_links.json" \
        >"$T/auto.out" 2>&1; then
    chosen=$(grep '^parallel.auto:' "$T/auto.out" | sed 's/^parallel.auto: //; s/ (predicted.*//')
    if [ -n "$chosen" ] && [ "$chosen" = "$first" ] && grep -q 'step     4/4' "$T/auto.out"; then
        pass "train --parallel.auto: chose '$chosen' (plan's first row) and trained 4 steps"
    else fail "parallel.auto chose '$chosen', plan ranks first '$first': $(oneline "$T/auto.out")"; fi
    if grep '^parallel.auto:' "$T/auto.out" | grep -q 'by link class: the profile.s measured links are not used (the profile.s links matrix describes 2 nodes, this job runs on 1 node)'; then
        pass "parallel.auto with a 2-node links matrix on 1 node: $(grep -o 'by link class.*' "$T/auto.out" | head -1)"
    else fail "parallel.auto links note: $(grep '^parallel.auto:' "$T/auto.out")"; fi
else fail "parallel.auto run: $(oneline "$T/auto.out")"; fi

# One rule book: plan offers only layouts train accepts, and refuses the others with
# train's own message. A tied model over 4 ranks: pipeline layouts are offered (the
# last stage holds a copy of the embedding), tp=4 is not (2 kv heads); rows of the
# table train as they are.
sed 's/"max_position_embeddings": 64}/"max_position_embeddings": 64, "tie_word_embeddings": true}/; s/"num_hidden_layers": 2/"num_hidden_layers": 4/' \
    "$T/run.json" >"$T/tied.json"
"$FT" plan --config "$T/tied.json" --gpus 4 --hardware this --profile "$T/prof.json" --tsv --top 10000 >"$T/tied.tsv" 2>&1
pp_rows=$(awk -F'\t' 'NR > 1 && $5 > 1' "$T/tied.tsv" | wc -l)
tp4_rows=$(awk -F'\t' 'NR > 1 && $4 == 4' "$T/tied.tsv" | wc -l)
if [ "$pp_rows" -gt 0 ] && [ "$tp4_rows" = 0 ]; then
    pass "plan, tied model on 4 ranks: $pp_rows pipeline layouts offered, none with tp=4 (2 kv heads)"
else fail "tied plan: $pp_rows pipeline rows, $tp4_rows tp=4 rows: $(head -c 300 "$T/tied.tsv")"; fi
bad "plan --layout train refuses" "cannot run: model.num_key_value_heads = 2 is not divisible by parallel.tp = 4" \
    --config "$T/tied.json" --gpus 4 --hardware this --profile "$T/prof.json" --layout tp=4
# Train the first row with pp > 1 and the first with pp = 4, as the table gives them.
for want in 'NR > 1 && $5 > 1' 'NR > 1 && $5 == 4'; do
    row=$(awk -F'\t' "$want { print; exit }" "$T/tied.tsv")
    args=$(echo "$row" | awk -F'\t' '{ printf "--parallel.dp %s --parallel.tp %s --parallel.pp %s --parallel.cp %s --parallel.zero %s --parallel.sequence_parallel %s --training.micro_batch_size %s --training.grad_acc_steps %s --parallel.pp_schedule %s --parallel.pp_virtual %s --training.recompute %s", $3, $4, $5, $6, $7, ($8 ? "true" : "false"), $9, $10, $11, $12, $13 }')
    name=$(echo "$row" | cut -f2)
    # shellcheck disable=SC2086
    if [ -n "$row" ] && "${MPIRUN[@]}" -np 4 "$FT" train --config "$T/tied.json" $args >"$T/row.out" 2>&1 &&
        grep -q 'step     4/4' "$T/row.out"; then
        pass "a row plan offers trains as given: $name"
    else fail "plan row '$name' ($args): $(oneline "$T/row.out")"; fi
done

# --- the words: a legend for every label, a plain summary, the command to train --
# Every label of the table's layout column is explained in the legend under it.
"$FT" plan --config "$T/tied.json" --gpus 4 --hardware this --profile "$T/prof.json" --top 40 >"$T/words.out" 2>&1
cat "$T/p.out" "$T/words.out" "$T/ep.out" >"$T/both.out"
missing=$(python3 - "$T/both.out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
legend = text[text.index("layout labels:"):] if "layout labels:" in text else ""
missing = set()
for line in text.splitlines():
    m = re.match(r"^ +\d+  (.*?) {2,}", line)
    if not m: continue
    for tok in m.group(1).split():
        sched = re.match(r"^(afab|1f1b|interleaved)(x\d\+?)?$", tok)
        labels = [sched.group(1)] + ([re.sub(r"\d", "N", sched.group(2)) if not sched.group(2).endswith("+") else sched.group(2)] if sched.group(2) else []) if sched else [re.sub(r"\d+", "N", tok)]
        missing.update(l for l in labels if l not in legend)
print(" ".join(sorted(missing)))
PY
)
if grep -q '^layout labels:' "$T/words.out" && [ -z "$missing" ]; then
    pass "the legend under the table explains every label the tables use"
else fail "labels missing from the legend: '$missing': $(oneline "$T/words.out")"; fi
# The summary names an overhead only when it is one (never "0% of the step").
zero=0
for hw in h100 a100; do for g in 1 8 64; do
    "$FT" plan --model smollm-135m --gpus $g --hardware $hw --seq-length 2048 --global-batch-tokens 1048576 --top 3 >"$T/s.out" 2>&1
    grep 'wins at' "$T/s.out" | grep -Eq '\(0% of the step\)|is 0% slower' && { zero=1; fail "summary names a 0% overhead ($hw, $g GPUs): $(grep 'wins at' "$T/s.out")"; }
done; done
grep 'wins at' "$T/words.out" | grep -Eq '\(0% of the step\)' && zero=1
[ $zero = 0 ] && pass "the summary never names a 0% overhead: $(grep 'wins at' "$T/words.out" | grep -o 'its [^.]*' | head -1)"
# The printed commands carry exactly the chosen layout (the first row's keys), and
# the mpirun one trains it: its start-up layout line is the plan's.
"$FT" plan --config "$T/tied.json" --gpus 4 --hardware this --profile "$T/prof.json" --top 1 --tsv >"$T/first.tsv" 2>&1
want=$(awk -F'\t' 'NR == 2 { printf "--parallel.dp %s --parallel.tp %s --parallel.pp %s --parallel.cp %s --parallel.zero %s --parallel.sequence_parallel %s --training.micro_batch_size %s --training.grad_acc_steps %s --training.global_batch_size 8 --parallel.pp_schedule %s --parallel.pp_virtual %s --training.recompute %s", $3, $4, $5, $6, $7, ($8 ? "true" : "false"), $9, $10, $11, $12, $13 }' "$T/first.tsv")
cmd=$(grep -A1 '^train it (Open MPI):' "$T/words.out" | tail -1 | sed 's/^ *//')
srun=$(grep -A1 '^or (Slurm):' "$T/words.out" | tail -1 | sed 's/^ *//')
if [ "$cmd" = "mpirun -np 4 ./femtotron train --config $T/tied.json $want" ] &&
   [ "$srun" = "srun --ntasks 4 ./femtotron train --config $T/tied.json $want" ]; then
    pass "plan prints the mpirun and srun commands with every key of the chosen layout"
else fail "printed commands: '$cmd' / '$srun', want the keys '$want'"; fi
read -r -a keys <<< "${cmd#mpirun -np 4 ./femtotron train }"
dims=$(awk -F'\t' 'NR == 2 { printf "dp %s x pp %s x cp %s x tp %s, ZeRO-%s", $3, $5, $6, $4, $7 }' "$T/first.tsv")
if "${MPIRUN[@]}" -np 4 "$FT" train "${keys[@]}" --training.steps 1 >"$T/cmd.out" 2>&1 &&
   grep -q "^layout: 4 ranks = $dims," "$T/cmd.out" && grep -q 'step     1/1' "$T/cmd.out"; then
    pass "the printed command trains the chosen layout: $(grep '^layout:' "$T/cmd.out" | cut -c1-80)"
else fail "the printed command (+ --training.steps 1), want '$dims': $(oneline "$T/cmd.out")"; fi

if "${MPIRUN[@]}" -np 2 "$FT" train --config "$T/run.json" --parallel.auto true --parallel.profile "$T/prof.json" \
        --parallel.memory_gb 0.0001 >"$T/auto2.out" 2>&1; then
    fail "parallel.auto with a 100 KiB budget trained"
elif grep -q 'no layout of 2 ranks fits' "$T/auto2.out"; then pass "parallel.auto with a 100 KiB budget: $(grep -o 'no layout.*' "$T/auto2.out" | head -1 | cut -c1-120)"
else fail "parallel.auto tiny budget: $(oneline "$T/auto2.out")"; fi

# A mixture of experts of femtotron's own: plan offers ep layouts (the trainer's own
# validation and memory plan), and the printed command of one trains.
sed 's/"max_position_embeddings": 64}/"max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2}/' \
    "$T/run.json" >"$T/moe.json"
"$FT" plan --config "$T/moe.json" --gpus 4 --hardware this --profile "$T/prof.json" --tsv --top 10000 >"$T/moe.tsv" 2>&1
ep_rows=$(awk -F'\t' 'NR > 1 && $31 == 2' "$T/moe.tsv" | wc -l); ep4=$(awk -F'\t' 'NR > 1 && $31 == 4' "$T/moe.tsv" | wc -l)
"$FT" plan --config "$T/moe.json" --gpus 4 --hardware this --profile "$T/prof.json" --layout dp=2,tp=2,ep=2 >"$T/moe.out" 2>&1
read -r -a keys <<< "$(grep -A1 '^train it (Open MPI):' "$T/moe.out" | tail -1 | sed 's/^ *mpirun -np 4 .\/femtotron train //')"
pred=$("$FT" plan --config "$T/moe.json" --gpus 4 --hardware this --profile "$T/prof.json" --layout dp=2,tp=2,ep=2 --tsv |
    awk -F'\t' 'NR == 2 { print $19 }')
if [ "$ep_rows" -gt 0 ] && [ "$ep4" -gt 0 ] && [ "${keys[${#keys[@]}-1]}" = 2 ] && [ "${keys[${#keys[@]}-2]}" = --parallel.ep ] &&
   "${MPIRUN[@]}" -np 4 "$FT" train "${keys[@]}" --training.steps 1 --logging.verbose true >"$T/moecmd.out" 2>&1 &&
   grep -q 'step     1/1' "$T/moecmd.out"; then
    meas=$(grep -E '^memory bytes' "$T/moecmd.out" | awk '{ s = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/ && $(i-1) != "(rank") s += $i; if (s > m) m = s } END { print m }')
    if [ -n "$pred" ] && [ "$pred" = "$meas" ]; then
        pass "own mixture of experts on 4 ranks: $ep_rows ep2 and $ep4 ep4 layouts offered; the printed dp2 tp2 ep2 command trains, its largest rank's $meas bytes as planned"
    else fail "own MoE dp2 tp2 ep2: planned '$pred' bytes, measured '$meas': $(grep -E '^memory' "$T/moecmd.out" | tr '\n' ' ')"; fi
else fail "own MoE: $ep_rows ep2 rows, $ep4 ep4 rows, keys '${keys[*]}': $(oneline "$T/moecmd.out" 2>/dev/null) $(head -c 300 "$T/moe.tsv")"; fi

# bench/tools/gpu_floor.py: the planner on idealised copies of a measured GPU profile
# (the H200 runs kept in bench/results). Its split must add up to its floor, the
# products must take 6 N_matmul T / rate (N_matmul counted here from the run's
# config), the attention the milliseconds given times layers x micro-batches, the
# passes and AdamW scale as 1 / bandwidth, and the 1.2x target be the fastest
# PyTorch step / 1.2.
# The attention timings as bench/attention_gpu.sh writes them: PyTorch's SDPA and
# cuDNN's kept-bf16 ops for the shape, and a shape without a femtotron run (left out).
cat >"$T/att.md" <<'MD'
| shape | system | fwd ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s | fwd+bwd vs PyTorch |
| --- | --- | --- | --- | --- | --- | --- |
| smollm-1.7b (B 4 S 2048 H 32/32 hd 64) | femtotron cudnn-kept | 0.300 | 0.700 | 1 | 1 | 0.79x |
| smollm-1.7b (B 4 S 2048 H 32/32 hd 64) | torch-sdpa-flash | 0.241 | 0.552 | 285.1 | 311.4 | — |
| llama-3.1-8b (B 1 S 8192 H 32/8 hd 128) | torch-sdpa-flash | 0.967 | 2.584 | 568.5 | 532.0 | — |
MD
if tar xzf bench/results/gpu_vs_pytorch_runs.tar.gz -C "$T" 2>"$T/tar.err" &&
   python3 bench/tools/gpu_floor.py "$T/runs" --attention-md "$T/att.md" --gemm 700 --bw 2 4 \
       --femtotron "$FT" >"$T/floor.md" 2>&1; then
    if python3 - "$T/runs" "$T/floor.md" >"$T/floor.chk" 2>&1 <<'PY'
import glob, json, statistics, sys
runs, table = sys.argv[1:]
cfg = json.load(open(f"{runs}/smollm-1.7b.femtotron.1.run.json"))
m, t = cfg["model"], cfg["training"]
D, L, H, KV, I, V = (m[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "intermediate_size", "vocab_size"))
hd = D // H
n_matmul = L * (D * (H + 2 * KV) * hd + H * hd * D + 3 * D * I) + V * D
tokens = t["global_batch_size"] * t["seq_length"]
calls = L * t["global_batch_size"] // t["micro_batch_size"]       # attention calls of a step, each way
steps = []
for p in glob.glob(f"{runs}/smollm-1.7b.*.meta"):
    if ".femtotron." in p or ".profile." in p:
        continue
    warm = int(dict(l.strip().split("=", 1) for l in open(p) if "=" in l).get("warmup", "0"))
    ms = [r["step_ms"] for r in map(json.loads, open(p[:-5] + ".jsonl")) if r.get("step", 0) > warm and "step_ms" in r]
    if ms:
        steps.append(statistics.median(ms))
rows = [[c.strip().strip("*") for c in l.strip().strip("|").split("|")] for l in open(table)
        if l.startswith("| ") and not l.startswith("| shape")]
assert len(rows) == 4 and all(r[0] == "smollm-1.7b" for r in rows), rows  # 1 rate x 2 bandwidths x 2 attention speeds
want = {"PyTorch's SDPA": calls * (0.241 + 0.552), "cuDNN (measured)": calls * (0.300 + 0.700)}
passes = {}
for shape, rate, bw, att, prod, att_ms, ew, adam, floor, target, mfu in rows:
    assert abs(float(prod) - 6 * n_matmul * tokens / 700e12 * 1e3) < 0.2, (prod, n_matmul)
    assert abs(float(att_ms) - want[att]) < 0.2, (att, att_ms)
    assert abs(float(prod) + float(att_ms) + float(ew) + float(adam) - float(floor)) < 0.25, rows
    assert abs(float(target) - min(steps) / 1.2) < 0.1, (target, steps)
    passes.setdefault(bw, float(ew) + float(adam))
assert abs(passes["2.0"] / passes["4.0"] - 2.0) < 0.01, passes
print(f"products {rows[0][4]} ms, SDPA {rows[0][5]} ms, cuDNN {rows[1][5]} ms, passes + AdamW {passes['2.0']:.1f} / {passes['4.0']:.1f} ms, "
      f"1.2x target {rows[0][9]} ms")
PY
    then pass "bench/tools/gpu_floor.py on the H200 runs: the split adds up; $(cat "$T/floor.chk")"
    else fail "bench/tools/gpu_floor.py's table: $(oneline "$T/floor.chk") $(oneline "$T/floor.md")"; fi
else fail "bench/tools/gpu_floor.py: $(oneline "$T/floor.md") $(oneline "$T/tar.err" 2>/dev/null)"; fi
if python3 bench/tools/gpu_floor.py "$T/nonesuch" --sdpa smollm-1.7b=1,2 --femtotron "$FT" >"$T/floor_bad.out" 2>&1; then
    fail "gpu_floor.py without a runs directory succeeded"
elif grep -q "^gpu_floor.py: no $T/nonesuch/profile.json" "$T/floor_bad.out" &&
     ! python3 bench/tools/gpu_floor.py "$T/runs" --sdpa smollm-1.7b=1 >"$T/floor_bad2.out" 2>&1 &&
     grep -q 'expected SHAPE=FWD_MS,BWD_MS' "$T/floor_bad2.out"; then
    pass "gpu_floor.py: a missing runs directory and a malformed --sdpa are named"
else fail "gpu_floor.py bad inputs: $(oneline "$T/floor_bad.out") $(oneline "$T/floor_bad2.out" 2>/dev/null)"; fi
