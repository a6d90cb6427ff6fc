// data/tokenizer_decode.c — ids back to text.
//  - byte-level (and femtotron's byte tokenizer): the tokens' bytes concatenated,
//    which is what the ByteLevel decoder gives for valid UTF-8;
//  - character-level BPE: the token strings go through the decoder chain as
//    tokenizers' decode_chain does, step by step on the list of strings: Replace
//    (e.g. "▁" -> " "), ByteFallback (a run of <0xNN> tokens becomes its bytes when
//    they are valid UTF-8, else one U+FFFD per byte), Fuse (join into one), Strip
//    (up to start / stop content characters off each string's ends), Metaspace
//    (replacement -> " ", dropped from the first token unless prepend_scheme never).
// tokenizer_token_bytes gives one token as generate streams it: for character-level
// BPE its string through the chain without Fuse and Strip, as a token that is not
// the first, and a <0xNN> token as the byte NN (a character split into byte tokens
// comes out whole once all its bytes are written).
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"
#include "data/unicode_class.h"
#include "util.h"

typedef struct {
    uint8_t *p;  // (n + 1) bytes, NUL-terminated
    size_t n;
} Str;

typedef struct {
    Str *s;  // (cap)
    size_t n, cap;
} StrList;

static void list_push(StrList *l, const uint8_t *p, size_t n) {
    l->s = tok_grow(l->s, &l->cap, l->n + 1, sizeof(Str));
    Str *d = &l->s[l->n++];
    d->p = xmalloc(n + 1, "decoded token");
    memcpy(d->p, p, n);
    d->p[n] = 0;
    d->n = n;
}

static void list_free(StrList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->s[i].p);
    free(l->s);
    *l = (StrList){0};
}

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The byte of a "<0xNN>" token (as Rust's u8::from_str_radix(NN, 16) reads NN,
// which takes a leading '+'), or -1.
static int fallback_byte(const Str *s) {
    if (s->n != 6 || memcmp(s->p, "<0x", 3) != 0 || s->p[5] != '>') return -1;
    int hi = hex_digit(s->p[3]), lo = hex_digit(s->p[4]);
    if (s->p[3] == '+' && lo >= 0) return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_decode(s + i, n - i, &cp);
        if (cp == UTF8_INVALID) return false;
    }
    return true;
}

static void flush_bytes(StrList *out, uint8_t *bytes, size_t *nb) {
    if (!*nb) return;
    if (valid_utf8(bytes, *nb)) {
        list_push(out, bytes, *nb);
    } else {
        for (size_t i = 0; i < *nb; i++) list_push(out, (const uint8_t *)"\xEF\xBF\xBD", 3);
    }
    *nb = 0;
}

// One step of the chain: in -> out. stream: tokenizer_token_bytes' single token.
static void apply_step(const DecStep *d, const StrList *in, StrList *out, bool stream) {
    uint8_t *buf = NULL;  // (cap) one rewritten string, or a run of fallback bytes
    size_t cap = 0, nb = 0;
    switch (d->kind) {
    case DEC_REPLACE:
    case DEC_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            const Str *s = &in->s[i];
            bool drop = d->kind == DEC_METASPACE && d->strip_first && i == 0 && !stream;
            const char *rep = d->kind == DEC_REPLACE ? d->content : drop ? "" : " ";
            size_t rl = strlen(rep);
            buf = tok_grow(buf, &cap, s->n + s->n * rl + 1, 1);
            size_t m = tok_replace_all(s->p, s->n, d->pattern, d->pattern_len, rep, rl, buf);
            list_push(out, buf, m);
        }
        break;
    case DEC_BYTE_FALLBACK:
        buf = tok_grow(buf, &cap, in->n + 1, 1);
        for (size_t i = 0; i < in->n; i++) {
            int b = fallback_byte(&in->s[i]);
            if (b >= 0 && stream) {
                uint8_t byte = (uint8_t)b;
                list_push(out, &byte, 1);
            } else if (b >= 0) {
                buf[nb++] = (uint8_t)b;
            } else {
                flush_bytes(out, buf, &nb);
                list_push(out, in->s[i].p, in->s[i].n);
            }
        }
        flush_bytes(out, buf, &nb);
        break;
    case DEC_FUSE: {
        size_t total = 0;
        for (size_t i = 0; i < in->n; i++) total += in->s[i].n;
        buf = tok_grow(buf, &cap, total + 1, 1);
        for (size_t i = 0; i < in->n; i++) memcpy(buf + nb, in->s[i].p, in->s[i].n), nb += in->s[i].n;
        list_push(out, buf, nb);
        break;
    }
    case DEC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const uint8_t *p = in->s[i].p;
            size_t a = 0, b = in->s[i].n, cl = d->content_len;
            for (int k = 0; k < d->start && b - a >= cl && memcmp(p + a, d->content, cl) == 0; k++) a += cl;
            for (int k = 0; k < d->stop && b - a >= cl && memcmp(p + b - cl, d->content, cl) == 0; k++) b -= cl;
            list_push(out, p + a, b - a);
        }
        break;
    }
    free(buf);
}

