// config.c — the run configuration. ONE table of keys (below) drives the
// defaults, JSON loading, `--section.key value` overrides, unknown-key errors,
// --help, JSON output and the Hugging Face config.json; adding a key is one line
// there plus its field in config.h. Cross-key rules live in config_validate.
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

typedef enum { KT_INT, KT_U64, KT_DOUBLE, KT_BOOL, KT_STRING } KeyType;

typedef struct {
    const char *section;
    const char *key;
    KeyType type;
    size_t offset;       // offsetof(Config, section.key)
    const char *def;     // default, written as an override value would be
    const char *hf_def;  // model keys: transformers' LlamaConfig default, used when
                         // FROM/config.json lacks the key (NULL: no such default)
    const char *help;
} KeyDef;

#define KEY(sec, name, type, def, help) \
    {#sec, #name, type, offsetof(Config, sec.name), def, NULL, help}
#define MKEY(name, type, def, hf_def, help) \
    {"model", #name, type, offsetof(Config, model.name), def, hf_def, help}

static const KeyDef KEYS[] = {
    // Hugging Face LlamaConfig keys. num_key_value_heads has no fixed HF default:
    // transformers uses num_attention_heads when the key is absent.
    MKEY(hidden_size, KT_INT, "256", "4096", "width of the residual stream (D)"),
    MKEY(intermediate_size, KT_INT, "768", "11008", "hidden width of the SwiGLU MLP"),
    MKEY(num_hidden_layers, KT_INT, "4", "32", "decoder layers (L)"),
    MKEY(num_attention_heads, KT_INT, "4", "32", "query heads (H); head dim = hidden_size / H"),
    MKEY(num_key_value_heads, KT_INT, "2", NULL,
         "key/value heads (grouped-query attention); must divide num_attention_heads"),
    MKEY(vocab_size, KT_INT, "257", "32000",
         "vocabulary size (257 = byte-level tokenizer: 256 bytes + end-of-text)"),
    MKEY(max_position_embeddings, KT_INT, "1024", "2048",
         "longest sequence the model is built for; training.seq_length <= this"),
    MKEY(rms_norm_eps, KT_DOUBLE, "1e-5", "1e-6", "epsilon inside RMSNorm"),
    MKEY(rope_theta, KT_DOUBLE, "10000", "10000", "RoPE base frequency"),
    MKEY(initializer_range, KT_DOUBLE, "0.02", "0.02", "std of the normal init of every matrix"),
    MKEY(tie_word_embeddings, KT_BOOL, "false", "false",
         "output head shares the embedding matrix"),
    MKEY(from, KT_STRING, "", NULL,
         "local Hugging Face model directory: its config.json gives the model keys not set here"),

    KEY(data, train, KT_STRING, "", "training token shards: llm.c .bin file or glob (required)"),
    KEY(data, val, KT_STRING, "", "validation token shards: file or glob (\"\" = none)"),
    KEY(data, shuffle, KT_BOOL, "false", "seeded permutation of the sequences every epoch"),

    KEY(training, seed, KT_U64, "1234", "seed of initialisation and data order"),
    KEY(training, steps, KT_INT, "100", "optimizer steps in total (resumed steps count)"),
    KEY(training, seq_length, KT_INT, "256", "tokens per sequence (S)"),
    KEY(training, micro_batch_size, KT_INT, "8", "sequences per micro-batch per data-parallel rank (B)"),
    KEY(training, grad_acc_steps, KT_INT, "0",
         "micro-batches per optimizer step (0 = derive from global_batch_size)"),
    KEY(training, global_batch_size, KT_INT, "0",
         "sequences per optimizer step (0 = grad_acc_steps * micro_batch_size * dp)"),
    KEY(training, lr, KT_DOUBLE, "3e-4", "peak learning rate (after warmup)"),
    KEY(training, min_lr, KT_DOUBLE, "3e-5", "lowest learning rate, reached at the end of the decay"),
    KEY(training, warmup_steps, KT_INT, "10", "steps of linear warmup"),
    KEY(training, weight_decay, KT_DOUBLE, "0.1", "AdamW decoupled weight decay (matrices only)"),
    KEY(training, beta1, KT_DOUBLE, "0.9", "AdamW first-moment decay"),
    KEY(training, beta2, KT_DOUBLE, "0.95", "AdamW second-moment decay"),
    KEY(training, eps, KT_DOUBLE, "1e-8", "AdamW epsilon"),
    KEY(training, grad_clip, KT_DOUBLE, "1.0", "max global gradient L2 norm (0 = no clipping)"),
    KEY(training, threads, KT_INT, "0", "threads per rank (0 = cores / ranks on the node)"),
    KEY(training, peak_flops, KT_DOUBLE, "0", "peak FLOP/s per rank for MFU (0 = measure GEMM peak)"),
    KEY(training, max_bad_steps, KT_INT, "5",
        "stop after this many steps in a row with a non-finite loss or gradient norm"),

    KEY(parallel, dp, KT_INT, "1", "data-parallel ranks"),
    KEY(parallel, tp, KT_INT, "1", "tensor-parallel ranks"),
    KEY(parallel, pp, KT_INT, "1", "pipeline-parallel stages"),
    KEY(parallel, cp, KT_INT, "1", "context-parallel ranks"),
    KEY(parallel, zero, KT_INT, "0", "ZeRO stage (0 = none, 1 = optimizer state, 2 = +gradients, 3 = +parameters)"),
    KEY(parallel, sequence_parallel, KT_BOOL, "false",
        "with tp > 1: norms, residual adds and the loss input on token shards (all-gather/reduce-scatter)"),
    KEY(parallel, order, KT_STRING, "dp-pp-cp-tp",
        "rank order, outermost first (tp fastest): dp-pp-cp-tp or pp-dp-cp-tp"),
    KEY(parallel, bucket_mb, KT_DOUBLE, "25", "data-parallel gradient bucket size (MiB)"),
    KEY(parallel, overlap, KT_BOOL, "true",
        "reduce each gradient bucket during backward as soon as it is complete (false: after backward)"),
    KEY(parallel, pp_schedule, KT_STRING, "1f1b", "pipeline schedule: 1f1b, afab (all forwards, then all backwards) or interleaved"),
    KEY(parallel, pp_virtual, KT_INT, "1", "model chunks per pipeline rank (interleaved schedule; 1 otherwise)"),
    KEY(parallel, pp_layers, KT_STRING, "",
        "layers per (virtual) pipeline stage, e.g. \"3,3,2\" (\"\" = balance estimated cost)"),
    KEY(parallel, timeout_s, KT_DOUBLE, "300", "abort the job when a collective has not finished after this many seconds"),

    KEY(checkpoint, dir, KT_STRING, "", "checkpoint directory (\"\" = no checkpoints)"),
    KEY(checkpoint, every, KT_INT, "0", "save every N steps (0 = only at the end)"),
    KEY(checkpoint, resume, KT_BOOL, "false", "continue from DIR/latest"),

    KEY(logging, metrics, KT_STRING, "", "JSON-lines metrics file (\"\" = none)"),
    KEY(logging, every, KT_INT, "1", "print and log every N steps"),
    KEY(logging, val_every, KT_INT, "0", "validate every N steps (0 = never; needs data.val)"),
    KEY(logging, val_batches, KT_INT, "4", "micro-batches per validation"),
    KEY(logging, verbose, KT_BOOL, "false", "every rank prints its grid coordinates at start-up"),
    KEY(logging, trace, KT_STRING, "",
        "Chrome trace-event JSON timeline of every rank's forward/backward/send/recv/reduce/optimizer (opens in Perfetto)"),
};
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))
_Static_assert(sizeof KEYS / sizeof KEYS[0] <= 64, "Config.keys_set has 64 bits");

