#!/usr/bin/env bash
# tests/shell/test_tokenizer.sh — femtotron's tokenizer.json BPE against Hugging Face
# `tokenizers` (PyPI, in build/pyenv; scripts/install_deps.sh installs it):
#  - byte-level BPE tokenizers are trained in the test on half of the Debian fortunes
#    (GPT-2 style ByteLevel regex; Llama 3 style Split + ByteLevel, ignore_merges and
#    a BOS template) and varied (add_prefix_space, Digits, the Qwen2 pattern, ids
#    past 65535);
#  - SentencePiece-style BPE tokenizers (Llama 2 / Mistral / TinyLlama kind) are
#    trained the same way (byte_fallback with the 256 <0xNN> tokens, <unk> <s> </s>,
#    a <s> template) and written in the legacy form (normalizer Prepend + Replace, no
#    pre-tokenizer, decoder Replace/ByteFallback/Fuse/Strip), without byte fallback
#    (fused <unk>, a normalized added token), with neither normalizer nor
#    pre-tokenizer (spaces take the byte fallback), and with the Metaspace pre-tokenizer
#    (prepend_scheme first / always / never, split true / false, ignore_merges, the
#    Metaspace decoder), and without a "▁" token (spaces take the byte fallback of
#    "▁", or <unk>);
#  - held-out fortunes, hand-written Unicode / whitespace / digit / special-token /
#    uncovered-character strings and seeded random strings are encoded by both: the
#    ids must be identical, token for token, with and without the post-processor's
#    tokens;
#  - decoding gives the same bytes, and the text itself where tokenizers' does;
#    generate's per-token bytes of a SentencePiece-style BPE spell the text;
#  - cutting a long text where tokenizer_safe_cut allows leaves the ids unchanged;
#  - `femtotron prepare --tokenizer` writes exactly `tokenizers`' ids plus the
#    end-of-text token per document (text with --split-on, JSONL, .gz, --field,
#    one long document, uint32 shards; the SentencePiece kind with <s> from its
#    template), the same for 1 and 2 threads;
#  - unsupported tokenizer features and bad inputs are fatal errors naming them.
# Run from the repository root; prints PASS/FAIL lines (tests/run_all.sh counts them).
set -u
FEMTOTRON=${FEMTOTRON:-./femtotron}
API=${API:-build/tests/test_tokenizer_api}
PY=build/pyenv/bin/python
HF="$PY tests/reference/hf_tok.py"
T=$(mktemp -d /tmp/femtotron_test_tokenizer.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }
check() {  # check NAME COMMAND... : PASS when the command succeeds
    local name=$1; shift
    if "$@" >"$T/check.log" 2>&1; then pass "$name"
    else fail "$name: $(tr '\n' ' ' <"$T/check.log" | cut -c1-600)"; fi
}
for f in "$FEMTOTRON" "$API"; do
    [ -x "$f" ] || { echo "FAIL tokenizer: $f not built (run make tests-bin femtotron)"; exit 1; }
done
if ! $PY -c "import tokenizers" 2>/dev/null; then
    echo "FAIL tokenizer: build/pyenv has no Hugging Face tokenizers (run bash scripts/install_deps.sh)"
    exit 1
fi

# --- the Unicode table is what its generator makes from unicodedata --------------
/usr/bin/python3 tests/reference/gen_unicode_class.py "$T/table.h"
check "src/data/unicode_class_table.h equals a fresh run of its generator (unicodedata)" \
    cmp "$T/table.h" src/data/unicode_class_table.h

# --- tokenizers trained here, test texts ----------------------------------------------
$HF train "$T" && $HF texts "$T/texts.jsonl" && $HF docs "$T/docs.jsonl"
SPM="spm_legacy spm_unk spm_plain spm_first spm_first_split spm_always spm_always_split spm_never"
SPM="$SPM spm_first_nometa spm_legacy_nometa spm_legacy_nometa_unk"
check "tokenizers trained on fortunes (GPT-2, Llama 3 and Llama 2 styles) and variants written" \
    ls "$T/gpt2.json" "$T/gpt2_prefix.json" "$T/digits.json" "$T/llama3.json" "$T/qwen2.json" "$T/wide.json" \
    $(for tk in $SPM; do echo "$T/$tk.json"; done)

