// model/llama.c — the parameter table, the activation plan, and the forward and
// backward of a Llama decoder stack, written as a sequence of kernel calls.
//
// One layer (pre-norm):
//   h   = x + o_proj(attention(rope(qkv_proj(rmsnorm1(x)))))
//   out = h + down_proj(silu(gate_proj(rmsnorm2(h))) * up_proj(rmsnorm2(h)))
// then a final RMSNorm, the output head, and the cross-entropy.
#include "model/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "util.h"

// Append one tensor to the table (when the table exists; the first pass only counts)
// and return its offset in the flat buffer. cols == 0 means a 1-D tensor.
static size_t add_param(LlamaModel *m, int *count, size_t *offset, const char *name,
                        int64_t rows, int64_t cols) {
    size_t at = *offset, numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    if (m->params) {
        ParamInfo *p = &m->params[*count];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = cols > 0 ? 2 : 1;
        p->shape[0] = rows;
        p->shape[1] = cols > 0 ? cols : 1;
        p->offset = at;
        p->numel = numel;
        p->weight_decay = p->ndim >= 2;
    }
    (*count)++;
    *offset += numel;
    return at;
}

// Walk the tensors in buffer order; a first pass counts, a second fills the table.
static void layout_params(LlamaModel *m) {
    int count = 0;
    size_t off = 0;
    char name[PARAM_NAME_MAX];
    const int D = m->D, F = m->F, q_rows = m->H * m->hd, kv_rows = m->KV * m->hd;
    m->embed = add_param(m, &count, &off, "model.embed_tokens.weight", m->V, D);
    for (int l = 0; l < m->L; l++) {
        LayerOffsets lo;
#define LAYER_PARAM(suffix, rows, cols) \
    (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), \
     add_param(m, &count, &off, name, rows, cols))
        lo.ln1 = LAYER_PARAM("input_layernorm.weight", D, 0);
        lo.qkv = LAYER_PARAM("self_attn.q_proj.weight", q_rows, D);  // q, k, v adjacent:
        LAYER_PARAM("self_attn.k_proj.weight", kv_rows, D);          // one fused GEMM
        LAYER_PARAM("self_attn.v_proj.weight", kv_rows, D);
        lo.o = LAYER_PARAM("self_attn.o_proj.weight", D, q_rows);
        lo.ln2 = LAYER_PARAM("post_attention_layernorm.weight", D, 0);
        lo.gate_up = LAYER_PARAM("mlp.gate_proj.weight", F, D);  // gate, up adjacent:
        LAYER_PARAM("mlp.up_proj.weight", F, D);                 // one fused GEMM
        lo.down = LAYER_PARAM("mlp.down_proj.weight", D, F);
#undef LAYER_PARAM
        if (m->layer) m->layer[l] = lo;
    }
    m->final_norm = add_param(m, &count, &off, "model.norm.weight", D, 0);
    m->head = m->cfg.tie_word_embeddings
                  ? m->embed
                  : add_param(m, &count, &off, "lm_head.weight", m->V, D);
    m->n_params = count;
    m->num_elements = off;
    if (m->unit_lo) {  // units: embedding | layer 0 | ... | layer L-1 | final norm (+ head)
        m->unit_lo[0] = 0;
        for (int l = 0; l < m->L; l++) m->unit_lo[1 + l] = m->layer[l].ln1;
        m->unit_lo[m->L + 1] = m->final_norm;
        m->unit_lo[m->L + 2] = off;
    }
}

void llama_build(LlamaModel *m, const ModelConfig *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->D = cfg->hidden_size;
    m->F = cfg->intermediate_size;
    m->L = cfg->num_hidden_layers;
    m->H = cfg->num_attention_heads;
    m->KV = cfg->num_key_value_heads;
    m->hd = cfg->hidden_size / cfg->num_attention_heads;
    m->V = cfg->vocab_size;
    layout_params(m);  // count
    m->params = xcalloc(sizeof(ParamInfo) * (size_t)m->n_params, "parameter table");
    m->layer = xcalloc(sizeof(LayerOffsets) * (size_t)m->L, "layer offsets");
    m->n_units = m->L + 2;
    m->unit_lo = xcalloc(sizeof(size_t) * (size_t)(m->n_units + 1), "unit offsets");
    layout_params(m);  // fill
}

void llama_free(LlamaModel *m) {
    free(m->params);
    free(m->layer);
    free(m->unit_lo);
    memset(m, 0, sizeof *m);
}

