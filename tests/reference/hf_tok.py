"""hf_tok.py — the Hugging Face `tokenizers` side of tests/shell/test_tokenizer.sh and
bench/tokenizer_speed.sh (run with build/pyenv/bin/python).

  hf_tok.py train OUTDIR        train byte-level BPE tokenizers and SentencePiece-
                                style (Llama 2) BPE tokenizers on part of the Debian
                                fortunes corpus and write variants of them
  hf_tok.py texts OUT.jsonl     test texts: fortunes the tokenizers were not trained
                                on, hand-written strings, seeded random strings
  hf_tok.py docs OUT.jsonl      every held-out fortune as a document (JSONL)
  hf_tok.py encode TOK TEXTS.jsonl [--specials]   one line of ids per text
  hf_tok.py decode TOK IDS      one line of hex per line of ids (decode with
                                skip_special_tokens=False)
  hf_tok.py legacy TOK OUT      TOK rewritten in the format every tokenizers
                                release reads (merges as "a b" strings), for
                                build/tfenv's older transformers

Fortune files (skip *.dat, *.u8) in sorted order: even-numbered ones train, odd
ones are held out for the tests.
"""
import glob
import json
import os
import random
import sys

FORTUNES = "/usr/share/games/fortunes"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def fortune_files():
    files = [f for f in sorted(glob.glob(os.path.join(FORTUNES, "*")))
             if os.path.isfile(f) and not f.endswith((".dat", ".u8"))]
    if len(files) < 4:
        sys.exit(f"hf_tok.py: too few fortune files in {FORTUNES} (Debian package fortunes)")
    return files[0::2], files[1::2]


def fortunes_of(path):
    """The fortunes of a file: runs of lines between lines "%", without the final newline."""
    docs, cur = [], []
    for line in open(path, encoding="utf-8", errors="replace").read().split("\n"):
        if line.rstrip("\r") == "%":
            docs.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    docs.append("\n".join(cur))
    return [d for d in docs if d.strip()]


def train(outdir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    os.makedirs(outdir, exist_ok=True)
    train_files, _ = fortune_files()
    alphabet = pre_tokenizers.ByteLevel.alphabet()

    # GPT-2 style: ByteLevel with its own regex, no prefix space.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train(train_files, trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>", "<|pad|>"],
                                               initial_alphabet=alphabet, show_progress=False))
    tok.add_tokens([AddedToken("fortune cookie", normalized=True)])  # an added (non-special) token
    tok.save(os.path.join(outdir, "gpt2.json"))

    # Llama 3 style: Split with the Llama 3 pattern, ByteLevel without regex,
    # ignore_merges, a BOS added by the post-processor.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train(train_files, trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                               initial_alphabet=alphabet, show_progress=False))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    tok.save(os.path.join(outdir, "llama3.json"))

    # Variants of the same vocabularies with other pre-tokenizer settings.
    def variant(src, dst, edit):
        j = json.load(open(os.path.join(outdir, src)))
        edit(j)
        json.dump(j, open(os.path.join(outdir, dst), "w"), ensure_ascii=False)

    def prefix(j):
        j["pre_tokenizer"]["add_prefix_space"] = True
    variant("gpt2.json", "gpt2_prefix.json", prefix)

    def digits(j):  # SmolLM's: every digit alone, then ByteLevel with its regex
        j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, j["pre_tokenizer"]]}
    variant("gpt2.json", "digits.json", digits)

    def qwen2(j):
        j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = QWEN2_PATTERN
        j["model"]["ignore_merges"] = False
    variant("llama3.json", "qwen2.json", qwen2)

    def wide(j):  # every id + 70000: uint32 shards, ids past 65535
        j["model"]["vocab"] = {k: v + 70000 for k, v in j["model"]["vocab"].items()}
        # tokenizers renumbers an added token that is not in the model's vocabulary
        # to the vocabulary's size when it loads a file; keep only those it keeps.
        j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in j["model"]["vocab"]]
        for a in j["added_tokens"]:
            a["id"] += 70000
    variant("gpt2.json", "wide.json", wide)
    train_spm(outdir, train_files)


