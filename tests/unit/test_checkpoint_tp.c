// tests/unit/test_checkpoint_tp.c — checkpoint.dtype bf16 (rounding to nearest even,
// BF16 model.safetensors beside the fp32 master copy, an exact resume, checksums of
// pieces split at odd elements, older 4-byte-unit manifests) and tensor-parallel
// tables (slices of global tensors, vocab padding) loading BF16 Hugging Face weights
// and F32 checkpoints, whole and in pieces; one rank cannot save a tp > 1 model alone
// (checked in a fork()ed child, since die() ends the process). Fixture:
// checkpoint_fixture.h.
#define _GNU_SOURCE
#include <cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_fixture.h"
#include "io/checkpoint_internal.h"
#include "ops/bf16.h"

// ---------------------------------------------------------------- checkpoint.dtype bf16

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

int main(void) {
    fixture_start();
    fixture_model();
    test_bf16();
    test_tp_tables();
    return fixture_finish();
}
