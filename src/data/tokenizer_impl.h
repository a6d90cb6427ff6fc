// data/tokenizer_impl.h — the Tokenizer's insides, shared by tokenizer_load.c,
// tokenizer_vocab.c and tokenizer_spm_load.c (loading tokenizer.json), tokenizer.c
// (lookups), tokenizer_decode.c (decoding), tokenizer_encode.c (normalizer,
// pre-tokenizer, added tokens) and tokenizer_bpe.c (merging words). Not a public API.
//
// Two kinds of tokenizer.json BPE:
//  - byte-level (GPT-2, Llama 3, Qwen2): vocabulary strings are written in GPT-2's
//    byte characters and stored here as the bytes they stand for; a word's first
//    symbols are its bytes;
//  - character-level, "SentencePiece-style" (Llama 2, Mistral, TinyLlama): strings
//    are plain UTF-8 text (spaces written as the Metaspace character U+2581); a
//    word's first symbols are its characters, a character missing from the
//    vocabulary becomes its UTF-8 bytes as <0xNN> tokens (byte_fallback) or unk.
#ifndef FEMTOTRON_TOKENIZER_IMPL_H
#define FEMTOTRON_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "data/tokenizer.h"

// One pre-tokenizer step; a Sequence is several, applied in order, each to every
// piece the previous ones produced.
typedef enum {
    STEP_PREFIX_SPACE,   // ByteLevel add_prefix_space: " " before a piece not starting with one
    STEP_SPLIT_GPT2,     // the GPT-2 pattern (ByteLevel use_regex, or Split)
    STEP_SPLIT_LLAMA3,   // the Llama 3 pattern (Split); max_digits 3, or 1 for Qwen2's
    STEP_DIGITS_SINGLE,  // Digits individual_digits: every numeric character alone
    STEP_DIGITS_RUN,     // Digits: runs of numeric characters
    STEP_METASPACE,      // Metaspace: " " -> replacement, prepend it, split before it
} StepKind;

// Metaspace's prepend_scheme: when a piece not starting with the replacement gets it.
typedef enum { PREPEND_NEVER, PREPEND_FIRST, PREPEND_ALWAYS } PrependScheme;

// One normalizer of a (Sequence) normalizer, applied in order to the text between
// added tokens that are not "normalized": Prepend(content) to non-empty text, or
// Replace every (non-overlapping, leftmost) pattern by content.
typedef enum { NORM_PREPEND, NORM_REPLACE } NormKind;
typedef struct {
    NormKind kind;
    char *pattern, *content;  // NUL-terminated UTF-8; pattern NULL for Prepend
    size_t pattern_len, content_len;
} NormOp;
#define MAX_NORM_OPS 8

// One decoder of a character-level BPE's (Sequence) decoder, each turning a list of
// token strings into another, as tokenizers' decode_chain does.
typedef enum { DEC_REPLACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } DecKind;
typedef struct {
    DecKind kind;
    char *pattern, *content;  // Replace: pattern -> content; Strip: content is one character
    size_t pattern_len, content_len;
    int start, stop;          // Strip: at most this many content characters off each end
    bool strip_first;         // Metaspace: the first token loses its replacement characters
} DecStep;
#define MAX_DEC_STEPS 8

// tok_bpe_word's view of a character's first or last symbol character: its
// tok_pair_small index (0..128), CUT_BIG (a character without one) or CUT_NEVER
// (a character never cut from its neighbours).
#define CUT_BIG 129
#define CUT_NEVER 130
#define CUT_DIM 131
enum { CUT_NO, CUT_YES, CUT_ASK };  // Tokenizer.cut_tab: don't cut, cut, tok_pair_joinable decides

// A pair of adjacent characters (code points) that occurs inside some model token.
#define PAIR_SMALL 129
typedef struct {
    uint64_t key;  // (a << 32 | b) + 1; 0 = empty slot
} PairSlot;

#define MAX_STEPS 8

