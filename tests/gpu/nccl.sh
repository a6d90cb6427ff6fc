#!/usr/bin/env bash
# tests/gpu/nccl.sh — parallel.comm on a machine with one GPU, run by
# tests/gpu/run.sh:
#   1. build-cuda/tests/nccl_ops: NCCL's collectives through dist/device_comm.h on
#      a one-rank communicator, and its watchdog on a peer that never joins;
#   2. one rank with parallel.comm = nccl trains the parity problem equal to the
#      CPU's one rank within 1e-5 (the key is accepted; one rank has no peers);
#   3. two ranks on the one GPU with parallel.comm = nccl are refused, saying NCCL
#      refuses two ranks on one GPU;
#   4. two ranks with parallel.comm = auto say so in a note and run over MPI;
#   5. with two GPUs or more (a rank each), NCCL's links (nccl_links: messages of
#      one tag in order, the ops' stream waiting for a receive by its event,
#      nothing staged, a tag without a link over MPI; ends that do not match
#      refused naming the lone one) and its collectives ordered by events:
#      dp 2 with parallel.comm = nccl waits on the host once per step (the CUDA
#      profile's count over 3 and 6 steps), as one rank does; and, emulated
#      (NCCL_EMU_HANG_TEST=1: tests/emu/nccl_emu.h's NCCL_EMU_HANG_AT makes a
#      collective never finish, a peer that dies after joining), the watchdog of
#      collectives the device waits for ends the job after parallel.timeout_s,
#      naming the operation and the group, and so it does for a pipeline message
#      that never arrives (pp 2), naming the message and its link;
#   6. where there are GPUs enough for a rank each (GPUS, default nvidia-smi's
#      count; the emulation plays CUDA_EMU_DEVICES of them), layouts of several
#      ranks with parallel.comm = nccl against the CPU's one rank within 1e-5
#      (tests/gpu/layouts.sh: NCCL_LAYOUTS, default ZeRO-3 over 4 ranks with uneven
#      buckets, pp 2 under 1f1b, interleaved and zb-v, cp 2, tp2 x cp2 x pp2 and
#      ep 2, whose token exchanges go over NCCL too), under 0.1 MiB staged through
#      MPI (ep's token counts) and, where the row has pp or cp, every rank's
#      pipeline and ring messages over NCCL links (test_parity.sh's NCCL_LINKS);
#      skipped, saying so, on one GPU;
#   7. emulated only (NCCL_EMU_STREAM_TEST=1): the same with NCCL's streams run
#      before the ops' stream wherever events allow, then after it
#      (CUDA_EMU_STREAMS=side-first, side-last: tests/emu/cuda_emu.h), on dp 2
#      ZeRO-1, tp 2 with sequence parallel, cp 2 and pp 2 (1f1b): a missing event
#      between the ops and a collective, either way, changes the numbers in one of
#      the two (dropping the collective's wait for the ops fails side-first at 0.14
#      relative on dp 2, dropping the ops' wait for the collective side-last at
#      0.01; issue order, the GPU's usual one, passes both); around a link's
#      message in all three (a send not waiting for the ops: 0.026 on pp 2, 0.011
#      on cp 2; the ops not waiting for a receive: 0.016 and 0.003 and more).
# Prints PASS/FAIL lines; exit 1 on a failure. GPU_BIN (default ./femtotron-cuda),
# NCCL_OPS (default ./build-cuda/tests/nccl_ops).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/lib.sh  # CPU_BIN, GPU_BIN, MPIRUN, tmp, failed; the parity problem

timeout -k 10 300 "${NCCL_OPS:-./build-cuda/tests/nccl_ops}" >"$tmp/ops.log" 2>&1  # a hung collective fails, not blocks
rc=$?
grep -E '^(PASS|FAIL) ' "$tmp/ops.log"
[ "$rc" -eq 0 ] || grep -q '^FAIL ' "$tmp/ops.log" || failed "nccl_ops exited with status $rc: $(tail -3 "$tmp/ops.log")"

parity_corpus
common=("${PARITY[@]}" --training.steps 5)
gpu=(--training.device cuda --training.precision fp32)
"$CPU_BIN" train "${common[@]}" --logging.metrics "$tmp/cpu.jsonl" >"$tmp/cpu.log" 2>&1 ||
    { failed "CPU reference run: $(tail -3 "$tmp/cpu.log")"; exit 1; }
