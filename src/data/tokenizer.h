// data/tokenizer.h — one interface over femtotron's tokenizers:
//
//  - byte-level (byte_tokenizer.h): ids 0..255 are bytes, 256 is end-of-text;
//  - a Hugging Face tokenizer.json with a BPE model, encoding token for token as
//    the `tokenizers` package does: added/special tokens are split out first
//    (leftmost-longest; those with "normalized": false, then the others), the rest
//    is normalized and pre-tokenized, and every piece is merged by BPE, lowest
//    merge rank first (ignore_merges, unk_token and fuse_unk honoured). Two kinds:
//    - byte-level BPE (GPT-2, SmolLM, Llama 3, Qwen2): pre-tokenizer ByteLevel
//      with or without its GPT-2 regex and add_prefix_space, Split with the GPT-2 /
//      Llama 3 / Qwen2 pattern, Digits, as a Sequence; no normalizer; decoder
//      ByteLevel;
//    - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama as transformers
//      converts them): no ByteLevel; characters are the first symbols, one that is
//      no token becomes its UTF-8 bytes as <0xNN> tokens (byte_fallback) or unk;
//      either the legacy normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] with
//      no pre-tokenizer (the whole text is one word), or no normalizer and a
//      Metaspace pre-tokenizer (prepend_scheme first / always / never, split true /
//      false); decoder Replace, ByteFallback, Fuse, Strip, Metaspace (a Sequence).
//    Post-processor ByteLevel or TemplateProcessing (e.g. Llama 2's <s>).
//    Anything else in the file — another model type, another normalizer or one
//    with a Regex pattern, an unknown pre-tokenizer, pattern, post-processor or
//    decoder (also inside a Sequence), BPE dropout, a continuing subword prefix,
//    byte fallback with ByteLevel, added tokens with lstrip/rstrip/single_word —
//    is a fatal error naming the file and the feature, never a silent difference.
//
// Encoding is reentrant: each thread encodes with its own TokenizerState (a word
// cache and scratch buffers) over a shared, read-only Tokenizer.
// Text is bytes: valid UTF-8 encodes exactly as `tokenizers` does; a byte that is
// not valid UTF-8 (which `tokenizers` cannot be given) is kept and counted as one
// punctuation-like character, its byte token encoding it.
#ifndef FEMTOTRON_TOKENIZER_H
#define FEMTOTRON_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;
typedef struct TokenizerState TokenizerState;

// A growable list of token ids.
typedef struct {
    uint32_t *ids;  // (cap)
    size_t n, cap;
} TokenList;
void token_list_push(TokenList *l, uint32_t id);
void token_list_free(TokenList *l);

// Load a tokenizer.json (fatal on anything unsupported, naming it).
Tokenizer *tokenizer_load(const char *path);
// The byte-level tokenizer behind the same interface.
Tokenizer *tokenizer_byte_level(void);
void tokenizer_free(Tokenizer *t);

bool tokenizer_is_byte_level(const Tokenizer *t);
// "byte-level" or "PATH (byte-level BPE | SentencePiece-style BPE, N ids, ...)".
const char *tokenizer_describe(const Tokenizer *t);
// 1 + the largest id (model vocabulary and added tokens).
uint32_t tokenizer_vocab_size(const Tokenizer *t);
// Id of an exact token text (an added token, else a vocabulary entry as bytes),
// or -1.
int64_t tokenizer_token_id(const Tokenizer *t, const char *text);
// The end-of-text id written between documents: BYTE_EOT for byte-level, else the
// first added token among <|endoftext|>, <|end_of_text|>, </s>, <eos>; -1 if none.
int64_t tokenizer_default_eot(const Tokenizer *t);

// Encoding state for one thread. Counts the invalid UTF-8 bytes it has seen.
TokenizerState *tokenizer_state_new(const Tokenizer *t);
void tokenizer_state_free(TokenizerState *st);
uint64_t tokenizer_state_invalid_utf8(const TokenizerState *st);

// Append the ids of text(n) to out: `tokenizers`' encode(text,
// add_special_tokens=False), i.e. no post-processor tokens.
void tokenizer_encode(TokenizerState *st, const uint8_t *text, size_t n, TokenList *out);
// The same with the post-processor's tokens (a TemplateProcessing's BOS, ...):
// encode(text) with add_special_tokens=True, as for a prompt.
void tokenizer_encode_with_specials(TokenizerState *st, const uint8_t *text, size_t n,
                                    TokenList *out);

// The post-processor's tokens before (suffix 0) or after (suffix 1) a sequence,
// e.g. Llama 3's <|begin_of_text|>: (*n) ids, NULL when there are none.
const uint32_t *tokenizer_special_ids(const Tokenizer *t, int suffix, int *n);

// Where a long text may be cut into parts that encode separately to the same ids
// as the whole: the first position p in [from, n) after a "\n" that follows a
// non-space and precedes a printable ASCII non-space, when this tokenizer's
// pre-tokenizer makes such a position a boundary of every split (any position
// for byte-level); for a SentencePiece-style BPE with Metaspace, before a " " that
// follows a printable ASCII non-space where no merge can reach across (never with
// the legacy Prepend normalizer, which prepends "▁" to every part; such texts are
// one word, merged in O(n log n) and cut inside the merge where no token spans).
// 0 when there is none or the tokenizer allows no cut.
size_t tokenizer_safe_cut(const Tokenizer *t, const uint8_t *text, size_t n, size_t from);

// The bytes of one token (the ByteLevel decoder's mapping; an added token's
// content; for a SentencePiece-style BPE its string through the decoder with "▁"
// as " " and <0xNN> as the byte NN, as generate streams it); NULL for an id that
// is no token.
const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len);
// Decode ids(n): a malloc'd buffer of *len bytes (plus a NUL), the tokens' bytes
// concatenated (`tokenizers`' decode(ids, skip_special_tokens=False) for text
// that is valid UTF-8; for a SentencePiece-style BPE exactly its decoder chain,
// U+FFFD per byte of a <0xNN> run that is not UTF-8 included). An id that is no
// token is fatal.
char *tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, size_t *len);

#endif
