// tests/unit/test_bf16_acts.c — bf16 activations (ModelShard.bf16_acts, what
// training.precision = bf16 turns on): the dense MLP keeps its gate|up
// pre-activations as bf16 and not the SwiGLU output, which the backward rebuilds
// (model/activations.h), both bf16 as their ops write them, and the norms'
// outputs and the gradients of gate|up's and q|k|v's outputs are written as bf16
// too. On the CPU ops (fp32 products, so the only roundings are those), for a
// whole 3-layer model and one micro-batch:
//   - the gradient of the last layer's down projection, the final norm and the
//     head against central finite differences of the loss: nothing after the last
//     layer's SwiGLU is rounded, so the loss is smooth in them, and their gradient
//     reads the SwiGLU output the backward rebuilt, which must be the forward's
//     (measured: 6.1e-5 relative at worst; a forward that fed down_proj the fp32
//     SwiGLU of the unrounded gate|up instead misses by 3.4e-3, so the bound is 5e-4);
//   - recomputation none, selective and full: the same loss and gradients, bit for
//     bit (the rebuilt working layer rounds the same values);
//   - the fp32-activation model: loss and gradients within bf16's rounding of it,
//     and not equal to it (the rounding happens);
//   - the activation plan: per layer a quarter of the two fp32 buffers it replaces
//     (gate|up 2 Fl bf16 values a token instead of 3 Fl floats), nothing else.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "model/activation_plan.h"
#include "model/activations.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "util.h"

enum { B = 2, S = 8, N = B * S };

static void small_config(ModelConfig *mc) {
    Config c;
    config_defaults(&c);
    *mc = c.model;
    mc->hidden_size = 32;
    mc->num_attention_heads = 4;  // hd 8
    mc->num_key_value_heads = 2;
    mc->intermediate_size = 48;
    mc->num_hidden_layers = 3;
    mc->vocab_size = 29;
    mc->max_position_embeddings = 16;
    mc->initializer_range = 0.1;
    mc->tie_word_embeddings = 0;
}

typedef struct {
    LlamaModel m;
    Activations a;
    float *params, *grads;  // (num_elements)
    int32_t tok[N], tgt[N];
} Run;

// bf16: 0 fp32 activations, 1 bf16 activations, 2 also q|k|v and the attention
// output kept as bf16 (LlamaModel.att_bf16, what training.attention = cudnn adds).
static void run_open(Run *r, Recompute rc, int bf16) {
    ModelConfig mc;
    small_config(&mc);
    ModelShard shard = model_whole();
    shard.recompute = rc;
    shard.bf16_acts = bf16 > 0;
    shard.att_bf16 = bf16 == 2;
    llama_build(&r->m, &mc, shard);
    r->params = xcalloc(sizeof(float) * r->m.num_elements, "test");
    r->grads = xcalloc(sizeof(float) * r->m.num_elements, "test");
    llama_init_params(&r->m, r->params, 11);
    activations_alloc(&r->a, &r->m, llama_all_units(&r->m), B, S, NULL);
    for (int n = 0; n < N; n++) r->tok[n] = (n * 7 + 1) % 29, r->tgt[n] = (n * 5 + 2) % 29;
}

static void run_close(Run *r) {
    activations_free(&r->a);
    free(r->params), free(r->grads);
    llama_free(&r->m);
}

// The mean loss of the micro-batch; with grads, its gradients into r->grads (zeroed first).
static double loss_of(Run *r, int grads) {
    WholeBuffers wb = {r->params, grads ? r->grads : NULL, &r->m};
    ParamAccess pa = param_access_whole(&wb);
    double sum = 0.0;
    if (grads) memset(r->grads, 0, sizeof(float) * r->m.num_elements);
    llama_stage_forward(&r->m, &pa, &r->a, r->tok, NULL, r->tgt, 1.0f / N, grads, &sum);
    if (grads) llama_stage_backward(&r->m, &pa, &r->a, r->tok, NULL);
    return sum / N;
}

