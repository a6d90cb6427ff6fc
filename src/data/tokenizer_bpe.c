// data/tokenizer_bpe.c — BPE merging of one word (a final pre-tokenizer piece), as
// tokenizers' BPE model does it:
//   1. the word's first symbols: its bytes (byte-level BPE) or its characters
//      (character-level BPE), each a one-symbol token; a character that is no token
//      becomes its bytes' <0xNN> tokens (byte_fallback), else unk_token (runs of
//      them fused with fuse_unk), else it is dropped;
//   2. the adjacent pair with the lowest merge rank (leftmost on ties) is merged
//      until no pair has a merge — the priority-queue algorithm of tokenizers'
//      Word::merge_all, stale entries and all, O(n log n) in the word's length;
//      words of up to SCAN_MAX symbols (nearly all) by a scan in the same order
//      (merge_scan).
// A character-level word may be the whole text (Llama 2's legacy form has no
// pre-tokenizer), so it is first cut where no merge can reach across (see
// tok_bpe_word). Each part
// merges exactly as it would inside the whole word (merges on one side never see
// the other, and their relative order is unchanged), and the parts are short, so
// they hit the per-thread word cache as byte-level words do.
// The cache (tokenizer_impl.h) is where the time goes: a hit costs ~60
// instructions, a miss (symbols and merging) ~1200; the sets of the next parts are
// prefetched while the cut scan runs on.
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/unicode_class.h"
#include "util.h"

void *tok_grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, c * elem);
    if (!p) die("out of memory in the tokenizer (%zu elements)", c);
    *cap = c;
    return p;
}

// ---------------------------------------------------------------- merge queue

static inline int item_less(MergeItem a, MergeItem b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(TokenizerState *st, MergeItem it) {
    st->heap = tok_grow(st->heap, &st->heap_cap, st->heap_n + 1, sizeof(MergeItem));
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

// A short word (most of them) is merged without the queue: the merge of each
// adjacent pair is kept in an array, the lowest rank found by a scan, and after a
// merge only the two pairs beside it are looked up again. This is the queue's
// order exactly: the queue pops the lowest (rank, position) among entries whose
// pair still merges into the entry's token, and such an entry is always one for
// the pair at its position now: a position's pair only changes by a merge on
// either side, which makes its text strictly longer, so it never again merges into
// the token an older entry names. O(n^2) in the word's length, cheaper than the
// queue's hash lookups of stale entries up to a few dozen symbols.
#define SCAN_MAX 32

static inline uint64_t pair_merge(const Tokenizer *t, uint32_t left, uint32_t right) {
    uint32_t rank, new_id;
    return tok_merge_find(t, left, right, &rank, &new_id) ? (uint64_t)rank << 32 | new_id : UINT64_MAX;
}

// Merge s[0..ns) (ns <= SCAN_MAX) in place; returns the symbols left, in order.
static int32_t merge_scan(const Tokenizer *t, Symbol *s, int32_t ns) {
    // m[i]: the merge of symbols i and i + 1 as rank << 32 | merged id, UINT64_MAX
    // for none. Two pairs of one rank are one merge, so equal values are the same
    // merge and the strict < keeps the leftmost, as the queue's tie rule does.
    uint64_t m[SCAN_MAX];  // (ns - 1)
    for (int32_t i = 0; i + 1 < ns; i++) m[i] = pair_merge(t, s[i].id, s[i + 1].id);
    while (ns > 1) {
        int32_t best = 0;
        for (int32_t i = 1; i + 1 < ns; i++)
            if (m[i] < m[best]) best = i;
        if (m[best] == UINT64_MAX) break;
        s[best].id = (uint32_t)m[best];
        s[best].len += s[best + 1].len;
        // Drop symbol best + 1 and the pair (best + 1, best + 2); the pairs on each
        // side of the merged symbol are new.
        for (int32_t i = best + 1; i + 1 < ns; i++) s[i] = s[i + 1];
        for (int32_t i = best + 1; i + 2 < ns; i++) m[i] = m[i + 1];
        ns--;
        if (best > 0) m[best - 1] = pair_merge(t, s[best - 1].id, s[best].id);
        if (best + 1 < ns) m[best] = pair_merge(t, s[best].id, s[best + 1].id);
    }
    return ns;
}

// ---------------------------------------------------------------- first symbols

// Symbols under construction, with tokenizers' pending unk_token.
typedef struct {
    Symbol *s;
    int32_t n;
    int64_t unk;       // pending unk id, -1 if none
    uint32_t unk_len;  // its bytes
} SymbolBuilder;

static void add_symbol(SymbolBuilder *b, uint32_t id, uint32_t len) {
    b->s[b->n] = (Symbol){id, b->n - 1, b->n + 1, len};
    b->n++;
}

static void flush_unk(SymbolBuilder *b) {
    if (b->unk >= 0) add_symbol(b, (uint32_t)b->unk, b->unk_len);
    b->unk = -1;
}

// A unit (byte or character) of len bytes that is no token.
static void add_unknown(const Tokenizer *t, SymbolBuilder *b, uint32_t len) {
    if (t->unk_id < 0) return;  // dropped
    if (b->unk >= 0 && t->fuse_unk) {
        b->unk_len += len;
        return;
    }
    flush_unk(b);
    b->unk = t->unk_id;
    b->unk_len = len;
}

// Id of the one-character token c(len), or -1.
static inline int64_t char_id(const Tokenizer *t, const uint8_t *c, size_t len) {
    if (len == 1 && c[0] < 0x80) return t->ascii_id[c[0]];
    if (len == 3 && c[0] == 0xE2 && c[1] == 0x96 && c[2] == 0x81) return t->spm_space_id;  // "▁"
    return tok_vocab_find(t, c, len);
}

static void char_symbols(const Tokenizer *t, SymbolBuilder *b, const uint8_t *w, size_t n) {
    static const uint8_t meta[3] = {0xE2, 0x96, 0x81};  // "▁"
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        const uint8_t *c = w + i;  // the character, len bytes; w advances by step
        size_t len = w[i] < 0x80 ? 1 : utf8_decode(w + i, n - i, &cp), step = len;
        if (w[i] == ' ' && t->space_meta) c = meta, len = 3;  // " " stands for "▁"
        int64_t id = char_id(t, c, len);
        if (id >= 0) {
            flush_unk(b);
            add_symbol(b, (uint32_t)id, (uint32_t)len);
        } else {
            bool all = t->byte_fallback;
            for (size_t k = 0; k < len && all; k++) all = t->fallback_id[c[k]] >= 0;
            if (all) {  // tokenizers leaves a pending unk pending here
                for (size_t k = 0; k < len; k++) add_symbol(b, (uint32_t)t->fallback_id[c[k]], 1);
            } else {
                add_unknown(t, b, (uint32_t)len);
            }
        }
        i += step;
    }
}

static void byte_symbols(const Tokenizer *t, SymbolBuilder *b, const uint8_t *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t id = t->byte_id[w[i]];
        if (id >= 0) {
            flush_unk(b);
            add_symbol(b, (uint32_t)id, 1);
        } else {
            add_unknown(t, b, 1);
        }
    }
}

