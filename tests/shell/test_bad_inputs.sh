#!/usr/bin/env bash
# tests/shell/test_bad_inputs.sh — every bad input must stop femtotron cleanly: a non-zero
# exit (not a signal, not a hang), a message on stderr that names the problem, no
# sanitizer report, and no change to any existing checkpoint, shard or model dir.
# A positive control (the good config trains; a good resume and a good model.from
# load) runs first, so each negative case differs from a working one in one thing.
# Run from the repository root; prints PASS/FAIL lines (tests/run_all.sh counts them).
# FEMTOTRON=path/to/build overrides the binary (e.g. an ASan build).
set -u
FEMTOTRON=${FEMTOTRON:-./femtotron}
PY=/usr/bin/python3
T=$(mktemp -d /tmp/femtotron_test_bad_inputs.XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
oneline() { tr '\n' ' ' <"$1" | cut -c1-400; }
if [ ! -x "$FEMTOTRON" ]; then
    echo "FAIL bad_inputs: $FEMTOTRON not built (run make)"
    exit 1
fi

# --- fixtures -----------------------------------------------------------------
for i in $(seq 1 200); do echo "line $i of some text for training the tiny model"; done >"$T/in.txt"
if ! "$FEMTOTRON" prepare --input "$T/in.txt" --output "$T/data" --val-fraction 0 >"$T/prep.log" 2>&1; then
    echo "FAIL setup: prepare failed: $(oneline "$T/prep.log")"
    exit 1
fi
SHARD=$T/data/train_000000.bin
TINY='"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64'
TRAIN='"seq_length": 16, "micro_batch_size": 2, "peak_flops": 1e9, "threads": 1'
cat >"$T/run.json" <<EOF
{ "model": { $TINY }, "data": { "train": "$T/data/train_*.bin" }, "training": { $TRAIN, "steps": 2 } }
EOF
# Same run, resuming the good checkpoint towards step 4: a bad input that slipped
# through would train and write step_0000004 there, which the hash check catches.
cat >"$T/run_resume.json" <<EOF
{ "model": { $TINY }, "data": { "train": "$T/data/train_*.bin" },
  "training": { $TRAIN, "steps": 4 }, "checkpoint": { "dir": "$T/ckpt", "resume": true } }
EOF

# --- positive controls --------------------------------------------------------
if ! timeout 60 "$FEMTOTRON" train --config "$T/run.json" --checkpoint.dir "$T/ckpt" >"$T/good.log" 2>&1; then
    echo "FAIL good_run: the good config does not train: $(oneline "$T/good.log")"
    exit 1
fi
CK=$T/ckpt/step_0000002
if [ "$(readlink "$T/ckpt/latest" 2>/dev/null)" != step_0000002 ] || [ ! -s "$CK/manifest.json" ] ||
   [ ! -s "$CK/model.safetensors" ] || [ ! -s "$CK/config.json" ] ||
   [ ! -s "$CK/optimizer.safetensors" ] || [ ! -s "$CK/trainer_state.json" ]; then
    echo "FAIL good_run: exit 0 but no complete checkpoint $CK: $(ls -R "$T/ckpt" | tr '\n' ' ')"
    exit 1
fi
echo "PASS good_run: tiny model trains 2 steps and writes $CK"
cp -r "$T/ckpt" "$T/ck_ok"
if timeout 60 "$FEMTOTRON" train --config "$T/run.json" --checkpoint.dir "$T/ck_ok" \
        --checkpoint.resume true --training.steps 3 >"$T/resume.log" 2>&1 &&
   [ "$(readlink "$T/ck_ok/latest")" = step_0000003 ]; then
    echo "PASS good_resume: a copy of the good checkpoint resumes to step 3"
else
    fail "good_resume: resuming a copy of the good checkpoint fails: $(oneline "$T/resume.log")"
fi

# Tiny Hugging Face dirs written with numpy: hf_ok (right shapes), hf_bad (k_proj
# has the wrong shape), hf_missing (no lm_head.weight on an untied model).
mkdir -p "$T/hf_ok" "$T/hf_bad" "$T/hf_missing" "$T/hf_noweights"
for d in hf_ok hf_bad hf_missing hf_noweights; do cp "$CK/config.json" "$T/$d/"; done
if ! "$PY" - "$T" "$SHARD" >"$T/py.log" 2>&1 <<'EOF'
import copy, json, struct, sys
import numpy as np
T, shard = sys.argv[1], sys.argv[2]
D, I, V, KV = 32, 64, 257, 16
L = "model.layers.0."
shapes = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D], "lm_head.weight": [V, D],
          L + "input_layernorm.weight": [D], L + "post_attention_layernorm.weight": [D],
          L + "self_attn.q_proj.weight": [D, D], L + "self_attn.k_proj.weight": [KV, D],
          L + "self_attn.v_proj.weight": [KV, D], L + "self_attn.o_proj.weight": [D, D],
          L + "mlp.gate_proj.weight": [I, D], L + "mlp.up_proj.weight": [I, D],
          L + "mlp.down_proj.weight": [D, I]}
