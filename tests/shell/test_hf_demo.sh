#!/usr/bin/env bash
# tests/shell/test_hf_demo.sh — scripts/hf_demo.sh end to end at a small size (2 of
# SmolLM2-135M's 30 layers, 3 steps): a Hugging Face directory in, continued
# pre-training on 2 ranks as a tied 2-stage pipeline, transformers' greedy tokens
# from RUN/latest equal to femtotron generate's.
. "$(dirname "$0")/lib.sh"
DEMO_LAYERS=2 DEMO_STEPS=3 DEMO_SEQ=64 DEMO_OUT="$tmp/demo" bash scripts/hf_demo.sh >"$tmp/demo.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "hf_demo: PASS transformers' greedy tokens equal femtotron's (24 tokens)" "$tmp/demo.log" &&
    [ -f "$tmp/demo/run/latest/tokenizer.json" ]; then
    pass "scripts/hf_demo.sh (2 layers, 3 steps, pp 2, tied): $(grep -o 'PASS.*' "$tmp/demo.log")"
else
    failed "scripts/hf_demo.sh: exit $rc: $(tail -3 "$tmp/demo.log" | tr '\n' ' ' | cut -c1-400)"
fi
exit $fail