typedef struct {
    StepKind kind;
    int max_digits;
} PretokStep;

// Added tokens of one matching pass, bucketed by first byte.
typedef struct {
    int n;
    const uint8_t **text;   // (n) content bytes
    uint32_t *len;          // (n)
    uint32_t *id;           // (n)
    int32_t first[257];     // tokens starting with byte b are [first[b], first[b+1])
    int only_first;         // the byte every token starts with (memchr finds the next
                            // candidate: Llama 2's <unk> <s> </s> all start with '<'), or < 0
} AddedSet;

// Open-addressing maps (linear probing; sizes are powers of two).
typedef struct {
    uint64_t hash;  // 0 = empty slot
    uint32_t id;
} VocabSlot;
typedef struct {
    uint64_t key;   // (left << 32 | right) + 1; 0 = empty slot
    uint32_t rank, new_id;
} MergeSlot;

struct Tokenizer {
    bool byte_level;            // femtotron's byte tokenizer, not a tokenizer.json
    bool char_bpe;              // character-level (SentencePiece-style) BPE, see above
    char desc[512];
    uint32_t vocab_size;        // 1 + largest id
    // Bytes of every id (the vocabulary map's keys; byte-level decoding); NULL where
    // an id has no token. Character-level: the token's UTF-8 string as written.
    uint8_t **tok_bytes;        // (vocab_size)
    uint32_t *tok_len;          // (vocab_size)
    uint8_t *is_added;          // (vocab_size) 1 for added tokens
    VocabSlot *vocab;           // model tokens by bytes
    size_t vocab_mask;
    MergeSlot *merges;          // (left, right) -> (rank, merged id)
    size_t merge_mask;
    size_t n_merges;
    int64_t byte_id[256];       // id of the single-byte token of each byte, -1 if none
    int64_t unk_id;             // -1 without unk_token
    // Character-level BPE only:
    bool byte_fallback;
    int64_t fallback_id[256];   // id of <0xNN> for byte NN, -1 if none
    int64_t ascii_id[128];      // id of each one-character ASCII token, -1 if none
    PairSlot *pairs;            // adjacent character pairs inside model tokens
    size_t pair_mask;
    // The same for pairs of ASCII characters and U+2581 "▁" (slot 128), the
    // characters of most text, as a byte matrix (16 KB, one load per test).
    uint8_t pair_small[PAIR_SMALL * PAIR_SMALL];  // (PAIR_SMALL, PAIR_SMALL) 1: adjacent in a token
    int64_t spm_space_id;       // id of the one-character token "▁", -1 if none
    bool space_meta;            // a " " reaching tok_bpe_word stands for "▁" (tok_build_char_tables)
    // How tok_bpe_word's cutting sees an ASCII character and "▁": the first and last
    // character of its symbols' text (itself when it is a token, '<' and '>' for
    // <0xNN> byte fallback) as tok_pair_small indices, CUT_NEVER when it is never
    // cut from its neighbours.
    uint8_t cut_first[128], cut_last[128];
    uint8_t cut_space_first, cut_space_last;
    // Whether to cut between characters whose last and first are (previous, next)
    // in that view: the pair_small test with CUT_NEVER and CUT_BIG folded in.
    uint8_t cut_tab[CUT_DIM * CUT_DIM];  // (CUT_DIM, CUT_DIM) CUT_NO / CUT_YES / CUT_ASK
    uint8_t **shown;            // (vocab_size) what tokenizer_token_bytes gives: "▁" as " ",
    uint32_t *shown_len;        // (vocab_size) <0xNN> as the byte NN
    NormOp norm[MAX_NORM_OPS];
    int n_norm;
    DecStep dec[MAX_DEC_STEPS];
    int n_dec;
    uint8_t meta_rep[4];        // Metaspace replacement character, UTF-8
    int meta_rep_len;
    uint32_t meta_rep_cp;
    PrependScheme meta_prepend;
    bool meta_split;
    bool fuse_unk, ignore_merges;
    PretokStep steps[MAX_STEPS];
    int n_steps;
    AddedSet added_raw;         // "normalized": false, matched first
    AddedSet added_norm;        // "normalized": true, matched in what is left
    uint32_t *prefix_ids, *suffix_ids;  // post-processor tokens around a sequence
    int n_prefix, n_suffix;
    bool cut_ok;                // tokenizer_safe_cut may cut
    int64_t eot;
};

