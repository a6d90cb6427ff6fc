// data/tokenizer_encode.c — encoding with a tokenizer.json byte-level BPE, in the
// order `tokenizers` applies its stages:
//   1. added tokens are split out, leftmost-longest: first those with
//      "normalized": false, then the others in the remaining gaps;
//   2. each gap goes through the pre-tokenizer steps (tokenizer_impl.h), each step
//      splitting every piece of the previous one;
//   3. each final piece is a "word" merged by BPE: its bytes become byte tokens,
//      then the adjacent pair with the lowest merge rank (leftmost on ties) is
//      merged until no pair has a merge — the priority-queue algorithm of
//      tokenizers' Word::merge_all, stale entries and all.
// Words are cached per thread (a direct-mapped table), as tokenizers does.
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/unicode_class.h"
#include "util.h"

#define CACHE_SLOTS 16384  // per thread; a power of two
#define CACHE_KEY_MAX 30   // longer words are not cached
#define CACHE_IDS_MAX 8

typedef struct {
    uint64_t hash;  // 0 = empty
    uint8_t key_len, n_ids;
    uint8_t key[CACHE_KEY_MAX];
    uint32_t ids[CACHE_IDS_MAX];
} CacheSlot;

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
    Symbol *sym;             // (sym_cap)
    size_t sym_cap;
    MergeItem *heap;         // (heap_cap) min-heap on (rank, pos)
    size_t heap_n, heap_cap;
    uint8_t *scratch[MAX_STEPS];  // a piece with its prefix space, per step
    size_t scratch_cap[MAX_STEPS];
    CacheSlot *cache;        // (CACHE_SLOTS)
};

TokenizerState *tokenizer_state_new(const Tokenizer *t) {
    TokenizerState *st = xcalloc(sizeof *st, "tokenizer state");
    st->t = t;
    if (!t->byte_level) st->cache = xcalloc(CACHE_SLOTS * sizeof(CacheSlot), "tokenizer word cache");
    return st;
}

void tokenizer_state_free(TokenizerState *st) {
    if (!st) return;
    free(st->sym);
    free(st->heap);
    for (int i = 0; i < MAX_STEPS; i++) free(st->scratch[i]);
    free(st->cache);
    free(st);
}

uint64_t tokenizer_state_invalid_utf8(const TokenizerState *st) { return st->invalid_utf8; }

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, c * elem);
    if (!p) die("out of memory in the tokenizer (%zu elements)", c);
    *cap = c;
    return p;
}

// ---------------------------------------------------------------- BPE

static inline int item_less(MergeItem a, MergeItem b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(TokenizerState *st, MergeItem it) {
    st->heap = grow(st->heap, &st->heap_cap, st->heap_n + 1, sizeof(MergeItem));
    size_t i = st->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_less(it, st->heap[p])) break;
        st->heap[i] = st->heap[p];
        i = p;
    }
    st->heap[i] = it;
}

static MergeItem heap_pop(TokenizerState *st) {
    MergeItem top = st->heap[0], last = st->heap[--st->heap_n];
    size_t i = 0, n = st->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && item_less(st->heap[c + 1], st->heap[c])) c++;
        if (!item_less(st->heap[c], last)) break;
        st->heap[i] = st->heap[c];
        i = c;
    }
    if (n) st->heap[i] = last;
    return top;
}

static void push_pair(TokenizerState *st, int32_t pos) {
    const Symbol *s = st->sym;
    uint32_t rank, new_id;
    if (tok_merge_find(st->t, s[pos].id, s[s[pos].next].id, &rank, &new_id))
        heap_push(st, (MergeItem){rank, (uint32_t)pos, new_id});
}