const ParamInfo *llama_find(const LlamaModel *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

size_t llama_matmul_params(const LlamaModel *m) {
    size_t qkv = (size_t)(m->H + 2 * m->KV) * m->hd;
    size_t per_layer = (size_t)m->D * qkv + (size_t)m->H * m->hd * m->D + 3 * (size_t)m->D * m->F;
    return (size_t)m->L * per_layer + (size_t)m->V * m->D;  // + output head
}

double llama_flops_per_token(const LlamaModel *m, int seq_length) {
    return 6.0 * (double)llama_matmul_params(m) + 6.0 * m->L * (double)seq_length * m->D;
}

// ----------------------------------------------------------------- activations

StageUnits llama_all_units(const LlamaModel *m) {
    StageUnits su = {0, m->L + 1};
    return su;
}

// The activation plan: every buffer and its size in floats. With a->arena set the
// buffers are carved out of it in this order; either way the total is returned.
// Scratch buffers are planned only when with_scratch is set.
static size_t activation_floats(const LlamaModel *m, int B, int S, Activations *a,
                                int with_scratch) {
    const size_t N = (size_t)B * S, D = m->D, F = m->F, nl = (size_t)a->nl;
    const size_t QKV = (size_t)(m->H + 2 * m->KV) * m->hd, A = (size_t)m->H * m->hd;
    const size_t P = (size_t)B * m->H * S * S, half = (size_t)m->hd / 2;
    const size_t head = a->has_head ? 1 : 0, scr = with_scratch ? 1 : 0;
    struct {
        float **ptr;
        size_t n;
    } plan[] = {
        {&a->cos_t, S * half},          {&a->sin_t, S * half},
        {&a->resid, (nl + 1) * N * D},  {&a->ln1, nl * N * D},
        {&a->ln1_rstd, nl * N},         {&a->qkv, nl * N * QKV},
        {&a->probs, nl * P},            {&a->attn, nl * N * A},
        {&a->resid_mid, nl * N * D},    {&a->ln2, nl * N * D},
        {&a->ln2_rstd, nl * N},         {&a->gu, nl * N * 2 * F},
        {&a->mlp_h, nl * N * F},        {&a->lnf, head * N * D},
        {&a->lnf_rstd, head * N},       {&a->logits, head * N * (size_t)m->V},
        {&a->dresid, scr * N * D},      {&a->dbuf_d, scr * N * (D > A ? D : A)},
        {&a->dqkv, scr * N * QKV},      {&a->dattn_scratch, scr * P},
        {&a->dgu, scr * N * 2 * F},     {&a->dbuf_i, scr * N * F},
    };
    size_t total = 0;
    float *base = a->arena;  // NULL when only counting
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        size_t n = (plan[i].n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
        if (base && plan[i].n) *plan[i].ptr = base + total;
        total += n;
    }
    return total;
}

static void stage_shape(Activations *a, const LlamaModel *m, StageUnits su) {
    a->has_embed = su.u0 == 0;
    a->has_head = su.u1 == m->L + 1;
    int first_layer = su.u0 == 0 ? 0 : su.u0 - 1;
    int last_layer = su.u1 == m->L + 1 ? m->L - 1 : su.u1 - 1;
    a->l0 = first_layer;
    a->nl = last_layer - first_layer + 1;
}

size_t activations_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch) {
    Activations tmp;
    memset(&tmp, 0, sizeof tmp);
    stage_shape(&tmp, m, su);
    return activation_floats(m, B, S, &tmp, with_scratch) * sizeof(float);
}

void activations_alloc(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                       double rope_theta, const Activations *share_scratch) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->S = S;
    stage_shape(a, m, su);
    a->bytes = activations_bytes(m, su, B, S, share_scratch == NULL);
    a->arena = xcalloc(a->bytes, "activations");
    activation_floats(m, B, S, a, share_scratch == NULL);
    if (share_scratch) {
        a->dresid = share_scratch->dresid;
        a->dbuf_d = share_scratch->dbuf_d;
        a->dqkv = share_scratch->dqkv;
        a->dattn_scratch = share_scratch->dattn_scratch;
        a->dgu = share_scratch->dgu;
        a->dbuf_i = share_scratch->dbuf_i;
    }
    rope_tables(a->cos_t, a->sin_t, S, m->hd, rope_theta, 0);
}

void activations_free(Activations *a) {
    free(a->arena);
    memset(a, 0, sizeof *a);
}

// --------------------------------------------------------- whole-buffer access