uint64_t tok_hash_bytes(const uint8_t *s, size_t n);
// The table slot (of mask + 1, a power of two) for hash h: its high bits after a
// multiply. tok_hash_bytes's low bits are weak (bit 0 is always set, and the
// FNV-style product carries little of the input into them): masking them directly
// left most of a table unused.
static inline size_t tok_slot(uint64_t h, size_t mask) {
    return (size_t)((h * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}
// Id of a model token by its bytes, or -1.
int64_t tok_vocab_find(const Tokenizer *t, const uint8_t *s, size_t n);
// Merge of (left, right): 1 and rank, merged id; 0 if none.
static inline int tok_merge_find(const Tokenizer *t, uint32_t left, uint32_t right,
                                 uint32_t *rank, uint32_t *new_id) {
    uint64_t key = (((uint64_t)left << 32) | right) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h ^ (h >> 32)) & t->merge_mask;
    for (;; i = (i + 1) & t->merge_mask) {
        const MergeSlot *m = &t->merges[i];
        if (m->key == key) {
            *rank = m->rank;
            *new_id = m->new_id;
            return 1;
        }
        if (m->key == 0) return 0;
    }
}

// Is the character pair (a, b) adjacent inside some model token (so a merge might
// join a symbol ending in a to one starting with b)?
static inline int tok_pair_small(uint32_t cp) { return cp < 128 ? (int)cp : cp == 0x2581 ? 128 : -1; }
static inline uint32_t tok_small_cp(int small) { return small == 128 ? 0x2581 : (uint32_t)small; }
static inline int tok_pair_joinable(const Tokenizer *t, uint32_t a, uint32_t b) {
    int sa = tok_pair_small(a), sb = tok_pair_small(b);
    if (sa >= 0 && sb >= 0) return t->pair_small[sa * PAIR_SMALL + sb];
    uint64_t key = (((uint64_t)a << 32) | b) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (size_t i = (size_t)(h ^ (h >> 32)) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == key) return 1;
        if (t->pairs[i].key == 0) return 0;
    }
}

// ---------------------------------------------------------------- encoding state

// The per-thread word cache: 2-way set associative, a set being two 64-byte slots
// (one cache line each, 128-byte aligned: a lookup touches one line pair, which
// the hardware fetches together). 65536 sets (8 MB per thread) hold the common
// words of a language: on the fortunes (about 60000 distinct pieces) the
// direct-mapped table of 65536 72-byte slots it replaced missed 13.6% of the
// pieces, 32768 sets 8.9%; a miss (a full merge) costs ~1200 instructions, a hit
// ~60, and the set is prefetched, so memory is the cheaper side.
#define CACHE_SETS 65536   // a power of two
#define CACHE_KEY_MAX 24   // longer words are not cached
#define CACHE_IDS_MAX 8    // nor words of more tokens

typedef struct {
    uint64_t key[CACHE_KEY_MAX / 8];  // the word's bytes, zero-padded (little-endian words)
    uint8_t key_len;                  // 0 = empty (no word is empty)
    uint8_t n_ids;
    uint8_t unused[6];
    uint32_t ids[CACHE_IDS_MAX];
} CacheSlot;
_Static_assert(sizeof(CacheSlot) == 64, "a cache slot is one cache line");

// A word's cache key: its bytes as zero-padded 64-bit words, and the set it
// belongs to (NULL: the word is too long to cache).
typedef struct {
    uint64_t k[CACHE_KEY_MAX / 8];
    CacheSlot *set;
} CacheKey;

