// tests/unit/test_checkpoint.c — checkpoint save/load round trips bit for bit, the
// atomic directory protocol (the newest step dir is the checkpoint, the `latest`
// link, stale temporaries, refusal to overwrite, a crash between publishing and
// `latest`), integrity (manifest checksums: a flipped byte, a truncated file, files
// of two checkpoints mixed, a NaN weight), clear errors for corrupt or mismatched
// checkpoints (checked in
// fork()ed children, since die() ends the process), and Hugging Face weight loading
// for tied and untied models, single-file and sharded; the piece API on one rank
// (byte-identical files, any read layout, refused partitions); tensor-parallel
// tables (slices of global tensors, vocab padding) loading BF16 and F32 files;
// checkpoint.dtype bf16 (rounding, the fp32 master copy, checksums of odd splits).
#define _GNU_SOURCE
#include <cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "run_child.h"
#include "config.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"
#include "model/llama.h"
#include "ops/bf16.h"

static char tmpdir[256];

// ---------------------------------------------------------------- helpers

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static char *slurp(const char *path, size_t *len) {
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

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

// Number of entries in a directory, "." and ".." excluded.
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void make_cfg(Config *cfg, int layers, int vocab, int tied) {
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
static float *pattern(size_t n, float scale, float shift) {
    float *p = malloc(n * sizeof(float));  // (n)
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * (float)i + 1e-3f * (float)(i % 7);
    return p;
}

static float *garbage(size_t n) {
    float *p = malloc(n * sizeof(float));  // (n)
    for (size_t i = 0; i < n; i++) p[i] = -999.0f;
    return p;
}

// ---------------------------------------------------------------- shared state for children

static Config g_cfg;
static LlamaModel g_model, g_other;
static float *g_params, *g_m, *g_v;
static char g_dir[512], g_path[1024];

static void child_save_step5(void *p) {
    (void)p;
    TrainerState st = {.step = 5, .consumed_sequences = 999};
    checkpoint_save(g_dir, &g_cfg, &g_model, g_params, g_m, g_v, &st);
}

static void child_latest(void *p) {
    char out[1024];
    checkpoint_latest((const char *)p, out, sizeof out);
}

// The target of DIR/latest when it is a symbolic link ("" otherwise).
static const char *link_target(const char *dir) {
    static char out[256];
    char p[1024];
    snprintf(p, sizeof p, "%s/latest", dir);
    ssize_t n = readlink(p, out, sizeof out - 1);
    out[n > 0 ? n : 0] = '\0';
    return out;
}

// Load g_path (params only) into the model's shape.
static void child_load_path(void *p) {
    (void)p;
    float *buf = garbage(g_model.num_elements);
    checkpoint_load(g_path, &g_model, buf, NULL, NULL, NULL);
}

// Load g_path into g_other (a differently shaped model).
static void child_load_other(void *p) {
    (void)p;
    float *buf = garbage(g_other.num_elements);
    checkpoint_load(g_path, &g_other, buf, NULL, NULL, NULL);
}

static void child_load_with_moments(void *p) {
    (void)p;
    float *a = garbage(g_model.num_elements), *b = garbage(g_model.num_elements);
    float *c = garbage(g_model.num_elements);
    checkpoint_load(g_path, &g_model, a, b, c, NULL);
}

static void child_hf_load_other(void *p) {
    (void)p;
    float *buf = garbage(g_other.num_elements);
    load_hf_weights(g_path, &g_other, buf);
}

static void expect_death(const char *what, void (*fn)(void *), void *ctx, const char *n1,
                         const char *n2) {
    char err[4096];
    int rc = run_child(fn, ctx, err, sizeof err);
    CHECK(rc != 0 && strstr(err, n1) && (!n2 || strstr(err, n2)),
          "%s: child exits %d naming \"%s\"%s%s (stderr: %.300s)", what, rc, n1, n2 ? " and " : "",
          n2 ? n2 : "", err);
}

// ---------------------------------------------------------------- save / load

static void test_save_load(void) {
    make_cfg(&g_cfg, 2, 11, 0);
    llama_build(&g_model, &g_cfg.model, model_whole());
    size_t n = g_model.num_elements;
    g_params = pattern(n, 0.01f, 0.5f);
    g_m = pattern(n, -0.002f, 0.1f);
    g_v = pattern(n, 1e-5f, 3.0f);
    // Nested path: the save creates every missing level.
    snprintf(g_dir, sizeof g_dir, "%s/runs/a/ckpt", tmpdir);
    TrainerState st = {.step = 5, .consumed_sequences = 4398046511104ull};  // 2^42
    checkpoint_save(g_dir, &g_cfg, &g_model, g_params, g_m, g_v, &st);

    char p[1024];
    snprintf(p, sizeof p, "%s/step_0000005", g_dir);
    CHECK(exists(p), "save creates DIR/step_0000005 under a missing parent path");
    CHECK(count_entries(p) == 6, "step dir holds 6 files (got %d)", count_entries(p));
    const char *files[] = {"model.safetensors", "config.json", "optimizer.safetensors",
                           "trainer_state.json", "manifest.json", "generation_config.json"};
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/step_0000005/%s", g_dir, files[i]);
        CHECK(exists(p), "step dir has %s", files[i]);
    }
    CHECK(strcmp(link_target(g_dir), "step_0000005") == 0, "latest is a link to step_0000005 (\"%s\")",
          link_target(g_dir));
    CHECK(count_entries(g_dir) == 2, "no temporaries left: DIR holds only step_0000005 and latest (%d entries)",
          count_entries(g_dir));

    // The files are standard: model tensors under HF names with global shapes.
    StIndex idx;
    snprintf(p, sizeof p, "%s/step_0000005/model.safetensors", g_dir);
    st_open(&idx, p);
    CHECK(idx.n == g_model.n_params, "model.safetensors holds every parameter (%d of %d)", idx.n,
          g_model.n_params);
    const StTensor *t = st_find(&idx, "model.layers.1.input_layernorm.weight");
    CHECK(t && t->ndim == 1 && t->shape[0] == 8, "1-D norm weight saved with shape [8]");
    t = st_find(&idx, "lm_head.weight");
    CHECK(t && t->ndim == 2 && t->shape[0] == 11 && t->shape[1] == 8, "lm_head.weight saved as [11, 8]");
    st_close(&idx);
    snprintf(p, sizeof p, "%s/step_0000005/optimizer.safetensors", g_dir);
    st_open(&idx, p);
    CHECK(idx.n == 2 * g_model.n_params && st_find(&idx, "model.norm.weight.exp_avg") &&
              st_find(&idx, "model.norm.weight.exp_avg_sq"),
          "optimizer.safetensors holds NAME.exp_avg and NAME.exp_avg_sq for all %d tensors",
          g_model.n_params);
    st_close(&idx);

    snprintf(p, sizeof p, "%s/step_0000005/trainer_state.json", g_dir);
    char *text = slurp(p, NULL);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    const cJSON *fmt = cJSON_GetObjectItem(js, "format");
    const cJSON *conf = cJSON_GetObjectItem(js, "config");
    CHECK(js && cJSON_GetObjectItem(js, "step") && cJSON_GetObjectItem(js, "step")->valuedouble == 5 &&
              cJSON_GetObjectItem(js, "seed") &&
              cJSON_GetObjectItem(js, "seed")->valuedouble == 1234567 && cJSON_IsString(fmt) &&
              strcmp(fmt->valuestring, "femtotron-checkpoint-v1") == 0 && cJSON_IsObject(conf) &&
              cJSON_GetObjectItem(conf, "model"),
          "trainer_state.json: step, seed, format and the config object");
    cJSON_Delete(js);
    free(text);
    snprintf(p, sizeof p, "%s/step_0000005/config.json", g_dir);
    text = slurp(p, NULL);
    js = text ? cJSON_Parse(text) : NULL;
    CHECK(js && cJSON_GetObjectItem(js, "hidden_size") &&
              cJSON_GetObjectItem(js, "hidden_size")->valuedouble == 8,
          "config.json is a Hugging Face config with hidden_size 8");
    cJSON_Delete(js);
    free(text);

    char found[1024], want[1024];
    snprintf(want, sizeof want, "%s/step_0000005", g_dir);
    int has = checkpoint_latest(g_dir, found, sizeof found);
    CHECK(has == 1 && strcmp(found, want) == 0, "checkpoint_latest finds %s", want);

    float *p2 = garbage(n), *m2 = garbage(n), *v2 = garbage(n);
    TrainerState st2 = {0};
    checkpoint_load(found, &g_model, p2, m2, v2, &st2);
    CHECK(memcmp(p2, g_params, n * sizeof(float)) == 0, "params load back bit for bit (%zu floats)", n);
    CHECK(memcmp(m2, g_m, n * sizeof(float)) == 0, "exp_avg loads back bit for bit");
    CHECK(memcmp(v2, g_v, n * sizeof(float)) == 0, "exp_avg_sq loads back bit for bit");
    CHECK(st2.step == 5 && st2.consumed_sequences == 4398046511104ull,
          "trainer state loads back (step %d, consumed %llu)", st2.step,
          (unsigned long long)st2.consumed_sequences);
    free(p2);
    free(m2);
    free(v2);

    // Saving the same step again must fail and leave the checkpoint untouched.
    size_t len_before, len_after;
    snprintf(p, sizeof p, "%s/step_0000005/model.safetensors", g_dir);
    char *before = slurp(p, &len_before);
    expect_death("saving step 5 twice", child_save_step5, NULL, "already exists", "step_0000005");
    char *after = slurp(p, &len_after);
    CHECK(before && after && len_before == len_after && memcmp(before, after, len_before) == 0,
          "the existing step_0000005/model.safetensors is unchanged after the refused save");
    free(before);
    free(after);
    CHECK(strcmp(link_target(g_dir), "step_0000005") == 0 && count_entries(g_dir) == 2,
          "latest is unchanged and no temporary is left after the refused save");
}

static void test_stale_tmp_and_no_moments(void) {
    char p[1024];
    // A crashed save left .tmp_step_0000007 with a half-written file.
    snprintf(p, sizeof p, "%s/.tmp_step_0000007", g_dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.tmp_step_0000007/junk.bin", g_dir);
    write_text(p, "half");
    // Parameters change between saves; save without optimizer moments this time.
    size_t n = g_model.num_elements;
    float *p7 = pattern(n, -0.03f, 7.0f);
    TrainerState st = {.step = 7, .consumed_sequences = 70};
    checkpoint_save(g_dir, &g_cfg, &g_model, p7, NULL, NULL, &st);
    snprintf(p, sizeof p, "%s/.tmp_step_0000007", g_dir);
    CHECK(!exists(p), "the stale .tmp_step_0000007 is gone after the save");
    snprintf(p, sizeof p, "%s/step_0000007/junk.bin", g_dir);
    CHECK(!exists(p), "the stale temporary's files did not leak into step_0000007");
    snprintf(p, sizeof p, "%s/step_0000007/optimizer.safetensors", g_dir);
    CHECK(!exists(p), "save with m == NULL writes no optimizer.safetensors");

    char found[1024];
    int has = checkpoint_latest(g_dir, found, sizeof found);
    CHECK(has == 1 && strstr(found, "/step_0000007") && strlen(strstr(found, "/step_0000007")) == 13,
          "latest now points at step_0000007 (%s)", found);
    float *buf = garbage(n);
    TrainerState st2 = {0};
    checkpoint_load(found, &g_model, buf, NULL, NULL, &st2);
    CHECK(memcmp(buf, p7, n * sizeof(float)) == 0 && st2.step == 7 && st2.consumed_sequences == 70,
          "step 7 loads back its own params and state (not step 5's)");
    snprintf(g_path, sizeof g_path, "%s", found);
    expect_death("loading moments from a checkpoint without them", child_load_with_moments, NULL,
                 "optimizer.safetensors", "step_0000007");
    free(buf);
    free(p7);
}

static void test_latest_errors(void) {
    char d[512], p[1024], out[1024];
    snprintf(d, sizeof d, "%s/nolatest", tmpdir);
    mkdir(d, 0755);
    CHECK(checkpoint_latest(d, out, sizeof out) == 0, "no step directory: checkpoint_latest returns 0");
    snprintf(p, sizeof p, "%s/does/not/exist", tmpdir);
    CHECK(checkpoint_latest(p, out, sizeof out) == 0, "missing checkpoint dir: checkpoint_latest returns 0");

    // `latest` is not consulted: a stale or garbled one does not matter.
    snprintf(d, sizeof d, "%s/garbled", tmpdir);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/latest", d);
    write_text(p, "../../etc\n");
    CHECK(checkpoint_latest(d, out, sizeof out) == 0, "a garbled latest file alone is no checkpoint");

    // A step directory femtotron could not have published is refused by name.
    snprintf(p, sizeof p, "%s/step_0000042", d);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/step_0000042/trainer_state.json", d);
    write_text(p, "{}");
    expect_death("the newest step dir has neither manifest.json nor model.safetensors", child_latest, d,
                 "step_0000042 is not a complete checkpoint", "manifest.json");
}

// Defect 1 of the reliability issue: a job killed after step_N was renamed into
// place but before `latest` moved used to redo step N on every resume and die on
// "already exists". Now the newest step directory is the checkpoint.
static void test_crash_between_publish_and_latest(void) {
    char d[512], p[1024], out[1024];
    snprintf(d, sizeof d, "%s/crash", tmpdir);
    TrainerState st = {.step = 3, .consumed_sequences = 30, .loss = 2.5};
    checkpoint_save(d, &g_cfg, &g_model, g_params, NULL, NULL, &st);
    st.step = 4;
    checkpoint_save(d, &g_cfg, &g_model, g_params, NULL, NULL, &st);
    // Put latest back where the killed job left it, plus the leftovers of a save in flight.
    snprintf(p, sizeof p, "%s/latest", d);
    unlink(p);
    if (symlink("step_0000003", p) != 0) perror("symlink");
    snprintf(p, sizeof p, "%s/.tmp_step_0000005", d);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/latest.tmp", d);
    write_text(p, "x");
    CHECK(checkpoint_latest(d, out, sizeof out) == 1 && strstr(out, "/step_0000004"),
          "latest still names step 3, the newest published step 4 is the checkpoint (%s)", out);
    checkpoint_prepare_dir(d);
    snprintf(p, sizeof p, "%s/.tmp_step_0000005", d);
    int tmp_gone = !exists(p);
    snprintf(p, sizeof p, "%s/latest.tmp", d);
    CHECK(tmp_gone && !exists(p) && strcmp(link_target(d), "step_0000004") == 0,
          "checkpoint_prepare_dir removes .tmp_step_0000005 and latest.tmp and points latest at step_0000004");
    st.step = 5;
    checkpoint_save(d, &g_cfg, &g_model, g_params, NULL, NULL, &st);
    CHECK(checkpoint_latest(d, out, sizeof out) == 1 && strstr(out, "/step_0000005") &&
              strcmp(link_target(d), "step_0000005") == 0,
          "the run goes on: step 5 is saved and latest follows");
    // The newest checkpoint whose loss was finite.
    st.step = 6;
    st.loss = NAN;
    checkpoint_save(d, &g_cfg, &g_model, g_params, NULL, NULL, &st);
    CHECK(checkpoint_newest_finite(d, out, sizeof out) == 1 && strstr(out, "/step_0000005"),
          "checkpoint_newest_finite skips step 6 (loss null) and names step 5 (%s)", out);
}

// Copy a file (for the mixed-checkpoint case).
static void copy_file(const char *from, const char *to) {
    size_t len;
    char *b = slurp(from, &len);
    FILE *f = fopen(to, "wb");
    if (!b || !f) { perror(to); exit(2); }
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);
}

// Defect 2: every file is checked against the manifest before any state is touched.
static void test_integrity(void) {
    char d[512], p[1100], q[1100];
    snprintf(d, sizeof d, "%s/integrity", tmpdir);
    size_t n = g_model.num_elements;
    TrainerState st = {.step = 10, .consumed_sequences = 100, .loss = 3.0};
    checkpoint_save(d, &g_cfg, &g_model, g_params, g_m, g_v, &st);
    st.step = 20;
    float *p20 = pattern(n, 0.02f, -1.0f);
    checkpoint_save(d, &g_cfg, &g_model, p20, g_m, g_v, &st);
    snprintf(g_path, sizeof g_path, "%s/step_0000020", d);
    CHECK(checkpoint_verify(g_path) == 1, "a fresh checkpoint verifies against its manifest");

    // One flipped bit in the data of model.safetensors.
    snprintf(p, sizeof p, "%s/model.safetensors", g_path);
    size_t len;
    char *bytes = slurp(p, &len), *orig = malloc(len);
    memcpy(orig, bytes, len);
    bytes[len - 7] ^= 0x10;
    FILE *f = fopen(p, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    expect_death("one flipped bit in model.safetensors", child_load_path, NULL,
                 "model.safetensors does not match its manifest", "step_0000020");
    // Truncated.
    f = fopen(p, "wb");
    fwrite(orig, 1, len - 4, f);
    fclose(f);
    expect_death("model.safetensors 4 bytes short", child_load_path, NULL, "model.safetensors is",
                 "truncated or replaced");
    // model.safetensors of step 10 beside the optimizer of step 20 (same size).
    snprintf(q, sizeof q, "%s/step_0000010/model.safetensors", d);
    copy_file(q, p);
    expect_death("step 10's model.safetensors in step 20", child_load_path, NULL,
                 "model.safetensors does not match its manifest", NULL);
    // ... with the manifest rewritten to match it: the step recorded in the file tells.
    snprintf(q, sizeof q, "%s/step_0000010/manifest.json", d);
    char *m10 = slurp(q, NULL), *m20;
    snprintf(q, sizeof q, "%s/manifest.json", g_path);
    m20 = slurp(q, NULL);
    cJSON *j10 = cJSON_Parse(m10), *j20 = cJSON_Parse(m20);
    cJSON *f10 = cJSON_GetObjectItem(j10, "files"), *f20 = cJSON_GetObjectItem(j20, "files");
    cJSON_ReplaceItemInArray(f20, 0, cJSON_Duplicate(cJSON_GetArrayItem(f10, 0), 1));  // model entry
    char *forged = cJSON_Print(j20);
    write_text(q, forged);
    expect_death("step 10's model.safetensors with a forged manifest", child_load_path, NULL,
                 "model.safetensors belongs to step 10", "to step 20");
    free(forged);
    cJSON_Delete(j10);
    cJSON_Delete(j20);
    free(m10);
    free(m20);
    free(bytes);
    free(orig);

    // A NaN weight, saved consistently (manifest and all): refused at load.
    float *nan_params = pattern(n, 0.01f, 0.5f);
    nan_params[g_model.layer[1].o + 3] = NAN;
    st.step = 30;
    checkpoint_save(d, &g_cfg, &g_model, nan_params, NULL, NULL, &st);
    snprintf(g_path, sizeof g_path, "%s/step_0000030", d);
    expect_death("a checkpoint holding a NaN weight", child_load_path, NULL,
                 "model.layers.1.self_attn.o_proj.weight", "non-finite");
    free(nan_params);
    free(p20);
}

static void test_mismatch(void) {
    char p[1100];
    snprintf(g_path, sizeof g_path, "%s/step_0000005", g_dir);
    // Different vocabulary: the embedding's shape differs.
    Config c;
    make_cfg(&c, 2, 12, 0);
    llama_build(&g_other, &c.model, model_whole());
    expect_death("vocab 12 model loading a vocab 11 checkpoint", child_load_other, NULL,
                 "model.embed_tokens.weight", "[11, 8]");
    llama_free(&g_other);
    // More layers: layer 2's tensors are missing.
    make_cfg(&c, 3, 11, 0);
    llama_build(&g_other, &c.model, model_whole());
    expect_death("3-layer model loading a 2-layer checkpoint", child_load_other, NULL,
                 "model.layers.2.", "missing");
    llama_free(&g_other);
    // Fewer layers: the checkpoint has tensors the model lacks.
    make_cfg(&c, 1, 11, 0);
    llama_build(&g_other, &c.model, model_whole());
    expect_death("1-layer model loading a 2-layer checkpoint", child_load_other, NULL,
                 "model.layers.1.", "not part of this model");
    llama_free(&g_other);
    // Tied model: the checkpoint's lm_head.weight has no place in it.
    make_cfg(&c, 2, 11, 1);
    llama_build(&g_other, &c.model, model_whole());
    expect_death("tied model loading an untied checkpoint", child_load_other, NULL,
                 "lm_head.weight", "not part of this model");
    llama_free(&g_other);

    // A 1-D tensor saved with the wrong length, written by hand in a copy.
    snprintf(g_path, sizeof g_path, "%s/badshape", tmpdir);
    mkdir(g_path, 0755);
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
    snprintf(p, sizeof p, "%s/model.safetensors", g_path);
    st_write_f32(p, w, g_model.n_params, NULL, NULL, 0);
    snprintf(p, sizeof p, "%s/trainer_state.json", g_path);
    write_text(p, "{\"format\":\"femtotron-checkpoint-v1\",\"step\":1,\"consumed_sequences\":2}");
    g_other = g_model;  // same model, the file is wrong
    expect_death("norm weight of shape [4] where [8] is expected", child_load_other, NULL,
                 "model.norm.weight", "[4]");
    memset(&g_other, 0, sizeof g_other);
    free(w);
}

// ---------------------------------------------------------------- pieces (one rank)

static int same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

// The whole-file writer st_write_f32 with the model's tensors of buf (and buf2),
// as checkpoint_save wrote them before it became collective.
static void write_whole(const char *path, const float *buf, const char *suffix1,
                        const float *buf2, const char *suffix2, const char *meta) {
    int np = g_model.n_params, n = np * (buf2 ? 2 : 1);
    StWrite *w = calloc((size_t)n, sizeof *w);
    char (*names)[128] = calloc((size_t)n, 128);
    for (int i = 0; i < n; i++) {
        const ParamInfo *pi = &g_model.params[i % np];
        snprintf(names[i], 128, "%s%s", pi->name, i < np ? suffix1 : suffix2);
        w[i].name = names[i];
        w[i].ndim = pi->ndim;
        w[i].shape[0] = pi->shape[0];
        w[i].shape[1] = pi->ndim == 2 ? pi->shape[1] : 0;
        w[i].data = (i < np ? buf : buf2) + pi->offset;
    }
    const char *keys[] = {"femtotron", "step"}, *vals[] = {meta, "9"};
    st_write_f32(path, w, n, keys, vals, 2);
    free(names);
    free(w);
}

static CkptPiece g_pieces[8];
static int g_n_pieces;

static void child_save_pieces(void *p) {
    TrainerState st = {.step = 9, .consumed_sequences = 1};
    checkpoint_save_pieces((const char *)p, &g_cfg, &g_model, g_pieces, g_n_pieces, &st);
}

static void child_load_pieces(void *p) {
    checkpoint_load_pieces((const char *)p, &g_model, g_pieces, g_n_pieces, NULL);
}

static void child_hf_pieces(void *p) {
    load_hf_weights_pieces((const char *)p, &g_model, g_pieces, g_n_pieces);
}

// checkpoint_save_pieces with one rank: several uneven, out-of-order pieces per
// kind give exactly the files of checkpoint_save, which match st_write_f32's.
static void test_pieces_save(void) {
    size_t n = g_model.num_elements;
    char d1[512], d2[512], a[1100], b[1100];
    snprintf(d1, sizeof d1, "%s/pieces_whole", tmpdir);
    snprintf(d2, sizeof d2, "%s/pieces_split", tmpdir);
    TrainerState st = {.step = 9, .consumed_sequences = 1};
    checkpoint_save(d1, &g_cfg, &g_model, g_params, g_m, g_v, &st);
    // Splits in the middle of tensors; exp_avg_sq split differently from exp_avg.
    CkptPiece pc[] = {
        {CKPT_PARAMS, 500, n, g_params + 500},  {CKPT_PARAMS, 0, 37, g_params},
        {CKPT_PARAMS, 37, 500, g_params + 37},  {CKPT_EXP_AVG, 0, n - 1, g_m},
        {CKPT_EXP_AVG, n - 1, n, g_m + n - 1},  {CKPT_EXP_AVG_SQ, 3, n, g_v + 3},
        {CKPT_EXP_AVG_SQ, 0, 3, g_v},           {CKPT_EXP_AVG_SQ, 3, 3, g_v + 3},
    };
    checkpoint_save_pieces(d2, &g_cfg, &g_model, pc, 8, &st);
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "config.json",
                           "trainer_state.json", "manifest.json"};
    int same = 1;
    for (int i = 0; i < 5; i++) {
        snprintf(a, sizeof a, "%s/step_0000009/%s", d1, files[i]);
        snprintf(b, sizeof b, "%s/step_0000009/%s", d2, files[i]);
        same = same && same_file(a, b);
    }
    CHECK(same, "checkpoint_save_pieces with 8 uneven pieces writes the same 5 files (manifest "
                "included: the checksums do not depend on the pieces), byte for byte, as checkpoint_save");

    snprintf(a, sizeof a, "%s/whole_model.safetensors", tmpdir);
    write_whole(a, g_params, "", NULL, NULL, "model");
    snprintf(b, sizeof b, "%s/step_0000009/model.safetensors", d1);
    CHECK(same_file(a, b), "model.safetensors equals st_write_f32 of the tensors in table order");
    snprintf(a, sizeof a, "%s/whole_optimizer.safetensors", tmpdir);
    write_whole(a, g_m, ".exp_avg", g_v, ".exp_avg_sq", "adamw");
    snprintf(b, sizeof b, "%s/step_0000009/optimizer.safetensors", d1);
    CHECK(same_file(a, b), "optimizer.safetensors equals st_write_f32 of all exp_avg, then all "
                           "exp_avg_sq");

    // Bad partitions die before anything is written (fresh directory each time).
    snprintf(d2, sizeof d2, "%s/pieces_gap", tmpdir);
    g_pieces[0] = (CkptPiece){CKPT_PARAMS, 0, 100, g_params};
    g_pieces[1] = (CkptPiece){CKPT_PARAMS, 101, n, g_params + 101};
    g_n_pieces = 2;
    expect_death("params pieces missing element 100", child_save_pieces, d2,
                 "params elements [100, 101)", "gap");
    snprintf(a, sizeof a, "%s/step_0000009", d2);
    CHECK(!exists(a), "the refused save left no step directory");
    g_pieces[1].lo = 99;
    g_pieces[1].data = g_params + 99;
    expect_death("params pieces both holding element 99", child_save_pieces, d2,
                 "params elements [99, 100)", "overlap");
    g_pieces[1] = (CkptPiece){CKPT_PARAMS, 100, n, g_params + 100};
    g_pieces[2] = (CkptPiece){CKPT_EXP_AVG, 0, n, g_m};
    g_n_pieces = 3;
    expect_death("exp_avg pieces without exp_avg_sq ones", child_save_pieces, d2,
                 "exp_avg_sq elements [0, ", "both exp_avg and exp_avg_sq");
    g_pieces[2] = (CkptPiece){CKPT_EXP_AVG, 5, n + 1, g_m};
    expect_death("a piece past the last element", child_save_pieces, d2, "piece 2 (exp_avg)",
                 "not a range inside");
}

// Reads of any piece layout: overlapping, crossing tensor boundaries, empty.
static void test_pieces_load(void) {
    size_t n = g_model.num_elements;
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/pieces_whole/step_0000009", tmpdir);
    size_t r[][3] = {{CKPT_PARAMS, 0, n},         {CKPT_PARAMS, 7, 301},
                     {CKPT_PARAMS, 300, 300},     {CKPT_EXP_AVG, 95, n},
                     {CKPT_EXP_AVG_SQ, n - 9, n}, {CKPT_EXP_AVG_SQ, 1, 2}};
    CkptPiece pc[6];
    for (int i = 0; i < 6; i++)
        pc[i] = (CkptPiece){(CkptKind)r[i][0], r[i][1], r[i][2], garbage(r[i][2] - r[i][1] + 1)};
    TrainerState st = {0};
    checkpoint_load_pieces(ck, &g_model, pc, 6, &st);
    int ok = st.step == 9;
    for (int i = 0; i < 6; i++) {
        const float *src = pc[i].kind == CKPT_PARAMS ? g_params : pc[i].kind == CKPT_EXP_AVG ? g_m : g_v;
        size_t len = pc[i].hi - pc[i].lo;
        ok = ok && memcmp(pc[i].data, src + pc[i].lo, len * sizeof(float)) == 0 &&
             pc[i].data[len] == -999.0f;  // nothing written past the piece
    }
    CHECK(ok, "checkpoint_load_pieces fills 6 overlapping/empty/tensor-crossing pieces bit for "
              "bit, writing nothing past them");
    for (int i = 0; i < 6; i++) free(pc[i].data);

    // A wrong file fails even when the pieces never touch the wrong tensor.
    g_pieces[0] = (CkptPiece){CKPT_PARAMS, 0, 10, garbage(10)};
    g_n_pieces = 1;
    snprintf(ck, sizeof ck, "%s/badshape", tmpdir);
    expect_death("a piece far from the mis-shaped model.norm.weight", child_load_pieces, ck,
                 "model.norm.weight", "[4]");
    snprintf(ck, sizeof ck, "%s/step_0000007", g_dir);
    g_pieces[0].kind = CKPT_EXP_AVG_SQ;
    expect_death("moment pieces from a checkpoint without moments", child_load_pieces, ck,
                 "optimizer.safetensors", "step_0000007");
    free(g_pieces[0].data);
}

// ---------------------------------------------------------------- Hugging Face weights

// Write the model's tensors from buf as a Hugging Face directory. skip: a name to
// leave out (or NULL); extra names get 3 floats each. shards == 2 splits the file.
static void write_hf_dir(const char *dir, const LlamaModel *m, const float *buf, const char *skip,
                         const char *const *extra, int n_extra, int shards) {
    mkdir(dir, 0755);
    static const float three[3] = {1, 2, 3};
    StWrite *w = calloc((size_t)(m->n_params + n_extra), sizeof *w);
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *pi = &m->params[i];
        if (skip && strcmp(pi->name, skip) == 0) continue;
        w[n].name = pi->name;
        w[n].ndim = pi->ndim;
        w[n].shape[0] = pi->shape[0];
        w[n].shape[1] = pi->shape[1];
        w[n].data = buf + pi->offset;
        n++;
    }
    for (int i = 0; i < n_extra; i++) {
        w[n].name = extra[i];
        w[n].ndim = 1;
        w[n].shape[0] = 3;
        w[n].data = three;
        n++;
    }
    char p[1024];
    if (shards == 1) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        st_write_f32(p, w, n, NULL, NULL, 0);
    } else {
        int half = n / 2;
        snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
        st_write_f32(p, w, half, NULL, NULL, 0);
        snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
        st_write_f32(p, w + half, n - half, NULL, NULL, 0);
        cJSON *root = cJSON_CreateObject();
        cJSON *wm = cJSON_AddObjectToObject(root, "weight_map");
        for (int i = 0; i < n; i++)
            cJSON_AddStringToObject(wm, w[i].name, i < half ? "model-00001-of-00002.safetensors"
                                                            : "model-00002-of-00002.safetensors");
        char *text = cJSON_Print(root);
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        write_text(p, text);
        free(text);
        cJSON_Delete(root);
    }
    free(w);
}

