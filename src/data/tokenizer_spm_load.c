// data/tokenizer_spm_load.c — loading what a character-level ("SentencePiece-style")
// BPE tokenizer.json adds to a byte-level one, as transformers writes them for
// Llama 2, Mistral and TinyLlama: the normalizer (Prepend, Replace with a string
// pattern, as a Sequence), the Metaspace pre-tokenizer, the decoder chain (Replace,
// ByteFallback, Fuse, Strip, Metaspace), and the lookup tables the encoder reads
// (<0xNN> byte-fallback ids, one-character ASCII ids, adjacent character pairs).
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "data/tokenizer_json.h"
#include "data/tokenizer_spm.h"
#include "data/unicode_class.h"
#include "util.h"

static char *dup_string(const Ctx *c, const cJSON *v, const char *what, size_t *len) {
    if (!cJSON_IsString(v)) die("tokenizer %s: %s must be a string", c->path, what);
    *len = strlen(v->valuestring);
    char *s = xmalloc(*len + 1, "tokenizer string");
    memcpy(s, v->valuestring, *len + 1);
    return s;
}

// A Replace's pattern: {"String": "..."} (a Regex pattern is refused).
static char *replace_pattern(const Ctx *c, const cJSON *p, const char *where, size_t *len) {
    const cJSON *pat = get(p, "pattern");
    if (pat && get(pat, "Regex"))
        die("tokenizer %s: %s Replace with a Regex pattern is not supported (only a String)", c->path, where);
    char *s = dup_string(c, pat ? get(pat, "String") : NULL, "a Replace pattern's String", len);
    if (*len == 0) die("tokenizer %s: %s Replace with an empty pattern", c->path, where);
    return s;
}

void tok_load_normalizer(const Ctx *c, Tokenizer *t, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return;
    const char *type = get_type(c, n, "normalizer");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(n, "normalizers");
        if (!cJSON_IsArray(list)) die("tokenizer %s: Sequence normalizer without a list", c->path);
        for (const cJSON *q = list->child; q; q = q->next) tok_load_normalizer(c, t, q);
        return;
    }
    if (strcmp(type, "Prepend") != 0 && strcmp(type, "Replace") != 0)
        die("tokenizer %s: normalizer %s is not supported (only Prepend, Replace and Sequence, as "
            "in Llama 2's tokenizer.json)", c->path, type);
    if (t->n_norm == MAX_NORM_OPS) die("tokenizer %s: more than %d normalizers", c->path, MAX_NORM_OPS);
    NormOp *op = &t->norm[t->n_norm++];
    if (!strcmp(type, "Prepend")) {
        op->kind = NORM_PREPEND;
        op->content = dup_string(c, get(n, "prepend"), "Prepend's prepend", &op->content_len);
    } else {
        op->kind = NORM_REPLACE;
        op->pattern = replace_pattern(c, n, "normalizer", &op->pattern_len);
        op->content = dup_string(c, get(n, "content"), "Replace's content", &op->content_len);
    }
}

// One character as Metaspace and Strip take it: a malloc'd NUL-terminated copy of
// its UTF-8 (*len bytes, at most 4) and its code point.
static char *one_char(const Ctx *c, const cJSON *v, const char *what, size_t *len, uint32_t *cp) {
    char *s = dup_string(c, v, what, len);
    size_t l = *len ? utf8_decode((const uint8_t *)s, *len, cp) : 0;
    if (*len == 0 || l != *len || *cp == UTF8_INVALID)
        die("tokenizer %s: %s \"%s\" must be one character", c->path, what, s);
    return s;
}

// Metaspace's prepend_scheme, or in older files add_prefix_space (true: always).
static PrependScheme prepend_scheme(const Ctx *c, const cJSON *p) {
    const cJSON *v = get(p, "prepend_scheme");
    if (!v || cJSON_IsNull(v)) return get_bool(c, p, "add_prefix_space", true, "Metaspace") ? PREPEND_ALWAYS : PREPEND_NEVER;
    if (!cJSON_IsString(v)) die("tokenizer %s: Metaspace prepend_scheme must be a string", c->path);
    if (!strcmp(v->valuestring, "always")) return PREPEND_ALWAYS;
    if (!strcmp(v->valuestring, "first")) return PREPEND_FIRST;
    if (!strcmp(v->valuestring, "never")) return PREPEND_NEVER;
    die("tokenizer %s: Metaspace prepend_scheme \"%s\" is not always, first or never", c->path, v->valuestring);
}

