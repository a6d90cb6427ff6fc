// data/tokenizer_json.h — what the tokenizer.json loader files share: the load
// context, small cJSON accessors that die with the file's name, and the model
// loader (tokenizer_vocab.c) that tokenizer_load.c calls. Not a public API.
#ifndef FEMTOTRON_TOKENIZER_JSON_H
#define FEMTOTRON_TOKENIZER_JSON_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer_impl.h"
#include "util.h"

typedef struct {
    const char *path;
    cJSON *root;
    size_t file_bytes;  // every id is bounded by it: a file of n bytes names fewer than n tokens
} Ctx;

static inline const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static inline bool get_bool(const Ctx *c, const cJSON *obj, const char *key, bool dflt, const char *where) {
    const cJSON *v = get(obj, key);
    if (!v || cJSON_IsNull(v)) return dflt;
    if (!cJSON_IsBool(v)) die("tokenizer %s: %s.%s must be true or false", c->path, where, key);
    return cJSON_IsTrue(v);
}

static inline const char *get_type(const Ctx *c, const cJSON *obj, const char *where) {
    const cJSON *v = get(obj, "type");
    if (!cJSON_IsString(v)) die("tokenizer %s: %s has no \"type\"", c->path, where);
    return v->valuestring;
}

// A token id: a non-negative integer below the file's size in bytes (a file of n
// bytes cannot describe n tokens, so a larger id is corrupt; it would otherwise
// size the id tables: 11e8 asked for about 14 GB).
static inline int64_t get_id(const Ctx *c, const cJSON *v, const char *what) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        die("tokenizer %s: %s must be a non-negative integer id", c->path, what);
    if (v->valuedouble >= (double)c->file_bytes)
        die("tokenizer %s: %s %.0f is not below the file's size (%zu bytes): the file cannot hold "
            "that many tokens, so it is corrupt", c->path, what, v->valuedouble, c->file_bytes);
    return (int64_t)v->valuedouble;
}

// tokenizer_vocab.c
// Fill the GPT-2 byte <-> unicode mapping that tok_map_token_string reads.
void tok_build_char_to_byte(void);
// Bytes a token string stands for under the mapping. Returns 0 (and out untouched
// beyond *len) when a character is not one of the 256 byte characters.
int tok_map_token_string(const char *s, uint8_t *out, size_t *len);
// Give id the token bytes (growing the id tables as needed).
void tok_set_token(Tokenizer *t, uint32_t id, const uint8_t *bytes, size_t len);
// The BPE model: vocabulary, byte tokens, unk_token, merges; *max_id gets 1 + its
// largest id.
void tok_load_model(const Ctx *c, Tokenizer *t, const cJSON *model, uint32_t *max_id);

#endif