// Run the chain over `list` (replaced by the result).
static void run_chain(const Tokenizer *t, StrList *list, bool stream) {
    for (int k = 0; k < t->n_dec; k++) {
        if (stream && (t->dec[k].kind == DEC_FUSE || t->dec[k].kind == DEC_STRIP)) continue;
        StrList next = {0};
        apply_step(&t->dec[k], list, &next, stream);
        list_free(list);
        *list = next;
    }
}

void tok_build_shown(Tokenizer *t) {
    t->shown = xcalloc((size_t)t->vocab_size * sizeof(uint8_t *), "decoded tokens");
    t->shown_len = xcalloc((size_t)t->vocab_size * sizeof(uint32_t), "decoded tokens");
    for (uint32_t id = 0; id < t->vocab_size; id++) {
        if (!t->tok_bytes[id]) continue;
        StrList l = {0};
        list_push(&l, t->tok_bytes[id], t->tok_len[id]);
        run_chain(t, &l, true);
        size_t total = 0;
        for (size_t i = 0; i < l.n; i++) total += l.s[i].n;
        t->shown[id] = xmalloc(total + 1, "decoded token");
        for (size_t i = 0, m = 0; i < l.n; i++) memcpy(t->shown[id] + m, l.s[i].p, l.s[i].n), m += l.s[i].n;
        t->shown[id][total] = 0;
        t->shown_len[id] = (uint32_t)total;
        list_free(&l);
    }
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (t->byte_level) {
        if (id >= BYTE_VOCAB_SIZE) return NULL;
        return (const uint8_t *)byte_token_text(id, len);
    }
    if (id >= t->vocab_size || !t->tok_bytes[id]) return NULL;
    if (t->char_bpe) {
        *len = t->shown_len[id];
        return t->shown[id];
    }
    *len = t->tok_len[id];
    return t->tok_bytes[id];
}

char *tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, size_t *len) {
    size_t l;
    StrList list = {0};  // the tokens' strings: bytes for byte-level, text for character-level
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = tokenizer_token_bytes(t, ids[i], &l);
        if (!b) die("decode: id %u is not a token of %s", ids[i], t->desc);
        if (t->char_bpe) list_push(&list, t->tok_bytes[ids[i]], t->tok_len[ids[i]]);
        else list_push(&list, b, l);
    }
    if (t->char_bpe) run_chain(t, &list, false);
    size_t total = 0, pos = 0;
    for (size_t i = 0; i < list.n; i++) total += list.s[i].n;
    char *out = xmalloc(total + 1, "decoded text");
    for (size_t i = 0; i < list.n; i++) memcpy(out + pos, list.s[i].p, list.s[i].n), pos += list.s[i].n;
    out[pos] = 0;
    *len = pos;
    list_free(&list);
    return out;
}