void tok_load_metaspace(const Ctx *c, Tokenizer *t, const cJSON *p) {
    size_t len;
    char *rep = one_char(c, get(p, "replacement"), "Metaspace replacement", &len, &t->meta_rep_cp);
    memcpy(t->meta_rep, rep, len);
    t->meta_rep_len = (int)len;
    free(rep);
    t->meta_prepend = prepend_scheme(c, p);
    t->meta_split = get_bool(c, p, "split", true, "Metaspace");
}

void tok_load_char_decoder(const Ctx *c, Tokenizer *t, const cJSON *d) {
    if (!d || cJSON_IsNull(d))
        die("tokenizer %s: no decoder; femtotron needs one to turn tokens into text", c->path);
    const char *type = get_type(c, d, "decoder");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(d, "decoders");
        if (!cJSON_IsArray(list)) die("tokenizer %s: Sequence decoder without a list", c->path);
        for (const cJSON *q = list->child; q; q = q->next) tok_load_char_decoder(c, t, q);
        return;
    }
    if (t->n_dec == MAX_DEC_STEPS) die("tokenizer %s: more than %d decoders", c->path, MAX_DEC_STEPS);
    DecStep *s = &t->dec[t->n_dec];
    if (!strcmp(type, "Replace")) {
        s->kind = DEC_REPLACE;
        s->pattern = replace_pattern(c, d, "decoder", &s->pattern_len);
        s->content = dup_string(c, get(d, "content"), "Replace's content", &s->content_len);
    } else if (!strcmp(type, "ByteFallback")) {
        s->kind = DEC_BYTE_FALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        s->kind = DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        s->kind = DEC_STRIP;
        uint32_t cp;
        s->content = one_char(c, get(d, "content"), "Strip content", &s->content_len, &cp);
        const cJSON *start = get(d, "start"), *stop = get(d, "stop");
        if (!cJSON_IsNumber(start) || !cJSON_IsNumber(stop) || start->valuedouble < 0 || stop->valuedouble < 0 ||
            start->valuedouble > 1e6 || stop->valuedouble > 1e6)
            die("tokenizer %s: Strip decoder needs non-negative integers start and stop", c->path);
        s->start = (int)start->valuedouble;
        s->stop = (int)stop->valuedouble;
    } else if (!strcmp(type, "Metaspace")) {
        s->kind = DEC_METASPACE;
        uint32_t cp;
        s->pattern = one_char(c, get(d, "replacement"), "Metaspace replacement", &s->pattern_len, &cp);
        s->strip_first = prepend_scheme(c, d) != PREPEND_NEVER;
    } else {
        die("tokenizer %s: decoder %s is not supported for a SentencePiece-style BPE (only Replace, "
            "ByteFallback, Fuse, Strip, Metaspace and Sequence)", c->path, type);
    }
    t->n_dec++;
}

// ---------------------------------------------------------------- tables

static void pair_insert(Tokenizer *t, uint32_t a, uint32_t b) {
    int sa = tok_pair_small(a), sb = tok_pair_small(b);
    if (sa >= 0 && sb >= 0) {
        t->pair_small[sa * PAIR_SMALL + sb] = 1;
        return;
    }
    uint64_t key = (((uint64_t)a << 32) | b) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (size_t i = (size_t)(h ^ (h >> 32)) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == key) return;
        if (t->pairs[i].key == 0) {
            t->pairs[i].key = key;
            return;
        }
    }
}

