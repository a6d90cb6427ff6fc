// data/tokenizer.c — the tokenizer's public API beyond loading and encoding: token
// lists, the byte-level tokenizer behind the same interface, lookups, safe cuts
// and freeing. Loading a Hugging Face tokenizer.json is in tokenizer_load.c,
// tokenizer_vocab.c and tokenizer_spm_load.c, encoding in tokenizer_encode.c and
// tokenizer_bpe.c, decoding in tokenizer_decode.c. What is supported, and what is
// refused, is in tokenizer.h.
#define _POSIX_C_SOURCE 200809L
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/tokenizer_impl.h"
#include "util.h"

// ---------------------------------------------------------------- small helpers

void token_list_reserve(TokenList *l, size_t extra) {
    if (l->cap - l->n >= extra) return;
    size_t cap = l->cap ? 2 * l->cap : 256;
    while (cap - l->n < extra) cap *= 2;
    uint32_t *p = realloc(l->ids, cap * sizeof *p);
    if (!p) die("out of memory growing a token list to %zu ids", cap);
    l->ids = p;
    l->cap = cap;
}

void token_list_push(TokenList *l, uint32_t id) { tok_push_ids(l, &id, 1); }

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
    if (t->shown)
        for (uint32_t i = 0; i < t->vocab_size; i++) free(t->shown[i]);
    free(t->shown);
    free(t->shown_len);
    free(t->pairs);
    for (int i = 0; i < t->n_norm; i++) free(t->norm[i].pattern), free(t->norm[i].content);
    for (int i = 0; i < t->n_dec; i++) free(t->dec[i].pattern), free(t->dec[i].content);
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

// Character-level BPE (cut_ok: no normalizer, no added token holding a space): cut
// before a " " that follows a printable ASCII non-space c. The " " (as Metaspace's
// replacement) starts the second part, so neither part gets a prepended
// replacement it would not get in the whole, and the word is cut there anyway:
// Metaspace split cuts before every replacement; otherwise it must be a place
// tokenizer_bpe.c cuts a word (both characters tokens, never side by side in one,
// and no ignore_merges, which looks at whole words).
static size_t char_bpe_cut(const Tokenizer *t, const uint8_t *text, size_t n, size_t from) {
    bool metaspace = t->n_steps == 1;  // else no pre-tokenizer: spaces stay " "
    uint32_t space = metaspace ? t->meta_rep_cp : ' ';
    bool split = metaspace && t->meta_split;
    int64_t space_id = metaspace ? tok_vocab_find(t, t->meta_rep, (size_t)t->meta_rep_len) : t->ascii_id[' '];
    if (!split && (t->ignore_merges || space_id < 0)) return 0;
    for (size_t p = from > 1 ? from : 1; p < n; p++) {
        uint8_t c = text[p - 1];
        if (text[p] != ' ' || c <= ' ' || c >= 0x7F) continue;
        if (split || (t->ascii_id[c] >= 0 && !tok_pair_joinable(t, c, space))) return p;
    }
    return 0;
}

size_t tokenizer_safe_cut(const Tokenizer *t, const uint8_t *text, size_t n, size_t from) {
    if (!t->cut_ok) return 0;
    if (t->byte_level) return from > 0 && from < n ? from : 0;
    if (t->char_bpe) return char_bpe_cut(t, text, n, from);
    for (size_t p = from > 2 ? from : 2; p < n; p++) {
        if (text[p - 1] != '\n') continue;
        uint8_t before = text[p - 2], after = text[p];
        // Printable ASCII, not space: the split patterns end a piece at the newline.
        if (before > ' ' && before < 0x7F && after > ' ' && after < 0x7F) return p;
    }
    return 0;
}
