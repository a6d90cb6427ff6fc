#!/usr/bin/env bash
# tests/shell/test_calibrate.sh — `femtotron bench calibrate` writes a hardware profile the
# planner can load (the format of plan/hardware.h, checked with Python's json):
#   - 2 ranks under mpirun, --quick: finishes within 30 s; name "this", positive
#     peak / memory / bandwidths, bytes_per_value 4, calib_ranks 2, gpus_per_node 2;
#     gemm, attn_fwd, attn_bwd curves with >= 3 points, strictly ascending work,
#     positive rates, peak_flops >= every GEMM rate (within 10%); one fit for each
#     of allreduce, reduce_scatter, allgather and p2p on 2 ranks, intra-node, with
#     alpha, beta >= 0 and not both 0; the summary names the file;
#   - node_cores = nproc, attn_head_dim as asked (64 by default), attention curves
#     keyed by the FLOPs of one (sequence, head): first work 4*hd*128*129/2;
#   - 1 rank without mpirun (--threads 1, --head-dim 32): the same curves, no
#     collective entries (nothing to communicate with), calib_ranks 1, calib_threads 1;
#   - an unknown option, a bad --threads or --head-dim and an unwritable output fail
#     naming them.
set -u
cd "$(dirname "$0")/../.."
FT=${FEMTOTRON:-./femtotron}
tmp=$(mktemp -d /tmp/femtotron_calibrate_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass() { echo "PASS $*"; }
failed() { echo "FAIL $*"; fail=1; }

check_profile() {  # check_profile FILE RANKS THREADS HEAD_DIM
    /usr/bin/python3 - "$@" "$(nproc)" <<'EOF'
import json, sys
path, ranks, threads, hd, cores = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
p = json.load(open(path))
bad = 0
def check(ok, what):
    global bad
    bad += not ok
    print(("PASS " if ok else "FAIL ") + f"{ranks} rank(s): {what}")
check(p["name"] == "this", f'name "this" ({p["name"]!r})')
check(all(p[k] > 0 for k in ("peak_flops", "mem_bytes", "mem_bw", "intra_bw", "inter_bw")),
      "peak_flops, mem_bytes, mem_bw, intra_bw, inter_bw positive")
check(p["intra_lat"] >= 0 and p["inter_lat"] >= 0, "latencies >= 0")
check(p["bytes_per_value"] == 4, "bytes_per_value 4 (fp32)")
check(p["calib_ranks"] == ranks and p["gpus_per_node"] == ranks,
      f'calib_ranks {p["calib_ranks"]}, gpus_per_node {p["gpus_per_node"]}')
check(p["calib_threads"] >= 1 and (threads == "any" or p["calib_threads"] == int(threads)),
      f'calib_threads {p["calib_threads"]}')
check(p["node_cores"] == cores, f'node_cores {p["node_cores"]} = nproc {cores}')
check(p["attn_head_dim"] == hd, f'attn_head_dim {p["attn_head_dim"]} = {hd}')
# Attention is keyed by the FLOPs of one (sequence, head), the shortest sequence
# 128 tokens: forward 4*hd*S(S+1)/2, backward twice that.
w0 = 4 * hd * 128 * 129 / 2
check(abs(p["attn_fwd"]["work"][0] - w0) < 1e-6 * w0 and abs(p["attn_bwd"]["work"][0] - 2 * w0) < 1e-6 * w0,
      f'attention keyed per (sequence, head): first work {p["attn_fwd"]["work"][0]:.6g} = {w0:.6g}')
for name in ("gemm", "attn_fwd", "attn_bwd"):
    w, r = p[name]["work"], p[name]["rate"]
    check(len(w) == len(r) and 3 <= len(w) <= 32, f"{name}: {len(w)} points")
    check(all(a < b for a, b in zip(w, w[1:])) and w[0] > 0, f"{name}: work strictly ascending")
    check(all(x > 0 for x in r), f"{name}: rates positive")
check(all(p["peak_flops"] >= 0.9 * x for x in p["gemm"]["rate"]),
      f'peak_flops {p["peak_flops"]:.3g} >= every GEMM rate (max {max(p["gemm"]["rate"]):.3g})')
colls = p["collectives"]
if ranks == 1:
    check(colls == [], "no collective entries on 1 rank")
else:
    kinds = sorted(c["kind"] for c in colls if c["ranks"] == ranks)
    check(kinds == sorted(["allreduce", "reduce_scatter", "allgather", "p2p"]),
          f"one fit per kind on {ranks} ranks ({kinds})")
    check(all(c["intra_node"] is True for c in colls), "fits are intra-node")
    check(all(c["alpha_s"] >= 0 and c["beta_s_per_byte"] >= 0 and
              c["alpha_s"] + c["beta_s_per_byte"] > 0 for c in colls), "alpha, beta >= 0, not both 0")
sys.exit(1 if bad else 0)
EOF
}

t0=$SECONDS
mpirun --oversubscribe --allow-run-as-root -np 2 "$FT" bench calibrate --quick --output "$tmp/p.json" \
    >"$tmp/out2.txt" 2>&1
rc=$?
dt=$((SECONDS - t0))
if [ "$rc" -eq 0 ] && [ -f "$tmp/p.json" ]; then
    pass "2 ranks: calibrate --quick exits 0 and writes the profile"
    check_profile "$tmp/p.json" 2 any 64 || fail=1
else
    failed "2 ranks: calibrate --quick exited $rc: $(tail -5 "$tmp/out2.txt")"
fi
[ "$dt" -le 30 ] && pass "2 ranks: --quick took ${dt}s (<= 30 s)" || failed "2 ranks: --quick took ${dt}s (> 30 s)"
grep -q "^wrote $tmp/p.json" "$tmp/out2.txt" && grep -q "^allreduce .* 2 ranks" "$tmp/out2.txt" &&
    pass "2 ranks: the summary lists the all-reduce fit and the file" ||
    failed "2 ranks: summary: $(cat "$tmp/out2.txt")"

"$FT" bench calibrate --quick --threads 1 --head-dim 32 --output "$tmp/p1.json" >"$tmp/out1.txt" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ -f "$tmp/p1.json" ]; then
    pass "1 rank: calibrate --quick without mpirun exits 0 and writes the profile"
    check_profile "$tmp/p1.json" 1 1 32 || fail=1
