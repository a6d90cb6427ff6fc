// tests/unit/test_config_hf.c — the run configuration's Hugging Face import: model.from
// precedence (defaults < FROM/config.json < run config < overrides, whatever the
// order), and published config.json files read as transformers reads them
// (Llama-3.2-1B's llama3 RoPE scaling and head_dim, Mixtral-8x7B's experts) and
// written back by a checkpoint. Shared helpers in config_fixture.h.
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "config_fixture.h"

// c: the defaults, model.from the temporary Hugging Face directory (hf_dir, its
// config.json as the test wrote it), validated for one rank.
static void load_from_hf_dir(Config *c) {
    config_defaults(c);
    config_set(c, "model.from", hf_dir);
    config_set(c, "data.train", "x.bin");
    config_validate(c, 1);
}

static void test_precedence(void) {
    // The HF file: every key differs from our defaults; kv heads absent, so
    // transformers' rule (kv = heads) applies; harmless extras are ignored.
    write_hf("{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\",\n"
             " \"hidden_size\": 96, \"intermediate_size\": 200, \"num_hidden_layers\": 3,\n"
             " \"num_attention_heads\": 6, \"vocab_size\": 1000, \"max_position_embeddings\": 512,\n"
             " \"rms_norm_eps\": 1e-6, \"rope_theta\": 50000.0, \"tie_word_embeddings\": true,\n"
             " \"hidden_act\": \"silu\", \"attention_bias\": false, \"mlp_bias\": false, \"head_dim\": 16,\n"
             " \"rope_scaling\": null, \"bos_token_id\": 1, \"eos_token_id\": 2, \"torch_dtype\": \"bfloat16\",\n"
             " \"transformers_version\": \"4.40.0\", \"use_cache\": true, \"pretraining_tp\": 1,\n"
             " \"attention_dropout\": 0.0}");
    Config c;
    config_defaults(&c);
    char json[512];
    snprintf(json, sizeof json, "{\"model\": {\"intermediate_size\": 300, \"from\": \"%s\", \"vocab_size\": 500}}",
             hf_dir);
    config_load_json(&c, json, "run.json");
    char *argv[] = {"--model.vocab_size", "400"};
    config_apply_args(&c, 2, argv);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
    CHECK(c.model.hidden_size == 96 && c.model.num_hidden_layers == 3 && c.model.rope_theta == 50000 &&
              c.model.rms_norm_eps == 1e-6 && c.model.tie_word_embeddings && c.model.max_position_embeddings == 512,
          "precedence: FROM/config.json beats the defaults");
    CHECK(c.model.num_key_value_heads == 6, "precedence: absent num_key_value_heads = num_attention_heads (%d)",
          c.model.num_key_value_heads);
    CHECK(c.model.intermediate_size == 300, "precedence: run config model section beats FROM/config.json (%d)",
          c.model.intermediate_size);
    CHECK(c.model.vocab_size == 400, "precedence: override beats run config and FROM (%d)", c.model.vocab_size);
    CHECK(c.model.initializer_range == 0.02, "precedence: key absent in FROM takes transformers' default");

    // Order independence: an inline key set BEFORE --model.from still wins.
    Config d;
    config_defaults(&d);
    config_load_json(&d, "{\"model\": {\"num_hidden_layers\": 9}}", "run.json");
    char *argv2[] = {"--model.from", hf_dir};
    config_apply_args(&d, 2, argv2);
    CHECK(d.model.num_hidden_layers == 9 && d.model.hidden_size == 96,
          "precedence: explicit key given before --model.from is kept (%d layers)", d.model.num_hidden_layers);
    config_set(&d, "model.from", "");
    CHECK(d.model.hidden_size == 256 && d.model.num_hidden_layers == 9,
          "clearing model.from puts the keys it filled back to defaults");
}

// meta-llama/Llama-3.2-1B's config.json as published: llama3 RoPE scaling, a head_dim
// equal to hidden / heads, tied embeddings, bos/eos ids.
static void test_llama32_config(void) {
    write_hf("{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,\n"
             " \"bos_token_id\": 128000, \"eos_token_id\": 128001, \"head_dim\": 64, \"hidden_act\": \"silu\",\n"
             " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192,\n"
             " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\",\n"
             " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8,\n"
             " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0,\n"
             " \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192,\n"
             " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,\n"
             " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true,\n"
             " \"vocab_size\": 128256}");
    Config c;
    load_from_hf_dir(&c);
    const ModelConfig *m = &c.model;
    CHECK(m->rope_type == ROPE_LLAMA3 && m->rope_factor == 32 && m->rope_low_freq_factor == 1 &&
              m->rope_high_freq_factor == 4 && m->rope_original_max_position_embeddings == 8192 &&
              m->rope_theta == 500000,
          "Llama-3.2-1B config.json: llama3 rope_scaling read (factor %g, low %g, high %g, L %d)", m->rope_factor,
          m->rope_low_freq_factor, m->rope_high_freq_factor, m->rope_original_max_position_embeddings);
    CHECK(model_head_dim(m) == 64 && m->head_dim == 0 && m->tie_word_embeddings && m->num_key_value_heads == 8,
          "Llama-3.2-1B config.json: head_dim 64 (= 2048 / 32, kept as derived), tied, 8 kv heads");
    // A separate head dim (hidden / heads = 32, head_dim 48) is kept as given.
    write_hf("{\"hidden_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 48}");
    load_from_hf_dir(&c);
    CHECK(model_head_dim(&c.model) == 48, "config.json head_dim 48 with hidden 128 / 4 heads: hd %d",
          model_head_dim(&c.model));
    // Written back (a checkpoint's config.json) and read again: the same model.
    char dir[64] = "/tmp/femtotron_hfXXXXXX", path[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    Config d;
    config_defaults(&d);
    config_set(&d, "model.rope_type", "llama3");
    config_set(&d, "model.rope_factor", "8");
    config_set(&d, "model.rope_original_max_position_embeddings", "2048");
    config_set(&d, "model.head_dim", "48");
    config_write_hf_json(&d.model, path, -1, -1, CKPT_DTYPE_FP32);
    config_defaults(&c);
    config_set(&c, "model.from", dir);
    CHECK(c.model.rope_type == ROPE_LLAMA3 && c.model.rope_factor == 8 &&
              c.model.rope_original_max_position_embeddings == 2048 && c.model.head_dim == 48,
          "llama3 RoPE and head_dim 48 written to config.json and read back");
    config_set(&d, "model.rope_type", "linear");
    config_write_hf_json(&d.model, path, -1, -1, CKPT_DTYPE_FP32);
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n > 0 && strstr(buf, "\"type\":\t\"linear\"") && strstr(buf, "\"factor\":\t8.0"),
          "linear RoPE written as {\"type\": \"linear\", \"factor\": 8} (every transformers reads it)");
    remove(path);
    rmdir(dir);
}