static size_t offset_of(const LlamaModel *m, const char *name) {
    const ParamInfo *p = llama_find(m, name);
    if (!p) die("test: no tensor %s", name);
    return p->offset;
}

// Central differences of the loss for the k largest-gradient elements of the
// tensor `name` (n elements): the worst relative difference from the backward's.
static double fd_worst(Run *r, const char *name, size_t n, int k) {
    const size_t off = offset_of(&r->m, name);
    double worst = 0.0;
    char *used = xcalloc(n, "test");
    for (int j = 0; j < k; j++) {
        size_t best = 0;
        for (size_t i = 0; i < n; i++)
            if (!used[i] && fabsf(r->grads[off + i]) > fabsf(r->grads[off + best])) best = i;
        used[best] = 1;
        float *w = r->params + off + best;
        const float w0 = *w, h = 1e-2f;
        *w = w0 + h;
        const double up = loss_of(r, 0);
        *w = w0 - h;
        const double down = loss_of(r, 0);
        *w = w0;
        const double fd = (up - down) / (2.0 * h), g = r->grads[off + best];
        worst = fmax(worst, fabs(fd - g) / fabs(g));
    }
    free(used);
    return worst;
}

static double rel_norm(const float *a, const float *b, size_t n) {  // |a - b| / |b|, 2-norms
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / den);
}

