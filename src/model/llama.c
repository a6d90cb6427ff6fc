// model/llama.c — the parameter table, and the forward and backward of a Llama
// decoder stack, written as a sequence of kernel calls (the buffers they use are
// planned in model/activations.c).
//
// One layer (pre-norm):
//   h   = x + o_proj(attention(rope(qkv_proj(rmsnorm1(x)))))
//   out = h + down_proj(silu(gate_proj(rmsnorm2(h))) * up_proj(rmsnorm2(h)))
// then a final RMSNorm, the output head, and the cross-entropy.
#include "model/llama.h"

#include "model/activations.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"
#include "util.h"

// Append one tensor to the table (when the table exists; the first pass only counts)
// and return its offset in the flat buffer. cols == 0 means a 1-D tensor. The
// slice held here follows `split`: `parts` equal slices of the split dimension,
// this rank's being number m->tp_rank; `valid_rows` < the slice for vocab padding.
static size_t add_param(LlamaModel *m, int *count, size_t *offset, const char *name,
                        int64_t rows, int64_t cols, SplitKind split) {
    int64_t lrows = rows, lcols = cols > 0 ? cols : 1, start = 0, valid = 0;
    if (split == SPLIT_ROWS) {
        lrows = (rows + m->tp - 1) / m->tp;  // vocab rows are padded to a multiple of tp
        start = lrows * m->tp_rank;
        valid = rows - start < 0 ? 0 : (rows - start < lrows ? rows - start : lrows);
    } else if (split == SPLIT_COLS) {
        lcols = cols / m->tp;
        start = lcols * m->tp_rank;
        valid = lcols;
    }
    size_t at = *offset, numel = (size_t)lrows * (size_t)lcols;
    if (m->params) {
        ParamInfo *p = &m->params[*count];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = cols > 0 ? 2 : 1;
        p->shape[0] = rows;
        p->shape[1] = cols > 0 ? cols : 1;
        p->local_shape[0] = lrows;
        p->local_shape[1] = lcols;
        p->split = split;
        p->start = start;
        p->valid = valid;
        p->replica_writer = split != SPLIT_NONE || m->tp_rank == 0;
        p->offset = at;
        p->numel = numel;
        p->weight_decay = p->ndim >= 2;
    }
    (*count)++;
    *offset += numel;
    return at;
}

int64_t param_global_index(const ParamInfo *p, size_t e) {
    if (p->split == SPLIT_NONE) return (int64_t)e;
    int64_t i = (int64_t)e / p->local_shape[1], j = (int64_t)e % p->local_shape[1];
    if (p->split == SPLIT_ROWS) return i < p->valid ? (p->start + i) * p->shape[1] + j : -1;
    return i * p->shape[1] + p->start + j;
}

// Walk the tensors in buffer order; a first pass counts, a second fills the table.
static void layout_params(LlamaModel *m) {
    int count = 0;
    size_t off = 0;
    char name[PARAM_NAME_MAX];
    const int D = m->D, F = m->F, q_rows = m->H * m->hd, kv_rows = m->KV * m->hd;
    m->embed = add_param(m, &count, &off, "model.embed_tokens.weight", m->V, D, SPLIT_ROWS);
    for (int l = 0; l < m->L; l++) {
        LayerOffsets lo;
#define LAYER_PARAM(suffix, rows, cols, split) \
    (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), \
     add_param(m, &count, &off, name, rows, cols, split))
        lo.ln1 = LAYER_PARAM("input_layernorm.weight", D, 0, SPLIT_NONE);
        lo.qkv = LAYER_PARAM("self_attn.q_proj.weight", q_rows, D, SPLIT_ROWS);  // q, k, v adjacent:
        LAYER_PARAM("self_attn.k_proj.weight", kv_rows, D, SPLIT_ROWS);          // one fused GEMM
        LAYER_PARAM("self_attn.v_proj.weight", kv_rows, D, SPLIT_ROWS);
        lo.o = LAYER_PARAM("self_attn.o_proj.weight", D, q_rows, SPLIT_COLS);
        lo.ln2 = LAYER_PARAM("post_attention_layernorm.weight", D, 0, SPLIT_NONE);
        lo.gate_up = LAYER_PARAM("mlp.gate_proj.weight", F, D, SPLIT_ROWS);  // gate, up adjacent:
        LAYER_PARAM("mlp.up_proj.weight", F, D, SPLIT_ROWS);                 // one fused GEMM
        lo.down = LAYER_PARAM("mlp.down_proj.weight", D, F, SPLIT_COLS);
#undef LAYER_PARAM
        if (m->layer) m->layer[l] = lo;
    }
    m->final_norm = add_param(m, &count, &off, "model.norm.weight", D, 0, SPLIT_NONE);
    m->head = m->cfg.tie_word_embeddings
                  ? m->embed
                  : add_param(m, &count, &off, "lm_head.weight", m->V, D, SPLIT_ROWS);
    m->n_params = count;
    m->num_elements = off;
    if (m->unit_lo) {  // units: embedding | layer 0 | ... | layer L-1 | final norm (+ head)
        m->unit_lo[0] = 0;
        for (int l = 0; l < m->L; l++) m->unit_lo[1 + l] = m->layer[l].ln1;
        m->unit_lo[m->L + 1] = m->final_norm;
        m->unit_lo[m->L + 2] = off;
    }
}

