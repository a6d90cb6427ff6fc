// tests/unit/test_split_backward.c — the split backward of the zero-bubble schedules
// (model/llama.h: llama_stage_backward_input, then _weight) against the fused
// backward (llama_stage_backward), bit for bit: every gradient element and every
// input gradient, for whole models and for first, middle and last stages, tied and
// untied, under each recomputation mode, with fp32 and with bf16 activations (the
// dense MLP's gate|up kept as bf16, the SwiGLU output rebuilt: model/activations.h). Two micro-batches are in flight at once
// (two activation slots sharing the backward scratch, two stashes) and run as a
// zero-bubble schedule runs them: B of both, then W of both, so a W that read the
// shared scratch instead of its own slot and stash would be caught. The row tables
// (embedding, head) are also handed over in pieces of a few rows, as ZeRO-2/3 does.
// Where the build has bf16 products (the oneMKL build: tests/shell/test_blas_mkl.sh
// runs it there), the bf16 activations again with them: the residual stream's
// gradient then reaches the down and o products as bf16, written by the norms'
// backwards, which the split keeps in its stash (model/llama_split.c).
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run_child.h"
#include "config.h"
#include "model/activation_plan.h"
#include "model/activations.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "util.h"

enum { B = 2, S = 8, N = B * S, MICRO = 2 };

static void small_config(ModelConfig *mc, int tied) {
    Config c;
    config_defaults(&c);
    *mc = c.model;
    mc->hidden_size = 32;
    mc->num_attention_heads = 4;  // hd 8
    mc->num_key_value_heads = 2;
    mc->intermediate_size = 40;
    mc->num_hidden_layers = 3;
    mc->vocab_size = 29;
    mc->max_position_embeddings = 16;
    mc->initializer_range = 0.1;
    mc->tie_word_embeddings = tied;
}

// Whole buffers handed out in pieces of at most piece_max elements (model/param_access.h).
typedef struct {
    WholeBuffers wb;
    size_t piece_max;
} Pieced;

static size_t piece_lo(const Pieced *p, int u, int k) {
    size_t lo, hi;
    llama_unit_piece(p->wb.model, u, p->piece_max, k, &lo, &hi);
    return lo;
}
static const float *pz_params(void *ctx, int u) {
    Pieced *p = ctx;
    return p->wb.params + p->wb.model->unit_lo[u];
}
static float *pz_grads(void *ctx, int u) {
    Pieced *p = ctx;
    return p->wb.grads + p->wb.model->unit_lo[u];
}
static void pz_unit_nothing(void *ctx, int u) { (void)ctx, (void)u; }
static const float *pz_piece(void *ctx, int u, int k) {
    Pieced *p = ctx;
    return p->wb.params + piece_lo(p, u, k);
}
static float *pz_piece_grads(void *ctx, int u, int k) {
    Pieced *p = ctx;
    return p->wb.grads + piece_lo(p, u, k);
}
static void pz_piece_nothing(void *ctx, int u, int k) { (void)ctx, (void)u, (void)k; }

static ParamAccess pieced_access(Pieced *p) {
    ParamAccess pa = {.ctx = p, .piece_max = p->piece_max, .acquire_params = pz_params,
                      .release_params = pz_unit_nothing, .grads = pz_grads, .grads_done = pz_unit_nothing,
                      .acquire_piece = pz_piece, .release_piece = pz_piece_nothing,
                      .piece_grads = pz_piece_grads, .piece_grads_done = pz_piece_nothing};
    return pa;
}

static void fill(float *x, size_t n, uint32_t salt) {  // deterministic values in (-1, 1)
    uint32_t h = 2166136261u ^ salt;
    for (size_t i = 0; i < n; i++) {
        h = h * 16777619u + 12345u;
        x[i] = (float)((int)(h >> 8) % 2001 - 1000) / 1000.0f;
    }
}

