#!/usr/bin/env bash
# bench/tokenizer_speed.sh — encoding speed of `femtotron prepare --tokenizer` beside
# Hugging Face `tokenizers` (PyPI, build/pyenv; scripts/install_deps.sh installs it)
# on the same corpus and the same tokenizer.json, with 1 and 2 threads.
#
# Corpus: every Debian fortunes file, COPIES times (default 8, ~20 MB), one document
# per fortune (femtotron: --split-on %; tokenizers: the same documents in a list).
# Tokenizers: byte-level BPEs trained by tests/reference/hf_tok.py on half the
# fortunes, GPT-2 style (ByteLevel regex) and Llama 3 style (Split + ByteLevel), and
# SentencePiece-style BPEs (Llama 2 kind: byte fallback, <s> template) in the legacy
# form (normalizer Prepend + Replace, each document one word) and the Metaspace
# form (prepend_scheme first, split false).
# femtotron: "encode" is the parallel encoding phase prepare reports; "end to end"
# is the whole command (reading, splitting, encoding, writing and fsyncing shards).
# tokenizers: encode_batch (ids, offsets, ...) and encode_batch_fast (no offsets),
# threads set with RAYON_NUM_THREADS. Each number is the median of REPEAT (3) runs,
# femtotron's and tokenizers' alternating.
# COPIES=4 REPEAT=3 takes about 2 minutes on 2 cores.
# Writes bench/results/tokenizer_speed.md. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES=${COPIES:-8}
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
REPEAT=${REPEAT:-3}
PY=build/pyenv/bin/python
[ -x ./femtotron ] || { echo "build femtotron first (make)"; exit 1; }
$PY -c "import tokenizers" || { echo "run bash scripts/install_deps.sh first"; exit 1; }
T=$(mktemp -d /tmp/femtotron_bench_tok.XXXXXX)
trap 'rm -rf "$T"' EXIT
$PY tests/reference/hf_tok.py train "$T" >/dev/null 2>&1
inputs=$(ls /usr/share/games/fortunes/* | grep -v -E '\.(dat|u8)$')
for _ in $(seq "$COPIES"); do cat $inputs; done >"$T/corpus.txt"
MB=$($PY -c "import os; print(f'{os.path.getsize(\"$T/corpus.txt\") / 1e6:.1f}')")

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

femto() {  # femto TOKENIZER THREADS -> "encode_MBps end_to_end_MBps tokens" (one run)
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$(./femtotron prepare --tokenizer "$T/$1.json" --input "$T/corpus.txt" --split-on % \
          --output "$T/out" --val-fraction 0 --threads "$2" --force 2>/dev/null)
    t1=$(date +%s.%N)
    echo "$(echo "$out" | sed -n 's/^encoding: .* \([0-9.]*\) MB\/s$/\1/p')" \
         "$(echo "$t0 $t1 $MB" | awk '{printf "%.1f", $3 / ($2 - $1)}')" \
         "$(echo "$out" | sed -n 's/^train: [0-9]* documents, \([0-9]*\) tokens.*/\1/p')"
}

hf() {  # hf TOKENIZER THREADS -> "batch_MBps fast_MBps tokens" (one run of each call)
    # add_special_tokens=True: prepare writes each document with its template's
    # tokens (Llama 3's <|begin_of_text|>, Llama 2's <s>; GPT-2 has none).
    RAYON_NUM_THREADS=$2 $PY - "$T/$1.json" "$T/corpus.txt" 1 <<'EOF'
import statistics, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs, cur = [], []
for line in open(sys.argv[2], encoding="utf-8", errors="replace").read().split("\n"):
    if line.rstrip("\r") == "%":
        docs.append("\n".join(cur) + "\n" if cur else ""); cur = []
    else:
        cur.append(line)
docs.append("\n".join(cur))
docs = [d for d in docs if d]
mb = sum(len(d.encode()) for d in docs) / 1e6
res = []
for fn in (tok.encode_batch, getattr(tok, "encode_batch_fast", tok.encode_batch)):
    times = []
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter()
        encs = fn(docs, add_special_tokens=True)
        times.append(time.perf_counter() - t0)
    res.append(mb / statistics.median(times))
print(f"{res[0]:.1f} {res[1]:.1f} {sum(len(e.ids) for e in encs) + len(docs)}")
EOF
}

rows=""
for tk in gpt2 llama3 spm_legacy spm_first; do
    for th in 1 2; do
        # femtotron and tokenizers runs alternate, so that the load of the shared
        # machine falls on both alike; each figure is the median of its REPEAT runs.
        fe=() fx=() hb=() hfa=()
        for _ in $(seq "$REPEAT"); do
            read -r a b f_tok <<<"$(femto $tk $th)"
            fe+=("$a") fx+=("$b")
            read -r a b h_tok <<<"$(hf $tk $th)"
            hb+=("$a") hfa+=("$b")
        done
        f_enc=$(printf '%s\n' "${fe[@]}" | median) f_e2e=$(printf '%s\n' "${fx[@]}" | median)
        h_batch=$(printf '%s\n' "${hb[@]}" | median) h_fast=$(printf '%s\n' "${hfa[@]}" | median)
        ratio=$(echo "$f_enc $h_batch $h_fast" | awk '{b = $2 > $3 ? $2 : $3; printf "%.1f", $1 / b}')
        same=$([ "$f_tok" = "$h_tok" ] && echo yes || echo "NO ($f_tok vs $h_tok)")
        rows+="| $tk | $th | $f_enc | $f_e2e | $h_batch | $h_fast | $ratio | $same |"$'\n'
        echo "$tk threads=$th femtotron encode $f_enc MB/s (end to end $f_e2e), tokenizers $h_batch / fast $h_fast MB/s, tokens equal: $same"
    done
done

mkdir -p bench/results
cat >bench/results/tokenizer_speed.md <<EOF
# Tokenizer encoding speed: femtotron vs Hugging Face tokenizers

Corpus: the Debian fortunes files ×$COPIES ($MB MB, one document per fortune).
Tokenizers: byte-level BPEs trained on half of the fortunes by
tests/reference/hf_tok.py (3000 ids; GPT-2 style ByteLevel regex, Llama 3 style
Split + ByteLevel; SentencePiece-style (Llama 2 kind, byte fallback, \`<s>\` template)
in the legacy form (normalizer Prepend + Replace, no pre-tokenizer: each document is
one word) and the Metaspace form (prepend_scheme first, split false)). MB/s of input
text, median of $REPEAT runs (femtotron's and tokenizers' alternating).
femtotron *encode* is the parallel encoding phase of \`prepare\`; *end to end* the
whole command (read, split, encode, write and fsync shards). tokenizers
$($PY -c "import tokenizers; print(tokenizers.__version__)"): \`encode_batch\` and \`encode_batch_fast\`
(no offsets), threads via RAYON_NUM_THREADS. *ratio* = femtotron encode ÷ the
faster of the two tokenizers calls. *same ids*: equal token counts (the ids themselves
are compared by tests/shell/test_tokenizer.sh).
Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $LOAD_START at the start, $(cut -d' ' -f1 /proc/loadavg) at the end (shared machine: absolute numbers drift, ratios hold better).

| tokenizer | threads | femtotron encode MB/s | femtotron end to end MB/s | tokenizers encode_batch MB/s | tokenizers encode_batch_fast MB/s | ratio | same ids |
|---|---|---|---|---|---|---|---|
$rows
EOF
echo "wrote bench/results/tokenizer_speed.md"
