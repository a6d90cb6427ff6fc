// data/tokenizer.c — the tokenizer's public API beyond loading and encoding: token
// lists, the byte-level tokenizer behind the same interface, lookups, safe cuts,
// decoding and freeing. Loading a Hugging Face tokenizer.json is in
// tokenizer_load.c and tokenizer_vocab.c, encoding in tokenizer_encode.c. What is
// supported, and what is refused, is in tokenizer.h.
#define _POSIX_C_SOURCE 200809L
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/tokenizer_impl.h"
#include "util.h"

// ---------------------------------------------------------------- small helpers

void token_list_push(TokenList *l, uint32_t id) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        uint32_t *p = realloc(l->ids, cap * sizeof *p);
        if (!p) die("out of memory growing a token list to %zu ids", cap);
        l->ids = p;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
}

void token_list_free(TokenList *l) {
    free(l->ids);
    *l = (TokenList){0};
}


Tokenizer *tokenizer_byte_level(void) {
    Tokenizer *t = xcalloc(sizeof(Tokenizer), "tokenizer");
    t->byte_level = true;
    t->vocab_size = BYTE_VOCAB_SIZE;
    t->eot = BYTE_EOT;
    t->cut_ok = true;
    snprintf(t->desc, sizeof t->desc, "byte-level");
    return t;
}

static void free_set(AddedSet *s) {
    for (int i = 0; i < s->n; i++) free((void *)s->text[i]);
    free(s->text);
    free(s->len);
    free(s->id);
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    if (t->tok_bytes)
        for (uint32_t i = 0; i < t->vocab_size; i++) free(t->tok_bytes[i]);
    free(t->tok_bytes);
    free(t->tok_len);
    free(t->is_added);
    free(t->vocab);
    free(t->merges);
    if (!t->byte_level) {
        free_set(&t->added_raw);
        free_set(&t->added_norm);
    }
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t);
}

bool tokenizer_is_byte_level(const Tokenizer *t) { return t->byte_level; }
const char *tokenizer_describe(const Tokenizer *t) { return t->desc; }
uint32_t tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
int64_t tokenizer_default_eot(const Tokenizer *t) { return t->eot; }

int64_t tokenizer_token_id(const Tokenizer *t, const char *text) {
    size_t n = strlen(text);
    if (t->byte_level) {
        if (n == 1) return (uint8_t)text[0];
        return strcmp(text, BYTE_EOT_TEXT) == 0 ? BYTE_EOT : -1;
    }
    const AddedSet *sets[2] = {&t->added_raw, &t->added_norm};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->n; i++)
            if (sets[s]->len[i] == n && memcmp(sets[s]->text[i], text, n) == 0) return sets[s]->id[i];
    return tok_vocab_find(t, (const uint8_t *)text, n);
}

size_t tokenizer_safe_cut(const Tokenizer *t, const uint8_t *text, size_t n, size_t from) {
    if (!t->cut_ok) return 0;
    if (t->byte_level) return from > 0 && from < n ? from : 0;
    for (size_t p = from > 2 ? from : 2; p < n; p++) {
        if (text[p - 1] != '\n') continue;
        uint8_t before = text[p - 2], after = text[p];
        // Printable ASCII, not space: the split patterns end a piece at the newline.
        if (before > ' ' && before < 0x7F && after > ' ' && after < 0x7F) return p;
    }
    return 0;
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (t->byte_level) {
        if (id >= BYTE_VOCAB_SIZE) return NULL;
        return (const uint8_t *)byte_token_text(id, len);
    }
    if (id >= t->vocab_size || !t->tok_bytes[id]) return NULL;
    *len = t->tok_len[id];
    return t->tok_bytes[id];
}

char *tokenizer_decode(const Tokenizer *t, const uint32_t *ids, size_t n, size_t *len) {
    size_t total = 0, l;
    for (size_t i = 0; i < n; i++) {
        if (!tokenizer_token_bytes(t, ids[i], &l))
            die("decode: id %u is not a token of %s", ids[i], t->desc);
        total += l;
    }
    char *out = xmalloc(total + 1, "decoded text");
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b = tokenizer_token_bytes(t, ids[i], &l);
        memcpy(out + pos, b, l);
        pos += l;
    }
    out[pos] = 0;
    *len = pos;
    return out;
}