def write_st(path, shapes):
    hdr, blobs, off = {}, [], 0
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        b = (rng.standard_normal(shape) * 0.02).astype(np.float32).tobytes()
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
write_st(f"{T}/hf_ok/model.safetensors", shapes)
bad = copy.deepcopy(shapes); bad[L + "self_attn.k_proj.weight"] = [D, D]
write_st(f"{T}/hf_bad/model.safetensors", bad)
missing = copy.deepcopy(shapes); del missing["lm_head.weight"]
write_st(f"{T}/hf_missing/model.safetensors", missing)

# Token shards derived from the good one.
raw = open(shard, "rb").read()
hdr, body = np.frombuffer(raw[:1024], dtype=np.int32).copy(), raw[1024:]
def shard_with(path, magic=None, count=None, tokens=None):
    h = hdr.copy()
    if magic is not None: h[0] = magic
    if count is not None: h[2] = count
    open(path, "wb").write(h.tobytes() + (body if tokens is None else tokens))
shard_with(f"{T}/magic.bin", magic=12345)
shard_with(f"{T}/short.bin", count=10, tokens=body[:20])          # 10 tokens < S+1
shard_with(f"{T}/big_id.bin", magic=20240801, count=100,           # uint32 id 70000
           tokens=np.full(100, 70000, dtype=np.uint32).tobytes())
open(f"{T}/trunc.bin", "wb").write(raw[:5000])                     # header says 9893
open(f"{T}/trunc_hdr.bin", "wb").write(raw[:500])                  # not even a header
EOF
then
    echo "FAIL setup: fixture script failed: $(oneline "$T/py.log")"
    exit 1
fi
if timeout 60 "$FEMTOTRON" train --config "$T/run.json" --model.from "$T/hf_ok" >"$T/from.log" 2>&1; then
    echo "PASS good_model_from: a numpy-written HF dir with the right shapes loads and trains"
else
    fail "good_model_from: the correct HF dir does not load: $(oneline "$T/from.log")"
fi

# Corrupt copies of the good checkpoint.
for c in ck_trunc ck_incomplete ck_opt ck_state ck_hdr ck_flip; do cp -r "$T/ckpt" "$T/$c"; done
truncate -s 50000 "$T/ck_trunc/step_0000002/model.safetensors"
# A newer step directory that femtotron could not have published (no manifest, no model).
mkdir "$T/ck_incomplete/step_0000009" && echo junk >"$T/ck_incomplete/step_0000009/notes.txt"
# One flipped byte inside the tensor data: same size, same header.
sz=$(stat -c %s "$T/ck_flip/step_0000002/model.safetensors")
printf '\125' | dd of="$T/ck_flip/step_0000002/model.safetensors" bs=1 seek=$((sz - 37)) count=1 conv=notrunc 2>/dev/null
# step 2's model.safetensors beside step 3's optimizer state (ck_ok holds both steps).
cp -r "$T/ck_ok" "$T/ck_mixed"
cp "$T/ck_mixed/step_0000002/model.safetensors" "$T/ck_mixed/step_0000003/model.safetensors"
truncate -s 100000 "$T/ck_opt/step_0000002/optimizer.safetensors"
printf '{"step": 2, "consumed' >"$T/ck_state/step_0000002/trainer_state.json"
printf '\377\377\377\377\377\377\377\177' |
    dd of="$T/ck_hdr/step_0000002/model.safetensors" bs=8 count=1 conv=notrunc 2>/dev/null

printf '{ "training": { "steps": 2, } }\n' >"$T/invalid.json"
printf '{ "trainng": { "steps": 2 } }\n' >"$T/section.json"
printf '{ "data": { "train": "%s" }, "training": { "stpes": 2 } }\n' "$SHARD" >"$T/key.json"
printf '{ "data": { "train": "%s" }, "training": { "steps": "2" } }\n' "$SHARD" >"$T/type.json"

# Everything below must come out byte-identical: checkpoints, shards, model dirs.
snapshot() { (cd "$T" && find ckpt ck_* data hf_* -type f | LC_ALL=C sort | xargs sha256sum); }
snapshot >"$T/before.sha"
cp "$T/before.sha" "$T/prev.sha"

