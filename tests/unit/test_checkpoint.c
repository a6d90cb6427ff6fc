// tests/unit/test_checkpoint.c — checkpoint save/load round trips bit for bit, the
// atomic directory protocol (the newest step dir is the checkpoint, the `latest`
// link, stale temporaries, refusal to overwrite, a crash between publishing and
// `latest`), integrity (manifest checksums: a flipped byte, a truncated file, files
// of two checkpoints mixed, a NaN weight), and clear errors for corrupt or mismatched
// checkpoints (checked in fork()ed children, since die() ends the process). The piece
// API and Hugging Face weights: test_checkpoint_pieces.c; tensor-parallel tables and
// checkpoint.dtype bf16: test_checkpoint_tp.c; what they share: checkpoint_fixture.h.
#define _GNU_SOURCE
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_fixture.h"

// ---------------------------------------------------------------- shared state for children

static LlamaModel g_other;
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

// ---------------------------------------------------------------- save / load

static void test_save_load(void) {
    fixture_model();
    size_t n = g_model.num_elements;
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
    float *p7 = fixture_save_step7(g_dir);
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
    fixture_write_badshape(g_path);
    g_other = g_model;  // same model, the file is wrong
    expect_death("norm weight of shape [4] where [8] is expected", child_load_other, NULL,
                 "model.norm.weight", "[4]");
    memset(&g_other, 0, sizeof g_other);
}

int main(void) {
    fixture_start();
    test_save_load();
    test_stale_tmp_and_no_moments();
    test_latest_errors();
    test_crash_between_publish_and_latest();
    test_integrity();
    test_mismatch();
    return fixture_finish();
}