// Units [u0, u1] of the model as one stage: forward and backward of MICRO
// micro-batches, fused in one run and split in another; 1 when every gradient
// bit and every returned input-gradient bit agree (and gradients are not all zero).
static int same_bits(Recompute rc, int bf16, int tied, StageUnits su, int piece_rows, const char **why) {
    ModelConfig mc;
    small_config(&mc, tied);
    ModelShard shard = model_whole();
    shard.recompute = rc;
    shard.bf16_acts = bf16 > 0;
    shard.att_bf16 = bf16 == 2;  // q|k|v and the attention output kept as bf16 too (training.attention = cudnn)
    shard.products16 = ops_matmul_bf16();  // the model's flag and the ops' state together, as training sets them
    LlamaModel m;
    llama_build(&m, &mc, shard);
    const size_t ne = m.num_elements, nd = (size_t)N * m.D;
    float *params = xcalloc(sizeof(float) * ne, "test");   // (ne)
    float *g_fused = xcalloc(sizeof(float) * ne, "test");  // (ne)
    float *g_split = xcalloc(sizeof(float) * ne, "test");  // (ne)
    llama_init_params(&m, params, 7);
    const size_t piece_max = (size_t)piece_rows * m.D;  // 0: whole units
    Pieced wf = {{params, g_fused, &m}, piece_max}, ws = {{params, g_split, &m}, piece_max};
    ParamAccess paf = pieced_access(&wf), pas = pieced_access(&ws);
    Activations a[MICRO];
    WeightGradStash st[MICRO];
    for (int k = 0; k < MICRO; k++) {
        activations_alloc(&a[k], &m, su, B, S, k ? &a[0] : NULL);
        wstash_alloc(&st[k], &m, su, B, S);
    }
    int32_t tok[MICRO][N], tgt[MICRO][N];
    float *x_in = xmalloc(sizeof(float) * nd * MICRO, "test");      // (MICRO, N, D) stage inputs
    float *dx_out = xmalloc(sizeof(float) * nd * MICRO, "test");    // (MICRO, N, D) output gradients
    float *dx_fused = xmalloc(sizeof(float) * nd * MICRO, "test");  // (MICRO, N, D) input gradients
    for (int k = 0; k < MICRO; k++)
        for (int n = 0; n < N; n++) tok[k][n] = (n * 7 + k * 3 + 1) % 29, tgt[k][n] = (n * 5 + k + 2) % 29;
    fill(x_in, nd * MICRO, 1);
    fill(dx_out, nd * MICRO, 2);
    const float scale = 1.0f / (MICRO * N);
    double loss = 0.0;  // the cross-entropy's accumulator (CPU: host memory)
    int ok = 1;
    *why = "";
    // Fused: forward then backward, micro-batch after micro-batch.
    for (int k = 0; k < MICRO; k++) {
        llama_stage_forward(&m, &paf, &a[0], tok[k], x_in + k * nd, tgt[k], scale, 1, &loss);
        const float *dx = llama_stage_backward(&m, &paf, &a[0], tok[k], dx_out + k * nd);
        if (dx) memcpy(dx_fused + k * nd, dx, sizeof(float) * nd);
    }
    // Split: both forwards, both B, then both W.
    for (int k = 0; k < MICRO; k++)
        llama_stage_forward(&m, &pas, &a[k], tok[k], x_in + k * nd, tgt[k], scale, 1, &loss);
    for (int k = 0; k < MICRO; k++) {
        const float *dx = llama_stage_backward_input(&m, &pas, &a[k], dx_out + k * nd, &st[k]);
        if ((dx == NULL) != (su.u0 == 0)) ok = 0, *why = "input gradient returned on the first stage only";
        if (dx && memcmp(dx, dx_fused + k * nd, sizeof(float) * nd))
            ok = 0, *why = "input gradient differs";
    }
    for (int k = 0; k < MICRO; k++) llama_stage_backward_weight(&m, &pas, &a[k], tok[k], &st[k]);
    size_t lo = m.unit_lo[su.u0], hi = m.unit_lo[su.u1 + 1], nonzero = 0;
    if (memcmp(g_fused, g_split, sizeof(float) * ne)) ok = 0, *why = "weight gradients differ";
    for (size_t i = lo; i < hi; i++) nonzero += g_fused[i] != 0.0f;
    if (nonzero < (hi - lo) / 2) ok = 0, *why = "most gradients are zero: the comparison proves nothing";
    for (int k = 0; k < MICRO; k++) {
        activations_free(&a[k]);
        wstash_free(&st[k]);
    }
    free(params), free(g_fused), free(g_split), free(x_in), free(dx_out), free(dx_fused);
    llama_free(&m);
    return ok;
}

// A model that says its products are bf16 (ModelShard.products16) run on fp32 ops:
// its forward refuses it (the bf16 residual gradient would reach fp32 products).
static void child_products16_on_fp32_ops(void *p) {
    (void)p;
    ops_set_matmul_bf16(0);
    ModelConfig mc;
    small_config(&mc, 0);
    ModelShard shard = model_whole();
    shard.bf16_acts = shard.products16 = 1;
    LlamaModel m;
    llama_build(&m, &mc, shard);
    float *params = xcalloc(sizeof(float) * m.num_elements, "test");  // (num_elements)
    llama_init_params(&m, params, 7);
    float *grads = xcalloc(sizeof(float) * m.num_elements, "test");  // (num_elements)
    Pieced w = {{params, grads, &m}, 0};
    ParamAccess pa = pieced_access(&w);
    const StageUnits su = {0, 4};
    Activations a;
    activations_alloc(&a, &m, su, B, S, NULL);
    int32_t tok[N] = {0}, tgt[N] = {0};
    double loss = 0.0;
    llama_stage_forward(&m, &pa, &a, tok, NULL, tgt, 1.0f, 1, &loss);
}