int main(void) {
    ops_set_threads(2);
    // 1. Finite differences of what follows the last layer's SwiGLU.
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        Run r;
        run_open(&r, RECOMPUTE_NONE, bf16);
        loss_of(&r, 1);
        const size_t F = (size_t)r.m.F, D = (size_t)r.m.D, V = (size_t)r.m.V;
        double wd = fd_worst(&r, "model.layers.2.mlp.down_proj.weight", D * F, 6);
        double wn = fd_worst(&r, "model.norm.weight", D, 4);
        double wh = fd_worst(&r, "lm_head.weight", V * D, 4);
        CHECK(wd < 5e-4 && wn < 5e-4 && wh < 5e-4,
              "%s activations: the last layer's down_proj, the final norm and the head against central differences "
              "(worst relative %.1e, %.1e, %.1e)", bf16 ? "bf16" : "fp32", wd, wn, wh);
        run_close(&r);
    }
    // 2. The recomputation modes, bit for bit; 3. against fp32 activations.
    Run none, sel, full, f32;
    run_open(&none, RECOMPUTE_NONE, 1);
    run_open(&sel, RECOMPUTE_SELECTIVE, 1);
    run_open(&full, RECOMPUTE_FULL, 1);
    run_open(&f32, RECOMPUTE_NONE, 0);
    const size_t ne = none.m.num_elements;
    const double l_none = loss_of(&none, 1), l_sel = loss_of(&sel, 1), l_full = loss_of(&full, 1);
    const double l_f32 = loss_of(&f32, 1);
    CHECK(l_none == l_sel && l_none == l_full && !memcmp(none.grads, sel.grads, sizeof(float) * ne) &&
              !memcmp(none.grads, full.grads, sizeof(float) * ne),
          "bf16 activations: recompute none, selective and full give the same loss (%.9f) and gradients, bit for bit",
          l_none);
    const double dl = fabs(l_none - l_f32) / l_f32, dg = rel_norm(none.grads, f32.grads, ne);
    CHECK(dl > 0 && dl < 1e-2 && dg > 0 && dg < 2e-2,
          "bf16 activations vs fp32: loss %.6f vs %.6f (%.1e relative), gradients %.1e relative (2-norm): "
          "rounded, within bf16's reach", l_none, l_f32, dl, dg);
    // 5. bf16 q|k|v and attention output (LlamaModel.att_bf16; on the CPU the
    //    reference ops: the fp32 attention of the widened values, rounded): the
    //    recomputation modes bit for bit, and within bf16's reach of the bf16
    //    activations above, but not equal (q|k|v, the output and the q|k|v gradient
    //    are rounded where they were fp32).
    Run anone, asel, afull;
    run_open(&anone, RECOMPUTE_NONE, 2);
    run_open(&asel, RECOMPUTE_SELECTIVE, 2);
    run_open(&afull, RECOMPUTE_FULL, 2);
    CHECK(anone.m.att_bf16 && !none.m.att_bf16, "att_bf16 follows ModelShard.att_bf16");
    const double la_none = loss_of(&anone, 1), la_sel = loss_of(&asel, 1), la_full = loss_of(&afull, 1);
    CHECK(la_none == la_sel && la_none == la_full && !memcmp(anone.grads, asel.grads, sizeof(float) * ne) &&
              !memcmp(anone.grads, afull.grads, sizeof(float) * ne),
          "bf16 q|k|v and attention output: recompute none, selective and full give the same loss (%.9f) and "
          "gradients, bit for bit", la_none);
    const double dla = fabs(la_none - l_none) / l_none, dga = rel_norm(anone.grads, none.grads, ne);
    CHECK(dla > 0 && dla < 1e-2 && dga > 0 && dga < 2e-2,
          "bf16 q|k|v and attention output vs bf16 activations: loss %.6f vs %.6f (%.1e relative), gradients "
          "%.1e relative (2-norm): rounded, within bf16's reach", la_none, l_none, dla, dga);
    //    The plan: each layer's q|k|v (N x QKV) and attention output (N x A) slots in
    //    bf16 halves (rounded to 16 floats: exact here), nothing else changed.
    const StageUnits sa = llama_all_units(&none.m);
    const size_t qkv_a = (size_t)N * (none.m.Hl + 2 * none.m.KVl) * none.m.hd, att_a = (size_t)N * none.m.Hl * none.m.hd;
    const size_t saved = (size_t)none.m.L * (qkv_a + att_a) * 2;  // 4 bytes -> 2 a value
    const size_t bb = activations_bytes(&none.m, sa, B, S, 1), ba = activations_bytes(&anone.m, sa, B, S, 1);
    CHECK(qkv_a % 32 == 0 && att_a % 32 == 0 && bb - ba == saved,
          "activation plan: bf16 q|k|v and attention output keep %zu bytes fewer (%zu -> %zu): half of each layer's "
          "two fp32 slots", bb - ba, bb, ba);
    run_close(&anone), run_close(&asel), run_close(&afull);
    // 4. The plan: a layer's MLP buffers 3 Fl floats -> 2 Fl bf16 values a token,
    //    per layer slot kept: every layer, or under full recomputation the one
    //    working layer of the shared scratch.
    const StageUnits su = llama_all_units(&f32.m);
    const size_t per_layer = (size_t)N * ((size_t)3 * f32.m.Fl * 4 - (size_t)2 * f32.m.Fl * 2);
    const size_t b32 = activations_bytes(&f32.m, su, B, S, 1), b16 = activations_bytes(&none.m, su, B, S, 1);
    CHECK(b32 - b16 == (size_t)f32.m.L * per_layer,
          "activation plan: bf16 activations keep %zu bytes fewer (%zu -> %zu): each layer's gate|up and SwiGLU "
          "output (3 Fl floats a token) become gate|up in bf16 (2 Fl halves)", b32 - b16, b32, b16);
    ModelConfig mc;
    small_config(&mc);
    ModelShard sh = model_whole();
    sh.recompute = RECOMPUTE_FULL;
    LlamaModel full32;
    llama_build(&full32, &mc, sh);
    const size_t f32b = activations_bytes(&full32, su, B, S, 1), f16b = activations_bytes(&full.m, su, B, S, 1);
    CHECK(f32b - f16b == per_layer && activations_bytes(&full32, su, B, S, 0) == activations_bytes(&full.m, su, B, S, 0),
          "activation plan, full recomputation: one layer's worth fewer (%zu -> %zu), in the shared scratch only",
          f32b, f16b);
    llama_free(&full32);
    run_close(&none), run_close(&sel), run_close(&full), run_close(&f32);
    return check_summary();
}
