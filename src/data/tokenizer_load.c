// data/tokenizer_load.c — loading and validating a Hugging Face tokenizer.json:
// the added tokens, pre-tokenizer, post-processor and decoder around the model
// (tokenizer_vocab.c), and tokenizer_load itself, which tells the two kinds apart
// (a ByteLevel pre-tokenizer: byte-level BPE; none: character-level BPE, whose
// normalizer, Metaspace and decoder are loaded by tokenizer_spm_load.c). What is supported, and
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
#include "data/tokenizer_spm.h"
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
    s->only_first = -1;
    for (int b = 0; b < 256; b++)
        if (s->first[b + 1] > s->first[b]) s->only_first = s->only_first == -1 ? b : -2;
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
        // Character-level BPE: the content is the token's text, never mapped.
        bool mapped = !t->char_bpe && tok_map_token_string(s, buf, &len);
        int64_t id = -1;
        for (int i = 0; i < k && id < 0; i++)
            if (src[i].len == slen && memcmp(src[i].content, s, slen) == 0) id = src[i].id;
        if (id < 0 && mapped) id = tok_vocab_find(t, buf, len);
        if (id < 0 && t->char_bpe) id = tok_vocab_find(t, (const uint8_t *)s, slen);
        if (id < 0) {
            id = max_added >= (int64_t)model_count ? max_added + 1 : (int64_t)model_count;
            max_added = id;
        }
        if ((uint32_t)id != file_id)
            warn("tokenizer %s: added token \"%s\" has id %u in the file, but tokenizers gives it "
                 "id %lld when it loads the file; femtotron does the same", c->path, s, file_id,
                 (long long)id);
        src[k].id = (uint32_t)id;
        src[k].normalized = get_bool(c, a, "normalized", true, "added token");
        if (src[k].normalized && t->n_norm) {
            // tokenizers matches a normalized added token in normalized text, in its
            // normalized form (Llama 2's Prepend makes "a b" "▁a▁b").
            size_t cap = 0, tmp_cap = 0;
            uint8_t *tmp = NULL;
            src[k].content = NULL;
            src[k].len = tok_normalize(t, (const uint8_t *)s, slen, &src[k].content, &cap, &tmp, &tmp_cap);
            free(tmp);
        } else {
            src[k].content = xmalloc(slen + 1, "added token");
            memcpy(src[k].content, s, slen + 1);
            src[k].len = slen;
        }
        k++;
        // Decoding passes added tokens through the ByteLevel decoder too: byte
        // characters become their bytes, other text stays as it is. A normalized one
        // decodes from its normalized form (tokenizers' id_to_token gives that).
        if (mapped) tok_set_token(t, (uint32_t)id, buf, len);
        else if (src[k - 1].normalized && t->n_norm) tok_set_token(t, (uint32_t)id, src[k - 1].content, src[k - 1].len);
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
    } else if (!strcmp(type, "Metaspace")) {
        if (!t->char_bpe)
            die("tokenizer %s: pre-tokenizer Metaspace with ByteLevel is not supported", c->path);
        push_step(c, t, STEP_METASPACE, 0);
        tok_load_metaspace(c, t, p);
    } else if (!strcmp(type, "Digits")) {
        push_step(c, t, get_bool(c, p, "individual_digits", false, "Digits") ? STEP_DIGITS_SINGLE
                                                                              : STEP_DIGITS_RUN, 0);
    } else {
        die("tokenizer %s: pre-tokenizer %s is not supported (only ByteLevel, Split, Digits, "
            "Metaspace and Sequence)", c->path, type);
    }
}

// Does pre-tokenizer p hold a ByteLevel step (so the model is byte-level BPE)?
static bool has_byte_level(const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return false;
    const cJSON *type = get(p, "type"), *list = get(p, "pretokenizers");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "ByteLevel")) return true;
    for (const cJSON *q = cJSON_IsArray(list) ? list->child : NULL; q; q = q->next)
        if (has_byte_level(q)) return true;
    return false;
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