// ---------------------------------------------------------------- merging

// Little-endian load of p(m), 1 <= m <= 8, reading only inside [lo, hi) (the word
// the piece is part of): one 8-byte load ending at p + m or starting at p where
// the buffer has room, shifted or masked to m bytes; a byte loop otherwise.
static inline uint64_t load_le(const uint8_t *p, size_t m, const uint8_t *lo, const uint8_t *hi) {
    uint64_t x;
    if ((size_t)(p + m - lo) >= 8) {
        memcpy(&x, p + m - 8, 8);
        return m == 8 ? x : x >> (64 - 8 * m);
    }
    if ((size_t)(hi - p) >= 8) {
        memcpy(&x, p, 8);
        return x & ((1ull << (8 * m)) - 1);  // m < 8 here
    }
    x = 0;
    for (size_t i = 0; i < m; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

// The key of w(n), a piece of [lo, hi); its set fetched into the CPU cache ahead
// of use (the table is megabytes: the load would stall otherwise).
static inline void cache_key(TokenizerState *st, const uint8_t *w, size_t n, const uint8_t *lo,
                             const uint8_t *hi, CacheKey *key) {
    key->set = NULL;
    if (n > CACHE_KEY_MAX) return;
    for (size_t i = 0; i < CACHE_KEY_MAX / 8; i++) {
        size_t at = 8 * i, m = n > at ? (n - at < 8 ? n - at : 8) : 0;
        key->k[i] = m ? load_le(w + at, m, lo, hi) : 0;
    }
    // Multiply-xorshift over the three words and the length; the set is taken from
    // the high bits of the last product, which every input bit reaches.
    uint64_t h = (key->k[0] ^ n) * 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 29) ^ key->k[1]) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 32) ^ key->k[2]) * 0x94D049BB133111EBull;
    key->set = &st->cache[2 * (size_t)(h >> 32 & (CACHE_SETS - 1))];
    __builtin_prefetch(key->set);
    __builtin_prefetch(key->set + 1);
}