else
    failed "1 rank: calibrate --quick exited $rc: $(tail -5 "$tmp/out1.txt")"
fi

# The profile as the MFU peak of a run (bench/run_peak.h): its peak_flops per rank.
if [ -f "$tmp/p1.json" ]; then
    cat /usr/share/games/fortunes/computers >"$tmp/c.txt"
    "$FT" prepare --input "$tmp/c.txt" --output "$tmp/d" --val-fraction 0 >/dev/null 2>&1
    "$FT" train --data.train "$tmp/d/train_*.bin" --training.seq_length 16 --training.micro_batch_size 1 \
        --training.global_batch_size 1 --model.hidden_size 32 --model.intermediate_size 64 \
        --model.num_hidden_layers 1 --training.threads 1 --training.steps 2 \
        --parallel.profile "$tmp/p1.json" >"$tmp/train.txt" 2>&1
    want=$(/usr/bin/python3 -c 'import json,sys; print("%.1f" % (json.load(open(sys.argv[1]))["peak_flops"] / 1e9))' "$tmp/p1.json")
    grep -qx "MFU peak: $want GFLOP/s per rank, $want GFLOP/s in all (parallel.profile $tmp/p1.json, measured by bench calibrate with 1 ranks x 1 threads)" "$tmp/train.txt" &&
        ! grep -q "finding the GEMM peak" "$tmp/train.txt" &&
        pass "train with parallel.profile: the MFU peak is the profile's ($want GFLOP/s per rank), said so" ||
        failed "train with parallel.profile: want $want, got $(grep -i peak "$tmp/train.txt")"
fi

expect_fail() {  # expect_fail WHAT NEEDLE ARGS...
    local what=$1 needle=$2
    shift 2
    local out
    out=$("$FT" bench calibrate "$@" 2>&1)
    local rc=$?
    if [ "$rc" -ne 0 ] && grep -qF -- "$needle" <<<"$out"; then
        pass "$what fails naming it"
    else
        failed "$what: exit $rc, output: $out"
    fi
}
expect_fail "--bogus" '"--bogus"' --bogus
expect_fail "--threads zero" '--threads needs a positive integer (got "0")' --threads 0
expect_fail "--output without a value" '--output needs a value' --output
expect_fail "--head-dim not a number" '--head-dim needs a positive integer (got "x")' --head-dim x
expect_fail "--precision fp16" '--precision must be fp32 or bf16 (got "fp16")' --precision fp16
expect_fail "--precision bf16 on the OpenBLAS build" '--precision bf16 needs bf16 products, which this build has not' \
    --precision bf16 --quick --output "$tmp/bf.json"
expect_fail "--attention flash" '--attention must be femtotron or cudnn (got "flash")' --attention flash
expect_fail "--attention cudnn in fp32" '--attention cudnn needs --precision bf16' --attention cudnn --precision fp32
if [ -f "$tmp/p1.json" ]; then
    p=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["precision"], d["attention"])' "$tmp/p1.json")
    [ "$p" = "fp32 femtotron" ] && pass "the CPU build's profile records fp32 products and femtotron's attention" ||
        failed "the CPU build's profile records precision and attention $p"
    # The planner says so when the run's attention kernels are not the ones the
    # profile timed (a GPU run with training.attention = cudnn), and not otherwise.
    cat >"$tmp/att.json" <<'JSON'
{"model": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
           "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 256},
 "training": {"seq_length": 256, "micro_batch_size": 2, "device": "cuda"}, "data": {"train": "x.bin"}}
JSON
    plain=$("$FT" plan --config "$tmp/att.json" --hardware this --profile "$tmp/p1.json" 2>&1)
    sed 's/"device": "cuda"/"device": "cuda", "attention": "cudnn"/' "$tmp/att.json" >"$tmp/att_cudnn.json"
    cudnn=$("$FT" plan --config "$tmp/att_cudnn.json" --hardware this --profile "$tmp/p1.json" 2>&1)
    if ! grep -q "attention curves timed" <<<"$plain" &&
        grep -q "timed femtotron's kernels, the run uses cudnn's (training.attention).*--attention cudnn" <<<"$cudnn"; then
        pass "plan notes a profile timed on other attention kernels than the run's (training.attention cudnn)"
    else
        failed "plan's attention note: without: $(head -2 <<<"$plain") with cudnn: $(head -2 <<<"$cudnn")"
    fi
fi
expect_fail "an output in a missing directory" "$tmp/nodir/p.json" --quick --output "$tmp/nodir/p.json"
out=$("$FT" bench --help 2>&1)
grep -q "bench calibrate" <<<"$out" && pass "bench --help documents calibrate" ||
    failed "bench --help: $out"
exit $fail
