#!/usr/bin/env bash
# tests/shell/test_design.sh — the design document and the code agree
# (docs/DESIGN.md is the reference; this test keeps it honest):
#   1. docs/DESIGN.md exists and the README links it;
#   2. every citation of the design in src/, tests/, bench/, scripts/ and the README
#      names an invariant (by number, and by name when one is given) or a section
#      that exists in it — a stale or invented citation fails;
#   3. every test file the design names ("Tested by") exists;
#   4. the layers: every src/ file belongs to a layer of the design's table and
#      every #include points to its own layer or one below it;
#   5. invariant 4: no MPI outside src/dist/;
#   6. invariant 6: model/, engines/ and parallel_layers/ never memcpy/memset/memmove
#      float buffer contents (they use the buffer ops of ops/ops.h);
#   7. per-process singletons: every mutable static variable in src/ is in a file
#      the design lists under "Per-process singletons".
# Prints one PASS/FAIL line per check; exit 1 on any failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
exec /usr/bin/python3 - "$@" <<'PY'
import glob, os, re, sys

fails = 0
def check(ok, msg, detail=""):
    global fails
    print(("PASS " if ok else "FAIL ") + msg + ("" if ok or not detail else ": " + detail))
    fails += 0 if ok else 1

DOC = "docs/DESIGN.md"
if not os.path.exists(DOC):
    check(False, "docs/DESIGN.md exists")
    sys.exit(1)
doc = open(DOC).read()
check(True, "docs/DESIGN.md exists")
check("docs/DESIGN.md" in open("README.md").read(), "the README links docs/DESIGN.md")

# ---- 2. citations ------------------------------------------------------------
headings = [m.group(2).strip() for m in re.finditer(r"^(#{2,3}) (.+)$", doc, re.M)]
invariants = {}
for h in headings:
    m = re.match(r"Invariant (\d+): (.+)$", h)
    if m:
        invariants[int(m.group(1))] = m.group(2).strip().lower()
check(sorted(invariants) == list(range(1, len(invariants) + 1)) and len(invariants) >= 6,
      "invariants numbered once, 1..%d, each a heading 'Invariant N: name'" % len(invariants),
      str(sorted(invariants)))

def comment_text(path):
    """The file's lines joined, comment markers stripped, so a citation may wrap."""
    out = []
    for line in open(path, errors="replace"):
        out.append(re.sub(r"^\s*(//+|#+|\*+|/\*+)?\s?", "", line.rstrip("\n")))
    return " ".join(out)

files = []
for pat in ["src/**/*.[ch]", "tests/**/*", "bench/**/*.sh", "bench/**/*.py", "bench/**/*.md",
            "scripts/**/*", "README.md", "Makefile", "tests/README.md"]:
    files += [f for f in glob.glob(pat, recursive=True) if os.path.isfile(f)]
files = sorted(set(f for f in files if not f.endswith((".png", ".bin")) and f != "tests/shell/test_design.sh"))
cites, bad = 0, []
for f in files:
    text = comment_text(f)
    for m in re.finditer(r"(\S*)DESIGN(\.md)?\b", text):
        prefix, rest = m.group(1), text[m.end():m.end() + 160]
        where = "%s: ...%s..." % (f, text[max(0, m.start() - 10):m.end() + 60])
        if not (prefix.endswith("docs/") or prefix.endswith("../docs/") or prefix.endswith("(docs/")
                or prefix.endswith("[`docs/") or prefix.endswith("`docs/")):
            bad.append(where + " (cite it as docs/DESIGN.md)")
            continue
        cites += 1
        inv = re.match(r",\s*invariant\s+(\d+)(?::\s*([^,.;:)]+))?", rest)
        sec = re.match(r',\s*"([^"]+)"', rest)
        if inv:
            n = int(inv.group(1))
            if n not in invariants:
                bad.append(where + " (no invariant %d)" % n)
            elif inv.group(2) and inv.group(2).strip().lower() != invariants[n]:
                bad.append(where + " (invariant %d is '%s')" % (n, invariants[n]))
        elif sec and sec.group(1) not in headings:
            bad.append(where + " (no section \"%s\")" % sec.group(1))
check(cites >= 15 and not bad, "%d citations of docs/DESIGN.md in %d files name invariants and sections that exist"
      % (cites, len(files)), "; ".join(bad[:6]))