# diff_ids NAME HF_FILE FT_FILE: PASS if identical, else the first differing text.
diff_ids() {
    if cmp -s "$2" "$3"; then pass "$1"; return; fi
    fail "$1: $($PY - "$2" "$3" "$T/texts.jsonl" <<'EOF'
import json, sys
a, b = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines()
texts = [json.loads(l)["text"] for l in open(sys.argv[3])]
for i, (x, y) in enumerate(zip(a, b)):
    if x != y:
        print(f"text {i} {texts[i]!r}: tokenizers {x[:200]} | femtotron {y[:200]}")
        break
else:
    print(f"{len(a)} vs {len(b)} lines")
EOF
)"
}

n_texts=$(wc -l <"$T/texts.jsonl")
for tk in gpt2 gpt2_prefix digits llama3 qwen2 wide $SPM; do
    for mode in plain specials; do
        flag=""; [ $mode = specials ] && flag=--specials
        $HF encode "$T/$tk.json" "$T/texts.jsonl" $flag >"$T/$tk.$mode.hf" 2>/dev/null
        "$API" encode "$T/$tk.json" "$T/texts.jsonl" $flag >"$T/$tk.$mode.ft" 2>"$T/$tk.err"
        diff_ids "$tk ($mode): $n_texts texts (held-out fortunes, Unicode, whitespace runs, digits, special tokens, random) encode to tokenizers' ids" \
            "$T/$tk.$mode.hf" "$T/$tk.$mode.ft"
    done
done
check "the texts exercise non-ASCII, special tokens and long whitespace runs" $PY -c "
import json
t = [json.loads(l)['text'] for l in open('$T/texts.jsonl')]
assert sum(any(ord(c) > 0x3000 for c in s) for s in t) > 20 and sum('<|endoftext|>' in s for s in t) > 5
assert any('   ' in s for s in t) and any('\u00e9' in s for s in t) and any('\U0001F389' in s for s in t)
ids = [l.split() for l in open('$T/llama3.specials.ft')]
assert all(l and l[0] == ids[0][0] for l in ids), 'BOS missing'"

check "SentencePiece kind: the texts exercise byte fallback, fused <unk>, the normalized added token and <s>" $PY -c "
ids = lambda f: [list(map(int, l.split())) for l in open('$T/' + f)]
fb = sum(any(3 <= i <= 258 for i in l) for l in ids('spm_legacy.plain.ft'))
unk = sum(0 in l for l in ids('spm_unk.plain.ft'))
added = sum(3000 in l for l in ids('spm_unk.plain.ft'))
assert fb > 100 and unk > 100 and added > 2, (fb, unk, added)
# Without a ▁ token, each space (read as ▁ by the merging) is <0xE2><0x96><0x81>, or <unk>.
meta_fb = sum(any(l[i:i + 3] == [229, 153, 132] for i in range(len(l))) for l in ids('spm_first_nometa.plain.ft'))
meta_unk = sum(0 in l for l in ids('spm_legacy_nometa_unk.plain.ft'))
assert meta_fb > 500 and meta_unk > 500, (meta_fb, meta_unk)
for tk in '$SPM'.split():
    assert all(l and l[0] == 1 for l in ids(tk + '.specials.ft')), tk + ': <s> missing'
print(fb, unk, added)"

for tk in gpt2 llama3 wide $SPM; do
    for mode in specials plain; do
        $HF decode "$T/$tk.json" "$T/$tk.$mode.hf" >"$T/$tk.dec.hf"
        "$API" decode "$T/$tk.json" <"$T/$tk.$mode.hf" >"$T/$tk.dec.ft"
        check "$tk: decoding every id list ($mode) gives tokenizers' text" cmp "$T/$tk.dec.hf" "$T/$tk.dec.ft"
    done
done
# Round trips: where tokenizers' decode gives the text back, femtotron's gives it
# too; generate's bytes per token spell " " + text under the legacy Prepend.
for tk in spm_legacy spm_first spm_always_split; do
    $HF decode "$T/$tk.json" "$T/$tk.plain.hf" >"$T/$tk.rt.hf"
    "$API" decode "$T/$tk.json" <"$T/$tk.plain.ft" >"$T/$tk.rt.ft"
    "$API" shown "$T/$tk.json" <"$T/$tk.plain.ft" >"$T/$tk.shown.ft"
    check "$tk: decode(encode(text)) is the text wherever tokenizers' is (300+ texts), generate's token bytes spell it" $PY -c "
