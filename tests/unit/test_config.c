// tests/unit/test_config.c — the run configuration's loading: defaults, JSON loading
// (inline and from a file), command-line overrides, derived batch sizes, JSON round
// trips (config_to_json and the Hugging Face config.json writer), enum options and
// their spellings, and --help. model.from is in test_config_hf.c, the refusals in
// test_config_errors.c; the shared helpers in config_fixture.h.
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

static void test_defaults(void) {
    Config c;
    config_defaults(&c);
    const ModelConfig *m = &c.model;
    CHECK(m->hidden_size == 256 && m->intermediate_size == 768 && m->num_hidden_layers == 4 &&
              m->num_attention_heads == 4 && m->num_key_value_heads == 2 && m->vocab_size == 257 &&
              m->max_position_embeddings == 1024 && m->rms_norm_eps == 1e-5 && m->rope_theta == 10000 &&
              m->initializer_range == 0.02 && !m->tie_word_embeddings && m->from[0] == '\0',
          "defaults: model section");
    const TrainingConfig *t = &c.training;
    CHECK(t->seed == 1234 && t->steps == 100 && t->seq_length == 256 && t->micro_batch_size == 8 &&
              t->grad_acc_steps == 0 && t->global_batch_size == 0 && t->lr == 3e-4 && t->min_lr == 3e-5 &&
              t->warmup_steps == 10 && t->weight_decay == 0.1 && t->beta1 == 0.9 && t->beta2 == 0.95 &&
              t->eps == 1e-8 && t->grad_clip == 1.0 && t->threads == 0 && t->peak_flops == 0,
          "defaults: training section");
    CHECK(c.parallel.dp == 1 && c.parallel.tp == 1 && c.parallel.pp == 1 && c.parallel.cp == 1 &&
              c.parallel.zero == 0 && !c.data.train[0] && !c.data.val[0] && !c.data.shuffle &&
              !c.checkpoint.dir[0] && c.checkpoint.every == 0 && !c.checkpoint.resume && !c.logging.metrics[0] &&
              c.logging.every == 1 && c.logging.val_every == 0 && c.logging.val_batches == 4,
          "defaults: data, parallel, checkpoint, logging sections");
}

static void test_load_json(void) {
    Config c;
    config_defaults(&c);
    config_load_json(&c,
                     "{\"model\": {\"hidden_size\": 64, \"rope_theta\": 500000, \"tie_word_embeddings\": true},\n"
                     " \"data\": {\"train\": \"shards/*.bin\", \"shuffle\": true},\n"
                     " \"training\": {\"seed\": 42, \"lr\": 1e-3, \"steps\": 7},\n"
                     " \"logging\": {\"metrics\": \"m.jsonl\"}}",
                     "inline");
    CHECK(c.model.hidden_size == 64 && c.model.rope_theta == 500000 && c.model.tie_word_embeddings &&
              !strcmp(c.data.train, "shards/*.bin") && c.data.shuffle && c.training.seed == 42 &&
              c.training.lr == 1e-3 && c.training.steps == 7 && !strcmp(c.logging.metrics, "m.jsonl"),
          "load_json sets int, uint64, float, bool and string keys");
    CHECK(c.model.num_hidden_layers == 4 && c.training.micro_batch_size == 8 && c.logging.every == 1,
          "load_json leaves keys it does not name at their defaults");

    // Same through a file on disk.
    char path[128];
    snprintf(path, sizeof path, "%s/run.json", hf_dir);
    write_file(path, "{\"training\": {\"micro_batch_size\": 3}, \"parallel\": {\"dp\": 2}}");
    config_load_file(&c, path);
    CHECK(c.training.micro_batch_size == 3 && c.parallel.dp == 2 && c.model.hidden_size == 64,
          "load_file applies on top of what the config already holds");
}