static const char *const SECTIONS[] = {"model", "data", "training", "parallel", "checkpoint", "logging"};
#define NSECTIONS ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))

// Largest integer a JSON number (an IEEE double) holds exactly.
#define JSON_MAX_EXACT 9007199254740992.0

// ---------------------------------------------------------------- table lookups

static void *field_ptr(Config *c, const KeyDef *k) { return (char *)c + k->offset; }

static int key_index(const char *section, size_t section_len, const char *key) {
    for (int i = 0; i < NKEYS; i++)
        if (strlen(KEYS[i].section) == section_len &&
            strncmp(KEYS[i].section, section, section_len) == 0 && strcmp(KEYS[i].key, key) == 0)
            return i;
    return -1;
}

static int is_section(const char *s) {
    for (int i = 0; i < NSECTIONS; i++)
        if (strcmp(SECTIONS[i], s) == 0) return 1;
    return 0;
}

static int is_model_from(const KeyDef *k) {
    return strcmp(k->section, "model") == 0 && strcmp(k->key, "from") == 0;
}

static const char *type_name(KeyType t) {
    switch (t) {
    case KT_INT: return "int";
    case KT_U64: return "uint64";
    case KT_DOUBLE: return "float";
    case KT_BOOL: return "bool";
    case KT_STRING: return "string";
    }
    return "?";
}

// What a value of this type must look like, for error messages.
static const char *type_expect(KeyType t) {
    switch (t) {
    case KT_INT: return "an integer";
    case KT_U64: return "a non-negative integer";
    case KT_DOUBLE: return "a finite number";
    case KT_BOOL: return "true or false";
    case KT_STRING: return "a string";
    }
    return "?";
}