import json
texts = [json.loads(l)['text'] for l in open('$T/texts.jsonl')]
hf, ft, shown = [[bytes.fromhex(l.strip()).decode('utf-8', 'replace') for l in open('$T/$tk.' + k)] for k in ('rt.hf', 'rt.ft', 'shown.ft')]
same = [i for i, t in enumerate(texts) if hf[i] == t]
assert len(same) > 300, len(same)
assert all(ft[i] == texts[i] for i in same)
if '$tk' == 'spm_legacy':
    spelled = [i for i in same if texts[i] and shown[i] == ' ' + texts[i]]
    assert len(spelled) > 300, len(spelled)
print(len(same))"
done

# --- safe cuts ------------------------------------------------------------------------
$PY -c "
import json
with open('$T/long.txt', 'w') as f:
    for l in open('$T/docs.jsonl'): f.write(json.loads(l)['text'] + '\n%\n')"
for tk in gpt2 llama3 digits; do
    check "$tk: a long text cut at every safe cut encodes to the same ids as the whole" \
        bash -c "'$API' cuts '$T/$tk.json' '$T/long.txt' | grep -Eq '^cuts [1-9][0-9]+ identical'"
done
check "gpt2 with add_prefix_space allows no cuts (a prefix space would change the ids)" \
    bash -c "'$API' cuts '$T/gpt2_prefix.json' '$T/long.txt' | grep -q '^cuts 0 identical'"
for tk in spm_first spm_first_split spm_always spm_always_split spm_never; do
    check "$tk: a long text cut at every safe cut encodes to the same ids as the whole" \
        bash -c "'$API' cuts '$T/$tk.json' '$T/long.txt' | grep -Eq '^cuts [1-9][0-9]{3,} identical'"
done
check "spm_legacy and spm_unk allow no cuts (Prepend puts a ▁ before every part), yet encode the 600 kB text as one word quickly" \
    bash -c "timeout 20 '$API' cuts '$T/spm_legacy.json' '$T/long.txt' | grep -q '^cuts 0 identical' &&
             timeout 20 '$API' cuts '$T/spm_unk.json' '$T/long.txt' | grep -q '^cuts 0 identical'"

# --- prepare --tokenizer --------------------------------------------------------------
cat >"$T/shards.py" <<'EOF'
import glob, json, math, struct, subprocess, sys

def read_shard(path):
    data = open(path, "rb").read()
    magic, version, count = struct.unpack("<3i", data[:12])
    width = {20240520: 2, 20240801: 4}[magic]
    assert version == 1 and len(data) == 1024 + width * count, path
    return width, list(struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:]))

def split_tokens(out_dir, split):
    toks, widths = [], set()
    for p in sorted(glob.glob(f"{out_dir}/{split}_*.bin")):
        w, t = read_shard(p)
        widths.add(w)
        toks += t
    return widths, toks

