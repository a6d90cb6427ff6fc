// config_output.c — the run configuration written out: --help from the key table,
// the config as JSON (config_to_json) and a checkpoint's Hugging Face config.json
// (config_write_hf_json).
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_internal.h"
#include "util.h"

// ---------------------------------------------------------------- output

static const char *type_name(KeyType t) {
    switch (t) {
    case KT_INT: return "int";
    case KT_U64: return "uint64";
    case KT_DOUBLE: return "float";
    case KT_BOOL: return "bool";
    case KT_STRING: return "string";
    case KT_ENUM: return "enum";
    case KT_SOURCES: return "sources";
    }
    return "?";
}

void config_print_help(void) {
    printf("Run configuration: a JSON file with the sections below, then overrides\n"
           "--section.key VALUE or --section.key=VALUE. Model keys are Hugging Face\n"
           "LlamaConfig keys; precedence: defaults < model.from's config.json <\n"
           "the file's model section < command-line overrides.\n");
    const char *last = "";
    for (int i = 0; i < CFG_NKEYS; i++) {
        const KeyDef *k = &CFG_KEYS[i];
        if (strcmp(k->section, last) != 0) printf("\n%s:\n", last = k->section);
        char name[64], def[40];
        snprintf(name, sizeof name, "%s.%s", k->section, k->key);
        snprintf(def, sizeof def, k->type == KT_STRING || k->type == KT_ENUM || k->type == KT_SOURCES ? "\"%s\"" : "%s", k->def);
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
    case KT_ENUM: cJSON_AddStringToObject(obj, k->key, k->names[*(const int *)p]); break;
    case KT_SOURCES: {  // a list given in JSON goes back out as that list
        cJSON *list = ((const char *)p)[0] == '[' ? cJSON_Parse((const char *)p) : NULL;
        if (list) cJSON_AddItemToObject(obj, k->key, list);
        else cJSON_AddStringToObject(obj, k->key, (const char *)p);
        break;
    }
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
    for (int s = 0; s < CFG_NSECTIONS; s++) {
        cJSON *sec = cJSON_AddObjectToObject(root, CFG_SECTIONS[s]);
        for (int i = 0; i < CFG_NKEYS; i++)
            if (strcmp(CFG_KEYS[i].section, CFG_SECTIONS[s]) == 0) add_json_value(sec, &CFG_KEYS[i], (const char *)c, 0);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) die("out of memory writing the config as JSON");
    return text;
}

// A JSON number that reads back as a float in Python (2.0, not 2): transformers 4.36
// checks isinstance(factor, float).
static void add_float(cJSON *obj, const char *key, double v) {
    char text[64];
    snprintf(text, sizeof text, "%.17g", v);
    if (!strpbrk(text, ".eEn")) strcat(text, ".0");  // n: nan/inf never get here (validated)
    cJSON_AddRawToObject(obj, key, text);
}

// rope_scaling as transformers reads it: null, {"type": "linear", "factor"} (the
// spelling every transformers version accepts), or Llama 3.1's llama3 object.
static void add_rope_scaling(cJSON *root, const ModelConfig *m) {
    if (m->rope_type == ROPE_DEFAULT) {
        cJSON_AddNullToObject(root, "rope_scaling");
        return;
    }
    cJSON *r = cJSON_AddObjectToObject(root, "rope_scaling");
    if (m->rope_type == ROPE_LINEAR) {
        cJSON_AddStringToObject(r, "type", "linear");
        add_float(r, "factor", m->rope_factor);
        return;
    }
    add_float(r, "factor", m->rope_factor);
    add_float(r, "low_freq_factor", m->rope_low_freq_factor);
    add_float(r, "high_freq_factor", m->rope_high_freq_factor);
    cJSON_AddNumberToObject(r, "original_max_position_embeddings", m->rope_original_max_position_embeddings);
    cJSON_AddStringToObject(r, "rope_type", "llama3");
}

// Write a JSON document durably: the checkpoint code renames the directory holding
// it into place and must never publish an empty file.
static void write_json_durable(cJSON *root, const char *path) {
    char *text = cJSON_Print(root);
    if (!text) die("out of memory writing %s", path);
    FILE *f = fopen(path, "w");
    if (!f) die_errno("cannot create %s", path);
    if (fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0) die_errno("cannot write %s", path);
    if (fsync(fileno(f)) != 0) die_errno("cannot fsync %s", path);
    if (fclose(f) != 0) die_errno("cannot close %s", path);
    free(text);
}

// model.from's file NAME parsed, or NULL (no model.from, no such file, not JSON).
static cJSON *source_json(const ModelConfig *m, const char *name) {
    if (!m->from[0]) return NULL;
    char path[CFG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", m->from, name);
    char *text = cfg_read_text_file(path);
    if (!text) return NULL;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (root && !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static void add_id_unless(cJSON *root, const char *key, int64_t id) {
    if (id >= 0 && !cJSON_GetObjectItemCaseSensitive(root, key)) cJSON_AddNumberToObject(root, key, (double)id);
}

void config_write_hf_json(const ModelConfig *m, const char *path, int64_t bos_id, int64_t eos_id,
                          CkptDtype dtype) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    const int moe = m->num_local_experts > 0;  // MixtralForCausalLM; else the MoE keys are left out
    cJSON_AddItemToArray(arch, cJSON_CreateString(moe ? "MixtralForCausalLM" : "LlamaForCausalLM"));
    cJSON_AddStringToObject(root, "model_type", moe ? "mixtral" : "llama");
    for (int i = 0; i < CFG_NKEYS; i++)
        if (strcmp(CFG_KEYS[i].section, "model") == 0 && !cfg_is_model_from(&CFG_KEYS[i]) &&
            strncmp(CFG_KEYS[i].key, "rope_", 5) != 0 && strcmp(CFG_KEYS[i].key, "head_dim") != 0 &&
            (moe || !cfg_is_moe_key(&CFG_KEYS[i])))
            add_json_value(root, &CFG_KEYS[i], (const char *)m, offsetof(Config, model));
    if (moe) cJSON_AddNullToObject(root, "sliding_window");  // full causal attention
    cJSON_AddNumberToObject(root, "rope_theta", m->rope_theta);  // a "rope_" key kept at the top
    cJSON_AddNumberToObject(root, "head_dim", model_head_dim(m));
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddBoolToObject(root, "attention_bias", false);
    cJSON_AddNumberToObject(root, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(root, "mlp_bias", false);
    add_rope_scaling(root, m);
    cJSON_AddStringToObject(root, "torch_dtype", dtype == CKPT_DTYPE_BF16 ? "bfloat16" : "float32");
    // Keys of the source config this file does not own, kept as they were
    // (rope_parameters and dtype are transformers 5's spellings of what rope_theta,
    // rope_scaling and torch_dtype say above).
    cJSON *src = source_json(m, "config.json");
    for (const cJSON *k = src ? src->child : NULL; k; k = k->next)
        if (k->string && !cJSON_GetObjectItemCaseSensitive(root, k->string) &&
            strcmp(k->string, "rope_parameters") != 0 && strcmp(k->string, "dtype") != 0)
            cJSON_AddItemToObject(root, k->string, cJSON_Duplicate(k, 1));
    cJSON_Delete(src);
    add_id_unless(root, "bos_token_id", bos_id);
    add_id_unless(root, "eos_token_id", eos_id);
    write_json_durable(root, path);
    cJSON_Delete(root);
}

void config_write_generation_json(const ModelConfig *m, const char *config_path, const char *path) {
    cJSON *root = source_json(m, "generation_config.json");
    if (!root) {
        root = cJSON_CreateObject();
        cJSON_AddBoolToObject(root, "_from_model_config", true);
        char *text = cfg_read_text_file(config_path);
        cJSON *cfg = text ? cJSON_Parse(text) : NULL;
        free(text);
        const char *keys[] = {"bos_token_id", "eos_token_id", "pad_token_id"};
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, keys[i]) : NULL;
            if (v && !cJSON_IsNull(v)) cJSON_AddItemToObject(root, keys[i], cJSON_Duplicate(v, 1));
        }
        cJSON_Delete(cfg);
    }
    write_json_durable(root, path);
    cJSON_Delete(root);
}
