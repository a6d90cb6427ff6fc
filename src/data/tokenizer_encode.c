// data/tokenizer_encode.c — encoding with a tokenizer.json BPE, in the order
// `tokenizers` applies its stages:
//   1. added tokens are split out, leftmost-longest: first those with
//      "normalized": false; each gap between them is normalized (the normalizer's
//      Prepend / Replace steps, if any), then the other added tokens (matched in
//      their normalized form) are split out of it;
//   2. each remaining gap goes through the pre-tokenizer steps (tokenizer_impl.h),
//      each step splitting every piece of the previous one;
//   3. each final piece is a "word" merged by BPE (tokenizer_bpe.c).
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/unicode_class.h"
#include "util.h"

TokenizerState *tokenizer_state_new(const Tokenizer *t) {
    TokenizerState *st = xcalloc(sizeof *st, "tokenizer state");
    st->t = t;
    if (!t->byte_level) {
        st->cache_mem = xcalloc(2 * CACHE_SETS * sizeof(CacheSlot) + 128, "tokenizer word cache");
        st->cache = (CacheSlot *)(((uintptr_t)st->cache_mem + 127) & ~(uintptr_t)127);
    }
    return st;
}

void tokenizer_state_free(TokenizerState *st) {
    if (!st) return;
    free(st->sym);
    free(st->heap);
    for (int i = 0; i < MAX_STEPS; i++) free(st->scratch[i]);
    free(st->normalized);
    free(st->norm_tmp);
    free(st->cache_mem);
    free(st);
}

uint64_t tokenizer_state_invalid_utf8(const TokenizerState *st) { return st->invalid_utf8; }

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

static void run_steps(TokenizerState *st, int k, const uint8_t *s, size_t n, TokenList *out);

// Metaspace: every " " becomes the replacement; the replacement goes in front of a
// piece not starting with it (prepend_scheme always; first: only the piece at the
// very start of the text, not one after an added token); with split, pieces are
// cut before each replacement (tokenizers' MergedWithNext).
static void metaspace_step(TokenizerState *st, int k, const uint8_t *s, size_t n, TokenList *out) {
    const Tokenizer *t = st->t;
    size_t rl = (size_t)t->meta_rep_len;
    bool starts = s[0] == ' ' || (n >= rl && memcmp(s, t->meta_rep, rl) == 0);
    bool prepend = !starts && (t->meta_prepend == PREPEND_ALWAYS || (t->meta_prepend == PREPEND_FIRST && s == st->text));
    if (t->space_meta) {  // spaces stay: tok_bpe_word reads " " as "▁" (tokenizer_impl.h)
        if (!prepend) {
            run_steps(st, k + 1, s, n, out);
            return;
        }
        st->scratch[k] = tok_grow(st->scratch[k], &st->scratch_cap[k], n + 1, 1);
        st->scratch[k][0] = ' ';  // (n + 1) the piece after the prepended "▁"
        memcpy(st->scratch[k] + 1, s, n);
        run_steps(st, k + 1, st->scratch[k], n + 1, out);
        return;
    }
    // Room for the worst case (every byte a space) rather than a pass counting them.
    st->scratch[k] = tok_grow(st->scratch[k], &st->scratch_cap[k], n + rl * (n + 1), 1);
    uint8_t *d = st->scratch[k];  // (n + rl * (n + 1)) the rewritten piece
    size_t m = 0;
    if (prepend) {
        memcpy(d, t->meta_rep, rl);
        m = rl;
    }
    m += tok_replace_all(s, n, " ", 1, (const char *)t->meta_rep, rl, d + m);
    if (!t->meta_split) {
        run_steps(st, k + 1, d, m, out);
        return;
    }
    size_t start = 0;
    for (size_t i = 1; i + rl <= m; i++)
        if (memcmp(d + i, t->meta_rep, rl) == 0) {
            run_steps(st, k + 1, d + start, i - start, out);
            start = i;
        }
    run_steps(st, k + 1, d + start, m - start, out);
}

