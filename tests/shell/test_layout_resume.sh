#!/usr/bin/env bash
# tests/shell/test_layout_resume.sh — checkpoints do not depend on the layout that wrote
# them: runs saved at pp=4 interleaved (2 chunks per rank), dp=4 ZeRO-3, tp=2 with
# sequence parallel, tp2 x cp2 x pp2, and dp=2 x tp=2 ZeRO-3 with bf16 weights
# (checkpoint.dtype) resume at other layouts (pp=2, 1 rank, dp=2 x pp=2 ZeRO-3,
# dp=2 ZeRO-1, tp=1, tp=4, cp=4) and continue with the losses of the
# uninterrupted 1-rank run (relative 1e-5). A tied model trained at
# dp=2 x pp=2 (the last stage holds a copy of the embedding) is saved once, as
# Hugging Face expects, resumes at the same layout bit for bit (the copy was equal
# to the first stage's, which is what both load; under zb-h1 too) and at 1 rank
# within 1e-5; a checkpoint of the interleaved run also resumes under zb-h1. A
# Mixtral saved at dp2 x tp2 SP ZeRO-3 resumes at 1 rank, at cp2 x tp2 ZeRO-1 and
# at dp4 x ep4; one saved at dp4 x ep2 ZeRO-3 (each rank holding half the experts)
# resumes at 1 rank and at dp2 x tp2 x ep2.
. "$(dirname "$0")/lib.sh"
MPI=(mpirun --oversubscribe --allow-run-as-root)
fortunes_data
C=(--data.train "$tmp/data/train_*.bin" --training.steps 12 --training.seq_length 32
   --training.micro_batch_size 2 --training.global_batch_size 8 --model.hidden_size 64
   --model.intermediate_size 128 --model.num_hidden_layers 8 --model.num_key_value_heads 4 --training.peak_flops 1e10
   --training.lr 3e-3 --training.threads 1 --data.shuffle true --parallel.timeout_s 60)

train() {  # train NAME NP ARGS...
    local name=$1 np=$2; shift 2
    timeout 120 "${MPI[@]}" -np "$np" ./femtotron train "${C[@]}" "$@" \
        --logging.metrics "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 ||
        { echo "FAIL $name: exit $? ($(grep -m1 'femtotron:' "$tmp/$name.log"))"; fail=1; return 1; }
}
compare() {  # compare NAME [REF [TOL]]: every logged step against the uninterrupted run
    /usr/bin/python3 - "$tmp/${2:-full}.jsonl" "$tmp/$1.jsonl" "$1" "${3:-1e-5}" <<'PY'
import json, sys
steps = lambda path: [r for r in map(json.loads, open(path)) if "event" not in r]  # step records
ref = {r["step"]: r["loss"] for r in steps(sys.argv[1])}
got = {r["step"]: r["loss"] for r in steps(sys.argv[2])}
worst = max(abs(ref[s] - got[s]) / abs(ref[s]) for s in got) if got else float("inf")
ok = got and worst <= float(sys.argv[4])
print(("PASS" if ok else "FAIL"), sys.argv[3], "steps", min(got, default=0), "..", max(got, default=0),
      "worst_rel_diff=%.3g" % worst)
sys.exit(0 if ok else 1)
PY
    [ $? -eq 0 ] || fail=1
}
resume_from() {  # resume_from SAVED_DIR NAME NP ARGS...: copy step 6 only, resume to 12
    local saved=$1 name=$2; shift 2
    mkdir -p "$tmp/ck_$name"
    cp -r "$saved/step_0000006" "$tmp/ck_$name/" 2>/dev/null ||
        { echo "FAIL $name: no step 6 checkpoint in $saved to resume from"; fail=1; return 1; }
    train "$name" "$@" --checkpoint.dir "$tmp/ck_$name" --checkpoint.resume true &&
        compare "$name" "${REF:-full}" "${TOL:-1e-5}"
}

train full 1 || exit 1
train save_pp4 4 --parallel.pp 4 --parallel.pp_schedule interleaved --parallel.pp_virtual 2 \
    --checkpoint.dir "$tmp/ck_pp4" --checkpoint.every 6 && compare save_pp4
train save_dp4z3 4 --parallel.dp 4 --parallel.zero 3 --checkpoint.dir "$tmp/ck_dp4" \
    --checkpoint.every 6 && compare save_dp4z3
resume_from "$tmp/ck_pp4" pp4_to_pp2 2 --parallel.pp 2
resume_from "$tmp/ck_pp4" pp4_to_pp2_zb_h1 2 --parallel.pp 2 --parallel.pp_schedule zb-h1
resume_from "$tmp/ck_pp4" pp4_to_1rank 1
resume_from "$tmp/ck_pp4" pp4_to_dp2pp2z3 4 --parallel.dp 2 --parallel.pp 2 --parallel.zero 3
resume_from "$tmp/ck_dp4" dp4z3_to_dp2z1 2 --parallel.dp 2 --parallel.zero 1
resume_from "$tmp/ck_dp4" dp4z3_to_1rank 1
train save_tp2sp 2 --parallel.tp 2 --parallel.sequence_parallel true --checkpoint.dir "$tmp/ck_tp2" \
    --checkpoint.every 6 && compare save_tp2sp