static inline bool slot_holds(const CacheSlot *c, const CacheKey *key, size_t n) {
    return c->key_len == n && c->key[0] == key->k[0] && c->key[1] == key->k[1] && c->key[2] == key->k[2];
}

// Remember that the word of key (n bytes) merges into ids(got), when they fit: the
// set's older slot gives way, the newer one becomes the older.
static void cache_store(const CacheKey *key, size_t n, const uint32_t *ids, size_t got) {
    if (!key || !key->set || got > CACHE_IDS_MAX) return;
    CacheSlot *c = key->set;
    c[1] = c[0];
    memcpy(c[0].key, key->k, sizeof key->k);
    c[0].key_len = (uint8_t)n;
    c[0].n_ids = (uint8_t)got;
    memcpy(c[0].ids, ids, got * sizeof(uint32_t));
}

// Append a cache slot's ids: all CACHE_IDS_MAX copied (a fixed-size copy, no call),
// n_ids of them kept.
static inline void push_cached(TokenList *out, const CacheSlot *c) {
    if (out->cap - out->n < CACHE_IDS_MAX) token_list_reserve(out, CACHE_IDS_MAX);
    memcpy(out->ids + out->n, c->ids, sizeof c->ids);
    out->n += c->n_ids;
}

// Append the cached ids of the word of key (n bytes); false if it is not cached.
static inline bool cache_hit(const CacheKey *key, size_t n, TokenList *out) {
    CacheSlot *c = key->set;
    if (!c) return false;
    if (slot_holds(&c[0], key, n)) {
        push_cached(out, &c[0]);
        return true;
    }
    if (slot_holds(&c[1], key, n)) {  // the older slot: it becomes the newer
        CacheSlot hit = c[1];
        c[1] = c[0];
        c[0] = hit;
        push_cached(out, &c[0]);
        return true;
    }
    return false;
}

// Merge w(n) and append its ids, remembering them under key (NULL: not cached).
static void merge_miss(TokenizerState *st, const uint8_t *w, size_t n, const CacheKey *key,
                       TokenList *out) {
    const Tokenizer *t = st->t;
    if (t->ignore_merges && !t->char_bpe) {  // a word that is a token is that token
        int64_t id = tok_vocab_find(t, w, n);
        if (id >= 0) {
            uint32_t one = (uint32_t)id;
            tok_push_ids(out, &one, 1);
            cache_store(key, n, &one, 1);  // the word's ids, however found
            return;
        }
    }
    // At most one symbol per byte (byte fallback gives one per byte, a character one),
    // but three for a " " read as "▁" (its bytes' fallback).
    st->sym = tok_grow(st->sym, &st->sym_cap, t->space_meta ? 3 * n : n, sizeof(Symbol));
    SymbolBuilder b = {st->sym, 0, -1, 0};
    if (t->char_bpe) char_symbols(t, &b, w, n);
    else byte_symbols(t, &b, w, n);
    flush_unk(&b);
    Symbol *s = st->sym;
    int32_t ns = b.n;
    if (ns == 0) return;
    s[ns - 1].next = -1;

    if (ns <= SCAN_MAX) {
        ns = merge_scan(t, s, ns);
        size_t n0 = out->n;
        token_list_reserve(out, (size_t)ns);
        for (int32_t i = 0; i < ns; i++) out->ids[out->n++] = s[i].id;
        cache_store(key, n, out->ids + n0, (size_t)ns);
        return;
    }
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
    token_list_reserve(out, (size_t)ns);
    for (int32_t i = 0; i < ns; i++)
        if (s[i].len) out->ids[out->n++] = s[i].id;
    cache_store(key, n, out->ids + n0, out->n - n0);
}

// Merge w(n), a piece of [lo, hi), and append its ids: from the cache if there.
static inline void merge_piece(TokenizerState *st, const uint8_t *w, size_t n, const uint8_t *lo,
                               const uint8_t *hi, TokenList *out) {
    CacheKey key;
    cache_key(st, w, n, lo, hi, &key);
    if (!cache_hit(&key, n, out)) merge_miss(st, w, n, &key, out);
}

static inline void ring_merge_oldest(TokenizerState *st, WordRing *r, TokenList *out) {
    const CacheKey *key = &r->word[r->head].key;
    const uint8_t *w = r->word[r->head].w;
    size_t n = r->word[r->head].n;
    if (!cache_hit(key, n, out)) merge_miss(st, w, n, key, out);
    r->head = (r->head + 1) % RING_AHEAD, r->queued--;
}

