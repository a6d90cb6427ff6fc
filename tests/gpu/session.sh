#!/usr/bin/env bash
# tests/gpu/session.sh — everything a lent GPU is for, in one call that fits the
# lease (15 minutes of device time a session, a machine's start included, at most 10
# minutes a command): issue 14's GPU tests, then issue 21's benchmark with the time
# left, and the record of both that the issues ask to commit under bench/results/.
#
# Here first: `bash scripts/gpu_bundle.sh` (the binaries, their libraries, Open MPI
# and the corpus in gpu-bundle.tar.gz, which git ignores). Then one device call,
# carrying the bundle, with timeout_s 600:
#   bash tests/gpu/session.sh
# On the device machine it
#   1. unpacks gpu-bundle.tar.gz where it is there and sources gpu-bundle/env.sh
#      (PREBUILT=1: nothing is built there); without a bundle it builds (make cuda);
#   2. writes the GPU and software versions (tests/gpu/versions.sh);
#   3. runs tests/gpu/run.sh's parts in SESSION_TESTS's order (default: the ops, the
#      one-rank parity, the layouts in fp32 and bf16, the PyTorch reference, resume
#      across devices, generate, calibrate, NCCL, then the main job's 500 bf16
#      steps), each under PART_LIMIT_S and all before the tests' deadline;
#   4. where gpu_ops failed, runs it again under compute-sanitizer's memcheck
#      (SANITIZER_LIMIT_S), whose first reports name the kernel and the address;
#   5. runs bench/attention_gpu.sh (femtotron's attention kernels against PyTorch's
#      SDPA, at most ATT_LIMIT_S), bench/attention_ncu.sh (Nsight Compute's counters
#      and the instruction mix of those kernels, at most NCU_LIMIT_S; SESSION_NCU=0
#      leaves it out) and gives bench/gpu_vs_pytorch.sh what is then left of
#      SESSION_BUDGET_S, where that is at least BENCH_MIN_S (SESSION_BENCH=0 leaves
#      all three out);
#   6. ends on its record's summary: a table of the parts with their counts and
#      seconds, and "N passed, N failed" over every part (exit 1 on a failure).
# Everything lands in OUT (the device tool's folder, whose files come back; default
# a new folder under /tmp, printed): session.md (the record: versions, the command,
# the table, every FAIL and SKIP line, the benchmarks' tables), session.log (all
# output), versions.txt, sanitizer.log, attention_gpu.md, attention_ncu.tar.gz,
# gpu_vs_pytorch.md and gpu_vs_pytorch_runs.tar.gz; session.md also holds the step's
# floor against issue 21's targets (bench/tools/gpu_floor.py). Copy session.md to bench/results/gpu_session_DATE.md
# and the benchmarks' files to bench/results/ here.
#
# Knobs (defaults in brackets): SESSION_BUDGET_S [560] the whole script;
# TESTS_SHARE_S [360] the most the tests take of it; PART_LIMIT_S [150]; PARITY_JOBS [4];
# SESSION_TESTS [above]; SANITIZER [compute-sanitizer] SANITIZER_LIMIT_S [90];
# SESSION_BENCH [1]; ATT_MIN_S [60]; ATT_LIMIT_S [150]; SESSION_NCU [1]; NCU_LIMIT_S [60]; BENCH_MIN_S
# [120]; BENCH_SHAPES [smollm-1.7b llama-3.2-1b smollm-360m]. Without an NVIDIA GPU
# it says so and exits 0, as tests/gpu/run.sh does.
set -u
cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
BUDGET=${SESSION_BUDGET_S:-560}
TESTS_SHARE=${TESTS_SHARE_S:-360}
SESSION_TESTS=${SESSION_TESTS:-"gpu_ops train_parity layouts layouts_bf16 reference resume_devices generate calibrate nccl bf16_main_job"}
OUT=${OUT:-$(mktemp -d /tmp/gpu_session.XXXXXX)}
mkdir -p "$OUT"
LOG=$OUT/session.log
REC=$OUT/session.md
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
elapsed() { echo $(($(date +%s) - T0)); }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    say "SKIP no NVIDIA GPU here (nvidia-smi lists none): the GPU session did not run"
    say "0 passed, 0 failed"
    exit 0
fi

# 1. The binaries: the bundle's where it came along, else built here. GPU_BUNDLE
# (default gpu-bundle.tar.gz) names it: tests/shell/test_cuda_emu.sh points it
# elsewhere, so that a developer's bundle (ignored by git) never unpacks its older
# binaries over a working tree's builds.
GPU_BUNDLE=${GPU_BUNDLE:-gpu-bundle.tar.gz}
if [ -f "$GPU_BUNDLE" ]; then
    tar xzf "$GPU_BUNDLE" || { say "FAIL unpacking $GPU_BUNDLE"; exit 1; }
    envmsg=$(mktemp)
    # shellcheck disable=SC1091
    . gpu-bundle/env.sh 2>"$envmsg"  # its notes of libraries still missing, if any
    tee -a "$LOG" <"$envmsg"
    rm -f "$envmsg"
    export PREBUILT=1
    say "== binaries from $GPU_BUNDLE ($(elapsed) s)"
