#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh — femtotron against PyTorch on one GPU (issue 21, items 1 and 5):
# trains the SmolLM-1.7B, SmolLM-360M and Llama-3.2-1B shapes (sequence 2048, tied
# embeddings) with ./femtotron-cuda (training.device cuda, precision bf16) and with
# bench/torch_train.py (bf16 autocast with fp32 master weights; eager + fused SDPA +
# fused AdamW, and torch.compile), same model, batch and data, and writes
# bench/results/gpu_vs_pytorch.md: tokens/s, MFU by femtotron's formula and by
# picotron's, peak memory, the ratio, femtotron's step split (logging.trace), the
# GPU and software versions and the load; with the GPU's profile (`bench calibrate`,
# CALIBRATE=1) the planner's predicted step next to the measured one (issue 21, item
# 4), and femtotron's op time by kind from a short FEMTOTRON_CUDA_PROFILE=1 run per
# shape (system "profile": issue 21's step split). See bench/README.md.
#
# Made to finish inside one 10-minute call on an H100: 3 warm-up + 5 timed steps
# per run (torch.compile 2 more warm-up steps for its compilation), a time budget
# for the whole script (BUDGET_S) that skips what no longer fits (the table says so),
# and a time limit per run. Where nvidia-smi lists no GPU, or there is no
# ./femtotron-cuda, or its libraries are missing, it says so in one line and exits 0.
#
# Environment knobs (defaults in brackets):
#   SHAPES ["smollm-1.7b smollm-360m llama-3.2-1b"]   ROUNDS [1]
#   SYSTEMS ["femtotron eager compile profile"] (also: eager-fp32, PyTorch eager in fp32;
#           profile: femtotron with FEMTOTRON_CUDA_PROFILE=1 for PROFILE_STEPS [3] steps)
#   CALIBRATE [1] `bench calibrate` first (CALIBRATE_TIMEOUT [90] s) and the planner's
#             prediction of each femtotron run (plan --config --hardware this)
#   MB_1P7B [4]  MB_360M [8]  MB_1B [4]   micro-batch per shape; halved on out of memory
#   WARMUP [3]  TIMED [5]  COMPILE_SCOPE [layers] (torch_train.py --compile-scope)
#   ACCUM [4] micro-batches per optimizer step in every system (femtotron's global_batch_size
#         = micro-batch x ACCUM; torch_train.py --accum): the optimizer's pass over every
#         weight amortised as in pre-training, not once per micro-batch
#   BUDGET_S [510] the whole script   FEMTO_TIMEOUT [150] EAGER_TIMEOUT [120] COMPILE_TIMEOUT [200]
#   PRECISION [bf16] femtotron's training.precision (falls back to fp32, with a note,
#             while the CUDA build refuses bf16)   PEAK_FLOPS [989e12] (H100 SXM bf16 dense)
#   ATTENTION [cudnn] femtotron's training.attention: cudnn (cuDNN's fused kernels) or
#             femtotron (its own); femtotron where precision is fp32, or where cuDNN fails
#             (with a note)
#   FEMTOTRON_CUDA [./femtotron-cuda]   PLAN_MEMORY [build-cuda/tests/plan_memory_main]
#   TORCH_PYTHON [the first of python3, build/torch2env/bin/python whose torch sees a GPU]
#   FEMTO_LAUNCH [""] a launcher before femtotron's command (e.g. "mpirun --allow-run-as-root -np 1")
#   GPU [0]   HEADROOM_MIB [3072]   BUILD [0] (1: `make cuda` first)   FORCE_FEMTO [0]
#   RES [bench/results]   SCRATCH [a fresh mktemp -d, removed at the end]
#   REPORT_ONLY [0] (1: rebuild the report from SCRATCH's runs; no GPU needed)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
RES=${RES:-bench/results}
FTC=${FEMTOTRON_CUDA:-./femtotron-cuda}
PLAN_MEMORY=${PLAN_MEMORY:-build-cuda/tests/plan_memory_main}
SHAPES=${SHAPES:-"smollm-1.7b smollm-360m llama-3.2-1b"}
SYSTEMS=${SYSTEMS:-"femtotron eager compile profile"}
PROFILE_STEPS=${PROFILE_STEPS:-3}
CALIBRATE=${CALIBRATE:-1}
CALIBRATE_TIMEOUT=${CALIBRATE_TIMEOUT:-90}
ROUNDS=${ROUNDS:-1}
WARMUP=${WARMUP:-3}
ACCUM=${ACCUM:-4}
TIMED=${TIMED:-5}
COMPILE_SCOPE=${COMPILE_SCOPE:-layers}
BUDGET_S=${BUDGET_S:-510}
FEMTO_TIMEOUT=${FEMTO_TIMEOUT:-150}
EAGER_TIMEOUT=${EAGER_TIMEOUT:-120}
COMPILE_TIMEOUT=${COMPILE_TIMEOUT:-200}
PRECISION=${PRECISION:-bf16}
ATTENTION=${ATTENTION:-cudnn}
# femtotron's training.attention for the current PRECISION (cuDNN's takes bf16 only).
femto_attention() { if [[ $PRECISION == bf16 ]]; then echo "$ATTENTION"; else echo femtotron; fi; }
PEAK_FLOPS=${PEAK_FLOPS:-989e12}
GPU=${GPU:-0}
HEADROOM_MIB=${HEADROOM_MIB:-3072}
REPORT_ONLY=${REPORT_ONLY:-0}