// Mixtral-8x7B's config.json (model_type mixtral): the MoE keys are read, a Llama
// config.json with the same keys stays dense, a missing num_local_experts is
// MixtralConfig's 8, and a checkpoint's config.json says MixtralForCausalLM and
// reads back the same model; a dense model's config.json carries no MoE key.
static void test_mixtral_config(void) {
    write_hf("{\"architectures\": [\"MixtralForCausalLM\"], \"hidden_size\": 4096, \"intermediate_size\": 14336,\n"
             " \"max_position_embeddings\": 32768, \"model_type\": \"mixtral\", \"num_attention_heads\": 32,\n"
             " \"num_experts_per_tok\": 2, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,\n"
             " \"num_local_experts\": 8, \"output_router_logits\": false, \"rms_norm_eps\": 1e-05,\n"
             " \"rope_theta\": 1000000.0, \"router_aux_loss_coef\": 0.02, \"sliding_window\": null,\n"
             " \"tie_word_embeddings\": false, \"vocab_size\": 32000}");
    Config c;
    load_from_hf_dir(&c);
    const ModelConfig *m = &c.model;
    CHECK(m->num_local_experts == 8 && m->num_experts_per_tok == 2 && m->router_aux_loss_coef == 0.02 &&
              !m->output_router_logits && m->intermediate_size == 14336,
          "Mixtral-8x7B config.json: 8 experts, top-2, aux coef 0.02 (got %d, %d, %g)", m->num_local_experts,
          m->num_experts_per_tok, m->router_aux_loss_coef);
    write_hf("{\"model_type\": \"mixtral\", \"num_experts_per_tok\": 1, \"output_router_logits\": true}");
    load_from_hf_dir(&c);
    CHECK(c.model.num_local_experts == 8 && c.model.num_experts_per_tok == 1 && c.model.output_router_logits,
          "Mixtral config.json without num_local_experts: MixtralConfig's 8 (got %d)", c.model.num_local_experts);
    write_hf("{\"model_type\": \"llama\", \"num_local_experts\": 8}");
    load_from_hf_dir(&c);
    CHECK(c.model.num_local_experts == 0, "a Llama config.json stays dense whatever num_local_experts says");
    // Written back and read again.
    char dir[64] = "/tmp/femtotron_moeXXXXXX", path[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    ModelConfig w = c.model;
    w.from[0] = 0;
    w.num_local_experts = 6;
    w.num_experts_per_tok = 3;
    w.router_aux_loss_coef = 0.05;
    w.output_router_logits = true;
    config_write_hf_json(&w, path, -1, -1, CKPT_DTYPE_FP32);
    Config d;
    config_defaults(&d);
    config_set(&d, "model.from", dir);
    config_set(&d, "data.train", "x.bin");
    config_validate(&d, 1);
    char *text = cfg_text(path);
    CHECK(d.model.num_local_experts == 6 && d.model.num_experts_per_tok == 3 && d.model.router_aux_loss_coef == 0.05 &&
              d.model.output_router_logits && strstr(text, "MixtralForCausalLM") && strstr(text, "\"mixtral\""),
          "a Mixtral checkpoint's config.json: MixtralForCausalLM, model_type mixtral, the MoE keys read back");
    free(text);
    w.num_local_experts = 0;
    config_write_hf_json(&w, path, -1, -1, CKPT_DTYPE_FP32);
    text = cfg_text(path);
    CHECK(!strstr(text, "num_local_experts") && !strstr(text, "router_aux_loss_coef") && strstr(text, "LlamaForCausalLM"),
          "a dense checkpoint's config.json: LlamaForCausalLM, no MoE key");
    free(text);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    hf_dir_create();
    test_precedence();
    test_llama32_config();
    test_mixtral_config();
    hf_dir_remove();
    return check_summary();
}