# ---- 3. tests named by the design exist -------------------------------------
named = sorted(set(re.findall(r"`(tests/[\w/.]+)`", doc)))
missing = [t for t in named if not os.path.exists(t)]
check(len(named) >= 15 and not missing, "the %d test files the design names exist" % len(named), ", ".join(missing))

# ---- 4. layers ---------------------------------------------------------------
block = re.search(r"<!-- layers.*?-->(.*?)<!-- /layers -->", doc, re.S).group(1)
layers = {}
for row in re.finditer(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`", block, re.M):
    layers[row.group(2).rstrip("/")] = int(row.group(1))
def layer_of(path):  # path relative to src/
    if "/" in path:
        return path.split("/")[0]
    if path.startswith("config"):
        return "config"
    if path.startswith("util"):
        return "util"
    return path
srcs = sorted(glob.glob("src/**/*.[ch]", recursive=True))
unknown = sorted(set(layer_of(os.path.relpath(s, "src")) for s in srcs) - set(layers))
check(len(layers) >= 10 and not unknown, "every src/ file belongs to one of the %d layers of the design" % len(layers),
      "not in the table: " + ", ".join(unknown))
up, edges = [], 0
for s in srcs:
    a = layer_of(os.path.relpath(s, "src"))
    for line in open(s):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m or m.group(1).startswith(("ops/fast_exp", )) and a == "ops":
            continue
        b = layer_of(m.group(1))
        if b not in layers or a not in layers:
            continue
        edges += 1
        if layers[b] < layers[a]:
            up.append("%s includes %s (layer %d %s -> layer %d %s)" % (s, m.group(1), layers[a], a, layers[b], b))
check(edges > 100 and not up, "all %d #include edges of src/ point to the same layer or one below" % edges,
      "; ".join(up[:6]))

# ---- 5. MPI only in dist/ ----------------------------------------------------
mpi = [s for s in srcs if not s.startswith("src/dist/") and re.search(r"\bMPI_\w+|<mpi\.h>|\bnccl[A-Z]\w*", open(s).read())]
check(not mpi, "invariant 4: no MPI (or NCCL) call outside src/dist/", ", ".join(mpi))

# ---- 6. buffer contents only through ops -------------------------------------
raw = []
for s in srcs:
    if not s.startswith(("src/model/", "src/engines/", "src/parallel_layers/")):
        continue
    for i, line in enumerate(open(s), 1):
        if re.search(r"\b(memcpy|memset|memmove)\s*\(", line) and "sizeof(float)" in line:
            raw.append("%s:%d" % (s, i))
check(not raw, "invariant 6: model/, engines/ and parallel_layers/ move float buffers only through ops", ", ".join(raw))

# ---- 7. per-process singletons -----------------------------------------------
sblock = re.search(r"<!-- singletons.*?-->(.*?)<!-- /singletons -->", doc, re.S).group(1)
listed = set(re.findall(r"^\|\s*`(src/[\w/.]+)`", sblock, re.M))
def mutable_static(line):
    """A static variable declaration (not a function, not a constant)."""
    m = re.match(r"\s*static\s+(?!inline)(.*)", line)
    if not m or "schedule(static" in line:
        return False
    decl = re.split(r"=|;|\{", m.group(1))[0]
    paren = decl.find("(")
    if paren >= 0 and not decl[paren + 1:].lstrip().startswith("*"):
        return False  # a function (a function pointer variable reads "(*name)")
    if re.match(r"const\b", decl.strip()) and "*" not in decl:
        return False  # const data
    if re.search(r"\*\s*const\b[^*]*$", decl):
        return False  # const pointer to const data
    return True
found = {}
for s in srcs:
    if not s.endswith(".c"):
        continue
    for i, line in enumerate(open(s), 1):
        if mutable_static(line):
            found.setdefault(s, i)
unlisted = ["%s:%d" % (f, n) for f, n in sorted(found.items()) if f not in listed]
stale = sorted(f for f in listed if f not in found)
check(len(found) >= 5 and not unlisted,
      "every mutable static variable of src/ is in a file listed under \"Per-process singletons\" (%d files)" % len(found),
      "unlisted: " + ", ".join(unlisted))
check(not stale, "every file listed under \"Per-process singletons\" still has such state", ", ".join(stale))
sys.exit(1 if fails else 0)
PY