// Edit distance, for "did you mean" hints on misspelt keys.
static int edit_distance(const char *a, const char *b) {
    enum { N = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= N || lb >= N) return N;
    int row[N], prev[N];
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, row, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

static void die_unknown_key(const char *origin, const char *dotted) {
    int best = -1, best_d = 4;
    for (int i = 0; i < NKEYS; i++) {
        char name[96];
        snprintf(name, sizeof name, "%s.%s", KEYS[i].section, KEYS[i].key);
        int d = edit_distance(dotted, name);
        if (d < best_d) best_d = d, best = i;
    }
    if (best >= 0)
        die("%s: unknown key \"%s\" (did you mean \"%s.%s\"?)", origin, dotted,
            KEYS[best].section, KEYS[best].key);
    die("%s: unknown key \"%s\" (see ./femtotron train --help for every key)", origin, dotted);
}

// ---------------------------------------------------------------- setting values

// Parse `text` by the key's type into c. Used for the defaults in the table and
// for command-line overrides, so both accept exactly the same spellings.
static void set_text(Config *c, const KeyDef *k, const char *text, const char *origin) {
    void *p = field_ptr(c, k);
    char *end = NULL;
    errno = 0;
    switch (k->type) {
    case KT_INT: {
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno || v < INT_MIN || v > INT_MAX) break;
        *(int *)p = (int)v;
        return;
    }
    case KT_U64: {
        // strtoull accepts "-1" (wrapping it), so refuse any sign ourselves.
        if (text[0] < '0' || text[0] > '9') break;
        unsigned long long v = strtoull(text, &end, 10);
        if (*end || errno) break;
        *(uint64_t *)p = (uint64_t)v;
        return;
    }
    case KT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v)) break;
        *(double *)p = v;
        return;
    }
    case KT_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0) {
            *(bool *)p = true;
            return;
        }
        if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0) {
            *(bool *)p = false;
            return;
        }
        die("%s: \"%s.%s\" must be true, false, 1 or 0, got \"%s\"", origin, k->section, k->key, text);
    case KT_STRING:
        if (strlen(text) >= CFG_PATH_MAX)
            die("%s: \"%s.%s\" is %zu characters long; the limit is %d", origin, k->section, k->key,
                strlen(text), CFG_PATH_MAX - 1);
        memcpy(p, text, strlen(text) + 1);
        return;
    }
    die("%s: \"%s.%s\" must be %s, got \"%s\"", origin, k->section, k->key, type_expect(k->type), text);
}

// Set from a JSON value, which must have the key's JSON type. `name` is how the
// key is spelt in that file ("training.steps" in a run config, "hidden_size" in a
// Hugging Face config.json).
static void set_json(Config *c, const KeyDef *k, const cJSON *v, const char *origin, const char *name) {
    void *p = field_ptr(c, k);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
    switch (k->type) {
    case KT_INT:
        if (!cJSON_IsNumber(v) || d != floor(d) || d < INT_MIN || d > INT_MAX) break;
        *(int *)p = (int)d;
        return;
    case KT_U64:
        // A JSON number holds integers exactly only up to 2^53; larger seeds are
        // written (by config_to_json) and accepted as decimal strings.
        if (cJSON_IsString(v) && v->valuestring[0] >= '0' && v->valuestring[0] <= '9') {
            char *end;
            errno = 0;
            unsigned long long u = strtoull(v->valuestring, &end, 10);
            if (*end || errno) break;
            *(uint64_t *)p = (uint64_t)u;
            return;
        }
        if (!cJSON_IsNumber(v) || d != floor(d) || d < 0 || d > JSON_MAX_EXACT) break;
        *(uint64_t *)p = (uint64_t)d;
        return;
    case KT_DOUBLE:
        if (!cJSON_IsNumber(v)) break;
        *(double *)p = d;
        return;
    case KT_BOOL:
        if (!cJSON_IsBool(v)) break;
        *(bool *)p = cJSON_IsTrue(v);
        return;
    case KT_STRING:
        if (!cJSON_IsString(v)) break;
        if (strlen(v->valuestring) >= CFG_PATH_MAX)
            die("%s: \"%s\" is %zu characters long; the limit is %d", origin, name,
                strlen(v->valuestring), CFG_PATH_MAX - 1);
        memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
        return;
    }
    char *shown = cJSON_PrintUnformatted(v);
    if (shown && strlen(shown) > 40) strcpy(shown + 37, "...");
    die("%s: \"%s\" must be %s (JSON %s), got %s", origin, name, type_expect(k->type),
        k->type == KT_STRING ? "string" : k->type == KT_BOOL ? "true/false" : "number",
        shown ? shown : "?");
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++) set_text(c, &KEYS[i], KEYS[i].def, "built-in default");
    c->keys_set = 0;
}

// ---------------------------------------------------------------- reading files

// Whole file as a NUL-terminated string (caller frees); NULL with errno set.
static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory reading %s", path);
    size_t n;
    while ((n = fread(buf + len, 1, cap - 1 - len, f)) > 0) {
        len += n;
        if (len == cap - 1) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) die("out of memory reading %s", path);
            buf = bigger;
        }
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