static const float *whole_params(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->params + wb->model->unit_lo[unit];
}
static float *whole_grads(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->grads + wb->model->unit_lo[unit];
}
static void whole_nothing(void *ctx, int unit) {
    (void)ctx;
    (void)unit;
}

ParamAccess param_access_whole(WholeBuffers *wb) {
    ParamAccess pa = {wb, whole_params, whole_nothing, whole_grads, whole_nothing};
    return pa;
}

// --------------------------------------------------------------------- forward

// Address of the tensor at flat offset `off` inside unit u, whose data starts at `base`.
#define AT(base, u, off) ((base) + ((off) - m->unit_lo[u]))

float *llama_stage_output(const LlamaModel *m, Activations *a) {
    return a->resid + (size_t)a->nl * a->B * a->S * m->D;
}

// One decoder layer forward; i is the local slot, l the global layer index.
static void layer_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int B = a->B, S = a->S, N = B * S, D = m->D, F = m->F;
    const int H = m->H, KV = m->KV, hd = m->hd, QKV = (H + 2 * KV) * hd, A = H * hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    const float *w = pa->acquire_params(pa->ctx, u);
    float *x = a->resid + (size_t)i * N * D;              // (N, D) layer input
    float *ln1 = a->ln1 + (size_t)i * N * D;              // (N, D)
    float *qkv = a->qkv + (size_t)i * N * QKV;            // (N, QKV)
    float *probs = a->probs + (size_t)i * B * H * S * S;  // (B, H, S, S)
    float *attn = a->attn + (size_t)i * N * A;            // (N, H*hd)
    float *mid = a->resid_mid + (size_t)i * N * D;        // (N, D)
    float *ln2 = a->ln2 + (size_t)i * N * D;              // (N, D)
    float *gu = a->gu + (size_t)i * N * 2 * F;            // (N, 2F)
    float *h = a->mlp_h + (size_t)i * N * F;              // (N, F)
    float *out = a->resid + (size_t)(i + 1) * N * D;      // (N, D) layer output

    rmsnorm_forward(ln1, a->ln1_rstd + (size_t)i * N, x, AT(w, u, lo->ln1), N, D, eps);
    matmul_forward(qkv, ln1, AT(w, u, lo->qkv), N, D, QKV);  // q|k|v in one GEMM
    rope_forward(qkv, a->cos_t, a->sin_t, B, S, H, KV, hd);
    attention_forward(attn, probs, qkv, B, S, H, KV, hd);
    matmul_forward(mid, attn, AT(w, u, lo->o), N, A, D);
    residual_forward(mid, mid, x, (size_t)N * D);
    rmsnorm_forward(ln2, a->ln2_rstd + (size_t)i * N, mid, AT(w, u, lo->ln2), N, D, eps);
    matmul_forward(gu, ln2, AT(w, u, lo->gate_up), N, D, 2 * F);  // gate|up in one GEMM
    swiglu_forward(h, gu, N, F);
    matmul_forward(out, h, AT(w, u, lo->down), N, F, D);
    residual_forward(out, out, mid, (size_t)N * D);
    pa->release_params(pa->ctx, u);
}

double llama_stage_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                           const int32_t *tokens, const float *x_in, const int32_t *targets,
                           float grad_scale, int want_grads) {
    const int N = a->B * a->S, D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    const float *w0 = NULL;
    if (a->has_embed) {
        w0 = pa->acquire_params(pa->ctx, 0);
        embedding_forward(a->resid, tokens, AT(w0, 0, m->embed), N, D);
        if (!(tied && a->has_head)) pa->release_params(pa->ctx, 0);  // a tied head needs it again
    } else {
        memcpy(a->resid, x_in, sizeof(float) * (size_t)N * D);  // kept for this stage's backward
    }
    for (int i = 0; i < a->nl; i++) layer_forward(m, pa, a, i);
    if (!a->has_head) return 0.0;
    const float *wf = pa->acquire_params(pa->ctx, u_final);
    if (tied && !w0) die("tie_word_embeddings: the last stage must hold the embedding");
    const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
    rmsnorm_forward(a->lnf, a->lnf_rstd, llama_stage_output(m, a), AT(wf, u_final, m->final_norm), N,
                    D, (float)m->cfg.rms_norm_eps);
    matmul_forward(a->logits, a->lnf, head, N, D, m->V);
    pa->release_params(pa->ctx, u_final);
    if (tied) pa->release_params(pa->ctx, 0);
    if (want_grads) return cross_entropy_forward_backward(a->logits, targets, N, m->V, grad_scale);
    return cross_entropy_forward(a->logits, targets, N, m->V);
}