void llama_build_tp(LlamaModel *m, const ModelConfig *cfg, int tp, int tp_rank, int sp) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->D = cfg->hidden_size;
    m->F = cfg->intermediate_size;
    m->L = cfg->num_hidden_layers;
    m->H = cfg->num_attention_heads;
    m->KV = cfg->num_key_value_heads;
    m->hd = cfg->hidden_size / cfg->num_attention_heads;
    m->V = cfg->vocab_size;
    m->tp = tp;
    m->tp_rank = tp_rank;
    m->sp = sp && tp > 1;
    m->Hl = m->H / tp;
    m->KVl = m->KV / tp;
    m->Fl = m->F / tp;
    m->Vl = (m->V + tp - 1) / tp;
    m->v0 = m->Vl * tp_rank;
    m->v_valid = m->V - m->v0 < 0 ? 0 : (m->V - m->v0 < m->Vl ? m->V - m->v0 : m->Vl);
    m->cp = 1;  // set by the trainer under context parallelism
    m->cp_rank = 0;
    layout_params(m);  // count
    m->params = xcalloc(sizeof(ParamInfo) * (size_t)m->n_params, "parameter table");
    m->layer = xcalloc(sizeof(LayerOffsets) * (size_t)m->L, "layer offsets");
    m->n_units = m->L + 2;
    m->unit_lo = xcalloc(sizeof(size_t) * (size_t)(m->n_units + 1), "unit offsets");
    layout_params(m);  // fill
}

void llama_build(LlamaModel *m, const ModelConfig *cfg) { llama_build_tp(m, cfg, 1, 0, 0); }

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

size_t llama_global_params(const LlamaModel *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += (size_t)m->params[i].shape[0] * (size_t)m->params[i].shape[1];
    return n;
}

size_t llama_matmul_params(const LlamaModel *m) {
    size_t qkv = (size_t)(m->H + 2 * m->KV) * m->hd;
    size_t per_layer = (size_t)m->D * qkv + (size_t)m->H * m->hd * m->D + 3 * (size_t)m->D * m->F;
    return (size_t)m->L * per_layer + (size_t)m->V * m->D;  // + output head
}

double llama_flops_per_token(const LlamaModel *m, int seq_length) {
    return 6.0 * (double)llama_matmul_params(m) + 6.0 * m->L * (double)seq_length * m->D;
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
    return a->resid + (size_t)a->nl * tp_rows(m, a->B * a->S) * m->D;
}

// RMSNorm backward of a replicated weight: with sequence parallel each rank sees
// only its token shard, so the weight's gradient contribution is summed over the
// group before it joins the accumulated gradient.
static void norm_backward(const LlamaModel *m, Activations *a, float *din, float *dweight,
                          const float *dout, const float *in, const float *weight, const float *rstd,
                          int Nr) {
    if (!m->sp) {
        rmsnorm_backward(din, dweight, dout, in, weight, rstd, Nr, m->D);
        return;
    }
    memset(a->tp_dw, 0, sizeof(float) * (size_t)m->D);
    rmsnorm_backward(din, a->tp_dw, dout, in, weight, rstd, Nr, m->D);
    tp_sum_replicated(m, a->tp_dw, (size_t)m->D);
    residual_forward(dweight, dweight, a->tp_dw, (size_t)m->D);
}

// Row-parallel output: computed into `out` directly (all-reduced in place) without
// sequence parallel, or into the partial scratch then reduce-scattered into out.
static float *row_parallel_dst(const LlamaModel *m, Activations *a, float *out) {
    return m->sp ? a->tp_partial : out;
}

