// config_hf.c — model.from: the model keys a run does not set come from a local
// Hugging Face model directory's config.json (config_resolve_model), and features
// of LlamaConfig this trainer cannot honour are refused.
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "util.h"

// ---------------------------------------------------------------- model.from

// Die unless the optional key `name` of a Hugging Face config is absent, null or
// false (a feature flag we do not implement).
static void hf_require_false(const cJSON *root, const char *name, const char *origin, const char *feature) {
    const cJSON *v = cfg_child(root, name);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return;
    if (cJSON_IsTrue(v)) die("%s: %s = true: %s is not supported; only false", origin, name, feature);
    die("%s: \"%s\" must be true or false", origin, name);
}

static void hf_require_string(const cJSON *root, const char *name, const char *want, const char *origin,
                              const char *why) {
    const cJSON *v = cfg_child(root, name);
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsString(v)) die("%s: \"%s\" must be a string", origin, name);
    if (strcmp(v->valuestring, want) != 0)
        die("%s: %s = \"%s\" is not supported: %s; only \"%s\"", origin, name, v->valuestring, why, want);
}

// rope_scaling / rope_parameters: plain RoPE only (no rope_type, or "default").
static void hf_require_plain_rope(const cJSON *v, const char *name, const char *origin) {
    if (!v || cJSON_IsNull(v)) return;
    const cJSON *t = cfg_child(v, "rope_type");
    if (!t) t = cfg_child(v, "type");
    if (cJSON_IsObject(v) && (!t || (cJSON_IsString(t) && strcmp(t->valuestring, "default") == 0))) {
        // rope_parameters (transformers >= 5) carries rope_theta and nothing else
        // we honour; a "default" rope_scaling with a factor would still scale.
        if (strcmp(name, "rope_scaling") == 0 && cfg_child(v, "factor"))
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
    char *text = cfg_read_text_file(path);
    if (!text)
        die_errno("model.from = \"%s\": cannot read %s (model.from must be a local Hugging Face model directory)",
                  from, path);
    cJSON *root = cfg_parse_or_die(text, origin);
    free(text);
    if (!cJSON_IsObject(root)) die("%s: the top level must be a JSON object", origin);

    // Features of LlamaConfig this trainer cannot honour: refuse rather than
    // train a different model than the file describes.
    hf_require_string(root, "model_type", "llama", origin, "femtotron trains Llama models");
    hf_require_string(root, "hidden_act", "silu", origin, "the MLP is SwiGLU");
    hf_require_false(root, "attention_bias", origin, "attention_bias (biases on q/k/v/o)");
    hf_require_false(root, "mlp_bias", origin, "mlp_bias (biases on gate/up/down)");
    hf_require_plain_rope(cfg_child(root, "rope_scaling"), "rope_scaling", origin);
    hf_require_plain_rope(cfg_child(root, "rope_parameters"), "rope_parameters", origin);
    if (cfg_child(root, "quantization_config"))
        die("%s: quantization_config: quantized weights are not supported; give an fp32/bf16/fp16 model", origin);
    const cJSON *drop = cfg_child(root, "attention_dropout");
    if (drop && !cJSON_IsNull(drop) && !(cJSON_IsNumber(drop) && drop->valuedouble == 0.0))
        die("%s: attention_dropout must be 0: dropout is not supported by this version", origin);

    Config tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int i = 0; i < CFG_NKEYS; i++) {
        const KeyDef *k = &CFG_KEYS[i];
        if (!k->hf_def) continue;
        cfg_set_text(&tmp, k, k->hf_def, "transformers default");
        const cJSON *v = cfg_child(root, k->key);
        if (v && !cJSON_IsNull(v)) cfg_set_json(&tmp, k, v, origin, k->key);
    }
    // transformers >= 5 moves rope_theta into rope_parameters.
    const cJSON *rp = cfg_child(root, "rope_parameters");
    const cJSON *theta = rp ? cfg_child(rp, "rope_theta") : NULL;
    if (!cfg_child(root, "rope_theta") && theta) {
        if (!cJSON_IsNumber(theta)) die("%s: \"rope_parameters.rope_theta\" must be a number", origin);
        tmp.model.rope_theta = theta->valuedouble;
    }
    const cJSON *kv = cfg_child(root, "num_key_value_heads");
    if (kv && !cJSON_IsNull(kv)) {
        int i = cfg_key_index("model", 5, "num_key_value_heads");
        cfg_set_json(&tmp, &CFG_KEYS[i], kv, origin, "num_key_value_heads");
    } else {
        tmp.model.num_key_value_heads = tmp.model.num_attention_heads;  // LlamaConfig's rule
    }
    const cJSON *hd = cfg_child(root, "head_dim");
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
    for (int i = 0; i < CFG_NKEYS; i++) {
        const KeyDef *k = &CFG_KEYS[i];
        if (strcmp(k->section, "model") != 0 || cfg_is_model_from(k) || (c->keys_set >> i & 1)) continue;
        size_t size = k->type == KT_INT ? sizeof(int) : k->type == KT_DOUBLE ? sizeof(double)
                    : k->type == KT_BOOL ? sizeof(bool) : 0;
        if (!size) die("internal: model key %s has an unexpected type", k->key);
        memcpy(cfg_field_ptr(c, k), cfg_field_ptr(&hf, k), size);
    }
}