// Parse or die with the line, column and a few characters where cJSON stopped.
static cJSON *parse_or_die(const char *text, const char *origin) {
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    if (root) return root;
    const char *err = cJSON_GetErrorPtr();
    if (!err) die("%s: invalid JSON", origin);
    int line = 1, col = 1;
    for (const char *p = text; p < err && *p; p++) {
        if (*p == '\n') line++, col = 1;
        else col++;
    }
    if (!*err) die("%s: invalid JSON: unexpected end of text (unclosed brace, bracket or string?)", origin);
    // A few characters either side of where parsing stopped, on one line.
    char near[40];
    size_t n = 0;
    const char *from = err - text > 12 ? err - 12 : text;
    for (const char *p = from; *p && p - err < 12 && n < sizeof near - 1; p++)
        near[n++] = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
    near[n] = '\0';
    die("%s: invalid JSON at line %d, column %d, near `%s`", origin, line, col, near);
}

// Child named `name` of an object, matched case-sensitively (cJSON's own lookup
// ignores case, which would accept "Hidden_Size").
static const cJSON *child(const cJSON *obj, const char *name) {
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next)
        if (it->string && strcmp(it->string, name) == 0) return it;
    return NULL;
}

static void die_on_duplicate(const cJSON *item, const char *origin, const char *what) {
    for (const cJSON *o = item->next; o; o = o->next)
        if (strcmp(o->string, item->string) == 0) die("%s: %s \"%s\" is given twice", origin, what, item->string);
}

// ---------------------------------------------------------------- model.from

// Die unless the optional key `name` of a Hugging Face config is absent, null or
// false (a feature flag we do not implement).
static void hf_require_false(const cJSON *root, const char *name, const char *origin, const char *feature) {
    const cJSON *v = child(root, name);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return;
    if (cJSON_IsTrue(v)) die("%s: %s = true: %s is not supported; only false", origin, name, feature);
    die("%s: \"%s\" must be true or false", origin, name);
}

static void hf_require_string(const cJSON *root, const char *name, const char *want, const char *origin,
                              const char *why) {
    const cJSON *v = child(root, name);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsString(v)) die("%s: \"%s\" must be a string", origin, name);
    if (strcmp(v->valuestring, want) != 0)
        die("%s: %s = \"%s\" is not supported: %s; only \"%s\"", origin, name, v->valuestring, why, want);
}

// rope_scaling / rope_parameters: plain RoPE only (no rope_type, or "default").
static void hf_require_plain_rope(const cJSON *v, const char *name, const char *origin) {
    if (!v || cJSON_IsNull(v)) return;
    const cJSON *t = child(v, "rope_type");
    if (!t) t = child(v, "type");
    if (cJSON_IsObject(v) && (!t || (cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0))) {
        // rope_parameters (transformers >= 5) carries rope_theta and nothing else
        // we honour; a "default" rope_scaling with a factor would still scale.
        if (strcmp(name, "rope_scaling") == 0 && child(v, "factor"))
            die("%s: rope_scaling with a factor is not supported (plain RoPE only); use null", origin);
        return;
    }
    char *shown = cJSON_PrintUnformatted(v);
    if (shown && strlen(shown) > 60) strcpy(shown + 57, "...");
    die("%s: %s = %s: RoPE scaling is not supported by this version; only plain RoPE (null)", origin, name,
        shown ? shown : "?");
}

// Model keys from FROM/config.json into `hf` (all of them: the file's value, or
// transformers' default when the file lacks the key).
static void read_hf_model(ModelConfig *hf, const char *from) {
    char path[CFG_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", from);
    char origin[CFG_PATH_MAX + 64];
    snprintf(origin, sizeof origin, "model.from: %s", path);
    char *text = read_text_file(path);
    if (!text)
        die_errno("model.from = \"%s\": cannot read %s (model.from must be a local Hugging Face model directory)",
                  from, path);
    cJSON *root = parse_or_die(text, origin);
    free(text);
    if (!cJSON_IsObject(root)) die("%s: the top level must be a JSON object", origin);

    // Features of LlamaConfig this trainer cannot honour: refuse rather than
    // train a different model than the file describes.
    hf_require_string(root, "model_type", "llama", origin, "femtotron trains Llama models");
    hf_require_string(root, "hidden_act", "silu", origin, "the MLP is SwiGLU");
    hf_require_false(root, "attention_bias", origin, "attention_bias (biases on q/k/v/o)");
    hf_require_false(root, "mlp_bias", origin, "mlp_bias (biases on gate/up/down)");
    hf_require_plain_rope(child(root, "rope_scaling"), "rope_scaling", origin);
    hf_require_plain_rope(child(root, "rope_parameters"), "rope_parameters", origin);
    if (child(root, "quantization_config"))
        die("%s: quantization_config: quantized weights are not supported; give an fp32/bf16/fp16 model", origin);
    const cJSON *drop = child(root, "attention_dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0.0))
        die("%s: attention_dropout must be 0: dropout is not supported by this version", origin);

    Config tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        if (!k->hf_def) continue;
        set_text(&tmp, k, k->hf_def, "transformers default");
        const cJSON *v = child(root, k->key);
        if (v && !cJSON_IsNull(v)) set_json(&tmp, k, v, origin, k->key);
    }
    // transformers >= 5 moves rope_theta into rope_parameters.
    const cJSON *rp = child(root, "rope_parameters");
    const cJSON *theta = rp ? child(rp, "rope_theta") : NULL;
    if (!child(root, "rope_theta") && theta) {
        if (!cJSON_IsNumber(theta)) die("%s: \"rope_parameters.rope_theta\" must be a number", origin);
        tmp.model.rope_theta = theta->valuedouble;
    }
    const cJSON *kv = child(root, "num_key_value_heads");
    if (kv && !cJSON_IsNull(kv)) {
        int i = key_index("model", 5, "num_key_value_heads");
        set_json(&tmp, &KEYS[i], kv, origin, "num_key_value_heads");
    } else {
        tmp.model.num_key_value_heads = tmp.model.num_attention_heads;  // LlamaConfig's rule
    }
    const cJSON *hd = child(root, "head_dim");
    if (hd && !cJSON_IsNull(hd)) {
        int h = tmp.model.num_attention_heads, d = tmp.model.hidden_size;
        if (!cJSON_IsNumber(hd)) die("%s: \"head_dim\" must be an integer", origin);
        if (h <= 0 || d % h != 0 || hd->valuedouble != (double)(d / h))
            die("%s: head_dim = %g is not hidden_size / num_attention_heads = %d / %d: "
                "a separate head_dim is not supported by this version",
                origin, hd->valuedouble, d, h);
    }
    cJSON_Delete(root);
    *hf = tmp.model;
}

void config_resolve_model(Config *c) {
    if (!c->model.from[0]) return;
    Config hf = *c;
    read_hf_model(&hf.model, c->model.from);
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        if (strcmp(k->section, "model") != 0 || is_model_from(k) || (c->keys_set >> i & 1)) continue;
        size_t size = k->type == KT_INT ? sizeof(int) : k->type == KT_DOUBLE ? sizeof(double)
                    : k->type == KT_BOOL ? sizeof(bool) : 0;
        if (!size) die("internal: model key %s has an unexpected type", k->key);
        memcpy(field_ptr(c, k), field_ptr(&hf, k), size);
    }
}

