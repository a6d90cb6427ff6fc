// data/tokenizer.c — loading a Hugging Face tokenizer.json (byte-level BPE) and
// decoding; the byte-level tokenizer behind the same interface. Encoding is in
// tokenizer_encode.c. What is supported, and what is refused, is in tokenizer.h.
#define _POSIX_C_SOURCE 200809L
#include "data/tokenizer.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/pretokenize.h"
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

uint64_t tok_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    return h | 1;  // never 0 (0 marks an empty slot)
}

int64_t tok_vocab_find(const Tokenizer *t, const uint8_t *s, size_t n) {
    if (!t->vocab) return -1;
    uint64_t h = tok_hash_bytes(s, n);
    for (size_t i = (size_t)h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
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

static void build_char_to_byte(void) {
    for (int c = 0; c < 0x144; c++) char_to_byte[c] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        char_to_byte[printable ? b : 256 + n++] = (int16_t)b;
    }
}

// Bytes a token string stands for under the mapping. Returns 0 (and out untouched
// beyond *len) when a character is not one of the 256 byte characters.
static int map_token_string(const char *s, uint8_t *out, size_t *len) {
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

// ---------------------------------------------------------------- JSON helpers

typedef struct {
    const char *path;
    cJSON *root;
} Ctx;

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static bool get_bool(const Ctx *c, const cJSON *obj, const char *key, bool dflt, const char *where) {
    const cJSON *v = get(obj, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) die("tokenizer %s: %s.%s must be true or false", c->path, where, key);
    return cJSON_IsTrue(v);
}

static const char *get_type(const Ctx *c, const cJSON *obj, const char *where) {
    const cJSON *v = get(obj, "type");
    if (!cJSON_IsString(v)) die("tokenizer %s: %s has no \"type\"", c->path, where);
    return v->valuestring;
}

static int64_t get_id(const Ctx *c, const cJSON *v, const char *what) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        die("tokenizer %s: %s must be a non-negative integer id", c->path, what);
    return (int64_t)v->valuedouble;
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

static void set_token(Tokenizer *t, uint32_t id, const uint8_t *bytes, size_t len) {
    ensure_id(t, id);
    free(t->tok_bytes[id]);
    t->tok_bytes[id] = xmalloc(len + 1, "token bytes");
    memcpy(t->tok_bytes[id], bytes, len);
    t->tok_bytes[id][len] = 0;
    t->tok_len[id] = (uint32_t)len;
}

static void vocab_insert(Tokenizer *t, uint32_t id) {
    uint64_t h = tok_hash_bytes(t->tok_bytes[id], t->tok_len[id]);
    for (size_t i = (size_t)h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
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
// (such a merge can never apply to byte symbols).
static int64_t merge_part_id(const Ctx *c, Tokenizer *t, const char *s, uint8_t *buf) {
    size_t len;
    if (!map_token_string(s, buf, &len)) return -1;
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

static void load_model(const Ctx *c, Tokenizer *t, const cJSON *model, uint32_t *max_id) {
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
    if (get_bool(c, model, "byte_fallback", false, "model"))
        die("tokenizer %s: BPE byte_fallback is not supported (a byte-level BPE needs none)", c->path);
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
        if (map_token_string(v->string, buf, &len)) {
            set_token(t, id, buf, len);
            if (tok_vocab_find(t, buf, len) < 0) vocab_insert(t, id);
            if (len == 1 && t->byte_id[buf[0]] < 0) t->byte_id[buf[0]] = id;
        } else {
            // Not a byte-level string: BPE never produces it; the ByteLevel decoder
            // writes its text as it is.
            set_token(t, id, (const uint8_t *)v->string, slen);
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
    if (missing)
        warn("tokenizer %s: %d of the 256 byte tokens are missing from the vocabulary; like "
             "tokenizers, such bytes encode as %s", c->path, missing,
             t->unk_id >= 0 ? "unk_token" : "nothing (they are dropped)");
    load_merges(c, t, get(model, "merges"));
}

// ---------------------------------------------------------------- added tokens

typedef struct {
    uint8_t *content;   // UTF-8 as written
    size_t len;
    uint32_t id;
    bool normalized;
} AddedSrc;

static void fill_added_set(AddedSet *s, AddedSrc *src, int n_src, bool normalized) {
    int n = 0;
    for (int i = 0; i < n_src; i++) n += src[i].normalized == normalized;
    s->n = n;
    size_t cap = (size_t)(n ? n : 1);
    s->text = xmalloc(cap * sizeof(uint8_t *), "added tokens");
    s->len = xmalloc(cap * sizeof(uint32_t), "added tokens");
    s->id = xmalloc(cap * sizeof(uint32_t), "added tokens");
    int k = 0;
    for (int b = 0; b < 256; b++) {  // bucket by first byte (tokens are few)
        s->first[b] = k;
        for (int i = 0; i < n_src; i++)
            if (src[i].normalized == normalized && src[i].content[0] == b) {
                s->text[k] = src[i].content;
                s->len[k] = (uint32_t)src[i].len;
                s->id[k] = src[i].id;
                k++;
            }
    }
    s->first[256] = k;
}

// Ids of added tokens are assigned as tokenizers does when it loads the file
// (it re-adds every token and only warns when the file's id differs): the id of
// an earlier added token with the same content, else the model's id of that
// token string, else a new id: the model's vocabulary size (its number of
// entries) for the first new one, one more than the last new one after that.
static void load_added(const Ctx *c, Tokenizer *t, size_t model_count, AddedSrc **out, int *n_out) {
    const cJSON *added = get(c->root, "added_tokens");
    *out = NULL;
    *n_out = 0;
    if (!added || cJSON_IsNull(added)) return;
    if (!cJSON_IsArray(added)) die("tokenizer %s: added_tokens must be an array", c->path);
    int n = cJSON_GetArraySize(added), k = 0;
    AddedSrc *src = xcalloc((size_t)(n ? n : 1) * sizeof(AddedSrc), "added tokens");
    int64_t max_added = -1;
    for (const cJSON *a = added->child; a; a = a->next) {
        const cJSON *content = get(a, "content");
        if (!cJSON_IsString(content)) die("tokenizer %s: an added token has no content", c->path);
        const char *s = content->valuestring;
        if (!s[0]) continue;  // tokenizers ignores empty added tokens
        const char *flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (get_bool(c, a, flags[f], false, "added token"))
                die("tokenizer %s: added token \"%s\" sets %s, which is not supported", c->path, s,
                    flags[f]);
        uint32_t file_id = (uint32_t)get_id(c, get(a, "id"), "added_tokens[].id");
        size_t slen = strlen(s), len;
        uint8_t *buf = xmalloc(slen + 1, "added token");
        bool mapped = map_token_string(s, buf, &len);
        int64_t id = -1;
        for (int i = 0; i < k && id < 0; i++)
            if (src[i].len == slen && memcmp(src[i].content, s, slen) == 0) id = src[i].id;
        if (id < 0 && mapped) id = tok_vocab_find(t, buf, len);
        if (id < 0) {
            id = max_added >= (int64_t)model_count ? max_added + 1 : (int64_t)model_count;
            max_added = id;
        }
        if ((uint32_t)id != file_id)
            warn("tokenizer %s: added token \"%s\" has id %u in the file, but tokenizers gives it "
                 "id %lld when it loads the file; femtotron does the same", c->path, s, file_id,
                 (long long)id);
        src[k].content = xmalloc(slen + 1, "added token");
        memcpy(src[k].content, s, slen + 1);
        src[k].len = slen;
        src[k].id = (uint32_t)id;
        src[k].normalized = get_bool(c, a, "normalized", true, "added token");
        k++;
        // Decoding passes added tokens through the ByteLevel decoder too: byte
        // characters become their bytes, other text stays as it is.
        if (mapped) set_token(t, (uint32_t)id, buf, len);
        else set_token(t, (uint32_t)id, (const uint8_t *)s, slen);
        free(buf);
        t->is_added[id] = 1;
    }
    *out = src;
    *n_out = k;
}

// ---------------------------------------------------------------- pipeline parts

static void push_step(const Ctx *c, Tokenizer *t, StepKind kind, int max_digits) {
    if (t->n_steps == MAX_STEPS) die("tokenizer %s: more than %d pre-tokenizer steps", c->path, MAX_STEPS);
    t->steps[t->n_steps++] = (PretokStep){kind, max_digits};
}

static void load_pretok(const Ctx *c, Tokenizer *t, const cJSON *p, bool *byte_level_seen) {
    const char *type = get_type(c, p, "pre_tokenizer");
    if (*byte_level_seen)
        die("tokenizer %s: pre-tokenizer %s after ByteLevel is not supported (ByteLevel must "
            "come last: it maps bytes to the characters later steps would see)", c->path, type);
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(p, "pretokenizers");
        if (!cJSON_IsArray(list)) die("tokenizer %s: Sequence pre-tokenizer without a list", c->path);
        for (const cJSON *q = list->child; q; q = q->next) load_pretok(c, t, q, byte_level_seen);
    } else if (!strcmp(type, "ByteLevel")) {
        if (get_bool(c, p, "add_prefix_space", true, "ByteLevel")) push_step(c, t, STEP_PREFIX_SPACE, 0);
        if (get_bool(c, p, "use_regex", true, "ByteLevel")) push_step(c, t, STEP_SPLIT_GPT2, 0);
        *byte_level_seen = true;
    } else if (!strcmp(type, "Split")) {
        const cJSON *pat = get(p, "pattern");
        const cJSON *re = pat ? get(pat, "Regex") : NULL;
        if (!cJSON_IsString(re))
            die("tokenizer %s: Split pre-tokenizer with a string (not regex) pattern is not supported",
                c->path);
        const cJSON *beh = get(p, "behavior");
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
            die("tokenizer %s: Split behavior %s is not supported (only Isolated)", c->path,
                cJSON_IsString(beh) ? beh->valuestring : "(missing)");
        if (get_bool(c, p, "invert", false, "Split"))
            die("tokenizer %s: Split with invert true is not supported", c->path);
        const char *r = re->valuestring;
        if (!strcmp(r, PRETOK_GPT2_PATTERN)) push_step(c, t, STEP_SPLIT_GPT2, 0);
        else if (!strcmp(r, PRETOK_LLAMA3_PATTERN)) push_step(c, t, STEP_SPLIT_LLAMA3, 3);
        else if (!strcmp(r, PRETOK_QWEN2_PATTERN)) push_step(c, t, STEP_SPLIT_LLAMA3, 1);
        else
            die("tokenizer %s: Split pattern %s is not supported (only the GPT-2, Llama 3 and "
                "Qwen2 patterns are implemented)", c->path, r);
    } else if (!strcmp(type, "Digits")) {
        push_step(c, t, get_bool(c, p, "individual_digits", false, "Digits") ? STEP_DIGITS_SINGLE
                                                                              : STEP_DIGITS_RUN, 0);
    } else {
        die("tokenizer %s: pre-tokenizer %s is not supported (only ByteLevel, Split, Digits and "
            "Sequence)", c->path, type);
    }
}

// Ids of a TemplateProcessing's special token by name.
static void template_ids(const Ctx *c, const cJSON *specials, const char *name, uint32_t **ids, int *n) {
    const cJSON *s = specials ? get(specials, name) : NULL;
    const cJSON *list = s ? get(s, "ids") : NULL;
    if (!cJSON_IsArray(list))
        die("tokenizer %s: TemplateProcessing names special token %s but gives no ids", c->path, name);
    for (const cJSON *v = list->child; v; v = v->next) {
        *ids = realloc(*ids, (size_t)(*n + 1) * sizeof(uint32_t));
        if (!*ids) die("out of memory");
        (*ids)[(*n)++] = (uint32_t)get_id(c, v, "a TemplateProcessing id");
    }
}

static void load_post(const Ctx *c, Tokenizer *t, const cJSON *p, int *templates) {
    if (!p || cJSON_IsNull(p)) return;
    const char *type = get_type(c, p, "post_processor");
    if (!strcmp(type, "ByteLevel")) return;  // trims offsets only
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(p, "processors");
        if (!cJSON_IsArray(list)) die("tokenizer %s: Sequence post-processor without a list", c->path);
        for (const cJSON *q = list->child; q; q = q->next) load_post(c, t, q, templates);
        return;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        die("tokenizer %s: post-processor %s is not supported (only ByteLevel, TemplateProcessing "
            "and Sequence)", c->path, type);
    if (++*templates > 1) die("tokenizer %s: more than one TemplateProcessing", c->path);
    const cJSON *single = get(p, "single"), *specials = get(p, "special_tokens");
    if (!cJSON_IsArray(single)) die("tokenizer %s: TemplateProcessing without a single template", c->path);
    bool after = false;
    for (const cJSON *item = single->child; item; item = item->next) {
        const cJSON *sp = get(item, "SpecialToken"), *seq = get(item, "Sequence");
        if (seq) {
            const cJSON *id = get(seq, "id");
            if (after || !cJSON_IsString(id) || strcmp(id->valuestring, "A") != 0)
                die("tokenizer %s: TemplateProcessing single template must hold sequence A once", c->path);
            after = true;
        } else if (sp && cJSON_IsString(get(sp, "id"))) {
            const char *name = get(sp, "id")->valuestring;
            if (after) template_ids(c, specials, name, &t->suffix_ids, &t->n_suffix);
            else template_ids(c, specials, name, &t->prefix_ids, &t->n_prefix);
        } else {
            die("tokenizer %s: TemplateProcessing item is neither SpecialToken nor Sequence", c->path);
        }
    }
    if (!after) die("tokenizer %s: TemplateProcessing single template has no sequence A", c->path);
}

static void check_decoder(const Ctx *c, const cJSON *d) {
    if (!d || cJSON_IsNull(d))
        die("tokenizer %s: no decoder; a byte-level BPE needs the ByteLevel decoder", c->path);
    const char *type = get_type(c, d, "decoder");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(d, "decoders");
        if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 1)
            die("tokenizer %s: decoder Sequence other than [ByteLevel] is not supported", c->path);
        check_decoder(c, list->child);
        return;
    }
    if (strcmp(type, "ByteLevel") != 0)
        die("tokenizer %s: decoder %s is not supported (only ByteLevel)", c->path, type);
}

static void check_normalizer(const Ctx *c, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return;
    const char *type = get_type(c, n, "normalizer");
    if (!strcmp(type, "Sequence")) {
        const cJSON *list = get(n, "normalizers");
        for (const cJSON *q = list ? list->child : NULL; q; q = q->next) check_normalizer(c, q);
        return;
    }
    die("tokenizer %s: normalizer %s is not supported (femtotron applies no normalizer; "
        "byte-level BPE tokenizers such as GPT-2's and Llama 3's have none)", c->path, type);
}

static const char *step_name(const PretokStep *s) {
    switch (s->kind) {
    case STEP_PREFIX_SPACE: return "prefix-space";
    case STEP_SPLIT_GPT2: return "gpt2-regex";
    case STEP_SPLIT_LLAMA3: return s->max_digits == 3 ? "llama3-regex" : "qwen2-regex";
    case STEP_DIGITS_SINGLE: return "digits(individual)";
    case STEP_DIGITS_RUN: return "digits";
    }
    return "?";
}

// ---------------------------------------------------------------- public API

Tokenizer *tokenizer_load(const char *path) {
    static int mapping_built = 0;
    if (!mapping_built) {
        build_char_to_byte();
        mapping_built = 1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("cannot open tokenizer %s", path);
    if (fseek(f, 0, SEEK_END) != 0) die_errno("cannot read tokenizer %s", path);
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) die_errno("cannot read tokenizer %s", path);
    char *text = xmalloc((size_t)size + 1, "tokenizer.json text");
    if (fread(text, 1, (size_t)size, f) != (size_t)size) die_errno("cannot read tokenizer %s", path);
    fclose(f);
    text[size] = 0;
    cJSON *root = cJSON_ParseWithLength(text, (size_t)size);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        die("tokenizer %s: not valid JSON (near byte %ld)", path,
            at && at >= text && at <= text + size ? (long)(at - text) : -1L);
    }
    free(text);
    Ctx c = {path, root};
    Tokenizer *t = xcalloc(sizeof(Tokenizer), "tokenizer");
    const char *ignored[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(root, ignored[i]);
        if (v && !cJSON_IsNull(v))
            warn("tokenizer %s: %s is set; femtotron ignores it and encodes whole texts", path, ignored[i]);
    }
    check_normalizer(&c, get(root, "normalizer"));
    uint32_t max_id = 0;
    load_model(&c, t, get(root, "model"), &max_id);
    AddedSrc *added;
    int n_added;
    load_added(&c, t, (size_t)cJSON_GetArraySize(get(get(root, "model"), "vocab")), &added, &n_added);
    fill_added_set(&t->added_raw, added, n_added, false);
    fill_added_set(&t->added_norm, added, n_added, true);
    bool newline_in_added = false;
    for (int i = 0; i < n_added; i++) newline_in_added |= memchr(added[i].content, '\n', added[i].len) != NULL;
    free(added);  // the contents stay, owned by the sets

    const cJSON *pre = get(root, "pre_tokenizer");
    bool byte_level_seen = false;
    if (pre && !cJSON_IsNull(pre)) load_pretok(&c, t, pre, &byte_level_seen);
    if (!byte_level_seen)
        die("tokenizer %s: the pre-tokenizer has no ByteLevel step; only byte-level BPE "
            "tokenizers are supported", path);
    int templates = 0;
    load_post(&c, t, get(root, "post_processor"), &templates);
    check_decoder(&c, get(root, "decoder"));

    // Cuts are safe when a regex split makes "x\nY" a boundary and nothing glues
    // pieces back: no prefix space, no added token spanning a newline.
    bool has_split = false, prefix = false;
    for (int i = 0; i < t->n_steps; i++) {
        has_split |= t->steps[i].kind == STEP_SPLIT_GPT2 || t->steps[i].kind == STEP_SPLIT_LLAMA3;
        prefix |= t->steps[i].kind == STEP_PREFIX_SPACE;
    }
    t->cut_ok = has_split && !prefix && !newline_in_added;
    const char *eots[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    t->eot = -1;
    for (int i = 0; i < 4 && t->eot < 0; i++) {
        int64_t id = tokenizer_token_id(t, eots[i]);
        if (id >= 0 && t->is_added[id]) t->eot = id;
    }
    int off = snprintf(t->desc, sizeof t->desc, "%s (BPE, %u ids, %zu merges, %d added tokens, "
                       "pre-tokenizer", path, t->vocab_size, t->n_merges, n_added);
    for (int i = 0; i < t->n_steps && off < (int)sizeof t->desc; i++)
        off += snprintf(t->desc + off, sizeof t->desc - (size_t)off, " %s", step_name(&t->steps[i]));
    if (off < (int)sizeof t->desc) snprintf(t->desc + off, sizeof t->desc - (size_t)off, ")");
    cJSON_Delete(root);
    return t;
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