if timeout -k 10 300 "${MPIRUN[@]}" -np 1 "$GPU_BIN" train "${common[@]}" "${gpu[@]}" --parallel.comm nccl \
    --logging.metrics "$tmp/nccl1.jsonl" >"$tmp/nccl1.log" 2>&1; then
    if r=$("$PYTHON" - "$tmp/cpu.jsonl" "$tmp/nccl1.jsonl" <<'PY'
import json, sys
steps = lambda p: [r["loss"] for r in map(json.loads, open(p)) if "loss" in r and "event" not in r]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print("%d steps, worst relative loss difference %.3g" % (len(b), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
    ); then echo "PASS one rank with parallel.comm = nccl equals the CPU: $r"
    else failed "one rank with parallel.comm = nccl against the CPU: $r"; fi
else
    failed "one rank with parallel.comm = nccl: $(tail -3 "$tmp/nccl1.log")"
fi
# Two ranks on one GPU (CUDA_EMU_DEVICES: the emulation's GPU count; a GPU ignores it).
two=(--parallel.dp 2 --training.micro_batch_size 4)
if CUDA_EMU_DEVICES=1 timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${common[@]}" "${gpu[@]}" "${two[@]}" \
    --parallel.comm nccl >"$tmp/nccl2.log" 2>&1; then
    failed "two ranks on one GPU with parallel.comm = nccl ran; NCCL should have been refused"
elif grep -q "parallel.comm = nccl: ranks share GPUs" "$tmp/nccl2.log"; then
    echo "PASS two ranks on one GPU with parallel.comm = nccl are refused: $(grep -m1 -o 'ranks share GPUs[^;]*' "$tmp/nccl2.log")"
else
    failed "two ranks with parallel.comm = nccl failed without the expected message: $(grep -m2 error "$tmp/nccl2.log")"
fi
if CUDA_EMU_DEVICES=1 timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${common[@]}" "${gpu[@]}" "${two[@]}" \
    >"$tmp/auto2.log" 2>&1 && grep -q "note: parallel.comm = auto: ranks share GPUs" "$tmp/auto2.log"; then
    echo "PASS two ranks on one GPU with parallel.comm = auto run over MPI, saying so"
else
    failed "two ranks with parallel.comm = auto: $(grep -m3 -E 'error|note' "$tmp/auto2.log")"
fi
gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
# 5. Two ranks, a GPU each: host waits per step, and the watchdog of a collective
# the device waits for.
if [ "${gpus:-0}" -ge 2 ]; then
    links_bin=${NCCL_LINKS_BIN:-$(dirname "${NCCL_OPS:-./build-cuda/tests/nccl_ops}")/nccl_links}
    CUDA_EMU_DEVICES=2 timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$links_bin" >"$tmp/links.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL) ' "$tmp/links.log"
    [ "$rc" -eq 0 ] || grep -q '^FAIL ' "$tmp/links.log" || failed "nccl_links exited with status $rc: $(tail -3 "$tmp/links.log")"
    CUDA_EMU_DEVICES=2 timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$links_bin" --mismatch >"$tmp/links_bad.log" 2>&1
    rc=$?
    msg=$(grep -m1 -o 'error: point-to-point link of the pp group with one end only: .*' "$tmp/links_bad.log")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$msg" ] && ! grep -q 'mismatched links were opened' "$tmp/links_bad.log"; then
        echo "PASS link ends that do not match are refused: $msg"
    else
        failed "link ends that do not match: exit $rc: $(grep -m2 -E 'error|opened' "$tmp/links_bad.log")"
    fi
    waits() {  # waits STEPS: rank 0's count of host waits, or "" without a CUDA profile
        CUDA_EMU_DEVICES=2 FEMTOTRON_CUDA_PROFILE=1 timeout -k 10 300 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train \
            "${common[@]}" "${gpu[@]}" "${two[@]}" --parallel.comm nccl --training.steps "$1" 2>&1 |
            profile_waits
    }
    w3=$(waits 3) w6=$(waits 6)
    if [ -z "$w3$w6" ]; then
        echo "(no CUDA profile from $GPU_BIN: the host-wait count with NCCL did not run)"
    elif [ -n "$w3" ] && [ -n "$w6" ] && [ "$((w6 - w3))" = 3 ]; then
        echo "PASS dp 2 with parallel.comm = nccl waits on the host once per step: $w3 waits over 3 steps, $w6 over 6"
    else
        failed "dp 2 with parallel.comm = nccl: host waits over 3 and 6 steps '$w3' '$w6' (want 3 more over 6)"
    fi
    # hang WHAT K REGEX ARGS...: the K-th NCCL call of each rank never finishes
    # (emulated); the job must end within 60 s with an error matching REGEX.
    hang() {
        local what=$1 k=$2 want=$3 t0 rc took msg; shift 3
        t0=$(date +%s)
        CUDA_EMU_DEVICES=2 NCCL_EMU_HANG_AT=$k timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$GPU_BIN" train "${common[@]}" \
            "${gpu[@]}" "$@" --parallel.comm nccl --parallel.timeout_s 3 >"$tmp/hang.log" 2>&1
        rc=$? took=$(($(date +%s) - t0))
        msg=$(grep -m1 -oE "error: $want has not finished after parallel.timeout_s = 3 s" "$tmp/hang.log")
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$msg" ] && [ "$took" -lt 60 ]; then
            echo "PASS $what (emulated) ends the job after parallel.timeout_s, in ${took} s: $msg"
        else
            failed "the watchdog of $what: exit $rc after ${took} s: $(grep -m2 -E 'error|cuda_emu' "$tmp/hang.log")"
        fi
    }
    if [ "${NCCL_EMU_HANG_TEST:-0}" = 1 ]; then
        hang "a collective that never finishes" 4 '.* on the dp( x cp)? group' "${two[@]}"
        # The first message of each rank of pp 2 (the activation's send and receive).
        hang "a pipeline message that never arrives" 1 "pipeline activation [a-z]* on the pp group's link 0->1 \(tag 0\)" \
            --parallel.pp 2 --parallel.pp_schedule 1f1b --training.micro_batch_size 2
    fi
else
    echo "SKIP host waits with NCCL over several ranks need a GPU per rank: this machine has ${gpus:-0}"
fi
# 6. Several ranks, a GPU each: the only way NCCL's multi-rank path runs.
if [ "${gpus:-0}" -ge 8 ]; then
    out=$(NCCL_LINKS=1 CUDA_EMU_DEVICES=$gpus \
        LAYOUTS=${NCCL_LAYOUTS:-'^(tied_dp4_zero3_buckets|pp2_1f1b_m8|pp2_int_m4|zbv_pp2_m4|cp2|tp2_cp2_pp2|moe_ep2)$'} GPU_ARGS="--training.device cuda --training.precision fp32 --parallel.comm nccl" bash tests/gpu/layouts.sh 2>&1)
    rc=$?
    # (a failed run's last log lines, indented by tests/shell/test_parity.sh, kept after its FAIL)
    printf '%s\n' "$out" | grep -E '^(PASS|FAIL) |^    ' | sed -E 's/^(PASS|FAIL) /\1 parallel.comm = nccl, a GPU per rank: /'
    if [ "$rc" -ne 0 ]; then
        printf '%s\n' "$out" | grep -q '^FAIL ' || echo "FAIL layouts with NCCL exited with status $rc: $(printf '%s\n' "$out" | tail -3)"
        fail=1
    fi
else
    echo "SKIP layouts with parallel.comm = nccl need a GPU per rank (8 for tp2 x cp2 x pp2): this machine has ${gpus:-0}"
fi
# 7. The events, each way, under the emulation's adversarial stream orders.
if [ "${NCCL_EMU_STREAM_TEST:-0}" = 1 ] && [ "${gpus:-0}" -ge 2 ]; then
    for order in side-first side-last; do
        out=$(CUDA_EMU_STREAMS=$order CUDA_EMU_DEVICES=$gpus LAYOUTS='^(dp2_zero1|tp2_sp|cp2|pp2_1f1b_m8)$' \
            GPU_ARGS="--training.device cuda --training.precision fp32 --parallel.comm nccl" bash tests/gpu/layouts.sh 2>&1)
        rc=$?
        printf '%s\n' "$out" | grep -E '^(PASS|FAIL) |^    ' | grep -v '^PASS memory' |
            sed -E "s/^(PASS|FAIL) /\1 parallel.comm = nccl, NCCL's streams run $order: /"
        if [ "$rc" -ne 0 ]; then
            printf '%s\n' "$out" | grep -q '^FAIL ' || echo "FAIL layouts with NCCL's streams $order exited with status $rc"
            fail=1
        fi
    done
fi
exit $fail