// One decoder layer forward with its weights w (unit u = 1 + l); i is the local
// slot, l the global layer index. `recompute` (full recomputation, from the
// backward) stops once every buffer the backward reads is rebuilt: the down
// projection only makes the layer output, which is kept — and for the last layer
// of a stage may still be on its way to the next stage, so it must not be written.
static void layer_forward_with(const LlamaModel *m, Activations *a, const float *w, int i,
                               int recompute) {
    const int B = a->B, S = a->S, N = B * S, Nr = tp_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    const LayerSaved s = layer_saved(m, a, i);

    rmsnorm_forward(s.ln1, s.ln1_rstd, s.x, AT(w, u, lo->ln1), Nr, D, eps);
    const float *ln1_full = tp_gather(m, s.ln1, a->tp_full, N, D);           // (N, D)
    matmul_forward(s.qkv, ln1_full, AT(w, u, lo->qkv), N, D, QKV);            // q|k|v, column-parallel
    rope_forward(s.qkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    cp_attention_forward(m, a, s.qkv, s.attn, s.lse);
    float *o = row_parallel_dst(m, a, s.mid);
    matmul_forward(o, s.attn, AT(w, u, lo->o), N, A, D);                      // row-parallel
    tp_reduce(m, o, s.mid, N, D);
    residual_forward(s.mid, s.mid, s.x, (size_t)Nr * D);
    rmsnorm_forward(s.ln2, s.ln2_rstd, s.mid, AT(w, u, lo->ln2), Nr, D, eps);
    const float *ln2_full = tp_gather(m, s.ln2, a->tp_full, N, D);
    matmul_forward(s.gu, ln2_full, AT(w, u, lo->gate_up), N, D, 2 * Fl);      // gate|up, column-parallel
    swiglu_forward(s.h, s.gu, N, Fl);
    if (recompute) return;
    float *down = row_parallel_dst(m, a, s.out);
    matmul_forward(down, s.h, AT(w, u, lo->down), N, Fl, D);                  // row-parallel
    tp_reduce(m, down, s.out, N, D);
    residual_forward(s.out, s.out, s.mid, (size_t)Nr * D);
}

static void layer_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int u = 1 + a->l0 + i;
    layer_forward_with(m, a, pa->acquire_params(pa->ctx, u), i, 0);
    pa->release_params(pa->ctx, u);
}

double llama_stage_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                           const int32_t *tokens, const float *x_in, const int32_t *targets,
                           float grad_scale, int want_grads) {
    const int N = a->B * a->S, Nr = tp_rows(m, N), D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    const float *w0 = NULL;
    if (a->has_embed) {
        w0 = pa->acquire_params(pa->ctx, 0);
        tp_embedding_forward(m, a->resid, tokens, AT(w0, 0, m->embed), a->tp_full, N);
        if (!(tied && a->has_head)) pa->release_params(pa->ctx, 0);  // a tied head needs it again
    } else if (x_in != a->resid) {
        memcpy(a->resid, x_in, sizeof(float) * (size_t)Nr * D);  // kept for this stage's backward
    }
    for (int i = 0; i < a->nl; i++) layer_forward(m, pa, a, i);
    if (!a->has_head) return 0.0;
    const float *wf = pa->acquire_params(pa->ctx, u_final);
    if (tied && !w0) die("tie_word_embeddings: the last stage must hold the embedding");
    const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
    rmsnorm_forward(a->lnf, a->lnf_rstd, llama_stage_output(m, a), AT(wf, u_final, m->final_norm),
                    Nr, D, (float)m->cfg.rms_norm_eps);
    const float *lnf_full = tp_gather(m, a->lnf, a->tp_full, N, D);
    matmul_forward(a->logits, lnf_full, head, N, D, m->Vl);  // vocab-parallel head
    pa->release_params(pa->ctx, u_final);
    if (tied) pa->release_params(pa->ctx, 0);
    return tp_cross_entropy(m, a->logits, targets, N, grad_scale, want_grads, a->tp_stats);
}

// -------------------------------------------------------------------- backward

// Backward of a column-parallel block's input: din_partial = dout @ W (N, D) is
// reduced over the group while the weight gradient is computed (overlap), then
// lands in din (Nr, D).
static void column_backward(const LlamaModel *m, Activations *a, float *din, float *dweight,
                            const float *dout, const float *in_full, const float *weight, int N,
                            int out_dim) {
    const int D = m->D;
    float *partial = m->sp ? a->tp_partial : din;
    matmul_backward(partial, NULL, dout, in_full, weight, N, D, out_dim, 0);  // input gradient only
    CommRequest r = tp_reduce_start(m, partial, din, N, D);
    matmul_backward(NULL, dweight, dout, in_full, weight, N, D, out_dim, 0);  // weight gradient
    tp_reduce_finish(&r);
}