// Run load_hf_weights in this process with stderr captured into a file, so the
// warning about ignored tensors can be checked.
static void load_hf_capture(const char *dir, const LlamaModel *m, float *buf, char *err, size_t size) {
    char p[1024];
    snprintf(p, sizeof p, "%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(p, "w");
    dup2(fileno(f), 2);
    load_hf_weights(dir, m, buf);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    char *text = slurp(p, NULL);
    snprintf(err, size, "%s", text ? text : "");
    free(text);
    size_t len = strlen(err);
    while (len > 0 && err[len - 1] == '\n') err[--len] = '\0';
}

static void test_hf(void) {
    char dir[512], err[4096];
    Config c;
    // Tied model, sharded directory, with HF's rotary buffers as extra tensors.
    make_cfg(&c, 2, 11, 1);
    LlamaModel tied;
    llama_build(&tied, &c.model, model_whole());
    CHECK(llama_find(&tied, "lm_head.weight") == NULL, "tied model has no lm_head.weight parameter");
    float *src = pattern(tied.num_elements, 0.05f, -1.0f), *dst = garbage(tied.num_elements);
    const char *inv[] = {"model.layers.0.self_attn.rotary_emb.inv_freq",
                         "model.layers.1.self_attn.rotary_emb.inv_freq"};
    snprintf(dir, sizeof dir, "%s/hf_tied", tmpdir);
    write_hf_dir(dir, &tied, src, NULL, inv, 2, 2);
    load_hf_capture(dir, &tied, dst, err, sizeof err);
    CHECK(memcmp(src, dst, tied.num_elements * sizeof(float)) == 0,
          "tied model loads from a sharded HF dir bit for bit");
    CHECK(strstr(err, "ignoring 2 tensors") && strstr(err, "inv_freq"),
          "one warning says 2 extra tensors (inv_freq) are ignored (%.200s)", err);

    // Untied model: lm_head present loads; missing is an error.
    make_cfg(&c, 2, 11, 0);
    LlamaModel untied;
    llama_build(&untied, &c.model, model_whole());
    float *usrc = pattern(untied.num_elements, -0.07f, 2.0f), *udst = garbage(untied.num_elements);
    snprintf(dir, sizeof dir, "%s/hf_untied", tmpdir);
    write_hf_dir(dir, &untied, usrc, NULL, NULL, 0, 1);
    load_hf_capture(dir, &untied, udst, err, sizeof err);
    CHECK(memcmp(usrc, udst, untied.num_elements * sizeof(float)) == 0 && err[0] == '\0',
          "untied model loads from model.safetensors bit for bit, without warnings");

    // A tied model accepts a file that carries a redundant lm_head.weight.
    float *tdst = garbage(tied.num_elements);
    load_hf_capture(dir, &tied, tdst, err, sizeof err);
    const ParamInfo *emb = llama_find(&tied, "model.embed_tokens.weight");
    const ParamInfo *uemb = llama_find(&untied, "model.embed_tokens.weight");
    CHECK(emb && uemb && memcmp(tdst + emb->offset, usrc + uemb->offset, emb->numel * sizeof(float)) == 0 &&
              strstr(err, "lm_head.weight"),
          "tied model loads an untied file, ignoring lm_head.weight with a warning naming it");

    snprintf(dir, sizeof dir, "%s/hf_nohead", tmpdir);
    write_hf_dir(dir, &untied, usrc, "lm_head.weight", NULL, 0, 1);
    snprintf(g_path, sizeof g_path, "%s", dir);
    g_other = untied;
    expect_death("untied model, file without lm_head.weight", child_hf_load_other, NULL,
                 "lm_head.weight", "untied");

    // Missing ordinary tensor.
    snprintf(dir, sizeof dir, "%s/hf_nonorm", tmpdir);
    write_hf_dir(dir, &untied, usrc, "model.layers.1.mlp.up_proj.weight", NULL, 0, 1);
    snprintf(g_path, sizeof g_path, "%s", dir);
    expect_death("file without a layer tensor", child_hf_load_other, NULL,
                 "model.layers.1.mlp.up_proj.weight", "missing");

    // A 3-layer file for a 2-layer config: the extra layer is a config mismatch.
    make_cfg(&c, 3, 11, 0);
    LlamaModel three;
    llama_build(&three, &c.model, model_whole());
    float *three_src = pattern(three.num_elements, 0.01f, 0.0f);
    snprintf(dir, sizeof dir, "%s/hf_3layers", tmpdir);
    write_hf_dir(dir, &three, three_src, NULL, NULL, 0, 1);
    snprintf(g_path, sizeof g_path, "%s", dir);
    expect_death("3-layer weights into a 2-layer model", child_hf_load_other, NULL,
                 "model.layers.2.", "num_hidden_layers = 2");

    // Shape mismatch: vocab 12 weights into a vocab 11 model.
    make_cfg(&c, 2, 12, 0);
    LlamaModel v12;
    llama_build(&v12, &c.model, model_whole());
    float *v12_src = pattern(v12.num_elements, 0.01f, 0.0f);
    snprintf(dir, sizeof dir, "%s/hf_v12", tmpdir);
    write_hf_dir(dir, &v12, v12_src, NULL, NULL, 0, 1);
    snprintf(g_path, sizeof g_path, "%s", dir);
    expect_death("vocab 12 weights into a vocab 11 model", child_hf_load_other, NULL,
                 "model.embed_tokens.weight", "[12, 8]");
    memset(&g_other, 0, sizeof g_other);

    free(src);
    free(dst);
    free(tdst);
    free(usrc);
    free(udst);
    free(three_src);
    free(v12_src);
    llama_free(&tied);
    llama_free(&untied);
    llama_free(&three);
    llama_free(&v12);
}

// Hugging Face weights by pieces, from a sharded directory, and only params.
static void test_hf_pieces(void) {
    char dir[512];
    size_t n = g_model.num_elements;
    snprintf(dir, sizeof dir, "%s/hf_pieces", tmpdir);
    const char *inv[] = {"model.layers.0.self_attn.rotary_emb.inv_freq"};
    write_hf_dir(dir, &g_model, g_params, NULL, inv, 1, 2);
    CkptPiece pc[3] = {{CKPT_PARAMS, n / 2 - 3, n, garbage(n)},
                       {CKPT_PARAMS, 0, n / 2 + 3, garbage(n)},
                       {CKPT_PARAMS, 11, 12, garbage(1)}};
    char err[4096];
    char p[1024];
    snprintf(p, sizeof p, "%s/stderr_pieces.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(p, "w");
    dup2(fileno(f), 2);
    load_hf_weights_pieces(dir, &g_model, pc, 3);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    char *text = slurp(p, NULL);
    snprintf(err, sizeof err, "%s", text ? text : "");
    free(text);
    size_t len = strlen(err);
    while (len > 0 && err[len - 1] == '\n') err[--len] = '\0';
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok = ok && memcmp(pc[i].data, g_params + pc[i].lo, (pc[i].hi - pc[i].lo) * sizeof(float)) == 0;
    CHECK(ok && strstr(err, "ignoring 1 tensor") && strstr(err, "inv_freq"),
          "load_hf_weights_pieces fills 3 pieces from a sharded dir and warns about inv_freq (%.200s)",
          err);
    for (int i = 0; i < 3; i++) free(pc[i].data);

    g_pieces[0] = (CkptPiece){CKPT_EXP_AVG, 0, 4, garbage(4)};
    g_n_pieces = 1;
    expect_death("an exp_avg piece from Hugging Face weights", child_hf_pieces, dir, "exp_avg",
                 "hold only params");
    free(g_pieces[0].data);
}

// ---------------------------------------------------------------- tensor-parallel tables

// A value exact in bf16 (8 significant bits) for global flat element g, so that a
// BF16 file holds the model's values exactly.
static float tp_value(size_t g) { return (float)((int)(g % 253) - 126) * 0.25f; }

// Hugging Face file of model m's global tensors in BF16 (written by hand: our writer
// only writes F32), element g of the global flat order holding tp_value(g).
static void write_bf16_file(const char *path, const LlamaModel *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t total = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        size_t numel = (size_t)(p->shape[0] * p->shape[1]);
        cJSON *t = cJSON_AddObjectToObject(root, p->name);
        cJSON_AddStringToObject(t, "dtype", "BF16");
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < p->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)p->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(2 * total)));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(2 * (total + numel))));
        total += numel;
    }
    char *json = cJSON_PrintUnformatted(root);
    size_t hlen = strlen(json), padded = (hlen + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    uint64_t n8 = padded;
    fwrite(&n8, 8, 1, f);  // little-endian host (as safetensors.c requires)
    fwrite(json, 1, hlen, f);
    for (size_t i = hlen; i < padded; i++) fputc(' ', f);
    for (size_t g = 0; g < total; g++) {
        float v = tp_value(g);
        uint32_t u;
        memcpy(&u, &v, 4);
        uint16_t h = (uint16_t)(u >> 16);  // exact: tp_value has <= 8 significant bits
        fwrite(&h, 2, 1, f);
    }
    fclose(f);
    free(json);
    cJSON_Delete(root);
}

