// data/tokenizer_impl.h — the Tokenizer's insides, shared by tokenizer_load.c and
// tokenizer_vocab.c (loading tokenizer.json), tokenizer.c (lookups, decoding) and
// tokenizer_encode.c (encoding). Not a public API.
#ifndef FEMTOTRON_TOKENIZER_IMPL_H
#define FEMTOTRON_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

// One pre-tokenizer step; a Sequence is several, applied in order, each to every
// piece the previous ones produced.
typedef enum {
    STEP_PREFIX_SPACE,   // ByteLevel add_prefix_space: " " before a piece not starting with one
    STEP_SPLIT_GPT2,     // the GPT-2 pattern (ByteLevel use_regex, or Split)
    STEP_SPLIT_LLAMA3,   // the Llama 3 pattern (Split); max_digits 3, or 1 for Qwen2's
    STEP_DIGITS_SINGLE,  // Digits individual_digits: every numeric character alone
    STEP_DIGITS_RUN,     // Digits: runs of numeric characters
} StepKind;

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
    bool byte_level;
    char desc[512];
    uint32_t vocab_size;        // 1 + largest id
    // Bytes of every id (decoding, and the vocabulary map's keys); NULL where an id
    // has no token.
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

#endif
