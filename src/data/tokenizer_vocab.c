// data/tokenizer_vocab.c — the vocabulary and merges tables of a Hugging Face
// BPE: the GPT-2 byte <-> unicode mapping (byte-level BPE), the hash maps of tokens
// and merges, and loading tokenizer.json's "model" into them.
#define _POSIX_C_SOURCE 200809L
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "data/tokenizer_json.h"
#include "util.h"

uint64_t tok_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return h | 1;  // never 0 (0 marks an empty slot)
}

int64_t tok_vocab_find(const Tokenizer *t, const uint8_t *s, size_t n) {
    if (!t->vocab) return -1;
    uint64_t h = tok_hash_bytes(s, n);
    for (size_t i = tok_slot(h, t->vocab_mask);; i = (i + 1) & t->vocab_mask) {
        const VocabSlot *v = &t->vocab[i];
        if (v->hash == 0) return -1;
        if (v->hash == h && t->tok_len[v->id] == n && memcmp(t->tok_bytes[v->id], s, n) == 0)
            return v->id;
    }
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p *= 2;
    return p;
}

// ---------------------------------------------------------------- byte <-> unicode
//
// GPT-2's bytes_to_unicode: the printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF
// stand for themselves; the other 68 bytes, in order, become U+0100..U+0143. Token
// strings in tokenizer.json are written in these characters.

static int16_t char_to_byte[0x144];  // code point -> byte, -1 when not a byte character

void tok_build_char_to_byte(void) {
    for (int c = 0; c < 0x144; c++) char_to_byte[c] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        char_to_byte[printable ? b : 256 + n++] = (int16_t)b;
    }
}

// Bytes a token string stands for under the mapping. Returns 0 (and out untouched
// beyond *len) when a character is not one of the 256 byte characters.
int tok_map_token_string(const char *s, uint8_t *out, size_t *len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l;
        if (p[i] < 0x80) cp = p[i], l = 1;
        else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu), l = 2;
        else return 0;  // three-byte and longer characters are above U+0143
        if (cp >= 0x144 || char_to_byte[cp] < 0) return 0;
        out[k++] = (uint8_t)char_to_byte[cp];
        i += l;
    }
    *len = k;
    return 1;
}

// ---------------------------------------------------------------- model

typedef struct {
    char *text;
    int64_t id;
} VocabEntry;

// Make room for ids up to `id` (added tokens may lie past the model's ids).
static void ensure_id(Tokenizer *t, uint32_t id) {
    if (id < t->vocab_size) return;
    uint32_t n = id + 1;
    t->tok_bytes = realloc(t->tok_bytes, n * sizeof(uint8_t *));
    t->tok_len = realloc(t->tok_len, n * sizeof(uint32_t));
    t->is_added = realloc(t->is_added, n);
    if (!t->tok_bytes || !t->tok_len || !t->is_added) die("out of memory for %u token ids", n);
    for (uint32_t i = t->vocab_size; i < n; i++) t->tok_bytes[i] = NULL, t->tok_len[i] = 0, t->is_added[i] = 0;
    t->vocab_size = n;
}

void tok_set_token(Tokenizer *t, uint32_t id, const uint8_t *bytes, size_t len) {
    ensure_id(t, id);
    free(t->tok_bytes[id]);
    t->tok_bytes[id] = xmalloc(len + 1, "token bytes");
    memcpy(t->tok_bytes[id], bytes, len);
    t->tok_bytes[id][len] = 0;
    t->tok_len[id] = (uint32_t)len;
}

static void vocab_insert(Tokenizer *t, uint32_t id) {
    uint64_t h = tok_hash_bytes(t->tok_bytes[id], t->tok_len[id]);
    for (size_t i = tok_slot(h, t->vocab_mask);; i = (i + 1) & t->vocab_mask) {
        VocabSlot *v = &t->vocab[i];
        if (v->hash == 0) {
            v->hash = h;
            v->id = id;
            return;
        }
    }
}