# Shapes: hidden layers heads kv_heads intermediate vocab seq micro_batch (all tied).
declare -A SHAPE=(
    [smollm-1.7b]="2048 24 32 32 8192 49152 2048 ${MB_1P7B:-4}"
    [smollm-360m]="960 32 15 5 2560 49152 2048 ${MB_360M:-8}"
    [llama-3.2-1b]="2048 16 32 8 8192 128256 2048 ${MB_1B:-4}"
)
for s in $SHAPES; do
    [[ -n ${SHAPE[$s]:-} ]] || { echo "gpu_vs_pytorch.sh: unknown shape $s (known: ${!SHAPE[*]})" >&2; exit 2; }
done

if [[ $REPORT_ONLY != 1 ]]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        echo "SKIP no NVIDIA GPU here (nvidia-smi lists none): bench/gpu_vs_pytorch.sh did not run"
        exit 0
    fi
    if [[ ${BUILD:-0} == 1 ]]; then
        echo "== make cuda"
        make -s -j"$(nproc)" cuda >/dev/null || echo "WARNING: make cuda failed" >&2
    fi
    if [[ ! -x $FTC ]]; then
        echo "SKIP no $FTC (build it with \`make cuda\`, or BUILD=1): bench/gpu_vs_pytorch.sh did not run"
        exit 0
    fi
    missing=$(ldd "$FTC" 2>/dev/null | awk '/not found/ {printf "%s%s", sep, $1; sep=", "}')
    if [[ -n $missing ]]; then
        echo "SKIP $FTC cannot start here, missing libraries: $missing (rebuild it on this machine with \`make cuda\`): bench/gpu_vs_pytorch.sh did not run"
        exit 0
    fi
fi

mkdir -p "$RES"
if [[ -n ${SCRATCH:-} ]]; then mkdir -p "$SCRATCH"; else
    [[ $REPORT_ONLY == 1 ]] && { echo "REPORT_ONLY=1 needs SCRATCH (the runs of an earlier run)" >&2; exit 2; }
    SCRATCH=$(mktemp -d /tmp/gpu_vs_pytorch.XXXXXX)
    trap 'rm -rf "$SCRATCH"' EXIT
fi
RUNS=$SCRATCH/runs
mkdir -p "$RUNS"
NOTES=$RUNS/notes.txt
note() { echo "NOTE: $*"; echo "$*" >>"$NOTES"; }
elapsed() { echo $(($(date +%s) - T0)); }
remaining() { echo $((BUDGET_S - $(elapsed))); }
say() { echo "== [$(elapsed) s] $*"; }

write_report() {
    python3 bench/gpu_vs_pytorch_report.py "$RUNS" "$RES/gpu_vs_pytorch.md" &&
        tar -C "$SCRATCH" -czf "$RES/gpu_vs_pytorch_runs.tar.gz" runs &&
        echo "wrote $RES/gpu_vs_pytorch.md and $RES/gpu_vs_pytorch_runs.tar.gz (every run's log, metrics, trace)"
}
if [[ $REPORT_ONLY == 1 ]]; then write_report; exit $?; fi

