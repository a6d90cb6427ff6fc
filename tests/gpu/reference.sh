#!/usr/bin/env bash
# tests/gpu/reference.sh — issue 14's "the PyTorch reference test passes against the
# GPU build", run by tests/gpu/run.sh: tests/reference/test_reference.py (an
# independent float64 PyTorch Llama and Mixtral: step 0's gradients tensor by tensor,
# 5 AdamW steps, all within 1e-5; untied, tied, RoPE scalings, experts) with
# ./femtotron-cuda and build-cuda/tests/dump_grads in place of the CPU binaries,
# training.device cuda and precision fp32 added to every run config. Prints its
# PASS/FAIL lines; exit 1 on a failure.
# Environment: GPU_BIN, GPU_DUMP_GRADS, GPU_TRAINING (JSON training keys), PYTHON (a
# python3 with torch and numpy; default: /usr/bin/python3 when it has them, else
# python3).
set -u
cd "$(dirname "$0")/../.." || exit 1
has_torch() { "$1" -c 'import torch, numpy' >/dev/null 2>&1; }
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    has_torch /usr/bin/python3 && PYTHON=/usr/bin/python3
fi
if ! has_torch "$PYTHON"; then
    echo "FAIL the PyTorch reference: $PYTHON cannot import torch and numpy (set PYTHON)"
    exit 1
fi
REFTEST_BIN=${GPU_BIN:-./femtotron-cuda} REFTEST_DUMP_GRADS=${GPU_DUMP_GRADS:-build-cuda/tests/dump_grads} \
    REFTEST_TRAINING=${GPU_TRAINING-'{"device": "cuda", "precision": "fp32"}'} exec "$PYTHON" tests/reference/test_reference.py
