// tests/unit/test_config.c — the run configuration: defaults, JSON loading, overrides,
// model.from precedence, derived batch sizes, JSON round trips, and one check per
// fatal error (run in a forked child: die() exits 1 when MPI is not running) that
// the process fails and its stderr names the key and the offending value.
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

static char hf_dir[64];  // temporary Hugging Face model directory (mkdtemp)

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

// A small text file's contents (malloc'd; empty when unreadable).
static char *cfg_text(const char *path) {
    char *buf = calloc(8192, 1);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, 8191, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static void write_hf(const char *json) {
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    write_file(path, json);
}

// One failing scenario: starting from defaults with data.train set, load `json`
// (if any) or the file `file` (if any), apply the space-separated `args` (if
// any), then validate on `world` ranks (if world > 0).
// backend (1 cpu, 2 cuda, 0 none) and bf16_ready: then config_check_backend as
// that binary would call it.
typedef struct {
    const char *json, *file, *args;
    int world;
    int backend, bf16_ready;
} Case;

static void run_case(const Case *k) {
    Config c;
    config_defaults(&c);
    config_set(&c, "data.train", "train.bin");
    if (k->json) config_load_json(&c, k->json, "case.json");
    if (k->file) config_load_file(&c, k->file);
    if (k->args) {
        char buf[1024], *argv[32];
        int argc = 0;
        snprintf(buf, sizeof buf, "%s", k->args);
        for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
        config_apply_args(&c, argc, argv);
    }
    if (k->world > 0) config_validate(&c, k->world);
    if (k->backend) config_check_backend(&c, k->backend == 2 ? DEVICE_CUDA : DEVICE_CPU, k->bf16_ready);
}

// Run fn in a child with stdout or stderr (fd) captured into out; returns the
// child's exit status (-1 when it did not exit normally).
static int run_captured(void (*fn)(const void *), const void *arg, int fd, char *out, size_t out_size) {
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], fd);
        fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(p[0], out + len, out_size - 1 - len)) > 0) len += (size_t)n;
    out[len] = '\0';
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void run_case_void(const void *arg) { run_case((const Case *)arg); }

// The case must exit non-zero with every '|'-separated needle in its stderr.
static void expect_fail(const char *name, Case k, const char *needles) {
    char err[4096];
    int rc = run_captured(run_case_void, &k, 2, err, sizeof err);
    int ok = rc != 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", needles);
    for (char *t = strtok(buf, "|"); t; t = strtok(NULL, "|"))
        if (!strstr(err, t)) ok = 0;
    char *nl = strchr(err, '\n');
    if (nl) *nl = '\0';
    CHECK(ok, "error %-34s exit %d, stderr: %s", name, rc, err);
}

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
    config_defaults(&c);
    config_set(&c, "model.from", hf_dir);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
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
    config_defaults(&c);
    config_set(&c, "model.from", hf_dir);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
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

