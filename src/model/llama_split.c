// model/llama_split.c — a stage's backward split in two for the zero-bubble pipeline
// schedules: B (input gradients, what the previous stage waits for) and W (weight
// gradients, what nobody waits for, run later in a pipeline bubble). It is the fused
// backward of model/llama.c cut along one line: every linear layer y = x W^T has
// dx = dy W (B) and dW += dy^T x (W); every norm has its input gradient (B) and its
// weight gradient sum(dy * x * rstd) (W). B keeps each dy in the stash
// (model/activations.h: WeightGradStash); x and rstd are the forward's activations,
// still held. The kernels and their arguments are those of the fused backward, so
// B then W gives its gradients bit for bit (tests/unit/test_split_backward.c).
#include "model/activations.h"
#include "model/llama.h"
#include "model/llama_layer.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "util.h"

// Layer slot i's part of the stash. The gradients of gate|up's and q|k|v's outputs
// have exactly the shapes of gate|up's and q|k|v's outputs, which only I reads
// (SwiGLU's and the attention's backward): once I has used them, the layer's own
// slots of gu and qkv hold the gradients for W, and the stash keeps only the four
// (Nr, D) gradients. Under full recomputation gu and qkv are the shared working
// layer, rebuilt by every layer's recomputation: there the stash holds them too.
typedef struct {
    float *d_down, *dgu, *d_ln2, *d_o, *dqkv, *d_ln1;  // shapes: WeightGradStash, one layer
} LayerStash;

static LayerStash layer_stash(const LlamaModel *m, const Activations *a, const WeightGradStash *st,
                              const LayerSaved *s, int i) {
    const size_t N = (size_t)a->B * a->S, Nr = (size_t)llama_rows(m, a->B * a->S), D = m->D;
    const size_t QKV = (size_t)(m->Hl + 2 * m->KVl) * m->hd, k = (size_t)i;
    const int own = m->recompute == RECOMPUTE_FULL;
    LayerStash ls = {st->d_down + k * Nr * D, own ? st->dgu + k * N * 2 * m->Fl : s->gu, st->d_ln2 + k * Nr * D,
                     st->d_o + k * Nr * D,    own ? st->dqkv + k * N * QKV : s->qkv, st->d_ln1 + k * Nr * D};
    return ls;
}

// ------------------------------------------------------------------------- B

// One layer's input-gradient half: dres (Nr, D) holds the gradient of the layer
// output on entry and of its input on exit, as in the fused layer_backward; the
// norms' output gradients are written straight into the stash where the fused
// backward uses scratch (dbuf_d), the two residual-stream gradients that later
// kernels overwrite (d_down, d_o) are copied there, and dgu and dqkv are computed
// in the scratch as in the fused backward, then copied where W reads them.
static void layer_backward_input(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 const WeightGradStash *st, int i) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid;
    const float *w = pa->acquire_params(pa->ctx, u);
    if (m->recompute == RECOMPUTE_FULL) llama_layer_forward_with(m, a, w, i, 1);
    const LayerSaved s = layer_saved(m, a, i);
    const RingAttention ra = activations_ring(m, a);
    const LayerStash k = layer_stash(m, a, st, &s, i);

    // MLP
    copy_f32(k.d_down, dres, (size_t)Nr * D);
    tp_row_backward_input(tp, a->dbuf_i, dres, AT(w, u, lo->down), a->tp_full, N, Fl, D);
    swiglu_backward(a->dgu, a->dbuf_i, s.gu, N, Fl);
    copy_f32(k.dgu, a->dgu, (size_t)N * 2 * Fl);  // gu is read for the last time just above
    tp_column_backward_input(tp, k.d_ln2, a->dgu, AT(w, u, lo->gate_up), a->tp_partial, N, D, 2 * Fl);
    tp_norm_backward_input(dres, k.d_ln2, s.mid, AT(w, u, lo->ln2), s.ln2_rstd, Nr, D);
    // Attention
    copy_f32(k.d_o, dres, (size_t)Nr * D);
    tp_row_backward_input(tp, a->dbuf_i, dres, AT(w, u, lo->o), a->tp_full, N, A, D);
    if (m->recompute == RECOMPUTE_SELECTIVE) ring_attention_forward(&m->cp, &ra, s.qkv, s.attn, s.lse);
    ring_attention_backward(&m->cp, &ra, a->dqkv, a->dbuf_i, s.qkv, s.attn, s.lse);
    rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    copy_f32(k.dqkv, a->dqkv, (size_t)N * QKV);  // qkv is read for the last time just above
    tp_column_backward_input(tp, k.d_ln1, a->dqkv, AT(w, u, lo->qkv), a->tp_partial, N, D, QKV);
    tp_norm_backward_input(dres, k.d_ln1, s.x, AT(w, u, lo->ln1), s.ln1_rstd, Nr, D);
    pa->release_params(pa->ctx, u);
}

