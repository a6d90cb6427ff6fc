// tests/unit/checkpoint_fixture.h — what the checkpoint unit tests share
// (test_checkpoint.c, test_checkpoint_pieces.c, test_checkpoint_tp.c): the
// program's temporary directory, file helpers, the small model configurations, the
// buffer patterns, the check of a fatal error in a fork()ed child, and the state
// the save/load tests build first and the others read (the 2-layer untied model with
// its params and moments, the step 7 checkpoint without moments, a mis-shaped file).
// Include after the test's feature macro (_GNU_SOURCE).
#ifndef FEMTOTRON_TEST_CHECKPOINT_FIXTURE_H
#define FEMTOTRON_TEST_CHECKPOINT_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "run_child.h"
#include "config.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/llama.h"

static char tmpdir[256];

// ---------------------------------------------------------------- helpers

static inline int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    if (len) *len = got;
    return buf;
}

static inline void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

// Number of entries in a directory, "." and ".." excluded.
static inline int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static inline int same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

static inline void make_cfg(Config *cfg, int layers, int vocab, int tied) {
    config_defaults(cfg);
    ModelConfig *m = &cfg->model;
    m->hidden_size = 8;
    m->intermediate_size = 12;
    m->num_hidden_layers = layers;
    m->num_attention_heads = 2;
    m->num_key_value_heads = 1;
    m->vocab_size = vocab;
    m->max_position_embeddings = 16;
    m->tie_word_embeddings = tied;
    cfg->training.seed = 1234567;
}

// Distinct values everywhere, and a different pattern per buffer kind.
static inline float *pattern(size_t n, float scale, float shift) {
    float *p = malloc(n * sizeof(float));  // (n)
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * (float)i + 1e-3f * (float)(i % 7);
    return p;
}

static inline float *garbage(size_t n) {
    float *p = malloc(n * sizeof(float));  // (n)
    for (size_t i = 0; i < n; i++) p[i] = -999.0f;
    return p;
}

static inline void expect_death(const char *what, void (*fn)(void *), void *ctx, const char *n1,
                                const char *n2) {
    char err[4096];
    int rc = run_child(fn, ctx, err, sizeof err);
    CHECK(rc != 0 && strstr(err, n1) && (!n2 || strstr(err, n2)),
          "%s: child exits %d naming \"%s\"%s%s (stderr: %.300s)", what, rc, n1, n2 ? " and " : "",
          n2 ? n2 : "", err);
}

// ---------------------------------------------------------------- shared state

// The model every program starts from (children read it too): 2 layers, vocab 11,
// untied, with distinct params and moments. Freed by main.
static Config g_cfg;
static LlamaModel g_model;
static float *g_params, *g_m, *g_v;

static inline void fixture_model(void) {
    make_cfg(&g_cfg, 2, 11, 0);
    llama_build(&g_model, &g_cfg.model, model_whole());
    size_t n = g_model.num_elements;
    g_params = pattern(n, 0.01f, 0.5f);
    g_m = pattern(n, -0.002f, 0.1f);
    g_v = pattern(n, 1e-5f, 3.0f);
}

// Step 7 in dir: new params (returned; the caller frees them) saved without
// optimizer moments.
static inline float *fixture_save_step7(const char *dir) {
    float *p7 = pattern(g_model.num_elements, -0.03f, 7.0f);
    TrainerState st = {.step = 7, .consumed_sequences = 70};
    checkpoint_save(dir, &g_cfg, &g_model, p7, NULL, NULL, &st);
    return p7;
}

// A checkpoint directory written by hand whose model.safetensors holds g_params
// with model.norm.weight saved as [4] where [8] is expected.
static inline void fixture_write_badshape(const char *dir) {
    char p[1100];
    mkdir(dir, 0755);
    StWrite *w = calloc((size_t)g_model.n_params, sizeof *w);
    for (int i = 0; i < g_model.n_params; i++) {
        const ParamInfo *pi = &g_model.params[i];
        w[i].name = pi->name;
        w[i].ndim = pi->ndim;
        w[i].shape[0] = pi->shape[0];
        w[i].shape[1] = pi->shape[1];
        w[i].data = g_params + pi->offset;
        if (strcmp(pi->name, "model.norm.weight") == 0) w[i].shape[0] = 4;  // half of D = 8
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_write_f32(p, w, g_model.n_params, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    write_text(p, "{\"format\":\"femtotron-checkpoint-v1\",\"step\":1,\"consumed_sequences\":2}");
    free(w);
}

// A program's start: its temporary directory (tmpdir), or exit 2 without one.
static inline void fixture_start(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/femtotron_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(2);
    }
}

// A program's end: the model and its buffers freed, tmpdir removed; the exit
// status of its checks (check_summary).
static inline int fixture_finish(void) {
    free(g_params);
    free(g_m);
    free(g_v);
    llama_free(&g_model);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}

#endif