static inline void ring_push(TokenizerState *st, WordRing *r, const uint8_t *w, size_t n, const uint8_t *lo,
                             const uint8_t *hi, TokenList *out) {
    if (r->queued == RING_AHEAD) ring_merge_oldest(st, r, out);
    size_t slot = (r->head + r->queued++) % RING_AHEAD;
    r->word[slot].w = w;
    r->word[slot].n = n;
    cache_key(st, w, n, lo, hi, &r->word[slot].key);
}

void tok_ring_push(TokenizerState *st, WordRing *r, const uint8_t *w, size_t n, const uint8_t *lo,
                   const uint8_t *hi, TokenList *out) {
    ring_push(st, r, w, n, lo, hi, out);
}

void tok_ring_flush(TokenizerState *st, WordRing *r, TokenList *out) {
    while (r->queued) ring_merge_oldest(st, r, out);
}

void tok_bpe_word(TokenizerState *st, const uint8_t *w, size_t n, TokenList *out) {
    const Tokenizer *t = st->t;
    if (!t->char_bpe) {  // (ignore_merges: in merge_miss, the answer cached)
        merge_piece(st, w, n, w, w + n, out);
        return;
    }
    if (t->ignore_merges) {  // a word that is a token is that token
        int64_t id = tok_vocab_find(t, w, n);
        if (id >= 0) {
            token_list_push(out, (uint32_t)id);
            return;
        }
    }
    // Cut between characters x, y where the last character of x's symbols' text and
    // the first of y's are never side by side in a token: a merge across would make
    // a token holding them so. A character that is a token is its own symbol; one
    // taking the byte fallback is <0xNN> symbols ('<' first, '>' last). One that
    // becomes unk (fused with its neighbours) or is dropped is never cut from them.
    // A part is merged only once RING_AHEAD more are found (WordRing).
    WordRing ring = {.head = 0, .queued = 0};
    size_t start = 0;
    // The previous character's last symbol character: its tok_pair_small index,
    // CUT_BIG (a code point in prev_big) or CUT_NEVER (not cuttable).
    uint8_t prev = CUT_NEVER;
    uint32_t prev_big = 0;
    for (size_t i = 0; i < n;) {
        // ASCII (and " " read as "▁") not cut from the character before: the most
        // frequent case, on its shortest path.
        if (w[i] < 0x80 && t->cut_tab[prev * CUT_DIM + t->cut_first[w[i]]] == CUT_NO) {
            prev = t->cut_last[w[i]];  // never CUT_BIG: prev_big is not read
            i++;
            continue;
        }
        uint8_t first, last;  // this character's, the same way
        uint32_t first_big = 0, last_big = 0;
        size_t len;
        if (w[i] < 0x80) {  // ASCII and "▁", most characters: the rule below, tabulated
            first = t->cut_first[w[i]], last = t->cut_last[w[i]], len = 1;
        } else if (w[i] == 0xE2 && i + 2 < n && w[i + 1] == 0x96 && w[i + 2] == 0x81) {
            first = t->cut_space_first, last = t->cut_space_last, len = 3;
        } else {
            uint32_t cp;
            len = utf8_decode(w + i, n - i, &cp);
            first_big = cp, last_big = cp;
            bool cuttable = cp != UTF8_INVALID && char_id(t, w + i, len) >= 0;
            if (!cuttable && t->byte_fallback) {
                cuttable = true;
                for (size_t k = 0; k < len && cuttable; k++) cuttable = t->fallback_id[w[i + k]] >= 0;
                first_big = '<', last_big = '>';
            }
            int fs = tok_pair_small(first_big), ls = tok_pair_small(last_big);
            first = !cuttable ? CUT_NEVER : fs >= 0 ? (uint8_t)fs : CUT_BIG;
            last = !cuttable ? CUT_NEVER : ls >= 0 ? (uint8_t)ls : CUT_BIG;
        }
        // (prev is CUT_NEVER at i = 0, and a part is never empty.)
        uint8_t cut = t->cut_tab[prev * CUT_DIM + first];
        if (cut == CUT_ASK) {
            uint32_t a = prev == CUT_BIG ? prev_big : tok_small_cp(prev);
            uint32_t b = first == CUT_BIG ? first_big : tok_small_cp(first);
            cut = tok_pair_joinable(t, a, b) ? CUT_NO : CUT_YES;
        }
        if (cut == CUT_YES) {
            ring_push(st, &ring, w + start, i - start, w, w + n, out);
            start = i;
        }
        prev = last, prev_big = last_big;
        i += len;
    }
    tok_ring_flush(st, &ring, out);
    merge_piece(st, w + start, n - start, w, w + n, out);
}