// -------------------------------------------------------------------- backward

// One decoder layer backward: dres (N, D) holds the gradient of the layer output on
// entry and of the layer input on exit.
static void layer_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int B = a->B, S = a->S, N = B * S, D = m->D, F = m->F;
    const int H = m->H, KV = m->KV, hd = m->hd, QKV = (H + 2 * KV) * hd, A = H * hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid, *dd = a->dbuf_d;
    const float *w = pa->acquire_params(pa->ctx, u);
    float *g = pa->grads(pa->ctx, u);
    const float *x = a->resid + (size_t)i * N * D;
    const float *ln1 = a->ln1 + (size_t)i * N * D;
    const float *qkv = a->qkv + (size_t)i * N * QKV;
    const float *probs = a->probs + (size_t)i * B * H * S * S;
    const float *attn = a->attn + (size_t)i * N * A;
    const float *mid = a->resid_mid + (size_t)i * N * D;
    const float *ln2 = a->ln2 + (size_t)i * N * D;
    const float *gu = a->gu + (size_t)i * N * 2 * F;
    const float *h = a->mlp_h + (size_t)i * N * F;

    // MLP: out = mid + down(swiglu(gate_up(rmsnorm2(mid)))); dres flows to mid as is.
    matmul_backward(a->dbuf_i, AT(g, u, lo->down), dres, h, AT(w, u, lo->down), N, F, D, 0);
    swiglu_backward(a->dgu, a->dbuf_i, gu, N, F);
    matmul_backward(dd, AT(g, u, lo->gate_up), a->dgu, ln2, AT(w, u, lo->gate_up), N, D, 2 * F, 0);
    rmsnorm_backward(dres, AT(g, u, lo->ln2), dd, mid, AT(w, u, lo->ln2),
                     a->ln2_rstd + (size_t)i * N, N, D);
    // Attention: mid = x + o(attention(rope(qkv(rmsnorm1(x)))))
    matmul_backward(dd, AT(g, u, lo->o), dres, attn, AT(w, u, lo->o), N, A, D, 0);
    attention_backward(a->dqkv, a->dattn_scratch, dd, qkv, probs, B, S, H, KV, hd);
    rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, H, KV, hd);
    matmul_backward(dd, AT(g, u, lo->qkv), a->dqkv, ln1, AT(w, u, lo->qkv), N, D, QKV, 0);
    rmsnorm_backward(dres, AT(g, u, lo->ln1), dd, x, AT(w, u, lo->ln1), a->ln1_rstd + (size_t)i * N,
                     N, D);
    pa->release_params(pa->ctx, u);
    pa->grads_done(pa->ctx, u);
}

const float *llama_stage_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                  const int32_t *tokens, const float *dx_out) {
    const int N = a->B * a->S, D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    float *dres = a->dresid;  // (N, D) gradient of the residual stream
    const float *w0 = NULL;
    float *g0 = NULL;
    if (a->has_head) {
        // Output head and final norm; a->logits holds dlogits. A tied head's weight
        // and gradient live in unit 0 (the embedding), which stays open until the end.
        const float *wf = pa->acquire_params(pa->ctx, u_final);
        float *gf = pa->grads(pa->ctx, u_final);
        if (tied) {
            w0 = pa->acquire_params(pa->ctx, 0);
            g0 = pa->grads(pa->ctx, 0);
        }
        const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
        float *dhead = tied ? AT(g0, 0, m->embed) : AT(gf, u_final, m->head);
        matmul_backward(a->dbuf_d, dhead, a->logits, a->lnf, head, N, D, m->V, 0);
        memset(dres, 0, sizeof(float) * (size_t)N * D);
        rmsnorm_backward(dres, AT(gf, u_final, m->final_norm), a->dbuf_d, llama_stage_output(m, a),
                         AT(wf, u_final, m->final_norm), a->lnf_rstd, N, D);
        pa->release_params(pa->ctx, u_final);
        pa->grads_done(pa->ctx, u_final);
    } else {
        memcpy(dres, dx_out, sizeof(float) * (size_t)N * D);
    }
    for (int i = a->nl - 1; i >= 0; i--) layer_backward(m, pa, a, i);
    if (!a->has_embed) return dres;
    if (!g0) g0 = pa->grads(pa->ctx, 0);
    embedding_backward(AT(g0, 0, m->embed), dres, tokens, N, D);
    if (w0) pa->release_params(pa->ctx, 0);
    pa->grads_done(pa->ctx, 0);
    return NULL;
}
