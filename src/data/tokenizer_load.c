// data/tokenizer_load.c — loading and validating a Hugging Face tokenizer.json:
// the added tokens, pre-tokenizer, post-processor, decoder and normalizer around
// the model (tokenizer_vocab.c), and tokenizer_load itself. What is supported, and
// what is refused, is in tokenizer.h.
#define _POSIX_C_SOURCE 200809L
#include "data/tokenizer.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/pretokenize.h"
#include "data/tokenizer_impl.h"
#include "data/tokenizer_json.h"
#include "util.h"


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
        bool mapped = tok_map_token_string(s, buf, &len);
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
        if (mapped) tok_set_token(t, (uint32_t)id, buf, len);
        else tok_set_token(t, (uint32_t)id, (const uint8_t *)s, slen);
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
        tok_build_char_to_byte();
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
    Ctx c = {path, root, (size_t)size};
    Tokenizer *t = xcalloc(sizeof(Tokenizer), "tokenizer");
    const char *ignored[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = get(root, ignored[i]);
        if (v && !cJSON_IsNull(v))
            warn("tokenizer %s: %s is set; femtotron ignores it and encodes whole texts", path, ignored[i]);
    }
    check_normalizer(&c, get(root, "normalizer"));
    uint32_t max_id = 0;
    tok_load_model(&c, t, get(root, "model"), &max_id);
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
