#!/usr/bin/env bash
# bench/attention_ncu.sh — why femtotron's mma attention kernels run at a fifth of
# PyTorch's flash SDPA (issue 21; bench/results/attention_gpu*.md): Nsight Compute's
# counters of each kernel of one training-shaped call, and the instruction mix of
# their machine code, for a GPU session to bring back. Nothing here is timed: the
# counters say where the warps wait (warp state statistics: barrier, long or short
# scoreboard, math pipe throttle, ...), how full the machine is (occupancy, issue
# slots, tensor pipe utilisation) and where in the source the stalls sit.
#
#   bash bench/attention_ncu.sh        (on the GPU machine, after `make cuda` or
#                                       with the bundle's binaries)
# Writes into RES [bench/results]: attention_ncu.txt (ncu's report of the forward,
# dQ and dK/dV kernels of the SmolLM-1.7B shape, B 4 S 2048 H 32/32 hd 64: one
# launch each, after the warm-ups) and attention_sass.txt (per kernel, the count of
# each opcode in its sm_90a code: HMMA, LDSM, LDS/STS, LDGSTS, MUFU, BAR, ...).
# Knobs: ATT_BIN [build-cuda/tests/attention_gpu], NCU [ncu, or the CUDA
# toolkit's], CUOBJDUMP [cuobjdump], SHAPE ["4 2048 32 32 64"], LIMIT_S [120].
# Without a GPU, or without ncu, it says so and exits 0.
set -u
cd "$(dirname "$0")/.." || exit 1
RES=${RES:-bench/results}
ATT=${ATT_BIN:-build-cuda/tests/attention_gpu}
SHAPE=${SHAPE:-"4 2048 32 32 64"}
LIMIT=${LIMIT_S:-120}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "SKIP no NVIDIA GPU here (nvidia-smi lists none): bench/attention_ncu.sh did not run"
    exit 0
fi
find_tool() {  # NAME: on PATH, in the CUDA toolkit, or under /opt/nvidia (Nsight Compute's own folder)
    command -v "$1" 2>/dev/null && return
    for d in "${CUDA_HOME:-/usr/local/cuda}/bin" /opt/nvidia/nsight-compute/*; do
        [[ -x $d/$1 ]] && { echo "$d/$1"; return; }
    done
}
NCU=${NCU:-$(find_tool ncu)}
CUOBJDUMP=${CUOBJDUMP:-$(find_tool cuobjdump)}
[[ -x $ATT ]] || { echo "SKIP no $ATT (make cuda builds it): bench/attention_ncu.sh did not run"; exit 0; }
mkdir -p "$RES"

# 1. The counters: the kernels of the third call of each (after attention_gpu's two
# warm-ups), clocks left as they are (the tool library's METHOD: never change them).
if [[ -n $NCU ]]; then
    read -r B S H KV hd <<<"$SHAPE"
    {
        echo "# ncu of femtotron's mma attention kernels, shape B $B S $S H $H/$KV hd $hd, bf16 ($(date -u '+%Y-%m-%d %H:%M UTC'))"
        nvidia-smi -L | head -n 1
        timeout -k 5 "$LIMIT" "$NCU" --clock-control none --launch-skip 2 --launch-count 3 \
            -k 'regex:k_forward|k_backward_dq|k_backward_dkv' \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section SourceCounters \
            env FEMTOTRON_ATTENTION=mma "$ATT" "$B" "$S" "$H" "$KV" "$hd" 1 bf16 2>&1
        echo "ncu exit status $?"
    } >"$RES/attention_ncu.txt"
    echo "wrote $RES/attention_ncu.txt ($(grep -c 'k_forward\|k_backward' "$RES/attention_ncu.txt") kernel mentions)"
else
    echo "SKIP no ncu here: no counters"
fi

# 2. The instruction mix of each flash_mma kernel's sm_90a code.
if [[ -n $CUOBJDUMP ]]; then
    "$CUOBJDUMP" --dump-sass --gpu-architecture sm_90a "$ATT" 2>/dev/null | python3 -c '
import re, sys, collections
kernel, mix = None, collections.OrderedDict()
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        kernel = m.group(1) if "flash_mma" in m.group(1) else None
        if kernel: mix[kernel] = collections.Counter()
        continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
    if kernel and m:
        mix[kernel][m.group(1)] += 1
for k, c in mix.items():
    print(k, sum(c.values()), "instructions:", ", ".join(f"{op} {n}" for op, n in c.most_common(20)))
' >"$RES/attention_sass.txt"
    echo "wrote $RES/attention_sass.txt ($(wc -l <"$RES/attention_sass.txt") kernels)"
else
    echo "SKIP no cuobjdump here: no instruction mix"
fi