export CUDA_VISIBLE_DEVICES=$GPU
smi() { nvidia-smi -i "$GPU" "$@" 2>/dev/null; }

# ------------------------------------------------------------ versions and load
say "GPU and software"
TORCH_PY=
for py in ${TORCH_PYTHON:-} python3 build/torch2env/bin/python; do
    if "$py" -c 'import sys, numpy, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        TORCH_PY=$py; break
    fi
done
[[ -n $TORCH_PY ]] || note "no Python here has a PyTorch that sees the GPU (tried ${TORCH_PYTHON:-} python3 build/torch2env/bin/python): the PyTorch rows are left out"
{
    TORCH_PY=${TORCH_PY:-/nonexistent} GPU=$GPU bash tests/gpu/versions.sh "$FTC"
    echo "cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1) ($(nproc) cores)"
    echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "gpu_apps_start=$(smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tr '\n' ';')"
    echo "gpu_util_start=$(smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"
    echo "peak_flops=$PEAK_FLOPS"
    echo "warmup=$WARMUP"
    echo "accum=$ACCUM"
    echo "timed=$TIMED"
    echo "compile_scope=$COMPILE_SCOPE"
    echo "profile_steps=$PROFILE_STEPS"
    echo "precision_calibrated=$PRECISION"
    echo "shapes=$SHAPES"
    echo "systems=$SYSTEMS"
    for s in $SHAPES; do echo "shape_$s=${SHAPE[$s]}"; done
} >"$RUNS/env.txt"
sed 's/^/   /' "$RUNS/env.txt"