// ---------------------------------------------------------------- loading and overrides

void config_load_json(Config *c, const char *json_text, const char *origin) {
    char where[CFG_PATH_MAX + 16];
    snprintf(where, sizeof where, "config %s", origin);
    cJSON *root = parse_or_die(json_text, where);
    if (!cJSON_IsObject(root))
        die("%s: the top level must be a JSON object of sections (model, data, training, parallel, "
            "checkpoint, logging)", where);
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        if (!is_section(sec->string))
            die("%s: unknown section \"%s\" (sections: model, data, training, parallel, checkpoint, logging)",
                where, sec->string);
        die_on_duplicate(sec, where, "section");
        if (!cJSON_IsObject(sec)) die("%s: section \"%s\" must be a JSON object", where, sec->string);
        for (const cJSON *v = sec->child; v; v = v->next) {
            char dotted[256];
            snprintf(dotted, sizeof dotted, "%s.%s", sec->string, v->string);
            int i = key_index(sec->string, strlen(sec->string), v->string);
            if (i < 0) die_unknown_key(where, dotted);
            die_on_duplicate(v, where, "key");
            set_json(c, &KEYS[i], v, where, dotted);
            c->keys_set |= (uint64_t)1 << i;
        }
    }
    cJSON_Delete(root);
    config_resolve_model(c);
}

void config_load_file(Config *c, const char *path) {
    char *text = read_text_file(path);
    if (!text) die_errno("cannot read config file %s", path);
    config_load_json(c, text, path);
    free(text);
}

void config_set(Config *c, const char *dotted_key, const char *value) {
    const char *dot = strchr(dotted_key, '.');
    int i = dot ? key_index(dotted_key, (size_t)(dot - dotted_key), dot + 1) : -1;
    if (i < 0) die_unknown_key("command line", dotted_key);
    const KeyDef *k = &KEYS[i];
    if (is_model_from(k) && c->model.from[0] && !value[0]) {
        // Dropping model.from: the model keys it filled go back to their defaults.
        for (int j = 0; j < NKEYS; j++)
            if (strcmp(KEYS[j].section, "model") == 0 && !(c->keys_set >> j & 1))
                set_text(c, &KEYS[j], KEYS[j].def, "built-in default");
    }
    set_text(c, k, value, "command line");
    c->keys_set |= (uint64_t)1 << i;
    if (is_model_from(k)) config_resolve_model(c);
}

int config_apply_args(Config *c, int argc, char **argv) {
    int i = 0;
    while (i < argc) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || !strchr(arg + 2, '.'))
            die("unexpected argument \"%s\": overrides are --section.key value or --section.key=value "
                "(see ./femtotron train --help)", arg);
        const char *eq = strchr(arg, '=');
        char key[256];
        const char *value;
        if (eq) {
            size_t n = (size_t)(eq - arg - 2);
            if (n >= sizeof key) die("argument \"%s\": key too long", arg);
            memcpy(key, arg + 2, n);
            key[n] = '\0';
            value = eq + 1;
            i += 1;
        } else {
            if (strlen(arg + 2) >= sizeof key) die("argument \"%s\": key too long", arg);
            strcpy(key, arg + 2);
            // A value that starts with "--" is the next override: this one has none.
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                die("argument \"%s\" needs a value: --%s VALUE or --%s=VALUE", arg, key, key);
            value = argv[i + 1];
            i += 2;
        }
        config_set(c, key, value);
    }
    return i;
}