static void test_overrides(void) {
    Config c;
    config_defaults(&c);
    char *argv[] = {"--model.num_hidden_layers", "12", "--training.seed=18446744073709551615",
                    "--training.lr", "0.5e-3", "--data.shuffle", "1", "--checkpoint.resume=true",
                    "--checkpoint.dir", "ckpt dir", "--data.shuffle=0", "--logging.metrics="};
    int argc = (int)(sizeof argv / sizeof argv[0]);
    strcpy(c.logging.metrics, "old");
    int used = config_apply_args(&c, argc, argv);
    CHECK(used == argc, "apply_args consumed %d of %d arguments", used, argc);
    CHECK(c.model.num_hidden_layers == 12, "override int: num_hidden_layers = %d", c.model.num_hidden_layers);
    CHECK(c.training.seed == UINT64_MAX, "override uint64 at 2^64-1: seed = %llu",
          (unsigned long long)c.training.seed);
    CHECK(c.training.lr == 0.5e-3, "override float: lr = %g", c.training.lr);
    CHECK(c.checkpoint.resume && !c.data.shuffle, "override bool: true / 1 then 0");
    CHECK(!strcmp(c.checkpoint.dir, "ckpt dir") && c.logging.metrics[0] == '\0',
          "override string, with a space and empty after '='");
}

static void test_batch(void) {
    Config c;
    config_defaults(&c);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
    CHECK(c.training.grad_acc_steps == 1 && c.training.global_batch_size == 8,
          "batch: neither given -> A = 1, G = B = 8 (A=%d G=%d)", c.training.grad_acc_steps,
          c.training.global_batch_size);
    config_defaults(&c);
    char *a1[] = {"--data.train", "x", "--training.grad_acc_steps", "3", "--parallel.dp", "2"};
    config_apply_args(&c, 6, a1);
    config_validate(&c, 2);
    CHECK(c.training.global_batch_size == 48, "batch: A only -> G = A*B*dp = 3*8*2 = %d",
          c.training.global_batch_size);
    config_defaults(&c);
    char *a2[] = {"--data.train", "x", "--training.global_batch_size", "64", "--parallel.dp", "4",
                  "--training.micro_batch_size", "2"};
    config_apply_args(&c, 8, a2);
    config_validate(&c, 4);
    CHECK(c.training.grad_acc_steps == 8, "batch: G only -> A = G/(B*dp) = 64/(2*4) = %d", c.training.grad_acc_steps);
    config_defaults(&c);
    char *a3[] = {"--data.train", "x", "--training.global_batch_size", "32", "--training.grad_acc_steps", "4"};
    config_apply_args(&c, 6, a3);
    config_validate(&c, 1);
    CHECK(c.training.grad_acc_steps == 4 && c.training.global_batch_size == 32, "batch: consistent G and A kept");
}

static void test_round_trip(void) {
    Config c, d;
    config_defaults(&c);
    char *argv[] = {"--model.hidden_size", "48", "--model.rms_norm_eps", "3.3e-7", "--training.lr", "0.1",
                    "--training.seed", "18446744073709551000", "--data.val", "v\"q\\.bin",
                    "--model.tie_word_embeddings", "true", "--logging.val_every", "5"};
    config_apply_args(&c, 14, argv);
    char *text = config_to_json(&c);
    config_defaults(&d);
    config_load_json(&d, text, "round trip");
    char *text2 = config_to_json(&d);
    CHECK(!strcmp(text, text2), "config_to_json -> config_load_json -> config_to_json gives the same text");
    CHECK(d.model.hidden_size == 48 && d.model.rms_norm_eps == 3.3e-7 && d.training.lr == 0.1 &&
              d.training.seed == 18446744073709551000ull && !strcmp(d.data.val, "v\"q\\.bin") &&
              d.model.tie_word_embeddings && d.logging.val_every == 5,
          "round trip keeps every value bit for bit (big seed, escaped string, float)");
    free(text);
    free(text2);

    // config_write_hf_json, read back through model.from, gives the same model.
    char dir[64] = "/tmp/femtotron_hfXXXXXX", path[128];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    c.model.num_key_value_heads = 1;
    c.model.initializer_range = 0.01;
    config_write_hf_json(&c.model, path, -1, -1, CKPT_DTYPE_FP32);
    config_defaults(&d);
    config_set(&d, "model.from", dir);
    strcpy(c.model.from, dir);
    CHECK(!memcmp(&c.model, &d.model, sizeof c.model),
          "write_hf_json -> model.from reads back the identical model section");
    FILE *f = fopen(path, "r");
    char buf[2048] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    CHECK(n > 0 && strstr(buf, "\"LlamaForCausalLM\"") && strstr(buf, "\"model_type\":\t\"llama\"") &&
              strstr(buf, "\"head_dim\":\t12") && strstr(buf, "\"rope_scaling\":\tnull") &&
              strstr(buf, "\"hidden_act\":\t\"silu\""),
          "HF config.json names the architecture, model_type, head_dim, silu, null rope_scaling");
    unlink(path);
    rmdir(dir);
}