static void merge_insert(Tokenizer *t, uint32_t left, uint32_t right, uint32_t rank, uint32_t new_id) {
    uint64_t key = (((uint64_t)left << 32) | right) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (size_t i = (size_t)(h ^ (h >> 32)) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        MergeSlot *m = &t->merges[i];
        if (m->key == 0 || m->key == key) {  // a repeated pair: the later line wins, as in tokenizers
            m->key = key;
            m->rank = rank;
            m->new_id = new_id;
            return;
        }
    }
}

// Id of a merge part given as a token string; -1 if it is not a byte-level token
// (such a merge can never apply to byte symbols). Character-level: the string is
// the token.
static int64_t merge_part_id(const Ctx *c, Tokenizer *t, const char *s, uint8_t *buf) {
    size_t len;
    if (t->char_bpe) {
        int64_t id = tok_vocab_find(t, (const uint8_t *)s, strlen(s));
        if (id < 0) die("tokenizer %s: merge part \"%s\" is not in the vocabulary", c->path, s);
        return id;
    }
    if (!tok_map_token_string(s, buf, &len)) return -1;
    int64_t id = tok_vocab_find(t, buf, len);
    if (id < 0) die("tokenizer %s: merge part \"%s\" is not in the vocabulary", c->path, s);
    return id;
}

static void load_merges(const Ctx *c, Tokenizer *t, const cJSON *merges) {
    if (!cJSON_IsArray(merges)) die("tokenizer %s: model.merges must be an array", c->path);
    size_t n = (size_t)cJSON_GetArraySize(merges);
    t->merge_mask = pow2_at_least(2 * n + 1) - 1;
    t->merges = xcalloc((t->merge_mask + 1) * sizeof(MergeSlot), "BPE merge table");
    uint8_t *buf = xmalloc(4096, "merge buffer");  // (4096) bytes of left + right
    uint32_t rank = 0;
    char pair_buf[2048];
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *a, *b;
        if (cJSON_IsString(m)) {  // "left right"
            const char *sp = strchr(m->valuestring, ' ');
            size_t la = sp ? (size_t)(sp - m->valuestring) : 0;
            if (!sp || la >= sizeof pair_buf || strchr(sp + 1, ' '))
                die("tokenizer %s: merge %u \"%s\" is not two tokens separated by one space",
                    c->path, rank, m->valuestring);
            memcpy(pair_buf, m->valuestring, la);
            pair_buf[la] = 0;
            a = pair_buf;
            b = sp + 1;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {  // ["left", "right"]
            a = m->child->valuestring;
            b = m->child->next->valuestring;
        } else {
            die("tokenizer %s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", c->path, rank);
        }
        if (strlen(a) + strlen(b) >= 2000)
            die("tokenizer %s: merge %u is longer than 2000 bytes", c->path, rank);
        int64_t ia = merge_part_id(c, t, a, buf), ib = merge_part_id(c, t, b, buf);
        if (ia < 0 || ib < 0) continue;
        size_t la = t->tok_len[ia], lb = t->tok_len[ib];
        memcpy(buf, t->tok_bytes[ia], la);
        memcpy(buf + la, t->tok_bytes[ib], lb);
        int64_t merged = tok_vocab_find(t, buf, la + lb);
        if (merged < 0)
            die("tokenizer %s: merge %u (\"%s\" + \"%s\") makes a token that is not in the "
                "vocabulary", c->path, rank, a, b);
        merge_insert(t, (uint32_t)ia, (uint32_t)ib, rank, (uint32_t)merged);
        t->n_merges++;
    }
    free(buf);
}