int main(void) {
    ops_set_threads(2);
    char err[2048];
    const int rc = run_child(child_products16_on_fp32_ops, NULL, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "ModelShard.products16") && strstr(err, "bf16 products"),
          "a model with bf16 products (ModelShard.products16) on fp32 ops is refused, naming both (exit %d: %.200s)",
          rc, err);
    const char *rc_name[] = {"none", "selective", "full"};
    const Recompute rcs[] = {RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL};
    // Units: 0 embedding, 1..3 layers, 4 final norm + head.
    const struct {
        StageUnits su;
        const char *name;
    } stages[] = {{{0, 4}, "whole model"}, {{0, 2}, "first stage"}, {{2, 3}, "middle stage"}, {{3, 4}, "last stage"}};
    const char *acts[] = {"", ", bf16 activations", ", bf16 activations with bf16 q|k|v and attention output"};
    for (int p16 = 0; p16 <= ops_has_bf16(); p16++) {  // bf16 products: with bf16 activations, as training has them
        ops_set_matmul_bf16(p16);
        for (int bf16 = p16; bf16 <= 2; bf16++)
            for (int r = 0; r < 3; r++)
                for (int tied = 0; tied <= 1; tied++)
                    for (int s = 0; s < 4; s++) {
                        const char *why;
                        int ok = same_bits(rcs[r], bf16, tied, stages[s].su, 0, &why);
                        CHECK(ok, "split backward = fused, bit for bit: %s, %s, recompute %s%s%s%s%s", stages[s].name,
                              tied ? "tied" : "untied", rc_name[r], acts[bf16], p16 ? ", bf16 products" : "",
                              ok ? "" : ": ", why);
                    }
    }
    ops_set_matmul_bf16(0);
    // The row tables in pieces of 3 rows (29 rows: 10 pieces; the final unit: its
    // norm, then 10 head pieces), as the ZeRO-2/3 engine hands them out.
    for (int tied = 0; tied <= 1; tied++)
        for (int s = 0; s < 4; s += 3) {
            const char *why;
            int ok = same_bits(RECOMPUTE_NONE, 0, tied, stages[s].su, 3, &why);
            CHECK(ok, "split backward = fused, bit for bit, row tables in pieces of 3 rows: %s, %s%s%s",
                  stages[s].name, tied ? "tied" : "untied", ok ? "" : ": ", why);
        }
    // The stash is what I keeps for W, growing with the layers held: four (N, D)
    // gradients per layer, plus gate|up's and q|k|v's under full recomputation
    // (otherwise they take the layer's own gu and qkv, which only I reads), and
    // gate|up's under bf16 activations (gu is kept as bf16, and W reads it again),
    // as bf16 there, half an fp32 one's bytes (and q|k|v's too, under full). With
    // bf16 products (and cuDNN's attention) two of the four, down's and o's output
    // gradients, are kept as bf16 too.
    ModelConfig mc;
    small_config(&mc, 0);
    for (int bf16 = 0; bf16 <= 2; bf16++)
        for (int full = 0; full <= 1; full++) {
            ModelShard shard = model_whole();
            shard.recompute = full ? RECOMPUTE_FULL : RECOMPUTE_NONE;
            shard.bf16_acts = bf16 > 0;
            shard.att_bf16 = shard.products16 = bf16 == 2;
            LlamaModel m;
            llama_build(&m, &mc, shard);
            StageUnits one = {1, 1}, two = {1, 2};
            size_t b1 = wstash_bytes(&m, one, B, S), b2 = wstash_bytes(&m, two, B, S);
            // + the layer's two norm weights (2 D), from which W rebuilds the products'
            // inputs (multiples of 16 floats here, so no rounding between layers)
            const size_t value = bf16 ? sizeof(uint16_t) : sizeof(float);
            const size_t halves = bf16 == 2 ? 2 : 0;  // (N, D) gradients kept as bf16: down's and o's
            size_t per_layer = sizeof(float) * ((4 - halves) * N * m.D + (size_t)2 * m.D) +
                               sizeof(uint16_t) * halves * N * m.D +
                               value * ((size_t)full * N * (m.H + 2 * m.KV) * m.hd + (size_t)(full || bf16) * N * 2 * m.Fl);
            CHECK(m.D % 8 == 0 && b1 == per_layer && b2 == 2 * per_layer,
                  "stash of one layer%s%s%s = %zu bytes, of two layers twice that (%zu, %zu)",
                  full ? " (full recomputation: + gate|up and q|k|v gradients)" : " = 4 (N, D) gradients + 2 norm weights",
                  bf16 && !full ? " + gate|up's gradient as bf16 (bf16 activations)" : bf16 ? " (bf16 activations: both as bf16)" : "",
                  halves ? ", down's and o's output gradients as bf16 (bf16 products, cuDNN)" : "", per_layer, b1, b2);
            llama_free(&m);
        }
    return check_summary();
}