// Expected value of local element e of tp table m: the global function, 0 for padding.
static float tp_expected(const LlamaModel *m, size_t e, float (*fn)(size_t)) {
    size_t base = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        if (e < p->offset + p->numel) {
            int64_t g = param_global_index(p, e - p->offset);
            return g < 0 ? 0.0f : fn(base + (size_t)g);
        }
        base += (size_t)(p->shape[0] * p->shape[1]);
    }
    return NAN;
}

static float g_tp_shift;
static float tp_moment(size_t g) { return g_tp_shift + 1e-3f * (float)g; }

static LlamaModel g_tp;

static void child_save_tp(void *p) {
    float *buf = calloc(g_tp.num_elements, sizeof(float));
    CkptPiece pc = {CKPT_PARAMS, 0, g_tp.num_elements, buf};
    TrainerState st = {.step = 1, .consumed_sequences = 0};
    checkpoint_save_pieces((const char *)p, &g_cfg, &g_tp, &pc, 1, &st);
}

// Tables of model_tp_shard models (tp 2 and 3, vocab 257: padding rows on the last tp
// rank): Hugging Face BF16 weights and an F32 checkpoint load into every tp rank's
// slices, whole or in pieces cut inside rows of the column-split tensors and
// across the padding boundary; one process cannot save a tp > 1 model alone.
static void test_tp_tables(void) {
    Config c;
    make_cfg(&c, 1, 257, 0);
    c.model.hidden_size = 12;
    c.model.num_attention_heads = 6;
    c.model.num_key_value_heads = 6;
    c.model.intermediate_size = 18;
    LlamaModel whole;
    llama_build(&whole, &c.model, model_whole());
    char dir[512], path[1100];
    snprintf(dir, sizeof dir, "%s/hf_bf16", tmpdir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_bf16_file(path, &whole);

    // An F32 checkpoint of the unsharded model (params = tp_value, moments distinct).
    size_t N = whole.num_elements;
    float *gp = malloc(N * sizeof(float)), *gm = malloc(N * sizeof(float)), *gv = malloc(N * sizeof(float));
    for (size_t g = 0; g < N; g++) {
        gp[g] = tp_value(g);
        gm[g] = 1.0f + 1e-3f * (float)g;
        gv[g] = 2.0f + 1e-3f * (float)g;
    }
    char ck[512], ckstep[1100];
    snprintf(ck, sizeof ck, "%s/tp_ckpt", tmpdir);
    TrainerState st = {.step = 4, .consumed_sequences = 8};
    checkpoint_save(ck, &c, &whole, gp, gm, gv, &st);
    snprintf(ckstep, sizeof ckstep, "%s/step_0000004", ck);

    for (int tp = 2; tp <= 3; tp++)
        for (int r = 0; r < tp; r++) {
            LlamaModel m;
            llama_build(&m, &c.model, model_tp_shard(tp, r, 0));
            size_t n = m.num_elements, bad = 0, pad = 0;
            float *buf = garbage(n);
            load_hf_weights(dir, &m, buf);
            for (size_t e = 0; e < n; e++) {
                float want = tp_expected(&m, e, tp_value);
                bad += memcmp(&want, &buf[e], 4) != 0;
            }
            // Cuts: inside the first and last row of every column-split tensor, and
            // 5 elements before the head's padding (a piece crossing into it).
            size_t cut[32];
            int nc = 0;
            for (int i = 0; i < m.n_params; i++) {
                const ParamInfo *p = &m.params[i];
                if (p->split == SPLIT_COLS) {
                    cut[nc++] = p->offset + (size_t)p->local_shape[1] / 2;
                    cut[nc++] = p->offset + p->numel - (size_t)p->local_shape[1] - 1;
                }
                if (p->split == SPLIT_ROWS && p->valid < p->local_shape[0]) {
                    pad += (size_t)(p->local_shape[0] - p->valid) * (size_t)p->local_shape[1];
                    cut[nc++] = p->offset + (size_t)(p->valid * p->local_shape[1]) - 5;
                }
            }
            cut[nc++] = n;
            CkptPiece pc[32];
            size_t lo = 0;
            for (int k = 0; k < nc; k++) {  // cuts are in increasing order (table order)
                pc[k] = (CkptPiece){CKPT_PARAMS, lo, cut[k], garbage(cut[k] - lo + 1)};
                lo = cut[k];
            }
            load_hf_weights_pieces(dir, &m, pc, nc);
            int spill = 0;
            for (int k = 0; k < nc; k++) {
                for (size_t e = pc[k].lo; e < pc[k].hi; e++) {
                    float want = tp_expected(&m, e, tp_value);
                    bad += memcmp(&want, &pc[k].data[e - pc[k].lo], 4) != 0;
                }
                spill += pc[k].data[pc[k].hi - pc[k].lo] != -999.0f;
                free(pc[k].data);
            }
            CHECK(bad == 0 && spill == 0 && nc == 2 * 2 + 1 + (r == tp - 1 ? 2 : 0) &&
                      (r == tp - 1) == (pad > 0),
                  "tp %d rank %d: BF16 Hugging Face weights load into the slices whole and in %d "
                  "pieces cut inside rows, %zu padding elements 0 (%zu wrong, %d spills)", tp, r,
                  nc, pad, bad, spill);

            // The F32 checkpoint, params and both moments, into the same slices.
            float *bm = garbage(n), *bv = garbage(n);
            memset(buf, 0xff, n * sizeof(float));
            TrainerState got = {0};
            checkpoint_load(ckstep, &m, buf, bm, bv, &got);
            bad = 0;
            for (size_t e = 0; e < n; e++) {
                float w0 = tp_expected(&m, e, tp_value);
                g_tp_shift = 1.0f;
                float w1 = tp_expected(&m, e, tp_moment);
                g_tp_shift = 2.0f;
                float w2 = tp_expected(&m, e, tp_moment);
                bad += memcmp(&w0, &buf[e], 4) != 0;
                bad += memcmp(&w1, &bm[e], 4) != 0;
                bad += memcmp(&w2, &bv[e], 4) != 0;
            }
            CHECK(bad == 0 && got.step == 4,
                  "tp %d rank %d: checkpoint_load of an unsharded checkpoint fills params and "
                  "moments of the slices bit for bit (%zu wrong)", tp, r, bad);
            free(buf);
            free(bm);
            free(bv);
            llama_free(&m);
        }

    // One process holding tp rank 0 of 2 leaves tp rank 1's slices unwritten.
    g_cfg = c;
    llama_build(&g_tp, &c.model, model_tp_shard(2, 0, 0));
    snprintf(ck, sizeof ck, "%s/tp_alone", tmpdir);
    expect_death("a tp = 2 save on one rank", child_save_tp, ck,
                 "of tensor-parallel rank 1's flat order", "written by no rank");
    llama_free(&g_tp);
    free(gp);
    free(gm);
    free(gv);
    llama_free(&whole);
}

// The nearest bfloat16 to x, ties to the even one, worked out from the two
// candidates (x truncated to bf16, and the next bf16 away from zero) in double:
// an independent check of bf16_from_f32's bit trick. Finite x only.
static float bf16_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
    float lo, hi;
    memcpy(&lo, &lo_bits, 4);
    memcpy(&hi, &hi_bits, 4);
    double dl = fabs((double)x - (double)lo), dh = fabs((double)hi - (double)x);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo_bits >> 16) & 1 ? hi : lo;
}