const float *llama_stage_backward_input(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                        const float *dx_out, WeightGradStash *st) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    float *dres = a->dresid;  // (Nr, D) gradient of the residual stream
    if (a->has_head) {
        // Head and final norm; a->logits holds dlogits (kept for W's head gradient).
        const float *wf = pa->acquire_params(pa->ctx, u_final);
        const float *w0 = tied ? pa->acquire_params(pa->ctx, 0) : NULL;
        const float *head = tied ? AT(w0, 0, m->embed) : AT(wf, u_final, m->head);
        tp_column_backward_input(&m->tp, st->d_lnf, a->logits, head, a->tp_partial, N, D, m->Vl);
        zero_f32(dres, (size_t)Nr * D);
        tp_norm_backward_input(dres, st->d_lnf, llama_stage_output(m, a), AT(wf, u_final, m->final_norm),
                               a->lnf_rstd, Nr, D);
        pa->release_params(pa->ctx, u_final);
        if (tied) pa->release_params(pa->ctx, 0);
    } else {
        copy_f32(dres, dx_out, (size_t)Nr * D);
    }
    for (int i = a->nl - 1; i >= 0; i--) layer_backward_input(m, pa, a, st, i);
    if (!a->has_embed) return dres;
    copy_f32(st->d_embed, dres, (size_t)Nr * D);  // the embedding's gradient, for W
    return NULL;
}

// ------------------------------------------------------------------------- W

// One layer's weight-gradient half, in the fused backward's order of tensors.
static void layer_backward_weight(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                  const WeightGradStash *st, int i) {
    const TensorParallel *tp = &m->tp;
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const int QKV = (m->Hl + 2 * m->KVl) * m->hd, A = m->Hl * m->hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    if (m->recompute == RECOMPUTE_FULL) {  // the working set again, from the kept input
        llama_layer_forward_with(m, a, pa->acquire_params(pa->ctx, u), i, 1);
        pa->release_params(pa->ctx, u);
    }
    float *g = pa->grads(pa->ctx, u);
    const LayerSaved s = layer_saved(m, a, i);
    const LayerStash k = layer_stash(m, a, st, &s, i);
    tp_row_backward_weight(tp, AT(g, u, lo->down), k.d_down, s.h, a->tp_full, N, Fl, D);
    tp_column_backward_weight(tp, AT(g, u, lo->gate_up), k.dgu, s.ln2, a->tp_full, N, D, 2 * Fl);
    tp_norm_backward_weight(tp, AT(g, u, lo->ln2), k.d_ln2, s.mid, s.ln2_rstd, a->tp_dw, Nr, D);
    tp_row_backward_weight(tp, AT(g, u, lo->o), k.d_o, s.attn, a->tp_full, N, A, D);
    tp_column_backward_weight(tp, AT(g, u, lo->qkv), k.dqkv, s.ln1, a->tp_full, N, D, QKV);
    tp_norm_backward_weight(tp, AT(g, u, lo->ln1), k.d_ln1, s.x, s.ln1_rstd, a->tp_dw, Nr, D);
    pa->grads_done(pa->ctx, u);
}

void llama_stage_backward_weight(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 const int32_t *tokens, const WeightGradStash *st) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D, u_final = m->L + 1;
    const int tied = m->cfg.tie_word_embeddings;
    float *g0 = NULL;
    if (a->has_head) {
        // A tied head's gradient lives in unit 0, which stays open until the
        // embedding's gradient on a single stage (as in the fused backward).
        float *gf = pa->grads(pa->ctx, u_final);
        if (tied) g0 = pa->grads(pa->ctx, 0);
        float *dhead = tied ? AT(g0, 0, m->embed) : AT(gf, u_final, m->head);
        tp_column_backward_weight(&m->tp, dhead, a->logits, a->lnf, a->tp_full, N, D, m->Vl);
        tp_norm_backward_weight(&m->tp, AT(gf, u_final, m->final_norm), st->d_lnf, llama_stage_output(m, a),
                                a->lnf_rstd, a->tp_dw, Nr, D);
        pa->grads_done(pa->ctx, u_final);
        if (tied && !a->has_embed) pa->grads_done(pa->ctx, 0);  // the last stage's copy
    }
    for (int i = a->nl - 1; i >= 0; i--) layer_backward_weight(m, pa, a, st, i);
    if (!a->has_embed) return;
    if (!g0) g0 = pa->grads(pa->ctx, 0);
    tp_embedding_backward(&m->tp, &m->vocab, AT(g0, 0, m->embed), st->d_embed, tokens, a->tp_full, N, D);
    pa->grads_done(pa->ctx, 0);
}