// ---------------------------------------------------------------- validation

static void need_int_min(const char *name, int v, int min) {
    if (v < min) die("%s = %d: must be at least %d", name, v, min);
}

static void need_positive(const char *name, double v) {
    if (!(v > 0)) die("%s = %g: must be greater than 0", name, v);
}

static void need_nonnegative(const char *name, double v) {
    if (!(v >= 0)) die("%s = %g: must be 0 or more", name, v);
}

static void validate_model(const ModelConfig *m) {
    need_int_min("model.hidden_size", m->hidden_size, 1);
    need_int_min("model.intermediate_size", m->intermediate_size, 1);
    need_int_min("model.num_hidden_layers", m->num_hidden_layers, 1);
    need_int_min("model.num_attention_heads", m->num_attention_heads, 1);
    need_int_min("model.num_key_value_heads", m->num_key_value_heads, 1);
    need_int_min("model.vocab_size", m->vocab_size, 2);
    need_int_min("model.max_position_embeddings", m->max_position_embeddings, 1);
    if (m->hidden_size % m->num_attention_heads != 0)
        die("model.hidden_size = %d is not divisible by model.num_attention_heads = %d", m->hidden_size,
            m->num_attention_heads);
    int hd = m->hidden_size / m->num_attention_heads;
    if (hd % 2 != 0)
        die("head dim = model.hidden_size / model.num_attention_heads = %d / %d = %d is odd: RoPE rotates "
            "pairs, so it must be even", m->hidden_size, m->num_attention_heads, hd);
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        die("model.num_attention_heads = %d is not divisible by model.num_key_value_heads = %d",
            m->num_attention_heads, m->num_key_value_heads);
    need_positive("model.rms_norm_eps", m->rms_norm_eps);
    need_positive("model.rope_theta", m->rope_theta);
    need_nonnegative("model.initializer_range", m->initializer_range);
}

static void validate_training(const TrainingConfig *t, int max_pos) {
    need_int_min("training.steps", t->steps, 1);
    need_int_min("training.seq_length", t->seq_length, 1);
    if (t->seq_length > max_pos)
        die("training.seq_length = %d exceeds model.max_position_embeddings = %d", t->seq_length, max_pos);
    need_int_min("training.micro_batch_size", t->micro_batch_size, 1);
    need_int_min("training.grad_acc_steps", t->grad_acc_steps, 0);
    need_int_min("training.global_batch_size", t->global_batch_size, 0);
    need_positive("training.lr", t->lr);
    need_nonnegative("training.min_lr", t->min_lr);
    if (t->min_lr > t->lr) die("training.min_lr = %g exceeds training.lr = %g", t->min_lr, t->lr);
    need_int_min("training.warmup_steps", t->warmup_steps, 0);
    need_nonnegative("training.weight_decay", t->weight_decay);
    if (!(t->beta1 >= 0 && t->beta1 < 1)) die("training.beta1 = %g: must be in [0, 1)", t->beta1);
    if (!(t->beta2 >= 0 && t->beta2 < 1)) die("training.beta2 = %g: must be in [0, 1)", t->beta2);
    need_positive("training.eps", t->eps);
    need_nonnegative("training.grad_clip", t->grad_clip);
    need_int_min("training.threads", t->threads, 0);
    need_nonnegative("training.peak_flops", t->peak_flops);
    need_int_min("training.max_bad_steps", t->max_bad_steps, 1);
}

static void validate_parallel(const ParallelConfig *p, int world_size) {
    need_int_min("parallel.dp", p->dp, 1);
    need_int_min("parallel.tp", p->tp, 1);
    need_int_min("parallel.pp", p->pp, 1);
    need_int_min("parallel.cp", p->cp, 1);
    if (p->zero < 0 || p->zero > 3) die("parallel.zero = %d: must be 0, 1, 2 or 3", p->zero);
    if (strcmp(p->order, "dp-pp-cp-tp") != 0 && strcmp(p->order, "pp-dp-cp-tp") != 0)
        die("parallel.order = \"%s\": must be \"dp-pp-cp-tp\" (default) or \"pp-dp-cp-tp\" "
            "(pipeline outermost)", p->order);
    need_positive("parallel.bucket_mb", p->bucket_mb);
    if (strcmp(p->pp_schedule, "1f1b") != 0 && strcmp(p->pp_schedule, "afab") != 0 &&
        strcmp(p->pp_schedule, "interleaved") != 0)
        die("parallel.pp_schedule = \"%s\": must be \"1f1b\", \"afab\" or \"interleaved\"", p->pp_schedule);
    need_int_min("parallel.pp_virtual", p->pp_virtual, 1);
    if (p->pp_virtual > 1 && strcmp(p->pp_schedule, "interleaved") != 0)
        die("parallel.pp_virtual = %d needs parallel.pp_schedule \"interleaved\" (it is \"%s\")",
            p->pp_virtual, p->pp_schedule);
    need_positive("parallel.timeout_s", p->timeout_s);
    long long n = (long long)p->dp * p->tp * p->pp * p->cp;
    if (n != world_size)
        die("parallel.dp * tp * pp * cp = %d * %d * %d * %d = %lld, but the job has %d rank%s; they must be equal",
            p->dp, p->tp, p->pp, p->cp, n, world_size, world_size == 1 ? "" : "s");
}

