#!/usr/bin/env bash
# tests/shell/test_resume.sh — resume is exact: 2N steps in one run give the same losses,
# bit for bit, as N steps + kill -9 + resume + N steps. Also: a run killed at any
# moment leaves the last complete checkpoint loadable.
. "$(dirname "$0")/lib.sh"
fortunes_data

N=6
common=(--data.train "$tmp/data/train_*.bin" --training.steps $((2 * N)) --training.seq_length 64
        --training.micro_batch_size 4 --training.grad_acc_steps 2 --training.warmup_steps 3
        --training.threads 2 --training.peak_flops 1e11
        --model.hidden_size 128 --model.intermediate_size 384 --model.num_hidden_layers 3
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --data.shuffle true --checkpoint.every $N)

# Uninterrupted run.
./femtotron train "${common[@]}" --logging.metrics "$tmp/full.jsonl" \
    --checkpoint.dir "$tmp/ck_full" >"$tmp/full.log" 2>&1 || { failed "uninterrupted run"; cat "$tmp/full.log"; exit 1; }

# Interrupted run: kill -9 as soon as the step-N checkpoint is complete.
./femtotron train "${common[@]}" --logging.metrics "$tmp/part.jsonl" \
    --checkpoint.dir "$tmp/ck_part" >"$tmp/part.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    [ -L "$tmp/ck_part/latest" ] && break
    sleep 0.01
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
latest=$(readlink "$tmp/ck_part/latest" 2>/dev/null)
if [ "$latest" = "step_$(printf %07d $N)" ]; then
    pass "killed after the step-$N checkpoint (latest = $latest)"
else
    failed "expected latest = step_$(printf %07d $N) after kill, got '$latest'"
fi
ls "$tmp/ck_part" | grep -q '^\.tmp' && echo "note: a partial .tmp checkpoint was left by the kill (ignored on resume)"

# Resume and finish.
./femtotron train "${common[@]}" --logging.metrics "$tmp/resumed.jsonl" \
    --checkpoint.dir "$tmp/ck_part" --checkpoint.resume true >"$tmp/resumed.log" 2>&1 ||
    { failed "resumed run"; cat "$tmp/resumed.log"; exit 1; }
grep -q "resumed from .*step_$(printf %07d $N)" "$tmp/resumed.log" &&
    pass "resumed from step $N" || failed "resume message missing: $(head -c 600 "$tmp/resumed.log")"

# Steps N+1..2N: losses and grad norms must be identical to the last bit (%.17g).
extract() { grep -o '"step": [0-9]*, "loss": [^,]*, "lr": [^,]*, "grad_norm": [^,]*' "$1"; }
full_tail=$(extract "$tmp/full.jsonl" | tail -n $N)
resumed=$(extract "$tmp/resumed.jsonl")
if [ -n "$resumed" ] && [ "$full_tail" = "$resumed" ]; then
    pass "steps $((N + 1))..$((2 * N)) bit-identical to the uninterrupted run"
else
    failed "resumed losses differ:"; diff <(echo "$full_tail") <(echo "$resumed") | head
fi
# Final weights identical too.
if cmp -s "$tmp/ck_full/step_$(printf %07d $((2 * N)))/model.safetensors" \
          "$tmp/ck_part/step_$(printf %07d $((2 * N)))/model.safetensors"; then
    pass "final model.safetensors byte-identical"
else
    failed "final weights differ"
fi
if cmp -s "$tmp/ck_full/step_$(printf %07d $((2 * N)))/optimizer.safetensors" \
          "$tmp/ck_part/step_$(printf %07d $((2 * N)))/optimizer.safetensors"; then
    pass "final optimizer.safetensors byte-identical"
else
    failed "final optimizer state differs"
fi