static void print_help_void(const void *arg) {
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

// training.device and training.precision: auto resolves per device, and each binary
// accepts only its own device (and bf16 only with bf16 kernels), naming the other.
static void test_device(void) {
    Config c;
    config_defaults(&c);
    CHECK(c.training.device == DEVICE_CPU && c.training.precision == PRECISION_AUTO,
          "defaults: training.device cpu, training.precision auto");
    config_set(&c, "data.train", "train.bin");
    config_validate(&c, 1);
    CHECK(c.training.precision == PRECISION_FP32, "precision auto on cpu resolves to fp32");
    config_defaults(&c);
    config_set(&c, "data.train", "train.bin");
    config_set(&c, "training.device", "cuda");
    config_validate(&c, 1);
    CHECK(c.training.precision == PRECISION_BF16, "precision auto on cuda resolves to bf16");
    char err[4096];
    Case ok_cpu = {.args = "--training.precision fp32", .world = 1, .backend = 1};
    Case ok_cuda = {.args = "--training.device cuda --training.precision fp32", .world = 1, .backend = 2};
    Case ok_bf16 = {.args = "--training.device cuda", .world = 1, .backend = 2, .bf16_ready = 1};
    Case ok_cpu_bf16 = {.args = "--training.precision bf16", .world = 1, .backend = 1, .bf16_ready = 1};
    CHECK(run_captured(run_case_void, &ok_cpu, 2, err, sizeof err) == 0 &&
              run_captured(run_case_void, &ok_cuda, 2, err, sizeof err) == 0 &&
              run_captured(run_case_void, &ok_bf16, 2, err, sizeof err) == 0 &&
              run_captured(run_case_void, &ok_cpu_bf16, 2, err, sizeof err) == 0,
          "cpu/fp32 on the CPU build, cuda/fp32 on the CUDA build, cuda/bf16 with bf16 kernels, cpu/bf16 on a "
          "CPU build with bf16 products (oneMKL's) pass");
    {
        Config cpu;
        config_defaults(&cpu);
        config_set(&cpu, "data.train", "train.bin");
        config_validate(&cpu, 1);
        CHECK(cpu.training.precision == PRECISION_FP32, "precision auto on cpu resolves to fp32 (bf16 by name only)");
    }
    expect_fail("bf16 on a CPU build without bf16 products",
                (Case){.args = "--training.precision bf16", .world = 1, .backend = 1},
                "training.precision = bf16 on the CPU needs the oneMKL build|make BLAS=mkl|training.precision = fp32|"
                "./femtotron-cuda");
    expect_fail("cuda on the CPU build", (Case){.args = "--training.device cuda --training.precision fp32", .world = 1, .backend = 1},
                "training.device = cuda|CPU build|make cuda|./femtotron-cuda|training.device = cpu");
    expect_fail("cpu on the CUDA build", (Case){.world = 1, .backend = 2},
                "training.device = cpu|CUDA build|./femtotron|training.device = cuda");
    expect_fail("bf16 without bf16 kernels", (Case){.args = "--training.device cuda", .world = 1, .backend = 2},
                "training.precision = bf16|no bf16 kernels|training.precision = fp32");
    expect_fail("device gpu", (Case){.args = "--training.device gpu"}, "training.device|\"cpu\" or \"cuda\"");
    // parallel.comm: NCCL exists in the CUDA build only; mpi and auto run anywhere.
    CHECK(c.parallel.comm == COMM_AUTO, "parallel.comm defaults to auto");
    Case ok_mpi = {.args = "--parallel.comm mpi --training.precision fp32", .world = 1, .backend = 1};
    Case ok_nccl = {.args = "--parallel.comm nccl --training.device cuda", .world = 1, .backend = 2, .bf16_ready = 1};
    CHECK(run_captured(run_case_void, &ok_mpi, 2, err, sizeof err) == 0 &&
              run_captured(run_case_void, &ok_nccl, 2, err, sizeof err) == 0,
          "parallel.comm mpi on the CPU build and nccl on the CUDA build pass");
    expect_fail("nccl on the CPU build", (Case){.args = "--parallel.comm nccl", .world = 1, .backend = 1},
                "parallel.comm = nccl|CPU build|make cuda|parallel.comm = mpi");
    expect_fail("comm gloo", (Case){.args = "--parallel.comm gloo"}, "parallel.comm|\"nccl\"");
    expect_fail("precision fp16", (Case){.args = "--training.precision fp16"}, "training.precision|\"bf16\"");
    // training.attention = cudnn: cuda, bf16 and one context-parallel rank only.
    CHECK(c.training.attention == ATTENTION_FEMTOTRON, "training.attention defaults to femtotron");
    Case ok_cudnn = {.args = "--training.device cuda --training.attention cudnn --parallel.dp 2", .world = 2,
                     .backend = 2, .bf16_ready = 1};
    CHECK(run_captured(run_case_void, &ok_cudnn, 2, err, sizeof err) == 0,
          "training.attention cudnn with cuda, bf16 and dp 2 passes");
    expect_fail("cudnn on cpu", (Case){.args = "--training.attention cudnn", .world = 1},
                "training.attention = cudnn needs training.device = cuda|training.attention = femtotron");
    expect_fail("cudnn in fp32",
                (Case){.args = "--training.device cuda --training.precision fp32 --training.attention cudnn",
                       .world = 1, .backend = 2},
                "training.attention = cudnn needs training.precision = bf16|training.attention = femtotron");
    expect_fail("cudnn with cp 2",
                (Case){.args = "--training.device cuda --training.attention cudnn --parallel.cp 2", .world = 2,
                       .backend = 2, .bf16_ready = 1},
                "training.attention = cudnn with parallel.cp = 2|ring|training.attention = femtotron");
    expect_fail("attention flash", (Case){.args = "--training.attention flash"}, "training.attention|\"cudnn\"");
    // training.keep_bf16_inputs: bf16, a dense model, not under full recomputation.
    CHECK(!c.training.keep_bf16_inputs, "training.keep_bf16_inputs defaults to false");
    Case ok_keep = {.args = "--training.device cuda --training.keep_bf16_inputs true --training.recompute selective",
                    .world = 1, .backend = 2, .bf16_ready = 1};
    CHECK(run_captured(run_case_void, &ok_keep, 2, err, sizeof err) == 0,
          "training.keep_bf16_inputs with bf16 and recompute selective passes");
    expect_fail("keep in fp32", (Case){.args = "--training.keep_bf16_inputs true", .world = 1},
                "training.keep_bf16_inputs = true needs training.precision = bf16");
    expect_fail("keep under full",
                (Case){.args = "--training.device cuda --training.keep_bf16_inputs true --training.recompute full",
                       .world = 1, .backend = 2, .bf16_ready = 1},
                "training.keep_bf16_inputs = true with training.recompute = full|recompute none or selective");
    expect_fail("keep with experts",
                (Case){.args = "--training.device cuda --training.keep_bf16_inputs true --model.num_local_experts 4 "
                               "--model.num_experts_per_tok 2",
                       .world = 1, .backend = 2, .bf16_ready = 1},
                "training.keep_bf16_inputs = true with a mixture-of-experts model|fp32");
}

static void test_help(void) {
    char out[16384];
    int rc = run_captured(print_help_void, NULL, 1, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "training.micro_batch_size") && strstr(out, "3e-4") &&
              strstr(out, "logging.val_batches") && strstr(out, "model.from"),
          "print_help lists keys with their defaults");
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
    config_defaults(&c);
    config_set(&c, "model.from", hf_dir);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
    const ModelConfig *m = &c.model;
    CHECK(m->num_local_experts == 8 && m->num_experts_per_tok == 2 && m->router_aux_loss_coef == 0.02 &&
              !m->output_router_logits && m->intermediate_size == 14336,
          "Mixtral-8x7B config.json: 8 experts, top-2, aux coef 0.02 (got %d, %d, %g)", m->num_local_experts,
          m->num_experts_per_tok, m->router_aux_loss_coef);
    write_hf("{\"model_type\": \"mixtral\", \"num_experts_per_tok\": 1, \"output_router_logits\": true}");
    config_defaults(&c);
    config_set(&c, "model.from", hf_dir);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
    CHECK(c.model.num_local_experts == 8 && c.model.num_experts_per_tok == 1 && c.model.output_router_logits,
          "Mixtral config.json without num_local_experts: MixtralConfig's 8 (got %d)", c.model.num_local_experts);
    write_hf("{\"model_type\": \"llama\", \"num_local_experts\": 8}");
    config_defaults(&c);
    config_set(&c, "model.from", hf_dir);
    config_set(&c, "data.train", "x.bin");
    config_validate(&c, 1);
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

static void test_errors(void) {
    char path[128], json[512];
    // Loading.
    expect_fail("unknown key", (Case){.json = "{\"training\": {\"stpes\": 3}}"},
                "config case.json|unknown key \"training.stpes\"|training.steps");
    expect_fail("unknown section", (Case){.json = "{\"trainig\": {}}"}, "unknown section \"trainig\"");
    expect_fail("section not an object", (Case){.json = "{\"model\": 3}"}, "section \"model\"");
    expect_fail("int given a fraction", (Case){.json = "{\"training\": {\"steps\": 1.5}}"},
                "\"training.steps\" must be an integer|1.5");
    expect_fail("int given a string", (Case){.json = "{\"model\": {\"hidden_size\": \"64\"}}"},
                "\"model.hidden_size\" must be an integer");
    expect_fail("bool given a number", (Case){.json = "{\"data\": {\"shuffle\": 1}}"},
                "\"data.shuffle\" must be true or false");
    expect_fail("string given a number", (Case){.json = "{\"checkpoint\": {\"dir\": 5}}"},
                "\"checkpoint.dir\" must be a string");
    expect_fail("sources given a number", (Case){.json = "{\"data\": {\"train\": 5}}"},
                "\"data.train\" must be a path, a glob or a list of sources|got 5");
    expect_fail("seed negative", (Case){.json = "{\"training\": {\"seed\": -1}}"}, "\"training.seed\"|-1");
    expect_fail("duplicate key", (Case){.json = "{\"training\": {\"steps\": 1, \"steps\": 2}}"},
                "\"steps\" is given twice");
    expect_fail("invalid JSON", (Case){.json = "{\"training\": {\n  \"steps\": 3,,\n}}"},
                "config case.json|invalid JSON at line 2");
    snprintf(path, sizeof path, "%s/no_such.json", hf_dir);
    expect_fail("missing config file", (Case){.file = path}, "no_such.json|No such file");
    // Overrides.
    expect_fail("override unknown key", (Case){.args = "--training.stpes 3"}, "unknown key \"training.stpes\"");
    expect_fail("override bad int", (Case){.args = "--training.steps 3x"}, "\"training.steps\"|\"3x\"");
    expect_fail("override bad bool", (Case){.args = "--data.shuffle yes"}, "\"data.shuffle\"|\"yes\"");
    expect_fail("override bad float", (Case){.args = "--training.lr nan"}, "\"training.lr\"|\"nan\"");
    expect_fail("override negative seed", (Case){.args = "--training.seed -5"}, "\"training.seed\"|\"-5\"");
    expect_fail("stray argument", (Case){.args = "--training.steps 3 extra"}, "unexpected argument \"extra\"");
    expect_fail("override without value", (Case){.args = "--training.steps"}, "\"--training.steps\" needs a value");
    // model.from: features we cannot honour.
    snprintf(json, sizeof json, "{\"model\": {\"from\": \"%s\"}}", hf_dir);
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}");
    expect_fail("HF hidden_act gelu", (Case){.json = json}, "hidden_act = \"gelu\"|config.json");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"attention_bias\": true}");
    expect_fail("HF attention_bias", (Case){.json = json}, "attention_bias = true");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"mlp_bias\": true}");
    expect_fail("HF mlp_bias", (Case){.json = json}, "mlp_bias = true");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}");
    expect_fail("HF rope_scaling yarn", (Case){.json = json}, "rope_scaling of type \"yarn\" is not supported|llama3");
    write_hf("{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}");
    expect_fail("HF rope_scaling dynamic (old spelling)", (Case){.json = json}, "type \"dynamic\" is not supported");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}");
    expect_fail("HF rope_scaling llama3 incomplete", (Case){.json = json}, "\"llama3\" needs a number \"low_freq_factor\"");
    write_hf("{\"rope_scaling\": {\"factor\": 8.0}}");
    expect_fail("HF rope_scaling default with a factor", (Case){.json = json}, "\"default\" with a factor");
    write_hf("{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
             "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}}");
    expect_fail("HF rope_scaling llama3 high <= low", (Case){.json = json, .world = 1}, "rope_high_freq_factor = 1|rope_low_freq_factor = 4");
    write_hf("{\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 33}");
    expect_fail("HF head_dim odd", (Case){.json = json, .world = 1}, "head dim = 33|model.head_dim|odd");
    expect_fail("linear RoPE factor < 1", (Case){.args = "--model.rope_type linear --model.rope_factor 0.5", .world = 1},
                "model.rope_factor = 0.5|at least 1");
    expect_fail("unknown RoPE type", (Case){.args = "--model.rope_type ntk"}, "model.rope_type|ntk");
    write_hf("{\"model_type\": \"mixtral\", \"sliding_window\": 4096}");
    expect_fail("HF Mixtral sliding_window", (Case){.json = json}, "sliding_window = 4096|sliding-window attention");
    write_hf("{\"model_type\": \"mixtral\", \"router_jitter_noise\": 0.1}");
    expect_fail("HF Mixtral router noise", (Case){.json = json}, "router_jitter_noise must be 0");
    write_hf("{\"model_type\": \"mistral\"}");
    expect_fail("HF model_type", (Case){.json = json}, "model_type = \"mistral\"");
    write_hf("{\"hidden_size\": 64.5}");
    expect_fail("HF wrong type", (Case){.json = json}, "\"hidden_size\" must be an integer|64.5");
    write_hf("{\"hidden_size\": 64,");
    expect_fail("HF invalid JSON", (Case){.json = json}, "model.from|config.json|invalid JSON");
    expect_fail("HF missing dir", (Case){.args = "--model.from /nonexistent/femtotron_model"},
                "model.from|/nonexistent/femtotron_model/config.json");
    // Validation: one key each.
    struct {
        const char *name, *args, *needles;
        int world;
    } v[] = {
        {"hidden_size 0", "--model.hidden_size 0", "model.hidden_size = 0", 1},
        {"heads do not divide hidden", "--model.hidden_size 250", "model.hidden_size = 250|num_attention_heads = 4", 1},
        {"odd head dim", "--model.hidden_size 20", "head dim|= 5|even", 1},
        {"kv heads do not divide heads", "--model.num_key_value_heads 3", "num_attention_heads = 4|num_key_value_heads = 3", 1},
        {"vocab_size 1", "--model.vocab_size 1", "model.vocab_size = 1", 1},
        {"rms_norm_eps 0", "--model.rms_norm_eps 0", "model.rms_norm_eps = 0", 1},
        {"seq_length > max pos", "--training.seq_length 2048", "training.seq_length = 2048|max_position_embeddings = 1024", 1},
        {"seq_length 0", "--training.seq_length 0", "training.seq_length = 0", 1},
        {"steps 0", "--training.steps 0", "training.steps = 0", 1},
        {"micro_batch_size 0", "--training.micro_batch_size 0", "training.micro_batch_size = 0", 1},
        {"lr 0", "--training.lr 0", "training.lr = 0", 1},
        {"min_lr > lr", "--training.min_lr 0.01", "training.min_lr = 0.01|training.lr = 0.0003", 1},
        {"min_lr < 0", "--training.min_lr -1", "training.min_lr = -1", 1},
        {"warmup < 0", "--training.warmup_steps -2", "training.warmup_steps = -2", 1},
        {"weight_decay < 0", "--training.weight_decay -0.1", "training.weight_decay = -0.1", 1},
        {"beta1 = 1", "--training.beta1 1", "training.beta1 = 1", 1},
        {"beta2 < 0", "--training.beta2 -0.5", "training.beta2 = -0.5", 1},
        {"eps 0", "--training.eps 0", "training.eps = 0", 1},
        {"grad_clip < 0", "--training.grad_clip -1", "training.grad_clip = -1", 1},
        {"data.train unset", "--data.train=", "data.train is not set|femtotron prepare", 1},
        {"grid != world", "--parallel.dp 2", "= 2, but the job has 4 ranks", 4},
        {"tp heads", "--parallel.tp 3", "num_attention_heads = 4 is not divisible by parallel.tp = 3", 3},
        {"tp kv heads", "--parallel.tp 4", "num_key_value_heads = 2 is not divisible by parallel.tp = 4", 4},
        {"tp ffn", "--parallel.tp 2 --model.intermediate_size 769", "intermediate_size = 769|parallel.tp = 2", 2},
        {"sp tokens", "--parallel.tp 2 --parallel.sequence_parallel true --training.micro_batch_size 1 --training.seq_length 7",
         "sequence_parallel|7 tokens|parallel.tp = 2", 2},
        {"pp > layers", "--parallel.pp 8", "parallel.pp * parallel.pp_virtual|a stage would be empty", 8},
        {"pp schedule", "--parallel.pp 2 --parallel.pp_schedule gpipe", "parallel.pp_schedule|gpipe", 2},
        {"pp virtual", "--parallel.pp 2 --parallel.pp_virtual 2", "pp_virtual = 2|interleaved", 2},
        {"zb-h1 with experts", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --model.num_local_experts 4 --model.num_experts_per_tok 2",
         "zb-h1|mixture-of-experts|num_local_experts = 4|not supported", 2},
        {"zb-v without its V", "--parallel.pp 2 --parallel.pp_schedule zb-v", "zb-v|parallel.pp_virtual = 2|it is 1", 2},
        {"zb-v, 3 chunks", "--parallel.pp 2 --parallel.pp_schedule zb-v --parallel.pp_virtual 3 --model.num_hidden_layers 6",
         "zb-v|parallel.pp_virtual = 2|it is 3", 2},
        {"interleaved M", "--parallel.pp 2 --parallel.pp_schedule interleaved --parallel.pp_virtual 2 --training.grad_acc_steps 3",
         "interleaved|grad_acc_steps = 3|multiple of parallel.pp = 2", 2},
        {"pp_layers sum", "--parallel.pp 2 --parallel.pp_layers 1,2", "parallel.pp_layers|2 stages with 3 layers", 2},
        {"pp_layers empty", "--parallel.pp 2 --parallel.pp_layers 4,0", "parallel.pp_layers|empty stage", 2},
        {"pp_costs count", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:1:1",
         "parallel.pp_costs = \"1:1:1\"|costs of 1 stages; expected 2", 2},
        {"pp_costs zero", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:0:1,1:1:1",
         "parallel.pp_costs|stage 0|three positive numbers F:I:W", 2},
        {"pp_costs pairs", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs 1:1,1:1",
         "parallel.pp_costs|stage 0|separated by ':'", 2},
        {"pp_costs word", "--parallel.pp 2 --parallel.pp_schedule zb-h1 --parallel.pp_costs fast",
         "parallel.pp_costs = \"fast\"|\"flops\", \"unit\" or \"measure\"", 2},
        {"pp_costs measure 1f1b", "--parallel.pp 2 --parallel.pp_costs measure",
         "parallel.pp_costs = \"measure\"|zero-bubble|not parallel.pp_schedule \"1f1b\"", 2},
        {"pp_costs 1f1b", "--parallel.pp 2 --parallel.pp_costs 1:1:1,1:1:1",
         "parallel.pp_costs|zero-bubble schedules|not parallel.pp_schedule \"1f1b\"", 2},
        {"cp seq", "--parallel.cp 2 --training.seq_length 250", "parallel.cp = 2|seq_length = 250|2 * cp = 4", 2},
        {"zero 4", "--parallel.zero 4", "parallel.zero = 4|0, 1, 2 or 3", 1},
        {"order", "--parallel.order tp-dp", "parallel.order|dp-pp-cp-tp", 1},
        {"recompute", "--training.recompute some", "training.recompute = \"some\"|\"none\", \"selective\" or \"full\"", 1},
        {"bucket 0", "--parallel.bucket_mb 0", "parallel.bucket_mb", 1},
        {"timeout 0", "--parallel.timeout_s 0", "parallel.timeout_s", 1},
        {"max_bad_steps 0", "--training.max_bad_steps 0", "training.max_bad_steps", 1},
        {"G not divisible", "--training.global_batch_size 20 --training.micro_batch_size 4 --parallel.dp 2",
         "global_batch_size = 20|= 4 * 2 = 8", 2},
        {"G != A*B*dp", "--training.global_batch_size 20 --training.grad_acc_steps 2 --training.micro_batch_size 4",
         "global_batch_size = 20|= 2 * 4 * 1 = 8", 1},
        {"checkpoint.every < 0", "--checkpoint.every -1", "checkpoint.every = -1", 1},
        {"resume without dir", "--checkpoint.resume true", "checkpoint.resume|checkpoint.dir", 1},
        {"logging.every 0", "--logging.every 0", "logging.every = 0", 1},
        {"val_every < 0", "--logging.val_every -3", "logging.val_every = -3", 1},
        {"val_batches 0", "--logging.val_batches 0", "logging.val_batches = 0", 1},
        {"experts < 0", "--model.num_local_experts -1", "model.num_local_experts = -1", 1},
        {"top-k > experts", "--model.num_local_experts 4 --model.num_experts_per_tok 5",
         "model.num_experts_per_tok = 5|between 1 and model.num_local_experts = 4", 1},
        {"top-k 0", "--model.num_local_experts 4 --model.num_experts_per_tok 0", "model.num_experts_per_tok = 0", 1},
        {"aux coef < 0", "--model.num_local_experts 4 --model.router_aux_loss_coef -0.1",
         "model.router_aux_loss_coef = -0.1", 1},
        {"ep without experts", "--parallel.dp 2 --parallel.ep 2", "parallel.ep = 2 needs a mixture-of-experts model", 2},
        {"ep outside dp x cp", "--model.num_local_experts 4 --parallel.tp 2 --parallel.ep 2",
         "parallel.ep = 2 does not divide parallel.dp * parallel.cp = 1 * 1 = 1", 2},
        {"ep experts", "--model.num_local_experts 6 --parallel.dp 4 --parallel.ep 4",
         "parallel.ep = 4 does not divide model.num_local_experts = 6", 4},
        {"ep 0", "--parallel.ep 0", "parallel.ep = 0", 1},
        {"shared experts without experts", "--model.n_shared_experts 1",
         "model.n_shared_experts = 1 needs a mixture-of-experts model", 1},
        {"val_every without data.val", "--logging.val_every 10", "logging.val_every = 10|data.val is not set", 1},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        expect_fail(v[i].name, (Case){.args = v[i].args, .world = v[i].world}, v[i].needles);
}

int main(void) {
    strcpy(hf_dir, "/tmp/femtotron_cfgXXXXXX");
    if (!mkdtemp(hf_dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_defaults();
    test_load_json();
    test_overrides();
    test_precedence();
    test_llama32_config();
    test_batch();
    test_round_trip();
    test_enums();
    test_device();
    test_help();
    test_errors();
    test_mixtral_config();

    char path[128];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/run.json", hf_dir);
    unlink(path);
    rmdir(hf_dir);
    return check_summary();
}