static void print_help_void(void *arg) {
    (void)arg;
    config_print_help();
}

// Options with a fixed set of values are enums from the moment they are loaded:
// every spelling maps to its value (from the command line and from JSON), the
// enum's name function gives the spelling back, and the config's JSON writes it.
static void test_enums(void) {
    struct {
        const char *key;
        const char *const *names;
        size_t offset;
    } e[] = {
        {"training.recompute", RECOMPUTE_NAMES, offsetof(Config, training.recompute)},
        {"parallel.pp_schedule", PP_SCHEDULE_NAMES, offsetof(Config, parallel.pp_schedule)},
        {"parallel.order", RANK_ORDER_NAMES, offsetof(Config, parallel.order)},
        {"training.device", DEVICE_NAMES, offsetof(Config, training.device)},
        {"training.precision", PRECISION_NAMES, offsetof(Config, training.precision)},
        {"training.attention", ATTENTION_NAMES, offsetof(Config, training.attention)},
        {"parallel.comm", COMM_NAMES, offsetof(Config, parallel.comm)},
    };
    for (size_t k = 0; k < sizeof e / sizeof e[0]; k++) {
        int ok = 1, n = 0;
        for (int v = 0; e[k].names[v]; v++, n++) {
            Config c;
            config_defaults(&c);
            config_set(&c, e[k].key, e[k].names[v]);
            ok &= *(const int *)((const char *)&c + e[k].offset) == v;
            // JSON: {"section": {"key": "name"}}
            char json[160], section[32];
            const char *dot = strchr(e[k].key, '.');
            snprintf(section, sizeof section, "%.*s", (int)(dot - e[k].key), e[k].key);
            snprintf(json, sizeof json, "{\"%s\": {\"%s\": \"%s\"}}", section, dot + 1, e[k].names[v]);
            config_defaults(&c);
            config_load_json(&c, json, "enum test");
            ok &= *(const int *)((const char *)&c + e[k].offset) == v;
            char *text = config_to_json(&c), want[96];
            snprintf(want, sizeof want, "\"%s\":\t\"%s\"", dot + 1, e[k].names[v]);
            ok &= strstr(text, want) != NULL;
            free(text);
        }
        CHECK(ok && n >= 2, "%s: each of its %d spellings loads (CLI and JSON) as its enum value and is "
              "written back by name", e[k].key, n);
    }
    CHECK(!strcmp(recompute_name(RECOMPUTE_SELECTIVE), "selective") && !strcmp(pp_schedule_name(PP_INTERLEAVED), "interleaved") &&
              !strcmp(rank_order_name(ORDER_PP_DP_CP_TP), "pp-dp-cp-tp"),
          "recompute_name, pp_schedule_name and rank_order_name spell the values");
    CHECK(config_name_index(PP_SCHEDULE_NAMES, "gpipe") == -1 && config_name_index(PP_SCHEDULE_NAMES, "afab") == PP_AFAB,
          "config_name_index finds spellings and refuses others");
}

static void test_help(void) {
    char out[16384];
    int rc = run_child_capture(print_help_void, NULL, 1, 0, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "training.micro_batch_size") && strstr(out, "3e-4") &&
              strstr(out, "logging.val_batches") && strstr(out, "model.from"),
          "print_help lists keys with their defaults");
}

int main(void) {
    hf_dir_create();
    test_defaults();
    test_load_json();
    test_overrides();
    test_batch();
    test_round_trip();
    test_enums();
    test_help();
    hf_dir_remove();
    return check_summary();
}
