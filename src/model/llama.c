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

// The activation plan: every buffer and its size in floats. With a->arena set the
// buffers are carved out of it in this order; either way the total is returned.
static size_t activation_floats(const LlamaModel *m, int B, int S, Activations *a) {
    const size_t N = (size_t)B * S, D = m->D, F = m->F, L = m->L;
    const size_t QKV = (size_t)(m->H + 2 * m->KV) * m->hd, A = (size_t)m->H * m->hd;
    const size_t P = (size_t)B * m->H * S * S, half = (size_t)m->hd / 2;
    struct {
        float **ptr;
        size_t n;
    } plan[] = {
        {&a->cos_t, S * half},      {&a->sin_t, S * half},
        {&a->resid, (L + 1) * N * D}, {&a->ln1, L * N * D},
        {&a->ln1_rstd, L * N},      {&a->qkv, L * N * QKV},
        {&a->probs, L * P},         {&a->attn, L * N * A},
        {&a->resid_mid, L * N * D}, {&a->ln2, L * N * D},
        {&a->ln2_rstd, L * N},      {&a->gu, L * N * 2 * F},
        {&a->mlp_h, L * N * F},     {&a->lnf, N * D},
        {&a->lnf_rstd, N},          {&a->logits, N * (size_t)m->V},
        {&a->dresid, N * D},        {&a->dbuf_d, N * (D > A ? D : A)},
        {&a->dqkv, N * QKV},        {&a->dattn_scratch, P},
        {&a->dgu, N * 2 * F},       {&a->dbuf_i, N * F},
    };
    size_t total = 0;
    float *base = a->arena;  // NULL when only counting
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        size_t n = (plan[i].n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
        if (base) *plan[i].ptr = base + total;
        total += n;
    }
    return total;
}

size_t activations_bytes(const LlamaModel *m, int B, int S) {
    Activations tmp;
    memset(&tmp, 0, sizeof tmp);
    return activation_floats(m, B, S, &tmp) * sizeof(float);
}

void activations_alloc(Activations *a, const LlamaModel *m, int B, int S, double rope_theta) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->S = S;
    a->bytes = activations_bytes(m, B, S);
    a->arena = xcalloc(a->bytes, "activations");
    activation_floats(m, B, S, a);
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

static void forward_to_logits(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                              const int32_t *tokens) {
    const int B = a->B, S = a->S, N = B * S, D = m->D, F = m->F;
    const int H = m->H, KV = m->KV, hd = m->hd, QKV = (H + 2 * KV) * hd, A = H * hd;
    const int tied = m->cfg.tie_word_embeddings, u_final = m->L + 1;
    const float eps = (float)m->cfg.rms_norm_eps;
    const float *w0 = pa->acquire_params(pa->ctx, 0);
    embedding_forward(a->resid, tokens, AT(w0, 0, m->embed), N, D);
    if (!tied) pa->release_params(pa->ctx, 0);  // a tied head needs it again at the end
    for (int l = 0; l < m->L; l++) {
        const LayerOffsets *lo = &m->layer[l];
        const int u = 1 + l;
        const float *w = pa->acquire_params(pa->ctx, u);
        float *x = a->resid + (size_t)l * N * D;              // (N, D) layer input
        float *ln1 = a->ln1 + (size_t)l * N * D;              // (N, D)
        float *qkv = a->qkv + (size_t)l * N * QKV;            // (N, QKV)
        float *probs = a->probs + (size_t)l * B * H * S * S;  // (B, H, S, S)
        float *attn = a->attn + (size_t)l * N * A;            // (N, H*hd)
        float *mid = a->resid_mid + (size_t)l * N * D;        // (N, D)
        float *ln2 = a->ln2 + (size_t)l * N * D;              // (N, D)
        float *gu = a->gu + (size_t)l * N * 2 * F;            // (N, 2F)
        float *h = a->mlp_h + (size_t)l * N * F;              // (N, F)
        float *out = a->resid + (size_t)(l + 1) * N * D;      // (N, D) layer output

        rmsnorm_forward(ln1, a->ln1_rstd + (size_t)l * N, x, AT(w, u, lo->ln1), N, D, eps);
        matmul_forward(qkv, ln1, AT(w, u, lo->qkv), N, D, QKV);  // q|k|v in one GEMM
        rope_forward(qkv, a->cos_t, a->sin_t, B, S, H, KV, hd);
        attention_forward(attn, probs, qkv, B, S, H, KV, hd);
        matmul_forward(mid, attn, AT(w, u, lo->o), N, A, D);
        residual_forward(mid, mid, x, (size_t)N * D);
        rmsnorm_forward(ln2, a->ln2_rstd + (size_t)l * N, mid, AT(w, u, lo->ln2), N, D, eps);
        matmul_forward(gu, ln2, AT(w, u, lo->gate_up), N, D, 2 * F);  // gate|up in one GEMM
        swiglu_forward(h, gu, N, F);
        matmul_forward(out, h, AT(w, u, lo->down), N, F, D);
        residual_forward(out, out, mid, (size_t)N * D);
        pa->release_params(pa->ctx, u);
    }
    const float *wf = pa->acquire_params(pa->ctx, u_final);
    const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
    rmsnorm_forward(a->lnf, a->lnf_rstd, a->resid + (size_t)m->L * N * D,
                    AT(wf, u_final, m->final_norm), N, D, eps);
    matmul_forward(a->logits, a->lnf, head, N, D, m->V);
    pa->release_params(pa->ctx, u_final);
    if (tied) pa->release_params(pa->ctx, 0);
}

