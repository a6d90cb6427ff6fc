#!/usr/bin/env python3
"""tests/emu/cu2cpp.py SRC.cu > OUT.cpp — a .cu file of src/ops as C++ for the host
emulation of CUDA (tests/emu/cuda_emu.h): each launch `kernel<<<grid, block, smem,
stream>>>(args)` becomes `emu_kernel_call(kernel, grid, block, smem, stream)(args)`.
Nothing else changes; a #line keeps compiler messages on the .cu file's lines."""
import re
import sys

src = sys.argv[1]
text = open(src).read()
# kernel name, optionally with template arguments (k_forward<HD>), then <<<
launch = re.compile(r"([A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<")
text, n_open = launch.subn(r"emu_kernel_call(\1, ", text)
text, n_close = re.subn(r">>>\s*\(", ")(", text)
if n_open != n_close:
    sys.exit(f"cu2cpp: {src}: {n_open} launches opened with <<< but {n_close} closed with >>>(")
sys.stdout.write(f'#line 1 "{src}"\n' + text)