# --- negative cases -----------------------------------------------------------
# bad NAME PATTERN... -- COMMAND... : COMMAND must exit non-zero (no signal, no
# timeout), stderr must match every PATTERN (extended regex, case-insensitive)
# and carry no sanitizer report, and no protected file may change.
bad() {
    local name=$1; shift
    local pats=()
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    timeout 20 "$@" >"$T/out" 2>"$T/err"
    local rc=$? p missing=""
    for p in "${pats[@]}"; do grep -Eqi -- "$p" "$T/err" || missing="$missing '$p'"; done
    snapshot >"$T/after.sha"
    local why=""
    if [ $rc -eq 0 ]; then
        why="exited 0 (stdout: $(oneline "$T/out"))"
    elif [ $rc -eq 124 ]; then
        why="hung (killed after 20 s)"
    elif [ $rc -ge 125 ]; then
        why="crashed, exit status $rc"
    elif grep -Eq 'Sanitizer|runtime error:' "$T/err"; then
        why="sanitizer report"
    elif [ -n "$missing" ]; then
        why="stderr does not match$missing"
    fi
    if ! cmp -s "$T/prev.sha" "$T/after.sha"; then
        why="${why:+$why; }modified protected files: $(diff "$T/prev.sha" "$T/after.sha" | grep '^[<>]' | tr '\n' ' ' | cut -c1-300)"
        cp "$T/after.sha" "$T/prev.sha"   # report each change once, at the case that made it
    fi
    if [ -n "$why" ]; then
        fail "$name: $why | stderr: $(oneline "$T/err")"
    else
        echo "PASS $name: $(head -n1 "$T/err" | cut -c1-160)"
    fi
}
F=$FEMTOTRON
R=(train --config "$T/run_resume.json")   # resumes the good checkpoint if let through
P=(train --config "$T/run.json")          # no checkpoint dir (model shape changes)

bad config_missing 'nope\.json' -- "$F" train --config "$T/nope.json"
bad invalid_json 'invalid\.json' 'json|line' -- "$F" train --config "$T/invalid.json"
bad unknown_section 'trainng' -- "$F" train --config "$T/section.json"
bad unknown_key_file 'stpes' -- "$F" train --config "$T/key.json"
bad unknown_key_cli 'training\.stpes' -- "$F" "${R[@]}" --training.stpes 2
bad wrong_type_file 'steps' 'integer|number|type' -- "$F" train --config "$T/type.json"
bad wrong_type_cli 'training\.steps' -- "$F" "${R[@]}" --training.steps abc
bad heads_not_div_kv 'num_key_value_heads' -- "$F" "${P[@]}" \
    --model.num_attention_heads 4 --model.num_key_value_heads 3
bad hidden_not_div_heads 'hidden_size' 'num_attention_heads' -- "$F" "${P[@]}" \
    --model.num_attention_heads 3 --model.num_key_value_heads 1