void tok_load_model(const Ctx *c, Tokenizer *t, const cJSON *model, uint32_t *max_id) {
    if (!cJSON_IsObject(model)) die("tokenizer %s: no \"model\" object", c->path);
    const cJSON *type = get(model, "type");
    // Old files leave out the type; a model with merges is BPE.
    if (type ? !cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 : !get(model, "merges"))
        die("tokenizer %s: model type %s is not supported (only BPE)", c->path,
            cJSON_IsString(type) ? type->valuestring : "(unknown)");
    const cJSON *dropout = get(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        die("tokenizer %s: BPE dropout is not supported (encoding would be random)", c->path);
    const char *opt_str[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(model, opt_str[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == 0))
            die("tokenizer %s: BPE %s is not supported", c->path, opt_str[i]);
    }
    t->byte_fallback = get_bool(c, model, "byte_fallback", false, "model");
    if (t->byte_fallback && !t->char_bpe)
        die("tokenizer %s: BPE byte_fallback is not supported with a ByteLevel pre-tokenizer (a "
            "byte-level BPE needs none)", c->path);
    t->fuse_unk = get_bool(c, model, "fuse_unk", false, "model");
    t->ignore_merges = get_bool(c, model, "ignore_merges", false, "model");

    const cJSON *vocab = get(model, "vocab");
    if (!cJSON_IsObject(vocab)) die("tokenizer %s: model.vocab must be an object", c->path);
    for (const cJSON *v = vocab->child; v; v = v->next) {
        int64_t id = get_id(c, v, "a model.vocab value");
        if ((uint32_t)id + 1 > *max_id) *max_id = (uint32_t)id + 1;
    }
    t->vocab_size = *max_id;
    // Plain calloc: ensure_id grows these with realloc for added tokens.
    t->tok_bytes = calloc(t->vocab_size + 1, sizeof(uint8_t *));
    t->tok_len = calloc(t->vocab_size + 1, sizeof(uint32_t));
    t->is_added = calloc(t->vocab_size + 1, 1);
    if (!t->tok_bytes || !t->tok_len || !t->is_added) die("out of memory for %u token ids", t->vocab_size);
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    t->vocab_mask = pow2_at_least(2 * n + 1) - 1;
    t->vocab = xcalloc((t->vocab_mask + 1) * sizeof(VocabSlot), "vocabulary map");
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        uint32_t id = (uint32_t)v->valuedouble;
        if (t->tok_bytes[id]) die("tokenizer %s: id %u appears twice in model.vocab", c->path, id);
        size_t slen = strlen(v->string), len;
        uint8_t *buf = xmalloc(slen + 1, "token string");
        if (t->char_bpe) {  // the string is the token's text
            tok_set_token(t, id, (const uint8_t *)v->string, slen);
            if (tok_vocab_find(t, (const uint8_t *)v->string, slen) < 0) vocab_insert(t, id);
        } else if (tok_map_token_string(v->string, buf, &len)) {
            tok_set_token(t, id, buf, len);
            if (tok_vocab_find(t, buf, len) < 0) vocab_insert(t, id);
            if (len == 1 && t->byte_id[buf[0]] < 0) t->byte_id[buf[0]] = id;
        } else {
            // Not a byte-level string: BPE never produces it; the ByteLevel decoder
            // writes its text as it is.
            tok_set_token(t, id, (const uint8_t *)v->string, slen);
        }
        free(buf);
    }
    const cJSON *unk = get(model, "unk_token");
    t->unk_id = -1;
    if (unk && !cJSON_IsNull(unk)) {
        if (!cJSON_IsString(unk)) die("tokenizer %s: model.unk_token must be a string", c->path);
        const cJSON *u = get(vocab, unk->valuestring);
        if (!u) die("tokenizer %s: unk_token \"%s\" is not in the vocabulary", c->path, unk->valuestring);
        t->unk_id = (int64_t)u->valuedouble;
    }
    int missing = 0;
    for (int b = 0; b < 256; b++) missing += t->byte_id[b] < 0;
    if (missing && !t->char_bpe)
        warn("tokenizer %s: %d of the 256 byte tokens are missing from the vocabulary; like "
             "tokenizers, such bytes encode as %s", c->path, missing,
             t->unk_id >= 0 ? "unk_token" : "nothing (they are dropped)");
    load_merges(c, t, get(model, "merges"));
}