elif [ "${PREBUILT:-0}" != 1 ]; then
    say "== make cuda ($(elapsed) s)"
    { make -s -j"$(nproc)" cuda && make -s -j"$(nproc)" femtotron build/tests/plan_memory_main build/tests/dump_grads; } \
        >>"$LOG" 2>&1 || { say "FAIL make cuda (see session.log)"; exit 1; }
    export PREBUILT=1
fi

# 2. What it ran on.
TORCH_PY=python3 bash tests/gpu/versions.sh "${GPU_BIN:-./femtotron-cuda}" >"$OUT/versions.txt"
nvidia-smi -L >>"$LOG" 2>&1
sed 's/^/   /' "$OUT/versions.txt" | tee -a "$LOG"

# 3. The tests, one run.sh call per part (its own counts), in priority order.
tests_deadline=$((T0 + (TESTS_SHARE < BUDGET ? TESTS_SHARE : BUDGET)))
export PART_LIMIT_S=${PART_LIMIT_S:-150}
# The layout parts' rows (tests/shell/test_parity.sh) 4 at a time: the machine has 16
# cores, a row's ranks are small processes on the one GPU (a CUDA context and a few
# MiB each, at most 8 per row), and the device's minutes are what is scarce.
export PARITY_JOBS=${PARITY_JOBS:-4}
rows=()
passed=0 failed=0
for t in $SESSION_TESTS; do
    t1=$(date +%s)
    out=$(DEADLINE=$tests_deadline GPU_TESTS=$t bash tests/gpu/run.sh 2>&1)
    rc=$?
    printf '%s\n' "$out" >>"$LOG"
    printf '%s\n' "$out" | grep -E '^(PASS|FAIL|SKIP) ' | cut -c1-400
    counts=$(printf '%s\n' "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n 1)
    read -r p f <<<"${counts:-0 1}"
    [ -n "$counts" ] || echo "FAIL $t: run.sh ended without its count (exit $rc)" | tee -a "$LOG" "$OUT/problems.txt"
    status=ok
    printf '%s\n' "$out" | grep -q "^SKIP $t" && status=skipped
    ((f > 0)) && status=failed
    rows+=("| $t | $p | $f | $(($(date +%s) - t1)) | $status |")
    passed=$((passed + p)) failed=$((failed + f))
    printf '%s\n' "$out" | grep -E '^(FAIL|SKIP) ' >>"$OUT/problems.txt"
    if [ "$t" = gpu_ops ] && [ "$status" = failed ]; then
        # 4. The failing ops under memcheck: an out-of-bounds access names its kernel.
        san=${SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
        if [ -x "$san" ]; then
            say "== compute-sanitizer memcheck of gpu_ops (limit ${SANITIZER_LIMIT_S:-90} s)"
            timeout -k 10 "${SANITIZER_LIMIT_S:-90}" "$san" --tool memcheck --print-limit 20 \
                "${GPU_OPS:-./build-cuda/tests/gpu_ops}" >"$OUT/sanitizer.log" 2>&1
            grep -E '^(=+ (ERROR SUMMARY|Invalid|Program hit)|FAIL )' "$OUT/sanitizer.log" | head -n 20 | tee -a "$LOG"
        else
            say "NOTE no compute-sanitizer here: gpu_ops was not run under memcheck"
        fi
    fi
done

# 5. The benchmarks, with what is left: the attention kernels alone (short), then
# the training steps against PyTorch.
att_note="left out (SESSION_BENCH=0)"
bench_note="left out (SESSION_BENCH=0)"
ncu_note="left out (SESSION_BENCH=0)"
floor_note="left out (SESSION_BENCH=0)"
if [ "${SESSION_BENCH:-1}" = 1 ]; then
    left=$((BUDGET - $(elapsed) - 10))
    if [ "$left" -ge "${ATT_MIN_S:-60}" ]; then
        cap=$((left < ${ATT_LIMIT_S:-150} ? left : ${ATT_LIMIT_S:-150}))
        say "== bench/attention_gpu.sh, at most ${cap} s ($(elapsed) s)"
        RES=$OUT ATT_BIN=${ATT_BIN:-build-cuda/tests/attention_gpu} timeout -k 5 "$cap" bash bench/attention_gpu.sh >>"$LOG" 2>&1
        att_note="ran (exit $?)"
    else
        att_note="not run: $left s left, under ATT_MIN_S=${ATT_MIN_S:-60}"
    fi
    say "== attention benchmark $att_note"
    # Nsight Compute's counters and the instruction mix of the attention kernels
    # (bench/attention_ncu.sh), packed into one file (the device tool brings back 8).
    left=$((BUDGET - $(elapsed) - 10))
    if [ "${SESSION_NCU:-1}" = 1 ] && [ "$left" -ge "${NCU_LIMIT_S:-60}" ]; then
        say "== bench/attention_ncu.sh, at most ${NCU_LIMIT_S:-60} s ($(elapsed) s)"
        RES=$OUT/ncu LIMIT_S=$((${NCU_LIMIT_S:-60} - 10)) ATT_BIN=${ATT_BIN:-build-cuda/tests/attention_gpu} \
            timeout -k 5 "${NCU_LIMIT_S:-60}" bash bench/attention_ncu.sh >>"$LOG" 2>&1
        ncu_note="ran (exit $?)"
        [ -d "$OUT/ncu" ] && tar czf "$OUT/attention_ncu.tar.gz" -C "$OUT" ncu && rm -rf "$OUT/ncu"
    else
        ncu_note="not run (SESSION_NCU=${SESSION_NCU:-1}, $left s left)"
    fi
    say "== attention counters $ncu_note"
    left=$((BUDGET - $(elapsed) - 10))
    if [ "$left" -ge "${BENCH_MIN_S:-120}" ]; then
        say "== bench/gpu_vs_pytorch.sh, ${left} s ($(elapsed) s)"
        RES=$OUT BUDGET_S=$left SHAPES=${BENCH_SHAPES:-"smollm-1.7b llama-3.2-1b smollm-360m"} \
            bash bench/gpu_vs_pytorch.sh >>"$LOG" 2>&1
        bench_note="ran with a budget of $left s (exit $?)"
    else
        bench_note="not run: $left s left, under BENCH_MIN_S=${BENCH_MIN_S:-120}"
    fi
    say "== benchmark $bench_note"
    # How fast the step could be against the targets (bench/tools/gpu_floor.py): the
    # planner on this run's profile made ideal, with this run's attention timings.
    if [ -f "$OUT/gpu_vs_pytorch_runs.tar.gz" ] && [ -f "$OUT/attention_gpu.md" ]; then
        fl=$(mktemp -d)
        tar xzf "$OUT/gpu_vs_pytorch_runs.tar.gz" -C "$fl" &&
            timeout -k 5 30 python3 bench/tools/gpu_floor.py "$fl/runs" --attention-md "$OUT/attention_gpu.md" \
                --femtotron "${GPU_BIN:-./femtotron-cuda}" >"$OUT/floor.md" 2>>"$LOG"
        floor_note="ran (exit $?)"
        rm -rf "$fl"
    else
        floor_note="not run: it needs the benchmark's runs and the attention table"
    fi
    say "== step floor $floor_note"
fi

# 6. The record.
{
    echo "# GPU session $(sed -n 's/^date=//p' "$OUT/versions.txt")"
    echo
    echo "Command: \`bash tests/gpu/session.sh\` (SESSION_BUDGET_S=$BUDGET, TESTS_SHARE_S=$TESTS_SHARE," \
        "PART_LIMIT_S=$PART_LIMIT_S), femtotron $(sed -n 's/^femtotron_rev=//p' "$OUT/versions.txt"), $(elapsed) s in all."
    echo
    echo '```'
    cat "$OUT/versions.txt"
    echo '```'
    echo
    echo "## Tests (tests/gpu/run.sh, a call per part)"
    echo
    echo "| part | passed | failed | seconds | status |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    echo "**$passed passed, $failed failed.**"
    if [ -s "$OUT/problems.txt" ]; then
        echo
        echo '```'
        cut -c1-600 "$OUT/problems.txt"
        echo '```'
    fi
    if [ -s "$OUT/sanitizer.log" ]; then
        echo
        echo "compute-sanitizer memcheck of gpu_ops (sanitizer.log), its first reports:"
        echo '```'
        grep -E '^=+ ' "$OUT/sanitizer.log" | head -n 30
        echo '```'
    fi
    echo
    echo "## Attention (bench/attention_gpu.sh): $att_note"
    if [ -f "$OUT/attention_gpu.md" ]; then echo; sed '1,2d' "$OUT/attention_gpu.md"; fi
    echo
    echo "## Attention counters (bench/attention_ncu.sh, in attention_ncu.tar.gz): $ncu_note"
    echo
    echo "## Benchmark (bench/gpu_vs_pytorch.sh): $bench_note"
    if [ -f "$OUT/gpu_vs_pytorch.md" ]; then echo; cat "$OUT/gpu_vs_pytorch.md"; fi
    echo
    echo "## The step's floor (bench/tools/gpu_floor.py, from this run's profile and attention table): $floor_note"
    if [ -s "$OUT/floor.md" ]; then echo; cat "$OUT/floor.md"; fi
} >"$REC"
# The reply of the device tool holds the end of the output: the failures and the
# table last, where it shows them even if the files did not come back.
say ""
if [ -s "$OUT/problems.txt" ]; then
    say "Failures and skips (the first 40; all in session.md):"
    head -n 40 "$OUT/problems.txt" | cut -c1-300 | tee -a "$LOG"
fi
rm -f "$OUT/problems.txt" "$OUT/floor.md"  # both in session.md (the device tool brings back 8 files)
sed -n '/^| part/,/^\*\*/p' "$REC" | tee -a "$LOG"
[ -f "$OUT/attention_gpu.md" ] && sed -n '/^| shape/,/^$/p' "$OUT/attention_gpu.md" | tee -a "$LOG"
say "record: $REC; log: $LOG"
say "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