bad seq_above_max_pos 'seq_length' 'max_position_embeddings' -- "$F" "${R[@]}" --training.seq_length 128
bad gbs_not_div_mbs 'global_batch_size' -- "$F" "${R[@]}" --training.global_batch_size 3
bad world_size_mismatch 'dp' 'rank|world' -- "$F" "${R[@]}" --parallel.dp 2
bad tp_unsupported 'tp' -- "$F" "${R[@]}" --parallel.tp 2
bad unknown_arg_option '--bogus' -- "$F" "${R[@]}" --bogus 1
bad unknown_arg_positional 'extra' -- "$F" "${R[@]}" extra
bad data_train_missing 'data\.train' -- "$F" "${R[@]}" --data.train=
bad data_glob_no_match 'nomatch_' -- "$F" "${R[@]}" --data.train "$T/nomatch_*.bin"
bad shard_truncated 'trunc\.bin' 'truncat' -- "$F" "${R[@]}" --data.train "$T/trunc.bin"
bad shard_no_header 'trunc_hdr\.bin' 'header|short' -- "$F" "${R[@]}" --data.train "$T/trunc_hdr.bin"
bad shard_bad_magic 'magic\.bin' 'magic' -- "$F" "${R[@]}" --data.train "$T/magic.bin"
bad token_id_ge_vocab 'vocab_size' -- "$F" "${P[@]}" --model.vocab_size 100
bad token_id_uint32 'vocab_size' 'big_id\.bin' -- "$F" "${R[@]}" --data.train "$T/big_id.bin"
bad data_shorter_than_seq 'short\.bin' 'shorter|sequence|seq_length' -- "$F" "${R[@]}" --data.train "$T/short.bin"
bad val_bad_magic 'magic\.bin' -- "$F" "${R[@]}" --data.val "$T/magic.bin" --logging.val_every 1
bad model_from_missing 'nodir' -- "$F" "${P[@]}" --model.from "$T/nodir"
bad model_from_no_weights 'hf_noweights' 'safetensors|weights' -- "$F" "${P[@]}" --model.from "$T/hf_noweights"
bad model_from_wrong_shape 'k_proj' 'shape' -- "$F" "${P[@]}" --model.from "$T/hf_bad"
bad model_from_missing_tensor 'lm_head' -- "$F" "${P[@]}" --model.from "$T/hf_missing"
bad resume_truncated_model 'model\.safetensors' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_trunc"
bad resume_truncated_optimizer 'optimizer\.safetensors' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_opt"
bad resume_bad_trainer_state 'trainer_state\.json' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_state"
bad resume_huge_st_header 'model\.safetensors' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_hdr"
bad resume_incomplete_step 'step_0000009' 'not a complete checkpoint' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_incomplete"
bad resume_flipped_byte 'model\.safetensors' 'does not match its manifest' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_flip"
bad resume_mixed_steps 'step_0000003' 'model\.safetensors' 'manifest' -- "$F" "${R[@]}" --checkpoint.dir "$T/ck_mixed" --training.steps 5
bad ckpt_every_no_dir 'checkpoint\.every is set but checkpoint\.dir is not' -- "$F" "${P[@]}" --checkpoint.every 1
bad ckpt_keep_no_dir 'checkpoint\.keep is set but checkpoint\.dir is not' -- "$F" "${P[@]}" --checkpoint.keep 2
bad ckpt_dtype_no_dir 'checkpoint\.dtype is set but checkpoint\.dir is not' -- "$F" "${P[@]}" --checkpoint.dtype bf16
bad ckpt_dtype_unknown 'checkpoint\.dtype' 'fp16' 'bf16' -- "$F" "${R[@]}" --checkpoint.dtype fp16
bad ckpt_keep_every_no_keep 'keep_every = 3 needs checkpoint\.keep' -- "$F" "${R[@]}" --checkpoint.keep_every 3
bad no_resume_existing_dir 'checkpoint\.resume' -- "$F" "${R[@]}" --checkpoint.resume false
bad prepare_missing_input 'missing\.txt' -- "$F" prepare --input "$T/missing.txt" --output "$T/prep_out"
bad prepare_existing_shards '--force' -- "$F" prepare --input "$T/in.txt" --output "$T/data"

# Outputs that cannot be written are refused before step 1, not at the first save
# (a 1000-step run with checkpoint.every 500: no step may have run). Under a path
# whose parent is a regular file (mkdir fails even for root); read-only
# directories too when not root (root writes through mode bits).
before_step1() {  # NAME PATTERN -- OPTIONS...: bad(), and stdout shows no training step
    local name=$1 pat=$2; shift 3
    local pre=()
    [ "$name" = ckpt_dir_readonly ] && [ "$(id -u)" -eq 0 ] &&
        pre=(unshare -m bash -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"' ro "$T/readonly")
    bad "$name" "$pat" -- "${pre[@]}" "$F" "${P[@]}" --training.steps 1000 "$@"
    if grep -q '^step ' "$T/out"; then fail "$name: training started before the error: $(oneline "$T/out")"; fi
}
before_step1 ckpt_dir_under_file 'checkpoint\.dir.*in\.txt/ck' -- --checkpoint.dir "$T/in.txt/ck" --checkpoint.every 500
before_step1 metrics_under_file 'logging\.metrics.*in\.txt' -- --logging.metrics "$T/in.txt/m.jsonl"
before_step1 trace_under_file 'logging\.trace.*in\.txt' -- --logging.trace "$T/in.txt/t.json"
mkdir -p "$T/readonly"
if [ "$(id -u)" -ne 0 ]; then
    chmod 555 "$T/readonly"
    before_step1 ckpt_dir_readonly 'checkpoint\.dir.*not writable' -- --checkpoint.dir "$T/readonly" --checkpoint.every 500
elif unshare -m true 2>/dev/null; then  # root: a read-only bind mount in a private mount namespace
    before_step1 ckpt_dir_readonly 'checkpoint\.dir.*not writable.*Read-only file system' -- \
        --checkpoint.dir "$T/readonly" --checkpoint.every 500
else
    echo "skip ckpt_dir_readonly: root without unshare -m (mode bits do not stop root; the cases above cover it)"
fi

# The good checkpoint itself, once more by name (bad() already checked after each case).
if (cd "$T" && sha256sum --quiet -c before.sha) >"$T/final.log" 2>&1; then
    echo "PASS checkpoints_unchanged: every file of $CK and of the corrupt copies is byte-identical"
else
    fail "checkpoints_unchanged: $(oneline "$T/final.log")"
fi
[ "$fails" -eq 0 ]