static void run_steps(TokenizerState *st, int k, const uint8_t *s, size_t n, TokenList *out) {
    if (n == 0) return;  // empty pieces vanish (no prefix space is added to them)
    const Tokenizer *t = st->t;
    if (k == t->n_steps) {
        tok_bpe_word(st, s, n, out);
        return;
    }
    const PretokStep *p = &t->steps[k];
    switch (p->kind) {
    case STEP_PREFIX_SPACE:
        if (s[0] == ' ') {
            run_steps(st, k + 1, s, n, out);
        } else {
            st->scratch[k] = tok_grow(st->scratch[k], &st->scratch_cap[k], n + 1, 1);
            st->scratch[k][0] = ' ';
            memcpy(st->scratch[k] + 1, s, n);
            run_steps(st, k + 1, st->scratch[k], n + 1, out);
        }
        return;
    case STEP_SPLIT_GPT2:
    case STEP_SPLIT_LLAMA3:
        if (k + 1 == t->n_steps && !t->char_bpe) {
            // The pieces are the words: queued, so that each one's cache set is
            // fetched while the next ones are matched (s stays in place meanwhile).
            WordRing ring = {.head = 0, .queued = 0};
            for (size_t i = 0; i < n;) {
                size_t m = p->kind == STEP_SPLIT_GPT2 ? pretok_match_gpt2(s, n, i)
                                                      : pretok_match_llama3(s, n, i, p->max_digits);
                tok_ring_push(st, &ring, s + i, m, s, s + n, out);
                i += m;
            }
            tok_ring_flush(st, &ring, out);
            return;
        }
        for (size_t i = 0; i < n;) {
            size_t m = p->kind == STEP_SPLIT_GPT2 ? pretok_match_gpt2(s, n, i)
                                                  : pretok_match_llama3(s, n, i, p->max_digits);
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
    case STEP_METASPACE:
        metaspace_step(st, k, s, n, out);
        return;
    }
}

// ---------------------------------------------------------------- normalizer

size_t tok_replace_all(const uint8_t *s, size_t n, const char *pat, size_t pl, const char *rep,
                       size_t rl, uint8_t *dst) {
    size_t m = 0, i = 0;
    const uint8_t p0 = (uint8_t)pat[0];
    if (pl == 1 && rl >= 1 && rl <= 4) {
        // One-byte pattern (Metaspace's and Llama 2's " " -> "▁"), 8 bytes at a time:
        // the 8 are stored as they are, then the output is cut after the bytes before
        // the first pattern byte among them (found as the lowest zero byte of x ^ p0)
        // and the replacement follows, stored as 4 bytes (the extra ones are written
        // over next). Stores stay inside dst (n + n * rl bytes): m <= i * rl, so
        // m + 8 <= n * rl while i + 8 <= n, and a replacement's 4 bytes end by
        // (i + 7) * rl + 4 <= n + n * rl.
        const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
        uint32_t rep4 = 0;
        memcpy(&rep4, rep, rl);
        while (i + 8 <= n) {
            uint64_t x, z;
            memcpy(&x, s + i, 8);
            memcpy(dst + m, &x, 8);
            z = x ^ (ones * p0);
            uint64_t zero = (z - ones) & ~z & highs;  // exact at its lowest set byte
            if (!zero) {
                i += 8, m += 8;
                continue;
            }
            size_t k = (size_t)__builtin_ctzll(zero) / 8;
            i += k + 1, m += k;
            memcpy(dst + m, &rep4, 4);
            m += rl;
        }
    }
    while (i < n) {
        // One-byte patterns (Metaspace's " ") need no memcmp call per match, and a
        // short replacement (its "▁", 3 bytes) is copied by a loop, not a call.
        if (s[i] == p0 && (pl == 1 || (i + pl <= n && memcmp(s + i, pat, pl) == 0))) {
            if (rl <= 4) for (size_t k = 0; k < rl; k++) dst[m + k] = (uint8_t)rep[k];
            else memcpy(dst + m, rep, rl);
            m += rl;
            i += pl;
        } else {
            dst[m++] = s[i++];
        }
    }
    return m;
}

size_t tok_normalize(const Tokenizer *t, const uint8_t *s, size_t n, uint8_t **dst, size_t *cap,
                     uint8_t **tmp, size_t *tmp_cap) {
    *dst = tok_grow(*dst, cap, n + 1, 1);
    memcpy(*dst, s, n);
    for (int k = 0; k < t->n_norm; k++) {
        const NormOp *op = &t->norm[k];
        if (n == 0) break;  // both steps leave empty text empty
        size_t m = 0, worst = op->kind == NORM_PREPEND ? n + op->content_len
                                                      : n + n * op->content_len;
        *tmp = tok_grow(*tmp, tmp_cap, worst + 1, 1);
        if (op->kind == NORM_PREPEND) {
            memcpy(*tmp, op->content, op->content_len);
            m = op->content_len;
            memcpy(*tmp + m, *dst, n);
            m += n;
        } else {
            m = tok_replace_all(*dst, n, op->pattern, op->pattern_len, op->content, op->content_len, *tmp);
        }
        uint8_t *sw = *dst;  // swap buffers: tmp holds the result
        size_t swc = *cap;
        *dst = *tmp, *cap = *tmp_cap;
        *tmp = sw, *tmp_cap = swc;
        n = m;
    }
    return n;
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
    if (pass == 1 && t->n_norm && t->space_meta && n) {
        // Prepend("▁") + Replace(" ", "▁"): a " " in front, tok_bpe_word reads the
        // spaces as "▁" (tokenizer_impl.h).
        st->normalized = tok_grow(st->normalized, &st->normalized_cap, n + 1, 1);
        st->normalized[0] = ' ';  // (n + 1) the gap after the prepended "▁"
        memcpy(st->normalized + 1, s, n);
        s = st->normalized;
        n++;
    } else if (pass == 1 && t->n_norm) {  // normalize the gap (no gap is inside another)
        size_t m = tok_normalize(t, s, n, &st->normalized, &st->normalized_cap, &st->norm_tmp, &st->norm_tmp_cap);
        s = st->normalized;
        n = m;
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
            if (set->only_first >= 0 && i < n) {
                const uint8_t *next = memchr(s + i, set->only_first, n - i);
                i = next ? (size_t)(next - s) : n;
            }
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
        uint64_t eight;  // 8 bytes at once while they are all ASCII
        if (i + 8 <= n && (memcpy(&eight, text + i, 8), !(eight & 0x8080808080808080ull))) {
            i += 8;
            continue;
        }
        if (text[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += utf8_decode(text + i, n - i, &cp);
        st->invalid_utf8 += cp == UTF8_INVALID;
    }
    if (t->byte_level) {
        token_list_reserve(out, n);
        for (size_t i = 0; i < n; i++) out->ids[out->n++] = text[i];
        return;
    }
    st->text = text;
    split_added(st, 0, text, n, out);
}

void tokenizer_encode_with_specials(TokenizerState *st, const uint8_t *text, size_t n,
                                    TokenList *out) {
    const Tokenizer *t = st->t;
    tok_push_ids(out, t->prefix_ids, (size_t)t->n_prefix);
    tokenizer_encode(st, text, n, out);
    tok_push_ids(out, t->suffix_ids, (size_t)t->n_suffix);
}

const uint32_t *tokenizer_special_ids(const Tokenizer *t, int suffix, int *n) {
    *n = suffix ? t->n_suffix : t->n_prefix;
    return *n ? (suffix ? t->suffix_ids : t->prefix_ids) : NULL;
}
