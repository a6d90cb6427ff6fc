#!/usr/bin/env bash
# tests/shell/test_prepare.sh — `femtotron prepare` end to end: shard names and headers,
# token counts (bytes + one end-of-text per document), byte-exact round trip of
# plain, UTF-8, --split-on and .gz inputs, the val-split rule, shard rotation,
# refusal to overwrite, --force, and errors for missing or corrupt input.
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
exit $((fails > 0))