// One decoder layer backward: dres (Nr, D) holds the gradient of the layer output on
// entry and of the layer input on exit. What recomputation dropped is rebuilt first
// from the kept buffers with the forward's own kernels and inputs, so it is
// bit-identical: under full the layer forward from the kept input (the weights are
// acquired once for both: under ZeRO-3 the gather the backward makes anyway), under
// selective the attention core (its lse; the output it rewrites is identical).
static void layer_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int B = a->B, S = a->S, N = B * S, Nr = tp_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid, *dd = a->dbuf_d;
    const float *w = pa->acquire_params(pa->ctx, u);
    if (m->recompute == RECOMPUTE_FULL) layer_forward_with(m, a, w, i, 1);
    float *g = pa->grads(pa->ctx, u);
    const LayerSaved s = layer_saved(m, a, i);

    // MLP: out = mid + down(swiglu(gate_up(rmsnorm2(mid)))); dres flows to mid as is.
    const float *dout_full = tp_gather(m, dres, a->tp_full, N, D);  // row-parallel needs all tokens
    matmul_backward(a->dbuf_i, AT(g, u, lo->down), dout_full, s.h, AT(w, u, lo->down), N, Fl, D, 0);
    swiglu_backward(a->dgu, a->dbuf_i, s.gu, N, Fl);
    const float *ln2_full = tp_gather(m, s.ln2, a->tp_full, N, D);  // re-gathered, not stored
    column_backward(m, a, dd, AT(g, u, lo->gate_up), a->dgu, ln2_full, AT(w, u, lo->gate_up), N, 2 * Fl);
    norm_backward(m, a, dres, AT(g, u, lo->ln2), dd, s.mid, AT(w, u, lo->ln2), s.ln2_rstd, Nr);
    // Attention: mid = x + o(attention(rope(qkv(rmsnorm1(x)))))
    dout_full = tp_gather(m, dres, a->tp_full, N, D);
    matmul_backward(a->dbuf_i, AT(g, u, lo->o), dout_full, s.attn, AT(w, u, lo->o), N, A, D, 0);
    if (m->recompute == RECOMPUTE_SELECTIVE) cp_attention_forward(m, a, s.qkv, s.attn, s.lse);
    cp_attention_backward(m, a, a->dqkv, a->dbuf_i, s.qkv, s.attn, s.lse);
    rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    const float *ln1_full = tp_gather(m, s.ln1, a->tp_full, N, D);
    column_backward(m, a, dd, AT(g, u, lo->qkv), a->dqkv, ln1_full, AT(w, u, lo->qkv), N, QKV);
    norm_backward(m, a, dres, AT(g, u, lo->ln1), dd, s.x, AT(w, u, lo->ln1), s.ln1_rstd, Nr);
    pa->release_params(pa->ctx, u);
    pa->grads_done(pa->ctx, u);
}

const float *llama_stage_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                  const int32_t *tokens, const float *dx_out) {
    const int N = a->B * a->S, Nr = tp_rows(m, N), D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    float *dres = a->dresid;  // (Nr, D) gradient of the residual stream
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
        const float *lnf_full = tp_gather(m, a->lnf, a->tp_full, N, D);
        column_backward(m, a, a->dbuf_d, dhead, a->logits, lnf_full, head, N, m->Vl);
        memset(dres, 0, sizeof(float) * (size_t)Nr * D);
        norm_backward(m, a, dres, AT(gf, u_final, m->final_norm), a->dbuf_d, llama_stage_output(m, a),
                      AT(wf, u_final, m->final_norm), a->lnf_rstd, Nr);
        pa->release_params(pa->ctx, u_final);
        pa->grads_done(pa->ctx, u_final);
    } else {
        memcpy(dres, dx_out, sizeof(float) * (size_t)Nr * D);
    }
    for (int i = a->nl - 1; i >= 0; i--) layer_backward(m, pa, a, i);
    if (!a->has_embed) return dres;
    if (!g0) g0 = pa->grads(pa->ctx, 0);
    tp_embedding_backward(m, AT(g0, 0, m->embed), dres, tokens, a->tp_full, N);
    if (w0) pa->release_params(pa->ctx, 0);
    pa->grads_done(pa->ctx, 0);
    return NULL;
}
