#!/usr/bin/env bash
# tests/shell/test_prepare.sh — `femtotron prepare` end to end: shard names and headers,
# token counts (bytes + one end-of-text per document), byte-exact round trip of
# plain, UTF-8, --split-on and .gz inputs, the val-split rule, shard rotation,
# refusal to overwrite, --force, and errors for missing or corrupt input.
# Inputs of any number and shape: 20,000 files as a directory, a quoted glob, an
# --input-list and 20,000 command-line arguments (no MPI; the same shards as their
# concatenation in byte order), the directory filter and --include, standard
# input, gzip and zstd (equal to the plain file; truncated and corrupt ones
# refused by name); the empty/tiny validation warnings and the split counts; and
# that prepare, plan, generate and bench peak never start MPI.
# Run from the repository root; prints PASS/FAIL lines (tests/run_all.sh counts them).
set -u
FEMTOTRON=${FEMTOTRON:-./femtotron}  # override to test another build
PY=/usr/bin/python3
T=$(mktemp -d /tmp/femtotron_test_prepare.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
check() {  # check NAME COMMAND... : PASS when the command succeeds
    local name=$1; shift
    if "$@" >"$T/check.log" 2>&1; then
        echo "PASS $name"
    else
        echo "FAIL $name: $(tr '\n' ' ' <"$T/check.log" | cut -c1-400)"
        fails=$((fails + 1))
    fi
}
if [ ! -x "$FEMTOTRON" ]; then
    echo "FAIL prepare: $FEMTOTRON not built (run make)"
    exit 1
fi

# shard.py: reads llm.c shards, checks header against size, compares documents.
cat >"$T/shard.py" <<'EOF'
import struct, sys, gzip

def read_shard(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    assert magic == 20240520, f"{path}: magic {magic}, want 20240520 (uint16)"
    assert version == 1, f"{path}: version {version}"
    assert len(data) == 1024 + 2 * count, f"{path}: {len(data)} bytes for {count} tokens"
    toks = struct.unpack(f"<{count}H", data[1024:])
    assert all(t <= 256 for t in toks), f"{path}: id above 256"
    return list(toks)

def docs_of(tokens):
    # Byte-level rule: ids 0..255 are bytes, 256 ends every document.
    assert not tokens or tokens[-1] == 256, "shard does not end with end-of-text"
    docs, cur = [], bytearray()
    for t in tokens:
        if t == 256:
            docs.append(bytes(cur)); cur = bytearray()
        else:
            cur.append(t)
    return docs

def input_docs(path, split_on=None, min_bytes=1):
    raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
    if split_on is None:
        docs = [raw]
    else:
        # Lines end at "\n" only (bytes.splitlines would also split at a lone "\r");
        # one "\n" and then one "\r" are ignored when comparing with the separator.
        parts = raw.split(b"\n")
        lines = [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        docs, cur = [], b""
        for line in lines:
            bare = line[:-1] if line.endswith(b"\n") else line
            bare = bare[:-1] if bare.endswith(b"\r") else bare
            if bare == split_on.encode():
                docs.append(cur); cur = b""
            else:
                cur += line
        docs.append(cur)
    return [d for d in docs if len(d) >= min_bytes]
EOF

# --- inputs -------------------------------------------------------------------
printf 'Hello, world.\nA plain ASCII document.\n' >"$T/plain.txt"
printf 'Grüße aus Köln — 東京 ☃ 🎉\nnaïve café\n' >"$T/utf8.txt"
printf 'Compressed text\nover two lines, with a NUL-free tail' >"$T/doc.txt"
gzip -c "$T/doc.txt" >"$T/doc.txt.gz"
printf 'first fortune\n%%\nsecond\nfortune, two lines\n%%\n%%\nthird (CRLF separator next)\r\n%%\r\nfourth, no final newline' >"$T/fort.txt"
for i in $(seq 0 39); do printf 'document number %d\n%%\n' "$i"; done >"$T/forty.txt"

# --- 1: plain + UTF-8 + gzip, one document per file ---------------------------
"$FEMTOTRON" prepare --input "$T/plain.txt" "$T/utf8.txt" "$T/doc.txt.gz" \
    --output "$T/out1" --val-fraction 0 >"$T/out1.stdout" 2>"$T/out1.stderr"
rc=$?
check "prepare exits 0 on plain, UTF-8 and .gz inputs" test $rc -eq 0
check "one train shard named train_000000.bin, no val shard (and prepare.json)" \
    bash -c "cd '$T/out1' && [ \"\$(ls | tr '\n' ' ')\" = 'prepare.json train_000000.bin ' ]"
check "shard magic/version/size and tokens = bytes + documents" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
toks = read_shard('$T/out1/train_000000.bin')
nbytes = sum(len(d) for f in ['plain.txt', 'utf8.txt', 'doc.txt.gz'] for d in input_docs('$T/' + f))
assert len(toks) == nbytes + 3, (len(toks), nbytes)
"
check "round trip: decoded documents equal the input files byte for byte" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
got = docs_of(read_shard('$T/out1/train_000000.bin'))
want = [d for f in ['plain.txt', 'utf8.txt', 'doc.txt.gz'] for d in input_docs('$T/' + f)]
assert got == want, (got, want)
assert any(b >= 0x80 for b in got[1]), 'UTF-8 bytes lost'
"
check "summary names documents, tokens, files and vocab 257" bash -c "
grep -q '^train: 3 documents, ' '$T/out1.stdout' &&
grep -q '^val: 0 documents, 0 tokens, 0 files' '$T/out1.stdout' &&
grep -q '^files written: 1' '$T/out1.stdout' && grep -q 'vocab_size to 257' '$T/out1.stdout'"
check "progress line on stderr reports MB read, MB/s and tokens" \
    grep -q 'MB read, .* MB/s, .* tokens written' "$T/out1.stderr"

# --- 2: --split-on % ------------------------------------------------------------
"$FEMTOTRON" prepare --input "$T/fort.txt" --split-on % --output "$T/out2" --val-fraction 0 \
    >"$T/out2.stdout" 2>&1
check "--split-on %: chunks become documents, empty ones skipped, CRLF separator honoured" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
got = docs_of(read_shard('$T/out2/train_000000.bin'))
want = input_docs('$T/fort.txt', '%')
assert len(want) == 4 and got == want, (got, want)
assert got[0] == b'first fortune\n' and got[3] == b'fourth, no final newline', got
"

# --- 3: val split rule and shard rotation ---------------------------------------
"$FEMTOTRON" prepare --input "$T/forty.txt" --split-on % --output "$T/out3" \
    --val-fraction 0.25 --shard-tokens 50 >"$T/out3.stdout" 2>&1
rc=$?
check "prepare with --val-fraction 0.25 --shard-tokens 50 exits 0" test $rc -eq 0
check "document k goes to val iff floor((k+1)F) > floor(kF), order kept" $PY -c "
import sys, glob, math; sys.path.insert(0, '$T'); from shard import *
docs = input_docs('$T/forty.txt', '%')
F = 0.25
want_val = [d for k, d in enumerate(docs) if math.floor((k+1)*F) > math.floor(k*F)]
want_train = [d for k, d in enumerate(docs) if not math.floor((k+1)*F) > math.floor(k*F)]
val = [d for p in sorted(glob.glob('$T/out3/val_*.bin')) for d in docs_of(read_shard(p))]
train = [d for p in sorted(glob.glob('$T/out3/train_*.bin')) for d in docs_of(read_shard(p))]
assert len(want_val) == 10 and val == want_val, (len(val), val[:3])
assert train == want_train, (len(train),)
"
check "shards rotate at the first document end past --shard-tokens, numbered from 000000" $PY -c "
import sys, glob, os; sys.path.insert(0, '$T'); from shard import *
for split in ['train', 'val']:
    paths = sorted(glob.glob(f'$T/out3/{split}_*.bin'))
    names = [os.path.basename(p) for p in paths]
    assert names == [f'{split}_{i:06d}.bin' for i in range(len(names))], names
    sizes = [len(read_shard(p)) for p in paths]
    docs = [docs_of(read_shard(p)) for p in paths]
    for s, d in zip(sizes[:-1], docs[:-1]):
        # full: >= 50 tokens, and the limit was crossed only by the last document
        assert s >= 50 and s - (len(d[-1]) + 1) < 50, (split, sizes)
    assert sizes[-1] >= 1
assert len(glob.glob('$T/out3/train_*.bin')) >= 4, 'expected several train shards'
assert not glob.glob('$T/out3/*.tmp'), 'temporary files left behind'
"

# --- 4: refusing to overwrite, --force ------------------------------------------
"$FEMTOTRON" prepare --input "$T/plain.txt" --output "$T/out3" >/dev/null 2>"$T/refuse.stderr"
rc=$?
check "existing shards are not overwritten without --force" \
    bash -c "[ $rc -ne 0 ] && grep -q -- '--force' '$T/refuse.stderr' && grep -q '$T/out3' '$T/refuse.stderr'"
"$FEMTOTRON" prepare --input "$T/forty.txt" --split-on % --output "$T/out3" --force \
    >/dev/null 2>&1
check "--force replaces every old shard (no stale train_000001.bin)" \
    bash -c "cd '$T/out3' && [ \"\$(ls | tr '\n' ' ')\" = 'prepare.json train_000000.bin val_000000.bin ' ]"

# --- 5: bad input --------------------------------------------------------------
"$FEMTOTRON" prepare --input "$T/plain.txt" "$T/missing.txt" --output "$T/out5" \
    >/dev/null 2>"$T/missing.stderr"
rc=$?
check "missing input is fatal, names the file and writes nothing" \
    bash -c "[ $rc -ne 0 ] && grep -q '$T/missing.txt' '$T/missing.stderr' && [ ! -e '$T/out5' ]"
printf 'this is not gzip data\n' >"$T/corrupt.gz"
"$FEMTOTRON" prepare --input "$T/corrupt.gz" --output "$T/out6" >/dev/null 2>"$T/corrupt.stderr"
rc=$?
check "corrupt .gz input is fatal and names the file" \
    bash -c "[ $rc -ne 0 ] && grep -q 'corrupt.gz' '$T/corrupt.stderr'"
"$FEMTOTRON" prepare --input "$T/plain.txt" --output "$T/out7" --val-fraction 1.5 \
    >/dev/null 2>"$T/frac.stderr"
rc=$?
check "--val-fraction outside [0, 1] is rejected" \
    bash -c "[ $rc -ne 0 ] && grep -q 'val-fraction' '$T/frac.stderr'"
"$FEMTOTRON" prepare --help >"$T/help.txt" 2>&1
rc=$?
check "prepare --help prints usage and exits 0" \
    bash -c "[ $rc -eq 0 ] && grep -q 'usage: femtotron prepare' '$T/help.txt'"

# --- 6: a real fortune file (Debian package 'fortunes') -------------------------
F=/usr/share/games/fortunes/computers
if [ -f "$F" ]; then
    "$FEMTOTRON" prepare --input "$F" --split-on % --output "$T/out8" >"$T/out8.stdout" 2>&1
    check "fortune file: every fortune is a document, split ~5% val, bytes intact" $PY -c "
import sys, glob, math; sys.path.insert(0, '$T'); from shard import *
docs = input_docs('$F', '%')
isval = [math.floor((k+1)*0.05) > math.floor(k*0.05) for k in range(len(docs))]
train = docs_of(read_shard('$T/out8/train_000000.bin'))
val = docs_of(read_shard('$T/out8/val_000000.bin'))
assert train == [d for d, v in zip(docs, isval) if not v]
assert val == [d for d, v in zip(docs, isval) if v]
assert len(val) == math.floor(len(docs) * 0.05), (len(val), len(docs))
"
fi
# --- 7: 20,000 inputs: a directory, a quoted glob, an --input-list, the arguments ----
# Names whose byte order differs from creation order and from a locale's order
# (unpadded numbers, upper case before lower case); each file is one fortune-style
# chunk, so their concatenation in byte order must give the very same shards.
# OMPI_MCA_pml=bogus makes MPI_Init fail: prepare must not call it.
NOMPI="OMPI_MCA_pml=bogus"
$PY - "$T/many" <<'EOF'
import os, sys
root = sys.argv[1]
files = []
for part in ["p1", "p10", "P2", "p9"]:
    os.makedirs(os.path.join(root, part))
    for i in range(5000):
        name = ("Doc%d.txt" if i % 7 == 0 else "doc%d.txt") % i
        files.append(os.path.join(root, part, name))
        with open(files[-1], "w") as f:
            f.write("file %s/%s, with some words to fill it\n%%\n" % (part, name))
def key(path):  # strcmp order within each directory, depth first
    return [c.encode() for c in os.path.relpath(path, root).split(os.sep)]
files.sort(key=key)
with open(root + ".list", "w") as f:
    f.write("".join(p + "\n" for p in files))
with open(root + ".cat", "w") as f:
    for p in files:
        f.write(open(p).read())
EOF
[ "$(wc -l <"$T/many.list")" -eq 20000 ] || echo "FAIL setup: 20000 inputs not made"
many() {  # many NAME ARGS... : prepare the 20,000 inputs into $T/NAME, timed
    local name=$1; shift
    local t0=$(date +%s.%N)
    env $NOMPI "$FEMTOTRON" prepare "$@" --split-on % --output "$T/$name" --val-fraction 0.01 \
        >"$T/$name.stdout" 2>"$T/$name.stderr"
    echo $? >"$T/$name.rc"
    echo "$(date +%s.%N) $t0" | awk '{printf "%.2f", $1 - $2}' >"$T/$name.seconds"
}
same_shards() {  # same_shards DIR_A DIR_B: the same train_*/val_* files, byte for byte
    [ "$(cd "$1" && ls -- *.bin)" = "$(cd "$2" && ls -- *.bin)" ] || { echo "shard names differ"; return 1; }
    for f in "$1"/*.bin; do cmp "$f" "$2/$(basename "$f")" || return 1; done
}
export -f same_shards  # for the bash -c of check
many many_cat --input "$T/many.cat"
many many_dir --input "$T/many"
many many_glob --input "$T/many/P*/*.txt" "$T/many/p*/*.txt"  # P2 sorts before p1
many many_list --input-list "$T/many.list"
mapfile -t many_files <"$T/many.list"
many many_args --input "${many_files[@]}"
args_bytes=$(printf '%s\n' "${many_files[@]}" | wc -c)
check "20,000 inputs: the concatenation gives 20000 documents, 200 in val" \
    bash -c "[ \$(cat '$T/many_cat.rc') -eq 0 ] && grep -q '^documents: 20000 kept' '$T/many_cat.stdout' &&
             grep -q '^val: 200 documents' '$T/many_cat.stdout'"
check "20,000 inputs as a directory: exit 0, the concatenation's shards ($(cat "$T/many_dir.seconds")s)" \
    bash -c "[ \$(cat '$T/many_dir.rc') -eq 0 ] && grep -q '^prepared 20000 input file' '$T/many_dir.stdout' &&
             same_shards '$T/many_cat' '$T/many_dir'"
check "20,000 inputs as two quoted globs: the same shards ($(cat "$T/many_glob.seconds")s)" \
    bash -c "[ \$(cat '$T/many_glob.rc') -eq 0 ] && same_shards '$T/many_cat' '$T/many_glob'"
check "20,000 inputs as an --input-list: the same shards ($(cat "$T/many_list.seconds")s)" \
    bash -c "[ \$(cat '$T/many_list.rc') -eq 0 ] && same_shards '$T/many_cat' '$T/many_list'"
check "20,000 inputs as $args_bytes bytes of arguments, without mpirun: the same shards ($(cat "$T/many_args.seconds")s)" \
    bash -c "[ $args_bytes -gt 100000 ] && [ \$(cat '$T/many_args.rc') -eq 0 ] &&
             same_shards '$T/many_cat' '$T/many_args'"
check "the 20,000 files take under 15 s each way" $PY -c "
import sys
t = {n: float(open('$T/%s.seconds' % n).read()) for n in ['many_dir', 'many_glob', 'many_list', 'many_args']}
assert max(t.values()) < 15, t
"

# --- 8: a directory tree: the filter, byte order, links, --include --------------------
mkdir -p "$T/tree/sub/deeper" "$T/tree/.hidden_dir" "$T/tree/Upper"
printf 'A text file.\n' >"$T/tree/a.txt"
printf '# Markdown\n' >"$T/tree/b.md"
printf '{"text": "jsonl one"}\n{"text": "jsonl two"}\n' >"$T/tree/c.jsonl"
printf 'gzipped text\n' | gzip -c >"$T/tree/sub/d.text.gz"
printf '{"text": "zstd jsonl"}\n' | zstd -q -c >"$T/tree/sub/deeper/e.ndjson.zst"
printf 'capital directory sorts first\n' >"$T/tree/Upper/f.txt"
ln -s a.txt "$T/tree/link_to_a.txt"      # a link to a file is read
ln -s sub "$T/tree/link_to_sub"          # a link to a directory is not followed
for skip in .hidden.txt .hidden_dir/x.txt notes.bin README data.json x.txt.bak sub/y.gz; do
    printf 'SKIPPED %s\n' "$skip" >"$T/tree/$skip"
done
"$FEMTOTRON" prepare --input "$T/tree" --output "$T/out_tree" --val-fraction 0 \
    >"$T/tree.stdout" 2>"$T/tree.stderr"
check "directory: .txt .md .jsonl .text.gz .ndjson.zst and a file link read, in byte order; hidden, other names and directory links skipped" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
got = docs_of(read_shard('$T/out_tree/train_000000.bin'))
want = [b'capital directory sorts first\n', b'A text file.\n', b'# Markdown\n', b'jsonl one', b'jsonl two',
        b'A text file.\n', b'gzipped text\n', b'zstd jsonl']
assert got == want, got
"
"$FEMTOTRON" prepare --input "$T/tree" --include README --include '*.bin' --include 'x.*' --output "$T/out_incl" \
    --val-fraction 0 >/dev/null 2>"$T/incl.stderr"
check "--include GLOB replaces the suffix rule (hidden files still skipped)" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
got = docs_of(read_shard('$T/out_incl/train_000000.bin'))
assert got == [b'SKIPPED README\n', b'SKIPPED notes.bin\n', b'SKIPPED x.txt.bak\n'], got
"

# --- 9: standard input, gzip and zstd equal the plain file ------------------------------
$PY -c "
import json
for i in range(300):
    print(json.dumps({'text': 'JSONL document %d: ' % i + 'naïve café ☃ ' * (i % 11), 'id': i}))
" >"$T/docs.jsonl"
gzip -c "$T/docs.jsonl" >"$T/docs.jsonl.gz"
zstd -q -c "$T/docs.jsonl" >"$T/docs.jsonl.zst"
head -150 "$T/docs.jsonl" | gzip -c >"$T/two_members.jsonl.gz"   # two gzip members
tail -150 "$T/docs.jsonl" | gzip -c >>"$T/two_members.jsonl.gz"
head -100 "$T/docs.jsonl" | zstd -q -c >"$T/two_frames.jsonl.zst"  # two zstd frames
tail -200 "$T/docs.jsonl" | zstd -q -c >>"$T/two_frames.jsonl.zst"
gzip -c "$T/docs.jsonl" >"$T/docs_gzip_unnamed.jsonl"               # gzip found by its magic
prep_docs() {  # prep_docs NAME ARGS...: prepare the JSONL documents into $T/NAME
    local name=$1; shift
    "$FEMTOTRON" prepare "$@" --output "$T/$name" --val-fraction 0.1 >"$T/$name.stdout" 2>"$T/$name.stderr"
}
prep_docs docs_plain --input "$T/docs.jsonl"
for v in docs.jsonl.gz docs.jsonl.zst two_members.jsonl.gz two_frames.jsonl.zst docs_gzip_unnamed.jsonl; do
    prep_docs "out_$v" --input "$T/$v"
    check "$v gives the plain file's shards" bash -c "same_shards '$T/docs_plain' '$T/out_$v'"
done
cat "$T/docs.jsonl" | prep_docs docs_stdin --input - --format jsonl
check "cat docs.jsonl | prepare --input - --format jsonl: the file's shards" \
    bash -c "same_shards '$T/docs_plain' '$T/docs_stdin'"
zstd -q -c "$T/docs.jsonl" | prep_docs docs_stdin_zst --input - --format jsonl
check "zstd data on standard input is found by its magic: the same shards" \
    bash -c "same_shards '$T/docs_plain' '$T/docs_stdin_zst'"
printf '%s\n' "$T/tree/a.txt" "" "$T/tree/b.md" | "$FEMTOTRON" prepare --input-list - --output "$T/out_stdlist" \
    --val-fraction 0 >/dev/null 2>&1
check "--input-list - reads the names from standard input (blank lines skipped)" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
assert docs_of(read_shard('$T/out_stdlist/train_000000.bin')) == [b'A text file.\n', b'# Markdown\n']
"

# --- 10: bad inputs are named ----------------------------------------------------------
refused() {  # refused NAME PATTERN ARGS...: prepare exits non-zero and stderr matches PATTERN
    local name=$1 pattern=$2; shift 2
    "$FEMTOTRON" prepare "$@" >"$T/refused.stdout" 2>"$T/refused.stderr" </dev/null
    local rc=$?
    check "$name" bash -c "[ $rc -ne 0 ] && grep -q -- '$pattern' '$T/refused.stderr' || { cat '$T/refused.stderr'; false; }"
}
head -c 2000 "$T/docs.jsonl.gz" >"$T/truncated.jsonl.gz"
$PY -c "
d = bytearray(open('$T/docs.jsonl.zst', 'rb').read())
for i in range(20, 60): d[i] ^= 0x5a
open('$T/corrupt.jsonl.zst', 'wb').write(d)"
head -c 300 "$T/docs.jsonl.zst" >"$T/truncated.jsonl.zst"
cp "$T/docs.jsonl" "$T/plain_named.zst"
mkdir -p "$T/nothing_here/.hidden"
printf 'x\n' >"$T/nothing_here/data.bin"
refused "a truncated .gz is refused, naming the file" "truncated.jsonl.gz.*ends early" \
    --input "$T/truncated.jsonl.gz" --output "$T/bad1"
refused "a corrupt .zst is refused, naming the file" "corrupt.jsonl.zst: corrupt zstd data" \
    --input "$T/corrupt.jsonl.zst" --output "$T/bad2"
refused "a truncated .zst is refused, naming the file" "truncated.jsonl.zst.*ends early" \
    --input "$T/truncated.jsonl.zst" --output "$T/bad3"
refused "a .zst name over plain text is refused" "plain_named.zst: named .zst but is not zstd" \
    --input "$T/plain_named.zst" --output "$T/bad4"
refused "a glob without matches is refused, naming it" "no file matches the input pattern $T/none\*.txt" \
    --input "$T/none*.txt" --output "$T/bad5"
refused "a directory without readable names is refused, naming it and the rule" \
    "input directory $T/nothing_here holds no file prepare reads.*--include" --input "$T/nothing_here" --output "$T/bad6"
refused "a missing --input-list is refused, naming it" "cannot open the input list $T/no.list" \
    --input-list "$T/no.list" --output "$T/bad7"
refused "standard input named twice is refused" "standard input (-) is named twice" \
    --input - - --output "$T/bad8"
refused "a glob matching only directories with nothing to read is refused" \
    "input pattern $T/nothing_h\* matches only directories without a file" --input "$T/nothing_h*" --output "$T/bad9"
: >"$T/empty.txt"
printf '%%\n%%\n' >"$T/separators.txt"
refused "an input with no text in it is refused, naming the output and the counts" \
    "prepare: no tokens written to $T/bad10: 0 document(s) kept, 1 skipped" --input "$T/empty.txt" --output "$T/bad10"
refused "an input of only --split-on separators is refused" \
    "prepare: no tokens written to $T/bad11: 0 document(s) kept" --input "$T/separators.txt" --split-on % --output "$T/bad11"
check "no output directory was made for inputs refused while expanding them" \
    bash -c "! ls -d '$T'/bad[5-9] 2>/dev/null | grep -q ."
mkdir -p "$T/globdirs/empty" "$T/globdirs/full" "$T/globdirs/hidden_only"
printf 'the only file\n' >"$T/globdirs/full/a.txt"
printf 'hidden\n' >"$T/globdirs/hidden_only/.h.txt"
"$FEMTOTRON" prepare --input "$T/globdirs/*" --output "$T/out_globdirs" --val-fraction 0 >/dev/null 2>&1
check "a glob's directories with nothing to read add nothing when another match yields files" $PY -c "
import sys; sys.path.insert(0, '$T'); from shard import *
assert docs_of(read_shard('$T/out_globdirs/train_000000.bin')) == [b'the only file\\n']
"

# --- 11: honest splits: the counts, an empty and a tiny validation split -------------------
head -17 "$T/docs.jsonl" >"$T/seventeen.jsonl"
"$FEMTOTRON" prepare --input "$T/seventeen.jsonl" --output "$T/out17" >"$T/out17.stdout" 2>"$T/out17.stderr"
check "17 JSONL documents at --val-fraction 0.05: a warning that val is EMPTY (20 documents needed)" \
    bash -c "grep -q 'warning: prepare: the validation split is EMPTY: --val-fraction 0.05 of 17 document(s)' '$T/out17.stderr' &&
             grep -q 'at least 20 documents are needed for one' '$T/out17.stderr' && grep -q '^val: 0 documents, 0 tokens, 0 files' '$T/out17.stdout'"
check "the summary gives each split's documents and tokens (bytes + end-of-text), and the shares" $PY -c "
import json
docs = [json.loads(l)['text'].encode() for l in open('$T/seventeen.jsonl')]
tokens = sum(len(d) + 1 for d in docs)
out = open('$T/out17.stdout').read()
assert 'train: 17 documents, %d tokens, 1 files' % tokens in out, out
assert 'split: train 100.0% of the documents and 100.0% of the tokens, val 0.0% and 0.0%' in out, out
"
"$FEMTOTRON" prepare --input "$T/seventeen.jsonl" --output "$T/out17b" --val-fraction 0.2 >"$T/out17b.stdout" 2>"$T/out17b.stderr"
check "17 documents at --val-fraction 0.2: 3 in val, a warning that val is tiny" \
    bash -c "grep -q '^val: 3 documents, ' '$T/out17b.stdout' && grep -q '^train: 14 documents, ' '$T/out17b.stdout' &&
             grep -q 'the validation split is tiny: 3 document(s)' '$T/out17b.stderr'"
check "no validation warning at --val-fraction 0 (none asked for) or for the 20,000 inputs (200 in val)" \
    bash -c "! grep -q 'validation split' '$T/out1.stderr' '$T/many_dir.stderr'"

# --- 12: the one-process commands never start MPI; several ranks are refused --------------
MPIRUN=${MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}
env $NOMPI "$FEMTOTRON" plan --model llama-3.1-8b --gpus 8 --hardware h100 --seq-length 4096 \
    --global-batch-tokens 1048576 --top 1 >"$T/plan.out" 2>&1
rc=$?
check "plan runs without MPI (MPI_Init would fail here)" bash -c "[ $rc -eq 0 ] || { cat '$T/plan.out'; false; }"
env $NOMPI "$FEMTOTRON" bench peak --seconds 0.05 --size 64 --threads 1 >"$T/peak.out" 2>&1
rc=$?
check "bench peak runs without MPI" bash -c "[ $rc -eq 0 ] && grep -q gemm_peak_gflops '$T/peak.out'"
if $PY tests/reference/generate_torch.py make-model "$T/model:257:2" >/dev/null 2>&1; then
    env $NOMPI "$FEMTOTRON" generate --model "$T/model" --prompt "Hello" --max-new-tokens 2 --temperature 0 \
        >"$T/gen.out" 2>"$T/gen.err"
    rc=$?
    check "generate runs without MPI" bash -c "[ $rc -eq 0 ] && grep -q '^Hello' '$T/gen.out' || { tail -3 '$T/gen.err'; false; }"
else
    echo "FAIL generate without MPI: tests/reference/generate_torch.py make-model failed (torch?)"; fails=$((fails + 1))
fi
env $NOMPI "$FEMTOTRON" train --config /nonexistent.json >"$T/train.out" 2>&1
rc=$?
check "train still starts MPI (fails under the bogus MPI setting, proving the probe works)" \
    bash -c "[ $rc -ne 0 ] && ! grep -q 'nonexistent.json' '$T/train.out'"
$MPIRUN -np 1 "$FEMTOTRON" prepare --input "$T/plain.txt" --output "$T/out_np1" --val-fraction 0 >/dev/null 2>&1
rc=$?
check "prepare under mpirun -np 1 still works" bash -c "[ $rc -eq 0 ] && [ -f '$T/out_np1/train_000000.bin' ]"
$MPIRUN -np 2 "$FEMTOTRON" prepare --input "$T/plain.txt" --output "$T/out_np2" >/dev/null 2>"$T/np2.err"
rc=$?
check "prepare under mpirun -np 2 is refused once, clearly, writing nothing" \
    bash -c "[ $rc -ne 0 ] && [ \$(grep -c 'runs as one process, but it was started as 2 ranks' '$T/np2.err') -eq 1 ] &&
             [ ! -e '$T/out_np2' ]"
exit $((fails > 0))
