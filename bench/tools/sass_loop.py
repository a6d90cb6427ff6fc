#!/usr/bin/env python3
"""bench/tools/sass_loop.py SASS_FILE — the instruction mix of a kernel's hot loop,
from `cuobjdump -sass -fun KERNEL OBJ` output (bench/sass_mix.sh runs it).

The loop: the backward branch (BRA to a lower address) whose range holds the most
mma (HMMA) instructions. Prints the whole kernel's count, the loop's count and
opcode mix with every path in it, and each path a forward branch may skip (40 or
more instructions, no mma; conditional "if" or, after an unconditional branch,
"else"), so that a tile's cost is the loop's count less the paths it does not
take."""
import collections
import re
import sys

ins = []  # (address, opcode, text)
for line in open(sys.argv[1]):
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(/\*.*)?$", line)
    if not m:
        continue
    text = m.group(2)
    op = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0].split(".")[0]
    ins.append((int(m.group(1), 16), op, text))
if not ins:
    sys.exit("sass_loop.py: no SASS instructions in " + sys.argv[1])
index = {a: i for i, (a, _, _) in enumerate(ins)}


def branch_target(text):
    m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\d,\s*)?0x([0-9a-f]+)", text)
    return int(m.group(1), 16) if m else None


def mma(lo, hi):
    return sum(1 for i in range(lo, hi + 1) if ins[i][1] == "HMMA")


best = None  # (mma count, head index, back-edge index)
for i, (a, op, text) in enumerate(ins):
    t = branch_target(text) if op == "BRA" else None
    if t is not None and t < a and t in index:
        n = mma(index[t], i)
        if n and (best is None or n > best[0] or (n == best[0] and i - index[t] < best[2] - best[1])):
            best = (n, index[t], i)
print(f"whole kernel: {len(ins)} instructions, {mma(0, len(ins) - 1)} mma")
if best is None:
    print("no loop with mma in it")
    sys.exit(0)
_, lo, hi = best
mix = collections.Counter(ins[i][1] for i in range(lo, hi + 1))
print(f"hot loop, every path: {sum(mix.values())} instructions, {mix['HMMA']} mma")
print("  mix: " + " ".join(f"{k}:{v}" for k, v in mix.most_common()))
# Forward branches over 40 or more instructions without mma: paths some tiles skip
# (flash_mma: the chunk's bounds, rare; the diagonal's mask pass; the checked copy
# of a last partial tile, jumped over by an unconditional branch after the
# unchecked one; the next tile's fetch, skipped only by the last). Listed in
# address order, each with its first opcodes; they may nest or overlap (a loop's
# code is not laid out in the order of its source), so which of them a tile skips
# is read from the listing: the cost of a tile is the loop's count less those.
for i in range(lo, hi + 1):
    a, op, text = ins[i]
    t = branch_target(text) if op == "BRA" else None
    if t is not None and t > a and t in index and index[t] <= hi:
        r0, r1 = i + 1, index[t] - 1
        if r1 - r0 + 1 >= 40 and mma(r0, r1) == 0:
            top = collections.Counter(ins[j][1] for j in range(r0, r1 + 1)).most_common(5)
            kind = "if" if text.startswith("@") else "else"
            print(f"  skippable ({kind}) 0x{ins[r0][0]:x}-0x{ins[r1][0]:x}: {r1 - r0 + 1} instructions ("
                  + " ".join(f"{k}:{v}" for k, v in top) + ")")