// Words waiting to be merged, oldest first, their cache sets fetched from memory
// meanwhile (the table is megabytes: a lookup right away would stall). A word's
// bytes must stay in place until it is merged (tok_ring_push, tok_ring_flush).
#define RING_AHEAD 8
typedef struct {
    struct {
        const uint8_t *w;
        size_t n;
        CacheKey key;
    } word[RING_AHEAD];
    size_t head, queued;
} WordRing;

// A symbol of a word being merged; len 0 marks one merged into its left neighbour.
typedef struct {
    uint32_t id;
    int32_t prev, next;
    uint32_t len;
} Symbol;

typedef struct {
    uint32_t rank, pos, new_id;
} MergeItem;

struct TokenizerState {
    const Tokenizer *t;
    uint64_t invalid_utf8;
    const uint8_t *text;     // the text being encoded (Metaspace "first" knows its start)
    Symbol *sym;             // (sym_cap)
    size_t sym_cap;
    MergeItem *heap;         // (heap_cap) min-heap on (rank, pos)
    size_t heap_n, heap_cap;
    uint8_t *scratch[MAX_STEPS];  // a piece rewritten by step k (prefix space, Metaspace)
    size_t scratch_cap[MAX_STEPS];
    uint8_t *normalized;     // (normalized_cap) the normalizer's output for one piece
    size_t normalized_cap;
    uint8_t *norm_tmp;       // (norm_tmp_cap) the normalizer's other buffer
    size_t norm_tmp_cap;
    CacheSlot *cache;        // (2 * CACHE_SETS) set k is slots 2k (most recent) and 2k + 1
    void *cache_mem;         // the allocation cache lies in (aligned up to 128 bytes)
};

// tokenizer_encode.c: apply the normalizer to s(n) into *dst (*cap bytes, grown as
// needed; *tmp is a second buffer for the steps to alternate with); returns the
// normalized length.
size_t tok_normalize(const Tokenizer *t, const uint8_t *s, size_t n, uint8_t **dst, size_t *cap,
                     uint8_t **tmp, size_t *tmp_cap);
// Copy s(n) to dst with every non-overlapping pat(pl) (pl >= 1), leftmost first,
// replaced by rep(rl); dst holds n + n * rl bytes at least. Returns the new length.
size_t tok_replace_all(const uint8_t *s, size_t n, const char *pat, size_t pl, const char *rep,
                       size_t rl, uint8_t *dst);
// tokenizer_decode.c: fill t->shown, what tokenizer_token_bytes gives per id.
void tok_build_shown(Tokenizer *t);

// Room in l for extra more ids (tokenizer.c); tok_push_ids appends ids(n) without
// a call per id (the encoder's inner loops push millions).
void token_list_reserve(TokenList *l, size_t extra);
static inline void tok_push_ids(TokenList *l, const uint32_t *ids, size_t n) {
    if (n == 0) return;  // an empty list may have no buffer yet (memcpy's arguments must not be NULL)
    if (l->cap - l->n < n) token_list_reserve(l, n);
    memcpy(l->ids + l->n, ids, n * sizeof *ids);
    l->n += n;
}

// Grow *p (of *cap elements of elem bytes) to hold need elements.
void *tok_grow(void *p, size_t *cap, size_t need, size_t elem);
// tokenizer_bpe.c: merge word w(n) by BPE and append its ids.
void tok_bpe_word(TokenizerState *st, const uint8_t *w, size_t n, TokenList *out);
// The same for a byte-level word w(n) lying in [lo, hi), through ring r (start it
// zeroed): the oldest queued word is merged when the ring is full, the rest by
// tok_ring_flush; ids come out in the order the words went in.
void tok_ring_push(TokenizerState *st, WordRing *r, const uint8_t *w, size_t n, const uint8_t *lo,
                   const uint8_t *hi, TokenList *out);
void tok_ring_flush(TokenizerState *st, WordRing *r, TokenList *out);

#endif