double llama_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                     const int32_t *tokens, const int32_t *targets, float grad_scale) {
    forward_to_logits(m, pa, a, tokens);
    return cross_entropy_forward_backward(a->logits, targets, a->B * a->S, m->V, grad_scale);
}

double llama_forward_loss(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                          const int32_t *tokens, const int32_t *targets) {
    forward_to_logits(m, pa, a, tokens);
    return cross_entropy_forward(a->logits, targets, a->B * a->S, m->V);
}

// -------------------------------------------------------------------- backward

void llama_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                    const int32_t *tokens) {
    const int B = a->B, S = a->S, N = B * S, D = m->D, F = m->F;
    const int H = m->H, KV = m->KV, hd = m->hd, QKV = (H + 2 * KV) * hd, A = H * hd;
    const int tied = m->cfg.tie_word_embeddings, u_final = m->L + 1;
    float *dres = a->dresid;  // (N, D) gradient of the residual stream
    float *dd = a->dbuf_d;    // (N, D) scratch

    // Output head and final norm; a->logits holds dlogits. A tied head's weight and
    // gradient live in unit 0 (the embedding), which stays open until the end.
    const float *wf = pa->acquire_params(pa->ctx, u_final);
    float *gf = pa->grads(pa->ctx, u_final);
    const float *w0 = tied ? pa->acquire_params(pa->ctx, 0) : NULL;
    float *g0 = tied ? pa->grads(pa->ctx, 0) : NULL;
    const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
    float *dhead = tied ? AT(g0, 0, m->embed) : AT(gf, u_final, m->head);
    matmul_backward(dd, dhead, a->logits, a->lnf, head, N, D, m->V, 0);
    memset(dres, 0, sizeof(float) * (size_t)N * D);
    rmsnorm_backward(dres, AT(gf, u_final, m->final_norm), dd, a->resid + (size_t)m->L * N * D,
                     AT(wf, u_final, m->final_norm), a->lnf_rstd, N, D);
    pa->release_params(pa->ctx, u_final);
    pa->grads_done(pa->ctx, u_final);

    for (int l = m->L - 1; l >= 0; l--) {
        const LayerOffsets *lo = &m->layer[l];
        const int u = 1 + l;
        const float *w = pa->acquire_params(pa->ctx, u);
        float *g = pa->grads(pa->ctx, u);
        const float *x = a->resid + (size_t)l * N * D;
        const float *ln1 = a->ln1 + (size_t)l * N * D;
        const float *qkv = a->qkv + (size_t)l * N * QKV;
        const float *probs = a->probs + (size_t)l * B * H * S * S;
        const float *attn = a->attn + (size_t)l * N * A;
        const float *mid = a->resid_mid + (size_t)l * N * D;
        const float *ln2 = a->ln2 + (size_t)l * N * D;
        const float *gu = a->gu + (size_t)l * N * 2 * F;
        const float *h = a->mlp_h + (size_t)l * N * F;

        // MLP: out = mid + down(swiglu(gate_up(rmsnorm2(mid)))); dres flows to mid as is.
        matmul_backward(a->dbuf_i, AT(g, u, lo->down), dres, h, AT(w, u, lo->down), N, F, D, 0);
        swiglu_backward(a->dgu, a->dbuf_i, gu, N, F);
        matmul_backward(dd, AT(g, u, lo->gate_up), a->dgu, ln2, AT(w, u, lo->gate_up), N, D, 2 * F, 0);
        rmsnorm_backward(dres, AT(g, u, lo->ln2), dd, mid, AT(w, u, lo->ln2),
                         a->ln2_rstd + (size_t)l * N, N, D);
        // Attention: mid = x + o(attention(rope(qkv(rmsnorm1(x)))))
        matmul_backward(dd, AT(g, u, lo->o), dres, attn, AT(w, u, lo->o), N, A, D, 0);
        attention_backward(a->dqkv, a->dattn_scratch, dd, qkv, probs, B, S, H, KV, hd);
        rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, H, KV, hd);
        matmul_backward(dd, AT(g, u, lo->qkv), a->dqkv, ln1, AT(w, u, lo->qkv), N, D, QKV, 0);
        rmsnorm_backward(dres, AT(g, u, lo->ln1), dd, x, AT(w, u, lo->ln1),
                         a->ln1_rstd + (size_t)l * N, N, D);
        pa->release_params(pa->ctx, u);
        pa->grads_done(pa->ctx, u);
    }
    if (!tied) g0 = pa->grads(pa->ctx, 0);
    embedding_backward(AT(g0, 0, m->embed), dres, tokens, N, D);
    if (tied) pa->release_params(pa->ctx, 0);
    pa->grads_done(pa->ctx, 0);
}