// Pipeline constraints that involve the model and the batch.
// Tensor-parallel constraints: every rank gets whole heads and an equal FFN slice.
static void validate_tensor(const Config *c) {
    const int tp = c->parallel.tp;
    const ModelConfig *m = &c->model;
    if (m->num_attention_heads % tp != 0)
        die("model.num_attention_heads = %d is not divisible by parallel.tp = %d", m->num_attention_heads, tp);
    if (m->num_key_value_heads % tp != 0)
        die("model.num_key_value_heads = %d is not divisible by parallel.tp = %d (key/value heads are "
            "split over tensor-parallel ranks, not replicated)", m->num_key_value_heads, tp);
    if (m->intermediate_size % tp != 0)
        die("model.intermediate_size = %d is not divisible by parallel.tp = %d", m->intermediate_size, tp);
    const int cp = c->parallel.cp;
    if (cp > 1 && c->training.seq_length % (2 * cp) != 0)
        die("parallel.cp = %d: training.seq_length = %d must be divisible by 2 * cp = %d (each rank "
            "holds two of the 2*cp chunks of every sequence)", cp, c->training.seq_length, 2 * cp);
    long long tokens = (long long)c->training.micro_batch_size * (c->training.seq_length / cp);
    if (c->parallel.sequence_parallel && tp > 1 && tokens % tp != 0)
        die("parallel.sequence_parallel: training.micro_batch_size * training.seq_length = %lld tokens "
            "is not divisible by parallel.tp = %d", tokens, tp);
}

static void validate_pipeline(const Config *c) {
    const ParallelConfig *p = &c->parallel;
    int chunks = p->pp * p->pp_virtual, L = c->model.num_hidden_layers;
    if (chunks > L)
        die("parallel.pp * parallel.pp_virtual = %d * %d = %d pipeline stages but the model has only "
            "%d layers (model.num_hidden_layers): a stage would be empty", p->pp, p->pp_virtual, chunks, L);
    if (strcmp(p->pp_schedule, "interleaved") == 0 && c->training.grad_acc_steps % p->pp != 0)
        die("parallel.pp_schedule \"interleaved\" needs the micro-batches per step "
            "(training.grad_acc_steps = %d) to be a multiple of parallel.pp = %d",
            c->training.grad_acc_steps, p->pp);
    if (p->pp > 1 && c->model.tie_word_embeddings)
        die("model.tie_word_embeddings = true with parallel.pp = %d: the first and last stages would "
            "share the embedding; this version supports tied embeddings only with parallel.pp = 1",
            p->pp);
    if (!p->pp_layers[0]) return;
    int n = 0, sum = 0;
    for (const char *q = p->pp_layers; *q;) {
        char *end;
        long k = strtol(q, &end, 10);
        if (end == q || k < 1)
            die("parallel.pp_layers = \"%s\": expected positive layer counts separated by commas, "
                "one per stage (an empty stage is not allowed)", p->pp_layers);
        n++;
        sum += (int)k;
        q = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("parallel.pp_layers = \"%s\": unexpected '%c'", p->pp_layers, *end);
    }
    if (n != chunks || sum != L)
        die("parallel.pp_layers = \"%s\" gives %d stages with %d layers; expected %d stages "
            "(parallel.pp * parallel.pp_virtual) with %d layers in total", p->pp_layers, n, sum, chunks, L);
}

// G = A * B * dp; whichever of G (global_batch_size) and A (grad_acc_steps) is 0
// is derived from the other.
static void derive_batch(TrainingConfig *t, int dp) {
    long long B = t->micro_batch_size, per_acc = B * dp;
    if (t->global_batch_size == 0 && t->grad_acc_steps == 0) t->grad_acc_steps = 1;
    if (t->global_batch_size == 0) {
        long long g = t->grad_acc_steps * per_acc;
        if (g > INT_MAX)
            die("training.global_batch_size = training.grad_acc_steps * training.micro_batch_size * parallel.dp "
                "= %d * %lld * %d is too large", t->grad_acc_steps, B, dp);
        t->global_batch_size = (int)g;
    } else if (t->grad_acc_steps == 0) {
        if (t->global_batch_size % per_acc != 0)
            die("training.global_batch_size = %d is not a multiple of training.micro_batch_size * parallel.dp "
                "= %lld * %d = %lld", t->global_batch_size, B, dp, per_acc);
        t->grad_acc_steps = (int)(t->global_batch_size / per_acc);
    } else if ((long long)t->grad_acc_steps * per_acc != t->global_batch_size) {
        die("training.global_batch_size = %d but training.grad_acc_steps * training.micro_batch_size * "
            "parallel.dp = %d * %lld * %d = %lld; set one of global_batch_size and grad_acc_steps to 0 to "
            "derive it", t->global_batch_size, t->grad_acc_steps, B, dp, (long long)t->grad_acc_steps * per_acc);
    }
}