void tok_build_char_tables(Tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);  // tokenizers' format!("<{b:#04X}>")
        t->fallback_id[b] = tok_vocab_find(t, (const uint8_t *)name, 6);
    }
    for (int b = 0; b < 128; b++) {
        uint8_t ch = (uint8_t)b;
        t->ascii_id[b] = tok_vocab_find(t, &ch, 1);
    }
    t->spm_space_id = tok_vocab_find(t, (const uint8_t *)"\xE2\x96\x81", 3);
    for (int b = 0; b < 128; b++) {  // tok_bpe_word's rule (there), tabulated
        bool fallback = t->byte_fallback && t->fallback_id[b] >= 0;
        t->cut_first[b] = (uint8_t)(t->ascii_id[b] >= 0 ? b : fallback ? '<' : CUT_NEVER);
        t->cut_last[b] = (uint8_t)(t->ascii_id[b] >= 0 ? b : fallback ? '>' : CUT_NEVER);
    }
    bool space_fallback = t->byte_fallback && t->fallback_id[0xE2] >= 0 && t->fallback_id[0x96] >= 0 &&
                          t->fallback_id[0x81] >= 0;
    int space = tok_pair_small(0x2581);
    t->cut_space_first = (uint8_t)(t->spm_space_id >= 0 ? space : space_fallback ? '<' : CUT_NEVER);
    t->cut_space_last = (uint8_t)(t->spm_space_id >= 0 ? space : space_fallback ? '>' : CUT_NEVER);
    // Every adjacent pair of characters inside a token (added tokens included: more
    // pairs only cut words less). At most one pair per byte of the vocabulary.
    size_t bytes = 0;
    for (uint32_t id = 0; id < t->vocab_size; id++)
        if (t->tok_bytes[id]) bytes += t->tok_len[id];
    size_t slots = 16;
    while (slots < 2 * bytes + 1) slots *= 2;
    t->pair_mask = slots - 1;
    t->pairs = xcalloc(slots * sizeof(PairSlot), "character pair table");
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (!t->tok_bytes[id]) continue;
        const uint8_t *s = t->tok_bytes[id];
        size_t n = t->tok_len[id];
        uint32_t prev = 0;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = utf8_decode(s + i, n - i, &cp);
            if (i > 0) pair_insert(t, prev, cp);
            prev = cp;
            i += l;
        }
    }
    // Where every " " becomes "▁" just before merging (Metaspace alone, without split,
    // replacement "▁"; or the legacy normalizer Prepend("▁") + Replace(" ", "▁") with
    // no normalized added tokens), the encoder leaves the spaces in place and the
    // merging reads a " " as the "▁" it would have become: no rewritten copy of the
    // text, and the commonest character is one byte, not three. No other space
    // reaches the merging in these forms, so the reading is unambiguous (and a word
    // with a literal "▁" merges as the same word with " " would). ignore_merges looks
    // words up by their bytes, so it keeps the rewrite.
    static const char meta[] = "\xE2\x96\x81";
    bool meta_only = t->n_steps == 1 && t->steps[0].kind == STEP_METASPACE && !t->meta_split &&
                     t->meta_rep_len == 3 && memcmp(t->meta_rep, meta, 3) == 0 && t->n_norm == 0;
    bool legacy = t->n_steps == 0 && t->n_norm == 2 && t->added_norm.n == 0 && t->norm[0].kind == NORM_PREPEND &&
                  !strcmp(t->norm[0].content, meta) && t->norm[1].kind == NORM_REPLACE &&
                  !strcmp(t->norm[1].pattern, " ") && !strcmp(t->norm[1].content, meta);
    t->space_meta = !t->ignore_merges && (meta_only || legacy);
    if (t->space_meta) t->cut_first[' '] = t->cut_space_first, t->cut_last[' '] = t->cut_space_last;
    for (int a = 0; a < CUT_DIM; a++)
        for (int b = 0; b < CUT_DIM; b++)
            t->cut_tab[a * CUT_DIM + b] = a == CUT_NEVER || b == CUT_NEVER ? CUT_NO
                                          : a == CUT_BIG || b == CUT_BIG ? CUT_ASK
                                          : t->pair_small[a * PAIR_SMALL + b] ? CUT_NO : CUT_YES;
}
