// tests/unit/test_checkpoint_pieces.c — the piece API on one rank and Hugging Face
// weights: checkpoint_save_pieces with uneven, out-of-order pieces writes the files of
// checkpoint_save byte for byte (which are st_write_f32's), bad partitions are refused
// before anything is written, checkpoint_load_pieces reads any piece layout
// (overlapping, empty, crossing tensors) and checks every file; Hugging Face weight
// loading for tied and untied models, single-file and sharded, whole and by pieces,
// with clear errors for missing or mismatched tensors (checked in fork()ed children,
// since die() ends the process). Fixture: checkpoint_fixture.h.
#define _GNU_SOURCE
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_fixture.h"

// ---------------------------------------------------------------- shared state for children

static LlamaModel g_other;
static char g_dir[512], g_path[1024];

static void child_hf_load_other(void *p) {
    (void)p;
    float *buf = garbage(g_other.num_elements);
    load_hf_weights(g_path, &g_other, buf);
}

// ---------------------------------------------------------------- pieces (one rank)

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

// What test_checkpoint's save/load tests leave behind and test_pieces_load reads, made
// the same way: the model, step 7 without moments in g_dir, the mis-shaped badshape.
static void setup(void) {
    fixture_model();
    snprintf(g_dir, sizeof g_dir, "%s/runs/a/ckpt", tmpdir);
    free(fixture_save_step7(g_dir));
    char p[1024];
    snprintf(p, sizeof p, "%s/badshape", tmpdir);
    fixture_write_badshape(p);
}

int main(void) {
    fixture_start();
    setup();
    test_pieces_save();
    test_pieces_load();
    test_hf();
    test_hf_pieces();
    return fixture_finish();
}