static const char *step_name(const PretokStep *s) {
    switch (s->kind) {
    case STEP_PREFIX_SPACE: return "prefix-space";
    case STEP_SPLIT_GPT2: return "gpt2-regex";
    case STEP_SPLIT_LLAMA3: return s->max_digits == 3 ? "llama3-regex" : "qwen2-regex";
    case STEP_DIGITS_SINGLE: return "digits(individual)";
    case STEP_DIGITS_RUN: return "digits";
    case STEP_METASPACE: return "metaspace";
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
    const cJSON *pre = get(root, "pre_tokenizer");
    t->char_bpe = !has_byte_level(pre);
    const cJSON *norm = get(root, "normalizer");
    if (!t->char_bpe && norm && !cJSON_IsNull(norm))
        die("tokenizer %s: normalizer %s is not supported with a byte-level BPE (GPT-2's and Llama 3's "
            "have none)", path, get_type(&c, norm, "normalizer"));
    tok_load_normalizer(&c, t, norm);
    uint32_t max_id = 0;
    tok_load_model(&c, t, get(root, "model"), &max_id);
    AddedSrc *added;
    int n_added;
    load_added(&c, t, (size_t)cJSON_GetArraySize(get(get(root, "model"), "vocab")), &added, &n_added);
    fill_added_set(&t->added_raw, added, n_added, false);
    fill_added_set(&t->added_norm, added, n_added, true);
    bool newline_in_added = false, space_in_added = false;
    for (int i = 0; i < n_added; i++) {
        newline_in_added |= memchr(added[i].content, '\n', added[i].len) != NULL;
        space_in_added |= memchr(added[i].content, ' ', added[i].len) != NULL;
    }
    free(added);  // the contents stay, owned by the sets

    bool byte_level_seen = false;
    if (pre && !cJSON_IsNull(pre)) load_pretok(&c, t, pre, &byte_level_seen);
    if (t->char_bpe && (t->n_steps > 1 || (t->n_steps == 1 && t->steps[0].kind != STEP_METASPACE)))
        die("tokenizer %s: a pre-tokenizer without ByteLevel must be a single Metaspace (a "
            "SentencePiece-style BPE); %s is not supported", path, step_name(&t->steps[0]));
    if (t->char_bpe && t->n_steps && t->n_norm)
        die("tokenizer %s: a normalizer together with the Metaspace pre-tokenizer is not supported", path);
    int templates = 0;
    load_post(&c, t, get(root, "post_processor"), &templates);
    if (t->char_bpe) {
        tok_load_char_decoder(&c, t, get(root, "decoder"));
        tok_build_char_tables(t);
        tok_build_shown(t);
    } else {
        check_decoder(&c, get(root, "decoder"));
    }

    // Cuts are safe when a regex split makes "x\nY" a boundary and nothing glues
    // pieces back: no prefix space, no added token spanning a newline.
    bool has_split = false, prefix = false;
    for (int i = 0; i < t->n_steps; i++) {
        has_split |= t->steps[i].kind == STEP_SPLIT_GPT2 || t->steps[i].kind == STEP_SPLIT_LLAMA3;
        prefix |= t->steps[i].kind == STEP_PREFIX_SPACE;
    }
    bool prepends = false;
    for (int i = 0; i < t->n_norm; i++) prepends |= t->norm[i].kind == NORM_PREPEND;
    t->cut_ok = has_split && !prefix && !newline_in_added && !prepends;
    // Character-level: no normalizer (Llama 2's legacy Prepend would put a "▁" before
    // every part; its whole-text words are cut inside tokenizer_bpe.c instead).
    if (t->char_bpe) t->cut_ok = !t->n_norm && !space_in_added;
    const char *eots[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    t->eot = -1;
    for (int i = 0; i < 4 && t->eot < 0; i++) {
        int64_t id = tokenizer_token_id(t, eots[i]);
        if (id >= 0 && t->is_added[id]) t->eot = id;
    }
    int off = snprintf(t->desc, sizeof t->desc, "%s (%s BPE, %u ids, %zu merges, %d added tokens, "
                       "%s%s%snormalizer %s, pre-tokenizer", path, t->char_bpe ? "SentencePiece-style" : "byte-level",
                       t->vocab_size, t->n_merges, n_added, t->byte_fallback ? "byte fallback, " : "",
                       t->unk_id >= 0 ? "unk, " : "", t->ignore_merges ? "ignore_merges, " : "",
                       t->n_norm ? (t->norm[0].kind == NORM_PREPEND ? "prepend+replace" : "replace") : "none");
    if (!t->n_steps && off < (int)sizeof t->desc) off += snprintf(t->desc + off, sizeof t->desc - (size_t)off, " none");
    for (int i = 0; i < t->n_steps && off < (int)sizeof t->desc; i++)
        off += snprintf(t->desc + off, sizeof t->desc - (size_t)off, " %s", step_name(&t->steps[i]));
    if (off < (int)sizeof t->desc) snprintf(t->desc + off, sizeof t->desc - (size_t)off, ")");
    cJSON_Delete(root);
    return t;
}