resume_from "$tmp/ck_tp2" tp2sp_to_1rank 1
resume_from "$tmp/ck_tp2" tp2sp_to_tp4 4 --parallel.tp 4
train save_4d 8 --parallel.tp 2 --parallel.cp 2 --parallel.pp 2 --parallel.sequence_parallel true \
    --checkpoint.dir "$tmp/ck_4d" --checkpoint.every 6 && compare save_4d
resume_from "$tmp/ck_4d" 4d_to_1rank 1
resume_from "$tmp/ck_4d" 4d_to_cp4 4 --parallel.cp 4
resume_from "$tmp/ck_4d" 4d_to_dp2tp2z2 4 --parallel.dp 2 --parallel.tp 2 --parallel.zero 2

# checkpoint.dtype bf16: ZeRO-3 shards and tp slices write bf16 weights and fp32
# master weights; another layout resumes from the masters on the 1-rank curve.
train save_bf16 4 --parallel.dp 2 --parallel.tp 2 --parallel.zero 3 --parallel.sequence_parallel true \
    --checkpoint.dtype bf16 --checkpoint.dir "$tmp/ck_bf16" --checkpoint.every 6 && compare save_bf16
resume_from "$tmp/ck_bf16" bf16_dp2tp2z3_to_pp2 2 --parallel.pp 2

# Tied embeddings over two pipeline stages.
T=(--model.tie_word_embeddings true --model.num_hidden_layers 4)
train tied_full 1 "${T[@]}" || exit 1
train tied_save 4 "${T[@]}" --parallel.dp 2 --parallel.pp 2 --parallel.zero 1 \
    --checkpoint.dir "$tmp/ck_tied" --checkpoint.every 6 && compare tied_save tied_full
/usr/bin/python3 - "$tmp/ck_tied/step_0000006/model.safetensors" <<'PY' && pass "tied checkpoint holds the embedding once (no lm_head.weight)" || failed "tied checkpoint tensors"
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; names = json.loads(f.read(n))
sys.exit(0 if "model.embed_tokens.weight" in names and "lm_head.weight" not in names else 1)
PY
REF=tied_save TOL=0 resume_from "$tmp/ck_tied" tied_dp2pp2_same_layout 4 "${T[@]}" --parallel.dp 2 --parallel.pp 2 --parallel.zero 1
# zb-h1 accumulates every gradient in 1f1b's order (its W passes run in micro-batch
# order): resumed at the same layout under zb-h1 it continues the 1f1b run bit for bit.
REF=tied_save TOL=0 resume_from "$tmp/ck_tied" tied_dp2pp2_same_layout_zb_h1 4 "${T[@]}" --parallel.dp 2 --parallel.pp 2 \
    --parallel.zero 1 --parallel.pp_schedule zb-h1
REF=tied_full resume_from "$tmp/ck_tied" tied_dp2pp2_to_1rank 1 "${T[@]}"
REF=tied_full resume_from "$tmp/ck_tied" tied_dp2pp2_to_pp4 4 "${T[@]}" --parallel.pp 4

# Mixtral (4 experts, top-2, the load-balancing loss on): saved at dp2 x tp2 SP ZeRO-3
# (expert slices and ZeRO shards), resumed at 1 rank, at cp2 x tp2 ZeRO-1 and with
# expert parallelism (dp 4 x ep 4).
M=(--model.num_local_experts 4 --model.num_experts_per_tok 2 --model.output_router_logits true
   --model.router_aux_loss_coef 0.02 --model.num_hidden_layers 4)
train moe_full 1 "${M[@]}" || exit 1
train moe_save 4 "${M[@]}" --parallel.dp 2 --parallel.tp 2 --parallel.sequence_parallel true --parallel.zero 3 \
    --checkpoint.dir "$tmp/ck_moe" --checkpoint.every 6 && compare moe_save moe_full
REF=moe_full resume_from "$tmp/ck_moe" moe_dp2tp2z3_to_1rank 1 "${M[@]}"
REF=moe_full resume_from "$tmp/ck_moe" moe_dp2tp2z3_to_cp2tp2z1 4 "${M[@]}" --parallel.cp 2 --parallel.tp 2 --parallel.zero 1
REF=moe_full resume_from "$tmp/ck_moe" moe_dp2tp2z3_to_dp4ep4 4 "${M[@]}" --parallel.dp 4 --parallel.ep 4 --training.micro_batch_size 2
# Saved with expert parallelism (dp4 x ep2 ZeRO-3: each rank holds 2 of the 4 experts,
# ZeRO-sharded over the 2 ranks that hold the same ones), resumed at 1 rank and at
# dp2 x tp2 x ep2 ZeRO-1.
train moe_ep_save 4 "${M[@]}" --parallel.dp 4 --parallel.ep 2 --parallel.zero 3 --training.micro_batch_size 2 \
    --checkpoint.dir "$tmp/ck_moe_ep" --checkpoint.every 6 && compare moe_ep_save moe_full
REF=moe_full resume_from "$tmp/ck_moe_ep" moe_dp4ep2z3_to_1rank 1 "${M[@]}"
REF=moe_full resume_from "$tmp/ck_moe_ep" moe_dp4ep2z3_to_dp2tp2ep2z1 4 "${M[@]}" --parallel.dp 2 --parallel.tp 2 \
    --parallel.ep 2 --parallel.zero 1
exit $fail
