#!/usr/bin/env python3
"""tests/emu/cu2cpp.py SRC > OUT.cpp — a .cu file of src/ops (or an emulation test
written as one) as C++ for the host emulation of CUDA (tests/emu/cuda_emu.h):
  - each launch `kernel<<<grid, block, smem, stream>>>(args)` becomes
    `emu_kernel_call(kernel, grid, block, smem, stream)(args)`;
  - each static shared array `__shared__ T name[N]...;` becomes a reference to the
    array inside a function-local `static EmuStaticShared<T[N]...>`, which the
    emulation fills with NaN bytes before every block (cuda_emu.h: a block reading
    what none of its threads wrote sees NaN, not what the last block left or the
    zero a C++ static starts as). A form this does not know stops it, naming the
    line; in a header it does not read, the header's `__shared__` fails to compile.
Nothing else changes; a #line keeps compiler messages on the source's lines."""
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
# __shared__ TYPE NAME[DIM]...;  (one line: the #line numbering stays right)
shared = re.compile(r"__shared__\s+([A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*((?:\[[^\]\n]+\])+)\s*;")
text = shared.sub(r"static EmuStaticShared<\1\3> \g<2>_emu_shared_; auto &\2 = \g<2>_emu_shared_.v;", text)
for n, line in enumerate(text.splitlines(), 1):
    code = re.sub(r'"(?:\\.|[^"\\])*"', '""', line).split("//")[0]  # not in strings or comments
    if "__shared__" in code:
        sys.exit(f"cu2cpp: {src}:{n}: a __shared__ declaration this does not rewrite (an array "
                 f"`__shared__ T name[N];` on one line): {line.strip()}")
sys.stdout.write(f'#line 1 "{src}"\n' + text)