# The schedule of steps already taken never changes on resume: raising training.steps
# of a cosine run is refused (the cosine would be re-stretched under the completed
# steps); a wsd run still in its stable phase is extended, its decay moving to the
# new end.
small=(--data.train "$tmp/data/train_*.bin" --training.seq_length 32 --training.micro_batch_size 2
       --training.global_batch_size 2 --model.hidden_size 32 --model.intermediate_size 64
       --model.num_hidden_layers 1 --training.threads 1 --training.peak_flops 1e10
       --training.warmup_steps 2 --training.lr 1e-3 --training.min_lr 1e-4 --checkpoint.every 6)
./femtotron train "${small[@]}" --training.steps 12 --checkpoint.dir "$tmp/ck_cos" >"$tmp/cos.log" 2>&1
./femtotron train "${small[@]}" --training.steps 24 --checkpoint.dir "$tmp/ck_cos" --checkpoint.resume true \
    >"$tmp/cos2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "resuming at step 12: the learning-rate schedule now gives step 3" "$tmp/cos2.log"; then
    pass "cosine run resumed with training.steps 12 -> 24: refused ($(grep -o 'resuming at step 12[^(]*' "$tmp/cos2.log"))"
else
    failed "cosine steps change on resume: exit $rc: $(tail -c 300 "$tmp/cos2.log")"
fi
wsd=(--training.lr_schedule wsd --training.decay_steps 4 --training.decay_shape 1-sqrt)
./femtotron train "${small[@]}" "${wsd[@]}" --training.steps 12 --checkpoint.dir "$tmp/ck_wsd" \
    --logging.metrics "$tmp/wsd12.jsonl" >"$tmp/wsd.log" 2>&1
# Kill-free stop at step 6: a copy holding only step 6 is resumed with 20 steps.
mkdir -p "$tmp/ck_wsd6" && cp -r "$tmp/ck_wsd/step_0000006" "$tmp/ck_wsd6/"
./femtotron train "${small[@]}" "${wsd[@]}" --training.steps 20 --checkpoint.dir "$tmp/ck_wsd6" \
    --checkpoint.resume true --logging.metrics "$tmp/wsd20.jsonl" >"$tmp/wsd2.log" 2>&1
rc=$?
lrs=$(/usr/bin/python3 -c "
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if 'event' not in r]  # step records
print(' '.join('%d:%.6g' % (r['step'], r['lr']) for r in rows if r['step'] in (7, 16, 17, 18, 20)))" "$tmp/wsd20.jsonl" 2>/dev/null)
# Steps 7..16 stable at 1e-3, then 1-sqrt over 17..20: 1e-4 + 9e-4 (1 - sqrt(q)), q = 1/4, 2/4, .., 1.
want="7:0.001 16:0.001 17:0.00055 18:0.000363604 20:0.0001"
if [ $rc -eq 0 ] && [ "$lrs" = "$want" ]; then
    pass "wsd run resumed in its stable phase with training.steps 12 -> 20: decay moved to 17..20 ($lrs)"
else
    failed "wsd extension: exit $rc, lr $lrs (want $want): $(tail -c 300 "$tmp/wsd2.log")"
fi

# checkpoint.keep 2 with keep_every 4: of steps 1..9 (every 1), 8 and 9 are the
# newest two and 4 is a multiple of 4; every other step directory is deleted after
# the save that made it surplus; `latest` names the newest.
./femtotron train "${small[@]}" --training.steps 9 --checkpoint.every 1 --checkpoint.keep 2 \
    --checkpoint.keep_every 4 --checkpoint.dir "$tmp/ck_keep" >"$tmp/keep.log" 2>&1
kept=$(cd "$tmp/ck_keep" && ls -d step_* 2>/dev/null | tr '\n' ' ')
if [ "$kept" = "step_0000004 step_0000008 step_0000009 " ] && [ "$(readlink "$tmp/ck_keep/latest")" = step_0000009 ] &&
    ! ls -a "$tmp/ck_keep" | grep -q '^\.old_'; then
    pass "checkpoint.keep 2, keep_every 4 over 9 saves: kept $kept"
else
    failed "checkpoint.keep: kept '$kept', latest $(readlink "$tmp/ck_keep/latest"): $(tail -c 300 "$tmp/keep.log")"
fi
exit $fail