void config_validate(Config *c, int world_size) {
    config_resolve_model(c);
    validate_model(&c->model);
    validate_training(&c->training, c->model.max_position_embeddings);
    validate_parallel(&c->parallel, world_size);
    derive_batch(&c->training, c->parallel.dp);
    validate_pipeline(c);
    validate_tensor(c);
    if (!c->data.train[0])
        die("data.train is not set: give a token shard file or glob (see ./femtotron prepare)");
    need_int_min("checkpoint.every", c->checkpoint.every, 0);
    if (c->checkpoint.resume && !c->checkpoint.dir[0])
        die("checkpoint.resume = true but checkpoint.dir is not set: give the directory to resume from");
    need_int_min("logging.every", c->logging.every, 1);
    need_int_min("logging.val_every", c->logging.val_every, 0);
    need_int_min("logging.val_batches", c->logging.val_batches, 1);
    if (c->logging.val_every > 0 && !c->data.val[0])
        die("logging.val_every = %d but data.val is not set: give validation shards or set "
            "logging.val_every to 0", c->logging.val_every);
}

// ---------------------------------------------------------------- output

void config_print_help(void) {
    printf("Run configuration: a JSON file with the sections below, then overrides\n"
           "--section.key VALUE or --section.key=VALUE. Model keys are Hugging Face\n"
           "LlamaConfig keys; precedence: defaults < model.from's config.json <\n"
           "the file's model section < command-line overrides.\n");
    const char *last = "";
    for (int i = 0; i < NKEYS; i++) {
        const KeyDef *k = &KEYS[i];
        if (strcmp(k->section, last) != 0) printf("\n%s:\n", last = k->section);
        char name[64], def[40];
        snprintf(name, sizeof name, "%s.%s", k->section, k->key);
        snprintf(def, sizeof def, k->type == KT_STRING ? "\"%s\"" : "%s", k->def);
        printf("  %-32s %-7s %-8s %s\n", name, type_name(k->type), def, k->help);
    }
}

// Add one key's value from a struct at `base` (whose fields sit at k->offset - shift).
static void add_json_value(cJSON *obj, const KeyDef *k, const char *base, size_t shift) {
    const void *p = base + (k->offset - shift);
    switch (k->type) {
    case KT_INT: cJSON_AddNumberToObject(obj, k->key, *(const int *)p); break;
    case KT_DOUBLE: cJSON_AddNumberToObject(obj, k->key, *(const double *)p); break;
    case KT_BOOL: cJSON_AddBoolToObject(obj, k->key, *(const bool *)p); break;
    case KT_STRING: cJSON_AddStringToObject(obj, k->key, (const char *)p); break;
    case KT_U64: {
        uint64_t u = *(const uint64_t *)p;
        if ((double)u <= JSON_MAX_EXACT) {
            cJSON_AddNumberToObject(obj, k->key, (double)u);
        } else {  // beyond a double's exact integers: keep every digit as a string
            char s[24];
            snprintf(s, sizeof s, "%llu", (unsigned long long)u);
            cJSON_AddStringToObject(obj, k->key, s);
        }
        break;
    }
    }
}

char *config_to_json(const Config *c) {
    cJSON *root = cJSON_CreateObject();
    for (int s = 0; s < NSECTIONS; s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, SECTIONS[s]);
        for (int i = 0; i < NKEYS; i++)
            if (strcmp(KEYS[i].section, SECTIONS[s]) == 0) add_json_value(sec, &KEYS[i], (const char *)c, 0);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("out of memory writing the config as JSON");
    return text;
}

void config_write_hf_json(const ModelConfig *m, const char *path) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(root, "model_type", "llama");
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].section, "model") == 0 && !is_model_from(&KEYS[i]))
            add_json_value(root, &KEYS[i], (const char *)m, offsetof(Config, model));
    cJSON_AddNumberToObject(root, "head_dim", m->num_attention_heads > 0 ? m->hidden_size / m->num_attention_heads : 0);
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddBoolToObject(root, "attention_bias", false);
    cJSON_AddNumberToObject(root, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(root, "mlp_bias", false);
    cJSON_AddNullToObject(root, "rope_scaling");
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("out of memory writing %s", path);

    // fsync before returning: the checkpoint code renames the directory holding
    // this file into place and must never publish an empty config.json.
    FILE *f = fopen(path, "w");
    if (!f) die_errno("cannot create %s", path);
    if (fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0) die_errno("cannot write %s", path);
    if (fsync(fileno(f)) != 0) die_errno("cannot fsync %s", path);
    if (fclose(f) != 0) die_errno("cannot close %s", path);
    free(text);
}