static float bf16_bits_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void child_load_bf16_flipped(void *p) {
    size_t n = g_model.num_elements;
    float *w = garbage(n), *m = garbage(n), *v = garbage(n);
    checkpoint_load((const char *)p, &g_model, w, m, v, NULL);
}

// checkpoint.dtype bf16: model.safetensors in BF16 (rounded to nearest even, half
// the size), the fp32 master weights in optimizer.safetensors, a resume exact; the
// checksums hold for pieces split at odd elements (2-byte units); older manifests
// ("word-sum-64", 4-byte units) still verify.
static void test_bf16(void) {
    // The rounding itself: ties to even, NaN, infinity, overflow.
    CHECK(bf16_bits_to_f32(bf16_from_f32(1.0f + 0x1p-8f)) == 1.0f &&
              bf16_bits_to_f32(bf16_from_f32(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f &&
              bf16_bits_to_f32(bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f &&
              bf16_bits_to_f32(bf16_from_f32(-1.0f - 3 * 0x1p-8f)) == -1.0f - 0x1p-6f,
          "bf16_from_f32 rounds to nearest, ties to even, both signs");
    float big = 3.4028235e38f, inf = INFINITY, nan = NAN;
    CHECK(isinf(bf16_bits_to_f32(bf16_from_f32(big))) && isinf(bf16_bits_to_f32(bf16_from_f32(inf))) &&
              isnan(bf16_bits_to_f32(bf16_from_f32(nan))),
          "the largest float rounds up to infinity, infinity stays, NaN stays a NaN");

    Config c = g_cfg;
    c.checkpoint.dtype = CKPT_DTYPE_BF16;
    size_t n = g_model.num_elements;
    char d[512], d2[512], p[1100], q[1100];
    snprintf(d, sizeof d, "%s/bf16_whole", tmpdir);
    TrainerState st = {.step = 7, .consumed_sequences = 70, .loss = 2.5};
    checkpoint_save(d, &c, &g_model, g_params, g_m, g_v, &st);
    snprintf(p, sizeof p, "%s/step_0000007/model.safetensors", d);
    StIndex idx;
    st_open(&idx, p);
    int all_bf16 = idx.n == g_model.n_params, rounded = 1;
    uint64_t bytes = 0;
    for (int i = 0; i < idx.n; i++) {
        all_bf16 = all_bf16 && idx.t[i].dtype == ST_BF16;
        bytes += idx.t[i].end - idx.t[i].begin;
        const ParamInfo *pi = llama_find(&g_model, idx.t[i].name);
        float *got = garbage(pi->numel);
        st_read_f32(&idx.t[i], 0, pi->numel, got);
        for (size_t e = 0; e < pi->numel; e++)
            rounded = rounded && got[e] == bf16_nearest(g_params[pi->offset + e]);
        free(got);
    }
    st_close(&idx);
    CHECK(all_bf16 && bytes == 2 * n, "model.safetensors holds all %d tensors as BF16, 2 bytes an "
                                      "element (%llu data bytes for %zu elements)",
          g_model.n_params, (unsigned long long)bytes, n);
    CHECK(rounded, "every saved bf16 weight is the nearest bfloat16 to the fp32 weight");
    snprintf(p, sizeof p, "%s/step_0000007/optimizer.safetensors", d);
    st_open(&idx, p);
    const StTensor *t = st_find(&idx, "model.norm.weight.master");
    CHECK(idx.n == 3 * g_model.n_params && t && t->dtype == ST_F32 &&
              st_find(&idx, "model.norm.weight.exp_avg"),
          "optimizer.safetensors holds exp_avg, exp_avg_sq and the fp32 master weights NAME.master");
    st_close(&idx);
    snprintf(p, sizeof p, "%s/step_0000007/config.json", d);
    char *text = slurp(p, NULL);
    cJSON *js = cJSON_Parse(text);
    const cJSON *dt = cJSON_GetObjectItem(js, "torch_dtype");
    CHECK(cJSON_IsString(dt) && strcmp(dt->valuestring, "bfloat16") == 0,
          "config.json says torch_dtype \"bfloat16\"");
    cJSON_Delete(js);
    free(text);

    // A resume reads the master weights: exact.
    snprintf(p, sizeof p, "%s/step_0000007", d);
    float *w2 = garbage(n), *m2 = garbage(n), *v2 = garbage(n);
    checkpoint_load(p, &g_model, w2, m2, v2, NULL);
    CHECK(memcmp(w2, g_params, n * sizeof(float)) == 0 && memcmp(m2, g_m, n * sizeof(float)) == 0 &&
              memcmp(v2, g_v, n * sizeof(float)) == 0,
          "a bf16 checkpoint resumes params (from NAME.master) and moments bit for bit");
    // Weights alone, as model.from reads a checkpoint: the bf16 values.
    load_hf_weights(p, &g_model, w2);
    int as_bf16 = 1;
    for (size_t e = 0; e < n; e++) as_bf16 = as_bf16 && w2[e] == bf16_nearest(g_params[e]);
    CHECK(as_bf16, "load_hf_weights of a bf16 checkpoint gives the bf16 weights");

    // Pieces split at odd elements: a bf16 run starting in the middle of a 4-byte
    // word; the checksum units are 2 bytes, so every byte is the same and verifies.
    snprintf(d2, sizeof d2, "%s/bf16_split", tmpdir);
    CkptPiece pc[] = {
        {CKPT_PARAMS, 501, n, g_params + 501},  {CKPT_PARAMS, 0, 37, g_params},
        {CKPT_PARAMS, 37, 501, g_params + 37},  {CKPT_EXP_AVG, 0, n - 1, g_m},
        {CKPT_EXP_AVG, n - 1, n, g_m + n - 1},  {CKPT_EXP_AVG_SQ, 3, n, g_v + 3},
        {CKPT_EXP_AVG_SQ, 0, 3, g_v},
    };
    checkpoint_save_pieces(d2, &c, &g_model, pc, 7, &st);
    const char *files[] = {"model.safetensors", "optimizer.safetensors", "manifest.json"};
    int same = 1;
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/step_0000007/%s", d, files[i]);
        snprintf(q, sizeof q, "%s/step_0000007/%s", d2, files[i]);
        same = same && same_file(p, q);
    }
    snprintf(q, sizeof q, "%s/step_0000007", d2);
    CHECK(same && checkpoint_verify(q) == 1,
          "bf16 pieces split at odd elements write the same files and manifest as one piece, "
          "and verify");
    // One flipped bit in the second byte of a bf16 value is caught.
    snprintf(p, sizeof p, "%s/step_0000007/model.safetensors", d2);
    size_t len;
    char *raw = slurp(p, &len);
    raw[len - 3] ^= 0x01;
    FILE *f = fopen(p, "wb");
    fwrite(raw, 1, len, f);
    fclose(f);
    free(raw);
    expect_death("a flipped bit in a bf16 model.safetensors", child_load_bf16_flipped, q,
                 "model.safetensors does not match its manifest", NULL);

    // A manifest of an older femtotron ("word-sum-64": 4-byte units) still verifies.
    snprintf(p, sizeof p, "%s/step_0000007/manifest.json", d);
    text = slurp(p, NULL);
    js = cJSON_Parse(text);
    free(text);
    cJSON_ReplaceItemInObject(js, "hash", cJSON_CreateString("word-sum-64"));
    cJSON *fl = cJSON_GetObjectItem(js, "files");
    for (int i = 0; i < cJSON_GetArraySize(fl); i++) {
        cJSON *e = cJSON_GetArrayItem(fl, i);
        snprintf(q, sizeof q, "%s/step_0000007/%s", d, cJSON_GetObjectItem(e, "name")->valuestring);
        int fd = open(q, O_RDONLY);
        struct stat sb;
        fstat(fd, &sb);
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx",
                 (unsigned long long)ckpt_hash_file_range(fd, q, 0, (uint64_t)sb.st_size, 4));
        close(fd);
        cJSON_ReplaceItemInObject(e, "hash", cJSON_CreateString(hex));
    }
    text = cJSON_Print(js);
    write_text(p, text);
    free(text);
    cJSON_Delete(js);
    snprintf(p, sizeof p, "%s/step_0000007", d);
    CHECK(checkpoint_verify(p) == 1, "a manifest with 4-byte word-sum-64 checksums still verifies");
    free(w2);
    free(m2);
    free(v2);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/femtotron_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_save_load();
    test_stale_tmp_and_no_moments();
    test_latest_errors();
    test_crash_between_publish_and_latest();
    test_integrity();
    test_mismatch();
    test_pieces_save();
    test_pieces_load();
    test_bf16();
    test_hf();
    test_hf_pieces();
    test_tp_tables();
    free(g_params);
    free(g_m);
    free(g_v);
    llama_free(&g_model);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