// Merge word w(n) and append its ids.
static void bpe_word(TokenizerState *st, const uint8_t *w, size_t n, TokenList *out) {
    const Tokenizer *t = st->t;
    if (t->ignore_merges) {  // a word that is a token is that token
        int64_t id = tok_vocab_find(t, w, n);
        if (id >= 0) {
            token_list_push(out, (uint32_t)id);
            return;
        }
    }
    uint64_t h = 0;
    CacheSlot *slot = NULL;
    if (n <= CACHE_KEY_MAX) {
        h = tok_hash_bytes(w, n);
        slot = &st->cache[h & (CACHE_SLOTS - 1)];
        if (slot->hash == h && slot->key_len == n && memcmp(slot->key, w, n) == 0) {
            for (int i = 0; i < slot->n_ids; i++) token_list_push(out, slot->ids[i]);
            return;
        }
    }
    // Initial symbols, one per byte; a byte without a token becomes unk_token
    // (consecutive ones fused with fuse_unk) or is dropped, as in tokenizers.
    st->sym = grow(st->sym, &st->sym_cap, n, sizeof(Symbol));
    Symbol *s = st->sym;
    int32_t ns = 0;
    int64_t pending_unk = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id = t->byte_id[w[i]];
        if (id >= 0) {
            if (pending_unk >= 0) {
                s[ns] = (Symbol){(uint32_t)pending_unk, ns - 1, ns + 1, unk_len};
                ns++;
                pending_unk = -1;
            }
            s[ns] = (Symbol){(uint32_t)id, ns - 1, ns + 1, 1};
            ns++;
        } else if (t->unk_id >= 0) {
            if (pending_unk >= 0 && t->fuse_unk) {
                unk_len++;
                continue;
            }
            if (pending_unk >= 0) {
                s[ns] = (Symbol){(uint32_t)pending_unk, ns - 1, ns + 1, unk_len};
                ns++;
            }
            pending_unk = t->unk_id;
            unk_len = 1;
        }
    }
    if (pending_unk >= 0) {
        s[ns] = (Symbol){(uint32_t)pending_unk, ns - 1, ns + 1, unk_len};
        ns++;
    }
    if (ns == 0) return;
    s[ns - 1].next = -1;

    st->heap_n = 0;
    for (int32_t i = 0; i + 1 < ns; i++) push_pair(st, i);
    while (st->heap_n) {
        MergeItem top = heap_pop(st);
        Symbol *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t nx = cur->next;
        uint32_t rank, new_id;
        // An entry is stale when the pair at its position no longer merges into
        // the same token (the check tokenizers makes).
        if (!tok_merge_find(t, cur->id, s[nx].id, &rank, &new_id) || new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += s[nx].len;
        cur->next = s[nx].next;
        s[nx].len = 0;
        if (cur->next >= 0) s[cur->next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) push_pair(st, cur->prev);
        if (cur->next >= 0) push_pair(st, (int32_t)top.pos);
    }
    size_t n0 = out->n;
    for (int32_t i = 0; i < ns; i++)
        if (s[i].len) token_list_push(out, s[i].id);
    size_t got = out->n - n0;
    if (slot && got <= CACHE_IDS_MAX) {
        slot->hash = h;
        slot->key_len = (uint8_t)n;
        memcpy(slot->key, w, n);
        slot->n_ids = (uint8_t)got;
        memcpy(slot->ids, out->ids + n0, got * sizeof(uint32_t));
    }
}

// ---------------------------------------------------------------- pre-tokenizer steps

static inline int is_numeric_at(const uint8_t *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) {
        *len = 1;
        return s[i] >= '0' && s[i] <= '9';
    }
    uint32_t cp;
    *len = utf8_decode(s + i, n - i, &cp);
    return cp != UTF8_INVALID && (unicode_class(cp) & UC_NUMBER);
}