def expected(tok_path, docs, eot_text, F):
    """tokenizers' ids of each document as its post-processor makes them (Llama 3's
    <|begin_of_text|> first) + end-of-text, split by the val rule."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    eot = tok.token_to_id(eot_text)
    train, val = [], []
    for k, enc in enumerate(tok.encode_batch(docs, add_special_tokens=True)):
        (val if math.floor((k + 1) * F) > math.floor(k * F) else train).extend(enc.ids + [eot])
    return train, val

if __name__ == "__main__":
    tok_path, out_dir, eot_text, F, width = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
    docs = json.load(open(sys.argv[6]))
    want_train, want_val = expected(tok_path, docs, eot_text, F)
    wt, got_train = split_tokens(out_dir, "train")
    wv, got_val = split_tokens(out_dir, "val")
    assert wt | wv == {width}, f"token width {wt | wv}, want {width}"
    for name, got, want in [("train", got_train, want_train), ("val", got_val, want_val)]:
        if got != want:
            i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            sys.exit(f"{name}: {len(got)} tokens, want {len(want)}; first difference at {i}: "
                     f"{got[i:i+8]} vs {want[i:i+8]}")
    print(f"train {len(got_train)} val {len(got_val)} tokens identical")
EOF
# Documents as the tests expect them, from the JSONL written by hf_tok.py docs.
$PY -c "
import json
docs = [json.loads(l)['text'] for l in open('$T/docs.jsonl')]
json.dump(docs, open('$T/docs.json', 'w'))
json.dump([d + '\\n' for d in docs], open('$T/docs_nl.json', 'w'))  # as split from long.txt: lines keep their newline
with open('$T/docs_body.jsonl', 'w') as f:
    for d in docs: f.write(json.dumps({'id': 1, 'body': d}) + '\n\n')"
gzip -c "$T/docs_body.jsonl" >"$T/docs_body.jsonl.gz"

"$FEMTOTRON" prepare --tokenizer "$T/llama3.json" --input "$T/docs.jsonl" --output "$T/j2" \
    --val-fraction 0.1 --threads 2 >"$T/j2.out" 2>"$T/j2.err"
check "prepare --tokenizer (Llama 3 style) on JSONL: shards hold tokenizers' ids with <|begin_of_text|> + <|end_of_text|> per document, val split by the rule" \
    $PY "$T/shards.py" "$T/llama3.json" "$T/j2" "<|end_of_text|>" 0.1 2 "$T/docs.json"
check "prepare reports the tokenizer, its end-of-text id, uint16 and vocab size; progress shows MB/s and tokens" \
    bash -c "grep -q 'vocab: .*llama3.json (byte-level BPE.*end-of-text \"<|end_of_text|>\" = [0-9]*; uint16 tokens: set model.vocab_size to [0-9]* or more' '$T/j2.out' &&
             grep -q 'MB read, .* MB/s, .* tokens written' '$T/j2.err'"
"$FEMTOTRON" prepare --tokenizer "$T/llama3.json" --input "$T/docs.jsonl" --output "$T/j1" \
    --val-fraction 0.1 --threads 1 >/dev/null 2>&1
check "1 and 2 threads write byte-identical shards" \
    bash -c "cmp '$T/j1/train_000000.bin' '$T/j2/train_000000.bin' && cmp '$T/j1/val_000000.bin' '$T/j2/val_000000.bin'"
"$FEMTOTRON" prepare --tokenizer "$T/llama3.json" --input "$T/docs_body.jsonl.gz" --field body \
    --output "$T/jz" --val-fraction 0.1 --threads 2 >/dev/null 2>&1
check "gzip'd JSONL with --field body and blank lines gives the same shards" \
    bash -c "cmp '$T/j1/train_000000.bin' '$T/jz/train_000000.bin' && cmp '$T/j1/val_000000.bin' '$T/jz/val_000000.bin'"

# Text input with --split-on %, GPT-2 style, small shards.
"$FEMTOTRON" prepare --tokenizer "$T/gpt2.json" --input "$T/long.txt" --split-on % --output "$T/t2" \
    --val-fraction 0.05 --shard-tokens 20000 --threads 2 >/dev/null 2>&1
check "prepare --tokenizer (GPT-2 style) on text --split-on %: tokenizers' ids + <|endoftext|>, several shards" \
    bash -c "$PY '$T/shards.py' '$T/gpt2.json' '$T/t2' '<|endoftext|>' 0.05 2 '$T/docs_nl.json' &&
             [ \$(ls '$T/t2' | grep -c '^train_') -ge 3 ]"

# One long document (cut into segments), uint32 ids past 65535.
$PY -c "import json; json.dump([open('$T/long.txt').read()], open('$T/one.json', 'w'))"
"$FEMTOTRON" prepare --tokenizer "$T/wide.json" --input "$T/long.txt" --output "$T/w2" \
    --val-fraction 0 --threads 2 >"$T/w2.out" 2>&1
check "one long document, ids past 65535: uint32 shards (magic 20240801) equal tokenizers' ids" \
    bash -c "$PY '$T/shards.py' '$T/wide.json' '$T/w2' '<|endoftext|>' 0 4 '$T/one.json' &&
             grep -q 'uint32 tokens' '$T/w2.out' && [ \$(wc -c <'$T/long.txt') -gt 600000 ]"

# SentencePiece kind: <s> from the template before each document, </s> after it.
for tk in spm_legacy spm_first; do
    for th in 1 2; do
        "$FEMTOTRON" prepare --tokenizer "$T/$tk.json" --input "$T/docs.jsonl" --output "$T/$tk.p$th" \
            --val-fraction 0.1 --threads $th >"$T/$tk.p$th.out" 2>&1
    done
    check "prepare --tokenizer $tk on JSONL: tokenizers' ids with <s> + </s> per document, 1 and 2 threads byte-identical" \
        bash -c "$PY '$T/shards.py' '$T/$tk.json' '$T/$tk.p2' '</s>' 0.1 2 '$T/docs.json' &&
                 grep -q 'end-of-text \"</s>\"' '$T/$tk.p2.out' &&
                 cmp '$T/$tk.p1/train_000000.bin' '$T/$tk.p2/train_000000.bin' && cmp '$T/$tk.p1/val_000000.bin' '$T/$tk.p2/val_000000.bin'"
    "$FEMTOTRON" prepare --tokenizer "$T/$tk.json" --input "$T/long.txt" --output "$T/$tk.l2" \
        --val-fraction 0 --threads 2 >/dev/null 2>&1
    check "prepare --tokenizer $tk, one long document (cut where allowed): tokenizers' ids" \
        $PY "$T/shards.py" "$T/$tk.json" "$T/$tk.l2" "</s>" 0 2 "$T/one.json"
done

# Invalid UTF-8: kept as byte tokens, with a warning.
printf 'caf\xe9 au lait \xff\xfe ok\n' >"$T/bad_utf8.txt"
"$FEMTOTRON" prepare --tokenizer "$T/gpt2.json" --input "$T/bad_utf8.txt" --output "$T/u" \
    --val-fraction 0 >/dev/null 2>"$T/u.err"
check "invalid UTF-8 bytes are encoded as their byte tokens (decode gives the bytes back) and reported" \
    bash -c "grep -q '3 bytes that are not valid UTF-8' '$T/u.err' && $PY -c \"
import sys; sys.path.insert(0, '$T'); from shards import read_shard
w, t = read_shard('$T/u/train_000000.bin'); print(' '.join(map(str, t[:-1])))\" >'$T/u.ids' &&
             '$API' decode '$T/gpt2.json' <'$T/u.ids' | grep -qx \$(od -An -tx1 '$T/bad_utf8.txt' | tr -d ' \n')"

# --- unsupported features and bad input: fatal, naming the problem ---------------------
# bad NAME EDIT_PYTHON EXPECTED_TEXT [BASE]: tokenizer variant made by EDIT from
# BASE (gpt2) must be refused.
bad() {
    local name=$1 edit=$2 want=$3 base=${4:-gpt2}
    $PY -c "
import json; j = json.load(open('$T/$base.json'))
$edit
json.dump(j, open('$T/bad.json', 'w'))"
    "$FEMTOTRON" prepare --tokenizer "$T/bad.json" --input "$T/bad_utf8.txt" --output "$T/bad_out" \
        --force >/dev/null 2>"$T/bad.err"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qF -- "$want" "$T/bad.err" && grep -qF "bad.json" "$T/bad.err"; then
        pass "refused, naming it: $name"
    else
        fail "$name: rc $rc, stderr: $(head -c 300 "$T/bad.err")"
    fi
}
bad "model type WordPiece" "j['model']['type'] = 'WordPiece'" "model type WordPiece is not supported"
bad "normalizer NFC" "j['normalizer'] = {'type': 'NFC'}" "normalizer NFC is not supported"
bad "pre-tokenizer Whitespace" "j['pre_tokenizer'] = {'type': 'Whitespace'}" "pre-tokenizer Whitespace is not supported"
bad "an unknown Split pattern" \
    "j['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [{'type': 'Split', 'pattern': {'Regex': '\\\\w+'}, 'behavior': 'Isolated', 'invert': False}, j['pre_tokenizer']]}" \
    "Split pattern \\w+ is not supported"
bad "Split behavior Removed" \
    "j['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [{'type': 'Split', 'pattern': {'Regex': ' '}, 'behavior': 'Removed', 'invert': False}, j['pre_tokenizer']]}" \
    "Split behavior Removed is not supported"
bad "a pre-tokenizer without ByteLevel other than Metaspace" "j['pre_tokenizer'] = {'type': 'Digits', 'individual_digits': True}" "a pre-tokenizer without ByteLevel must be a single Metaspace"
bad "decoder WordPiece" "j['decoder'] = {'type': 'WordPiece', 'prefix': '##', 'cleanup': True}" "decoder WordPiece is not supported"
bad "post-processor BertProcessing" "j['post_processor'] = {'type': 'BertProcessing', 'sep': ['[SEP]', 1], 'cls': ['[CLS]', 0]}" "post-processor BertProcessing is not supported"
bad "BPE dropout" "j['model']['dropout'] = 0.1" "dropout is not supported"
bad "byte_fallback with ByteLevel" "j['model']['byte_fallback'] = True" "byte_fallback is not supported with a ByteLevel pre-tokenizer"
bad "normalizer NFKC inside a Sequence (SentencePiece kind)" \
    "j['normalizer']['normalizers'].insert(0, {'type': 'NFKC'})" "normalizer NFKC is not supported" spm_legacy
bad "Replace normalizer with a Regex" \
    "j['normalizer']['normalizers'][1]['pattern'] = {'Regex': ' +'}" "normalizer Replace with a Regex pattern is not supported" spm_legacy
bad "decoder CTC inside a Sequence (SentencePiece kind)" \
    "j['decoder']['decoders'].append({'type': 'CTC', 'pad_token': '<pad>', 'word_delimiter_token': '|', 'cleanup': True})" \
    "decoder CTC is not supported for a SentencePiece-style BPE" spm_legacy
bad "decoder ByteLevel with a SentencePiece-style BPE" "j['decoder'] = {'type': 'ByteLevel'}" \
    "decoder ByteLevel is not supported for a SentencePiece-style BPE" spm_first
bad "no decoder (SentencePiece kind)" "j['decoder'] = None" "no decoder" spm_first
bad "Metaspace with a Digits step" \
    "j['pre_tokenizer'] = {'type': 'Sequence', 'pretokenizers': [{'type': 'Digits', 'individual_digits': True}, j['pre_tokenizer']]}" \
    "must be a single Metaspace" spm_first
bad "a normalizer with the Metaspace pre-tokenizer" \
    "j['normalizer'] = {'type': 'Replace', 'pattern': {'String': ' '}, 'content': '_'}" \
    "a normalizer together with the Metaspace pre-tokenizer is not supported" spm_first
bad "Metaspace prepend_scheme sometimes" "j['pre_tokenizer']['prepend_scheme'] = 'sometimes'" \
    "prepend_scheme \"sometimes\" is not always, first or never" spm_first
bad "Metaspace replacement of two characters" "j['pre_tokenizer']['replacement'] = '__'" \
    "Metaspace replacement \"__\" must be one character" spm_first
bad "a merge part not in the vocabulary (SentencePiece kind)" "j['model']['merges'].append(['zqzq', 'x'])" \
    "merge part \"zqzq\" is not in the vocabulary" spm_legacy
bad "normalizer on a byte-level BPE" "j['normalizer'] = {'type': 'Prepend', 'prepend': ' '}" \
    "normalizer Prepend is not supported with a byte-level BPE"
bad "continuing_subword_prefix" "j['model']['continuing_subword_prefix'] = '##'" "continuing_subword_prefix is not supported"
bad "added token with lstrip" "j['added_tokens'][0]['lstrip'] = True" "sets lstrip, which is not supported"
bad "a merge whose result is not in the vocabulary" "j['model']['merges'].append(['Ġ', 'Ġ' * 40])" "is not in the vocabulary"
bad "no end-of-text token" "j['added_tokens'] = []" "has no end-of-text token"
bad "a vocabulary id larger than the file (11e8)" "j['model']['vocab']['zzzz'] = 1100000000" "is not below the file's size"
printf '{"text": "not closed' >"$T/broken.json"
"$FEMTOTRON" prepare --tokenizer "$T/broken.json" --input "$T/bad_utf8.txt" --output "$T/bj" >/dev/null 2>"$T/bj.err"
check "a tokenizer.json that is not JSON is fatal, naming the file" \
    bash -c "[ $? -ne 0 ] && grep -q 'broken.json: not valid JSON' '$T/bj.err'"
printf '{"text": "a"}\n{"title": "no text"}\n' >"$T/nofield.jsonl"
"$FEMTOTRON" prepare --tokenizer "$T/gpt2.json" --input "$T/nofield.jsonl" --output "$T/nf" >/dev/null 2>"$T/nf.err"
check "a JSONL line without the field is fatal, naming file, line and --field" \
    bash -c "[ $? -ne 0 ] && grep -q 'nofield.jsonl line 2: no string field \"text\" (choose the field with --field)' '$T/nf.err'"
"$FEMTOTRON" prepare --input "$T/bad_utf8.txt" --field body --output "$T/ff" >/dev/null 2>"$T/ff.err"
check "--field on text inputs is refused" \
    bash -c "[ $? -ne 0 ] && grep -q -- '--field applies to JSONL inputs only' '$T/ff.err'"
"$FEMTOTRON" prepare --tokenizer "$T/gpt2.json" --eot '<|nope|>' --input "$T/bad_utf8.txt" --output "$T/ne" >/dev/null 2>"$T/ne.err"
check "--eot naming no token is refused" bash -c "[ $? -ne 0 ] && grep -q -- '--eot <|nope|> is not a token' '$T/ne.err'"
exit $((fails > 0))