SPM_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def train_spm(outdir, train_files):
    """SentencePiece-style BPE as transformers converts Llama 2 / Mistral / TinyLlama:
    characters as symbols, byte_fallback with the 256 <0xNN> tokens (ids 3..258 after
    <unk> <s> </s>, plain vocabulary entries as in Llama 2's file), a <s> template.
    Trained with Metaspace splitting at spaces (as sentencepiece does), written in the
    legacy form (normalizer Prepend + Replace, no pre-tokenizer) and Metaspace forms."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    # limit_alphabet leaves rare characters out: they take the byte fallback.
    tok.train(train_files, trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                               limit_alphabet=120, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    j = json.loads(tok.to_str())
    # Llama 2's file: the byte tokens are vocabulary entries, not added tokens.
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
    j["decoder"] = SPM_DECODER

    def write(name, edit):
        v = json.loads(json.dumps(j))
        edit(v)
        json.dump(v, open(os.path.join(outdir, name), "w"), ensure_ascii=False)

    def legacy(v):  # Llama 2 / TinyLlama / Mistral as transformers writes them (legacy=True)
        v["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        v["pre_tokenizer"] = None
    write("spm_legacy.json", legacy)

    def legacy_unk(v):  # no byte fallback: unknown characters become <unk>, fused
        legacy(v)
        v["model"]["byte_fallback"] = False
        v["added_tokens"].append({"id": len(v["model"]["vocab"]), "content": "fortune cookie", "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": True, "special": False})
    write("spm_unk.json", legacy_unk)

    def plain(v):  # neither normalizer nor pre-tokenizer: spaces take the byte fallback
        v["normalizer"] = None
        v["pre_tokenizer"] = None
    write("spm_plain.json", plain)

    def metaspace(scheme, split, decoder=None, ignore_merges=False):
        def edit(v):
            v["normalizer"] = None
            v["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}
            v["model"]["ignore_merges"] = ignore_merges
            if decoder:
                v["decoder"] = decoder
        return edit
    write("spm_first.json", metaspace("first", False))  # transformers' legacy=False
    write("spm_first_split.json", metaspace("first", True, ignore_merges=True))
    write("spm_always.json", metaspace("always", False))
    write("spm_always_split.json", metaspace("always", True, {"type": "Metaspace", "replacement": "\u2581",
                                                              "prepend_scheme": "always", "split": True}))
    write("spm_never.json", metaspace("never", True, {"type": "Metaspace", "replacement": "\u2581",
                                                      "prepend_scheme": "never", "split": True}))

    def no_meta(form, fallback=True):  # "▁" itself is no token: each becomes <0xE2><0x96><0x81> (or <unk>)
        def edit(v):
            form(v)
            del v["model"]["vocab"]["\u2581"]
            v["model"]["merges"] = [m for m in v["model"]["merges"] if "\u2581" not in m]
            v["model"]["byte_fallback"] = fallback
        return edit
    write("spm_first_nometa.json", no_meta(metaspace("first", False)))
    write("spm_legacy_nometa.json", no_meta(legacy))
    write("spm_legacy_nometa_unk.json", no_meta(legacy, fallback=False))


# Characters for random strings: ASCII of every class, apostrophes and contraction
# letters, Latin with accents, Greek, Cyrillic, CJK, kana, Hangul, Arabic, emoji,
# combining marks, non-ASCII digits and numbers, Unicode spaces and line breaks.
ALPHABET = (list("abcxyzABCXYZ0123456789") + list(" " * 8) + list("\t\n\n\r\x0b\x0c") +
            list("'''sStTrReEvVmMlLdD") + list(".,;:!?-_()[]{}<>\"/\\@#$%^&*+=|~`") +
            list("éèêëàçñøÅßÆœ") + list("αβγΩ") + list("жЖщЯ") + list("東京日本語中文") +
            list("ひらがなカタ") + list("한국") + list("العربية") + list("🎉😀👍🏽❤️") +
            ["\u0301", "\u0308", "\u200b", "\u200d"] + list("٣٤۵²³½Ⅷ") +
            ["\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u1680", "\u202f"] +
            ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "fortune cookie",
             "<s>", "</s>", "<unk>", "\u2581", "<0x41>",
             "<|endoftext", "<|", "|>", "'s", "'LL", "  ", "\n\n", " \n", "123456789", "\u017f", "\u212a", "'\u017f"])

HAND_WRITTEN = [
    "Hello, world! Grüße aus Köln — naïve café, Ångström, façade.",
    "東京は日本の首都です。 中文字符 한국어 テスト",
    "Emoji 🎉🎉 and 👍🏽 and ❤️ and a family 👨‍👩‍👧 here.",
    "Whitespace   runs\t\tand\n\n\nnewlines \r\n and trailing spaces   ",
    "    indented code:\n        return x  # comment\n",
    "Digits 0 12 345 6789 1234567890 3.14159 1e-10 ½ ² ٣٤٥ Ⅷ",
    "Special <|endoftext|> token <|endoftext|><|endoftext|> glued<|endoftext|>text <|pad|>",
    "Llama specials <|begin_of_text|>hi<|end_of_text|> and a fortune cookie too",
    "Contractions: I'm, you're, they've, he'll, she'd, it's, don't, I'M, YOU'RE, 'tis, o'clock",
    "",
    " ",
    "\n",
    "   leading spaces",
    "Mixed: ＡＢＣ１２３ (fullwidth), ﬁ ligature, Ω vs Ω, e\u0301 vs é",
    "Case folding: it\u017f, '\u017f, '\u212a, 'İ, 'ß, 'Ｓ",
    "Line separators\u2028and\u2029paragraphs, NEL\u0085here, nbsp\u00a0there, ideographic\u3000space",
    "Llama 2 specials: <s>bos</s> and <unk> and <s> <s>  </s>x, literal <0x41> and <0xZZ>",
    "<s>starts with a special token, then text",
    "  two leading spaces, a tab\tand trailing spaces and newline  \n",
    "\u2581already\u2581metaspace \u2581\u2581 and \u2581",
    "Unknown to the vocabulary: \U0001F999 \u2713 \u265e \U0001D518\U0001D52B Ж\u0301 \u00e7a \u4e2d\u6587 \U0001F1EB\U0001F1F7",
    "\t\t\n\n   \n",
]


def texts(out):
    _, held_out = fortune_files()
    docs = []
    for f in held_out[:6]:
        docs += fortunes_of(f)[:60]
    rng = random.Random(20240520)
    rand = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60))) for _ in range(400)]
    with open(out, "w", encoding="utf-8") as f:
        for t in HAND_WRITTEN + docs + rand:
            f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")


def docs(out):
    _, held_out = fortune_files()
    with open(out, "w", encoding="utf-8") as f:
        for path in held_out:
            for d in fortunes_of(path):
                f.write(json.dumps({"text": d, "source": os.path.basename(path)}, ensure_ascii=False) + "\n")


def encode(tok_path, texts_path, specials):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    lines = [json.loads(l)["text"] for l in open(texts_path, encoding="utf-8")]
    for enc in tok.encode_batch(lines, add_special_tokens=specials):
        print(" ".join(map(str, enc.ids)))


def decode(tok_path, ids_path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    for line in open(ids_path):
        ids = [int(x) for x in line.split()]
        print(tok.decode(ids, skip_special_tokens=False).encode("utf-8").hex())


def legacy(src, dst):
    j = json.load(open(src, encoding="utf-8"))
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    j["model"].pop("ignore_merges", None)
    json.dump(j, open(dst, "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "train":
        train(sys.argv[2])
    elif cmd == "texts":
        texts(sys.argv[2])
    elif cmd == "docs":
        docs(sys.argv[2])
    elif cmd == "encode":
        encode(sys.argv[2], sys.argv[3], "--specials" in sys.argv[4:])
    elif cmd == "decode":
        decode(sys.argv[2], sys.argv[3])
    elif cmd == "legacy":
        legacy(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
