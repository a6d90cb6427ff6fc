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

// A number member `key` of the rope_scaling object v, required.
static double rope_number(const cJSON *v, const char *key, const char *name, const char *type,
                          const char *origin) {
    const cJSON *x = cfg_child(v, key);
    if (!x || !cJSON_IsNumber(x))
        die("%s: %s of type \"%s\" needs a number \"%s\"", origin, name, type, key);
    return x->valuedouble;
}

// rope_scaling (transformers < 5) or rope_parameters (>= 5): the scaling types
// model/rope.h implements, read into m; any other type is refused by name.
static void hf_read_rope(const cJSON *v, const char *name, ModelConfig *m, const char *origin) {
    if (!v || cJSON_IsNull(v)) return;
    if (!cJSON_IsObject(v)) die("%s: %s must be an object or null", origin, name);
    const cJSON *t = cfg_child(v, "rope_type");
    if (!t) t = cfg_child(v, "type");  // the older spelling
    if (t && !cJSON_IsString(t)) die("%s: %s.rope_type must be a string", origin, name);
    const char *type = t ? t->valuestring : "default";
    int k = config_name_index(ROPE_TYPE_NAMES, type);
    if (k < 0)
        die("%s: %s of type \"%s\" is not supported; femtotron implements \"default\", \"linear\" "
            "and \"llama3\"", origin, name, type);
    m->rope_type = (RopeType)k;
    if (m->rope_type == ROPE_DEFAULT) {
        // rope_parameters of a plain model carries rope_theta only; a "default"
        // rope_scaling with a factor asks for a scaling no type names.
        if (strcmp(name, "rope_scaling") == 0 && cfg_child(v, "factor"))
            die("%s: rope_scaling of type \"default\" with a factor: name the scaling (\"linear\" or "
                "\"llama3\") or use null", origin);
        return;
    }
    m->rope_factor = rope_number(v, "factor", name, type, origin);
    if (m->rope_type == ROPE_LLAMA3) {
        m->rope_low_freq_factor = rope_number(v, "low_freq_factor", name, type, origin);
        m->rope_high_freq_factor = rope_number(v, "high_freq_factor", name, type, origin);
        double L = rope_number(v, "original_max_position_embeddings", name, type, origin);
        if (!(L >= 1 && L <= 1e9) || L != (double)(int)L)
            die("%s: %s.original_max_position_embeddings = %g: must be a positive integer", origin, name, L);
        m->rope_original_max_position_embeddings = (int)L;
    }
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
    // model_type: "llama" (dense) or "mixtral" (MixtralConfig: a sparse MoE MLP).
    const cJSON *mt = cfg_child(root, "model_type");
    if (mt && !cJSON_IsNull(mt) && !cJSON_IsString(mt)) die("%s: \"model_type\" must be a string", origin);
    const int mixtral = mt && cJSON_IsString(mt) && strcmp(mt->valuestring, "mixtral") == 0;
    if (mt && cJSON_IsString(mt) && !mixtral && strcmp(mt->valuestring, "llama") != 0)
        die("%s: model_type = \"%s\" is not supported: femtotron trains Llama and Mixtral models; only "
            "\"llama\" or \"mixtral\"", origin, mt->valuestring);
    if (mixtral) {
        const cJSON *sw = cfg_child(root, "sliding_window");
        if (sw && !cJSON_IsNull(sw))
            die("%s: sliding_window = %g: sliding-window attention is not supported; only null (full "
                "causal attention)", origin, cJSON_IsNumber(sw) ? sw->valuedouble : -1.0);
        const cJSON *jit = cfg_child(root, "router_jitter_noise");
        if (jit && !cJSON_IsNull(jit) && !(cJSON_IsNumber(jit) && jit->valuedouble == 0.0))
            die("%s: router_jitter_noise must be 0: router noise is not supported", origin);
    }
    hf_require_string(root, "hidden_act", "silu", origin, "the MLP is SwiGLU");
    hf_require_false(root, "attention_bias", origin, "attention_bias (biases on q/k/v/o)");
    hf_require_false(root, "mlp_bias", origin, "mlp_bias (biases on gate/up/down)");
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
    hf_read_rope(cfg_child(root, "rope_scaling"), "rope_scaling", &tmp.model, origin);
    hf_read_rope(cfg_child(root, "rope_parameters"), "rope_parameters", &tmp.model, origin);
    // transformers >= 5 moves rope_theta into rope_parameters.
    const cJSON *rp = cfg_child(root, "rope_parameters");
    const cJSON *theta = rp ? cfg_child(rp, "rope_theta") : NULL;
    if (!cfg_child(root, "rope_theta") && theta) {
        if (!cJSON_IsNumber(theta)) die("%s: \"rope_parameters.rope_theta\" must be a number", origin);
        tmp.model.rope_theta = theta->valuedouble;
    }
    // MixtralConfig's default is 8 experts; a Llama config.json is dense whatever it says.
    const cJSON *ne = cfg_child(root, "num_local_experts");
    if (!mixtral) tmp.model.num_local_experts = 0;
    else if (!ne || cJSON_IsNull(ne)) tmp.model.num_local_experts = 8;
    const cJSON *kv = cfg_child(root, "num_key_value_heads");
    if (kv && !cJSON_IsNull(kv)) {
        int i = cfg_key_index("model", 5, "num_key_value_heads");
        cfg_set_json(&tmp, &CFG_KEYS[i], kv, origin, "num_key_value_heads");
    } else {
        tmp.model.num_key_value_heads = tmp.model.num_attention_heads;  // LlamaConfig's rule
    }
    // A head_dim equal to hidden / heads (what transformers writes) is the derived one.
    const ModelConfig *t = &tmp.model;
    if (t->head_dim > 0 && t->num_attention_heads > 0 && t->hidden_size % t->num_attention_heads == 0 &&
        t->head_dim == t->hidden_size / t->num_attention_heads)
        tmp.model.head_dim = 0;
    cJSON_Delete(root);
    *hf = tmp.model;
}

void config_resolve_model(Config *c) {
    if (!c->model.from[0]) return;
    Config hf = *c;
    read_hf_model(&hf.model, c->model.from);
    for (int i = 0; i < CFG_NKEYS; i++) {
        const KeyDef *k = &CFG_KEYS[i];
        if (strcmp(k->section, "model") != 0 || cfg_is_model_from(k) || cfg_key_given(c, i)) continue;
        size_t size = k->type == KT_INT || k->type == KT_ENUM ? sizeof(int) : k->type == KT_DOUBLE ? sizeof(double)
                    : k->type == KT_BOOL ? sizeof(bool) : 0;
        if (!size) die("internal: model key %s has an unexpected type", k->key);
        memcpy(cfg_field_ptr(c, k), cfg_field_ptr(&hf, k), size);
    }
}