# ------------------------------------------------------------ data
# Byte-level tokens (< 257) from Debian's fortunes, as train_vs_pytorch.sh, or this
# repository's sources where fortunes is not installed; model.vocab_size is set to
# the model's (49152, 128256): the embedding and head cost what the full vocabulary
# costs, only ids above 256 are never seen, which does not change the work of a step.
say "data"
mapfile -t TEXTS < <(find "${FORTUNES_DIR:-/usr/share/games/fortunes}" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' 2>/dev/null | sort)
SPLIT=(--split-on %)
if ((${#TEXTS[@]})); then CORPUS="Debian's fortunes (/usr/share/games/fortunes)"; else
    SPLIT=()
    mapfile -t TEXTS < <(find src tests docs bench README.md -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.md' -o -name '*.py' -o -name '*.sh' \) 2>/dev/null | sort)
    CORPUS="this repository's sources and docs (fortunes is not installed here)"
fi
echo "corpus=$CORPUS" >>"$RUNS/env.txt"
PREP=$FTC
./femtotron --help >/dev/null 2>&1 && PREP=./femtotron
if ! "$PREP" prepare --input "${TEXTS[@]}" "${SPLIT[@]}" --output "$SCRATCH/data" --val-fraction 0 --force >"$RUNS/prepare.log" 2>&1; then
    echo "FAIL femtotron prepare: $(tail -n 3 "$RUNS/prepare.log")"; exit 1
fi
tail -n 1 "$RUNS/prepare.log"
DATA="$SCRATCH/data/train_*.bin"

# ------------------------------------------------------------ the GPU's profile
# For the planner's prediction of each femtotron run (issue 21, item 4): the
# profile of this GPU in femtotron's precision and attention kernels, head dim 64
# (every shape's). Where cuDNN fails there, femtotron's runs use its own kernels.
PROFILE_JSON=$RUNS/profile.json
calibrate() {
    timeout -k 10 "$CALIBRATE_TIMEOUT" "$FTC" bench calibrate --precision "$PRECISION" --head-dim 64 \
        --attention "$(femto_attention)" \
        --output "$PROFILE_JSON" >"$RUNS/calibrate.log" 2>&1
}
if [[ $CALIBRATE == 1 ]]; then
    say "bench calibrate (limit ${CALIBRATE_TIMEOUT} s)"
    calibrate
    crc=$?
    if ((crc != 0)) && grep -q '^femtotron: error: cuDNN' "$RUNS/calibrate.log" && [[ $ATTENTION == cudnn ]]; then
        note "bench calibrate with --attention cudnn failed ($(grep -m1 '^femtotron: error: cuDNN' "$RUNS/calibrate.log" | cut -c1-240)): femtotron ran on its own attention kernels"
        ATTENTION=femtotron
        calibrate
        crc=$?
    fi
    if ((crc == 0)); then
        sed 's/^/   /' "$RUNS/calibrate.log"
    else
        note "bench calibrate failed or ran past ${CALIBRATE_TIMEOUT} s: no planner predictions ($(tail -n 1 "$RUNS/calibrate.log" | cut -c1-200))"
        rm -f "$PROFILE_JSON"
    fi
fi

# ------------------------------------------------------------ runs
shape_fields() { read -r D L NH KV I V S _ <<<"${SHAPE[$1]}"; }

femto_args() {  # shape B steps -> FARGS
    shape_fields "$1"
    FARGS=(--data.train "$DATA" --model.hidden_size "$D" --model.num_hidden_layers "$L"
           --model.num_attention_heads "$NH" --model.num_key_value_heads "$KV"
           --model.intermediate_size "$I" --model.vocab_size "$V" --model.tie_word_embeddings true
           --model.max_position_embeddings "$S" --training.seq_length "$S"
           --training.micro_batch_size "$2" --training.global_batch_size $(($2 * ACCUM))
           --training.steps "$3" --training.threads "$(nproc)"
           --training.device cuda --training.precision "$PRECISION" --training.peak_flops "$PEAK_FLOPS"
           --training.attention "$(femto_attention)")
    # bf16: keep the norms' and SwiGLU's bf16 outputs for the weight gradients (the
    # card has the memory; PyTorch's eager runs keep them too)
    [[ $PRECISION == bf16 ]] && FARGS+=(--training.keep_bf16_inputs true)
    return 0
}

# The run config of femto_args (FARGS) as JSON, for `plan --config`.
femto_config() {  # shape B steps out.json
    femto_args "$1" "$2" "$3"
    python3 - "$4" "${FARGS[@]}" <<'PY'
import json, sys
out, args, cfg = sys.argv[1], sys.argv[2:], {}
for k, v in zip(args[::2], args[1::2]):
    sec, key = k[2:].split(".", 1)
    for conv in (int, float):
        try:
            v = conv(v); break
        except ValueError:
            pass
    if v in ("true", "false"): v = v == "true"
    cfg.setdefault(sec, {})[key] = v
json.dump(cfg, open(out, "w"), indent=1)
PY
}

# The planner's step time (s) for a femtotron run of shape at micro-batch B on this
# GPU's profile; empty when there is no profile or the planner fails.
femto_predict_step() {  # shape B name
    [[ -f $PROFILE_JSON ]] || return 0
    femto_config "$1" "$2" 1 "$RUNS/$3.run.json"
    "$FTC" plan --config "$RUNS/$3.run.json" --gpus 1 --hardware this --profile "$PROFILE_JSON" \
        --layout "dp=1,mbs=$2" --tsv 2>"$RUNS/$3.plan.err" |
        awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_s") c = i } NR == 2 && c { print $c }'
}

# femtotron's planned buffers (params + grads + optimizer + activations + comm) in
# MiB from the CUDA build's predictor, which equals the run's start-up memory line
# (tests/gpu/train_parity.sh checks it); empty when it cannot tell.
femto_predict_mib() {  # shape B
    [[ -x $PLAN_MEMORY ]] || return 0
    femto_args "$1" "$2" 1
    "$PLAN_MEMORY" --world 1 "${FARGS[@]}" 2>/dev/null |
        awk '/^memory bytes/ {printf "%d\n", ($6 + $8 + $10 + $12 + $14) / 1048576}'
}

# One run. Writes RUNS/NAME.{log,jsonl,mem,meta} (NAME = shape.system.round); sets STATUS:
# ok | oom | timeout | failed | skipped | bf16-refused | cudnn-failed.
run_one() {  # shape system round B
    local shape=$1 sys=$2 r=$3 B=$4 name="$1.$2.$3" W=$WARMUP cap rc t1 t2 poll base need free
    local log=$RUNS/$name.log met=$RUNS/$name.jsonl
    local -a cmd
    rm -f "$RUNS/$name".*
    shape_fields "$shape"
    case $sys in
        femtotron|profile) cap=$FEMTO_TIMEOUT ;;
        compile) cap=$COMPILE_TIMEOUT; W=$((WARMUP + 2)) ;;
        *) cap=$EAGER_TIMEOUT ;;
    esac
    local left=$(($(remaining) - 15))
    ((left < cap)) && cap=$left
    meta() { echo "$1=$2" >>"$RUNS/$name.meta"; }
    meta shape "$shape"; meta system "$sys"; meta round "$r"; meta batch "$B"; meta warmup "$W"; meta accum "$ACCUM"
    meta fields "${SHAPE[$shape]}"; meta timed "$TIMED"
    if ((cap < 20)); then
        STATUS=skipped; meta status skipped; meta why "out of the time budget (BUDGET_S=$BUDGET_S)"
        say "$shape $sys: skipped, out of the time budget"; return
    fi
    if [[ $sys == femtotron || $sys == profile ]]; then
        meta precision "$PRECISION$([[ $(femto_attention) == cudnn ]] && echo ", cuDNN attention")"
        need=$(femto_predict_mib "$shape" "$B")
        free=$(smi --query-gpu=memory.free --format=csv,noheader,nounits | head -n 1)
        if [[ -z $need ]]; then
            if [[ ${FORCE_FEMTO:-0} != 1 ]]; then
                STATUS=skipped; meta status skipped
                meta why "no memory predictor $PLAN_MEMORY (make cuda builds it): not run, since managed memory beyond the free GPU memory can hang the GPU (FORCE_FEMTO=1 runs it anyway)"
                say "$shape femtotron: skipped, no $PLAN_MEMORY"; return
            fi
        elif ((need + HEADROOM_MIB > free)); then
            STATUS=oom; meta status oom
            meta why "predicted $need MiB of planned buffers + $HEADROOM_MIB MiB headroom > $free MiB free"
            say "$shape femtotron B=$B: predicted $need MiB + $HEADROOM_MIB headroom > $free MiB free"; return
        fi
        meta predicted_mib "${need:-}"
        if [[ $sys == profile ]]; then  # a short run, every op timed on the GPU by CUDA events
            femto_args "$shape" "$B" "$PROFILE_STEPS"
            # shellcheck disable=SC2206
            cmd=(env FEMTOTRON_CUDA_PROFILE=1 ${FEMTO_LAUNCH:-} "$FTC" train "${FARGS[@]}" --logging.metrics "$met")
        else
            meta predicted_step_s "$(femto_predict_step "$shape" "$B" "$name")"
            femto_args "$shape" "$B" $((W + TIMED))
            # shellcheck disable=SC2206
            cmd=(${FEMTO_LAUNCH:-} "$FTC" train "${FARGS[@]}" --logging.metrics "$met" --logging.trace "$RUNS/$name.trace.json")
        fi
    else
        if [[ -z $TORCH_PY ]]; then STATUS=skipped; meta status skipped; meta why "no PyTorch with CUDA"; return; fi
        local dtype=bf16
        [[ $sys == eager-fp32 ]] && dtype=fp32
        meta precision "$dtype"
        cmd=("$TORCH_PY" bench/torch_train.py --device cuda --dtype "$dtype" --fused-adamw --tie-embeddings
             --attention sdpa --data "$DATA" --hidden "$D" --layers "$L" --heads "$NH" --kv-heads "$KV"
             --intermediate "$I" --vocab "$V" --seq "$S" --batch "$B" --accum "$ACCUM" --steps $((W + TIMED))
             --warmup-steps "$W" --peak-flops "$PEAK_FLOPS" --metrics "$met")
        [[ $sys == compile ]] && cmd+=(--compile --compile-scope "$COMPILE_SCOPE")
    fi
    say "$shape $sys round $r: micro-batch $B, $W + $TIMED steps, limit ${cap} s (load $(cut -d' ' -f1 /proc/loadavg))"
    base=$(smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1)
    meta mem_base_mib "$base"
    # nvidia-smi itself in the background (not through the smi function, whose subshell
    # would outlive a kill of $! with nvidia-smi still running under it)
    nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$RUNS/$name.mem" 2>/dev/null &
    poll=$!
    t1=$(date +%s.%N)
    PYTHONUNBUFFERED=1 timeout -k 10 "$cap" "${cmd[@]}" >"$log" 2>&1
    rc=$?
    t2=$(date +%s.%N)
    kill "$poll" 2>/dev/null; wait "$poll" 2>/dev/null
    meta rc "$rc"; meta wall_s "$(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.1f", b - a}')"
    if [[ $sys == profile ]]; then
        meta op_profile "$(sed -n 's/^femtotron: cuda profile: //p' "$log" | tail -n 1)"
        meta op_profile_by_op "$(sed -n 's/^femtotron: cuda profile by op: //p' "$log" | tail -n 1)"
        meta op_profile_by_product "$(sed -n 's/^femtotron: cuda profile by product: //p' "$log" | tail -n 1)"
    fi
    grep -E '^(step|median|peak GPU|memory \(rank)' "$log" | tail -n 3 | sed 's/^/   /'
    if ((rc == 0)); then STATUS=ok
    elif grep -q 'no bf16 kernels' "$log"; then STATUS=bf16-refused
    elif grep -q '^femtotron: error: cuDNN' "$log"; then STATUS=cudnn-failed
    elif ((rc == 124 || rc == 137)); then STATUS=timeout
    elif ((rc == 3)) || grep -qiE 'out of memory|OutOfMemoryError' "$log"; then STATUS=oom
    else STATUS=failed; fi
    meta status "$STATUS"
    if [[ $STATUS == timeout ]]; then
        meta why "stopped at its ${cap} s limit after $(grep -c '^step' "$log") of $((W + TIMED)) steps"
        echo "   timeout: stopped at its ${cap} s limit after $(grep -c '^step' "$log") of $((W + TIMED)) steps"
    elif [[ $STATUS != ok ]]; then
        meta why "$(grep -v '^ *$' "$log" | tail -n 1 | cut -c1-300)"
        echo "   $STATUS (exit $rc): $(grep -v '^ *$' "$log" | tail -n 1 | cut -c1-300)"
    fi
}

declare -A MB
for s in $SHAPES; do MB[$s]=$(awk '{print $8}' <<<"${SHAPE[$s]}"); done
for r in $(seq 1 "$ROUNDS"); do
    for shape in $SHAPES; do
        while :; do  # until every system has run at one micro-batch
            redo=0
            for sys in $SYSTEMS; do
                run_one "$shape" "$sys" "$r" "${MB[$shape]}"
                if [[ $STATUS == bf16-refused ]]; then
                    note "femtotron refused training.precision bf16 (\"this build has no bf16 kernels yet\"): femtotron ran in fp32 (no TF32), PyTorch in bf16 autocast; the ratio is not like for like"
                    PRECISION=fp32
                    run_one "$shape" "$sys" "$r" "${MB[$shape]}"
                fi
                if [[ $STATUS == cudnn-failed ]]; then
                    note "femtotron with training.attention cudnn failed ($(grep -m1 '^femtotron: error: cuDNN' "$RUNS/$shape.$sys.$r.log" | cut -c1-240)): femtotron ran on its own attention kernels"
                    ATTENTION=femtotron
                    run_one "$shape" "$sys" "$r" "${MB[$shape]}"
                fi
                if [[ $STATUS == oom ]]; then
                    if ((MB[$shape] > 1)); then
                        note "$shape: $sys ran out of GPU memory at micro-batch ${MB[$shape]}; every system of $shape runs at $((MB[$shape] / 2))"
                        MB[$shape]=$((MB[$shape] / 2)); redo=1; break
                    fi
                    note "$shape: $sys ran out of GPU memory at micro-batch 1"
                fi
            done
            ((redo)) || break
        done
    done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RUNS/env.txt"
echo "femto_precision_end=$PRECISION" >>"$RUNS/env.txt"
echo "femto_attention_end=$ATTENTION" >>"$RUNS/env.txt"
say "report"
write_report