static void run_steps(TokenizerState *st, int k, const uint8_t *s, size_t n, TokenList *out) {
    if (n == 0) return;  // empty pieces vanish (no prefix space is added to them)
    const Tokenizer *t = st->t;
    if (k == t->n_steps) {
        bpe_word(st, s, n, out);
        return;
    }
    const PretokStep *p = &t->steps[k];
    switch (p->kind) {
    case STEP_PREFIX_SPACE:
        if (s[0] == ' ') {
            run_steps(st, k + 1, s, n, out);
        } else {
            st->scratch[k] = grow(st->scratch[k], &st->scratch_cap[k], n + 1, 1);
            st->scratch[k][0] = ' ';
            memcpy(st->scratch[k] + 1, s, n);
            run_steps(st, k + 1, st->scratch[k], n + 1, out);
        }
        return;
    case STEP_SPLIT_GPT2:
        for (size_t i = 0; i < n;) {
            size_t m = pretok_match_gpt2(s, n, i);
            run_steps(st, k + 1, s + i, m, out);
            i += m;
        }
        return;
    case STEP_SPLIT_LLAMA3:
        for (size_t i = 0; i < n;) {
            size_t m = pretok_match_llama3(s, n, i, p->max_digits);
            run_steps(st, k + 1, s + i, m, out);
            i += m;
        }
        return;
    case STEP_DIGITS_SINGLE:
    case STEP_DIGITS_RUN: {
        // Pieces: runs of non-numeric characters, and numeric characters one by
        // one (individual_digits) or as runs.
        size_t start = 0, i = 0, len;
        int start_num = -1;
        while (i < n) {
            int num = is_numeric_at(s, n, i, &len);
            if (start_num >= 0 && (num != start_num || (num && p->kind == STEP_DIGITS_SINGLE))) {
                run_steps(st, k + 1, s + start, i - start, out);
                start = i;
            }
            start_num = num;
            i += len;
        }
        run_steps(st, k + 1, s + start, n - start, out);
        return;
    }
    }
}

// ---------------------------------------------------------------- added tokens

// Split s(n) on the tokens of `set` (leftmost-longest); gaps go to the next pass
// (pass 0: the normalized set; pass 1: the pre-tokenizer).
static void split_added(TokenizerState *st, int pass, const uint8_t *s, size_t n, TokenList *out) {
    const Tokenizer *t = st->t;
    if (pass == 2) {
        run_steps(st, 0, s, n, out);
        return;
    }
    const AddedSet *set = pass == 0 ? &t->added_raw : &t->added_norm;
    if (set->n == 0) {
        split_added(st, pass + 1, s, n, out);
        return;
    }
    size_t gap = 0;
    for (size_t i = 0; i < n;) {
        int b = s[i], best = -1;
        uint32_t best_len = 0;
        for (int k = set->first[b]; k < set->first[b + 1]; k++)
            if (set->len[k] > best_len && set->len[k] <= n - i && memcmp(set->text[k], s + i, set->len[k]) == 0) {
                best = k;
                best_len = set->len[k];
            }
        if (best < 0) {
            i++;
            continue;
        }
        split_added(st, pass + 1, s + gap, i - gap, out);
        token_list_push(out, set->id[best]);
        i += best_len;
        gap = i;
    }
    split_added(st, pass + 1, s + gap, n - gap, out);
}

void tokenizer_encode(TokenizerState *st, const uint8_t *text, size_t n, TokenList *out) {
    const Tokenizer *t = st->t;
    // Count what tokenizers could not have been given (it takes valid UTF-8 only).
    for (size_t i = 0; i < n;) {
        if (text[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += utf8_decode(text + i, n - i, &cp);
        st->invalid_utf8 += cp == UTF8_INVALID;
    }
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) token_list_push(out, text[i]);
        return;
    }
    split_added(st, 0, text, n, out);
}

void tokenizer_encode_with_specials(TokenizerState *st, const uint8_t *text, size_t n,
                                    TokenList *out) {
    const Tokenizer *t = st->t;
    for (int i = 0; i < t->n_prefix; i++) token_list_push(out, t->prefix_ids[i]);
    tokenizer_encode(st, text, n, out);
    for (int i = 0; i < t->n_suffix; i++) token_list_push(out, t->suffix_ids[i]);
}

const uint32_t *tokenizer_special_ids(const Tokenizer *t, int suffix, int *n) {
    *n = suffix ? t->n_suffix : t->n_prefix;
    return *n ? (suffix ? t->suffix_ids : t->prefix_ids) : NULL;
}
