// model/llama_split.c — a stage's backward split in two for the zero-bubble pipeline
// schedules: B (input gradients, what the previous stage waits for) and W (weight
// gradients, what nobody waits for, run later in a pipeline bubble). It is the fused
// backward of model/llama.c cut along one line: every linear layer y = x W^T has
// dx = dy W (B) and dW += dy^T x (W); every norm has its input gradient (B) and its
// weight gradient sum(dy * xhat) (W). B keeps each dy in the stash
// (model/activations.h: WeightGradStash), and the layer's norm weights, from which W
// rebuilds the products' inputs w * xhat; xhat and the rest are the forward's
// activations, still held. The kernels and their arguments are those of the fused backward, so
// B then W gives its gradients bit for bit (tests/unit/test_split_backward.c).
#include "model/activation_plan.h"
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
// Under bf16 activations (m->mlp_bf16) gu is bf16 and still needed by W, which
// rebuilds down's input from it: the stash holds dgu as well, as bf16 (dgu16), the
// form SwiGLU's backward writes and both gate|up products read. Where the down
// and o products read the residual stream's gradient as bf16 (LlamaModel.dres16_mlp,
// _for_o) the stash keeps it so, in the first halves of d_down and d_o, written by
// the norm's backward before each product (for d_down, the layer above's first norm
// or the final norm) as in the fused backward, and read as it is by both products,
// B's and W's: no copy of the fp32 gradient, no rounding pass, and half the room.
typedef struct {
    float *d_down, *dgu, *d_ln2, *d_o, *dqkv, *d_ln1, *norm_w;  // shapes: WeightGradStash, one layer
    uint16_t *dgu16, *dqkv16;  // (N, 2Fl), (N, QKV) bf16: dgu's and dqkv's room under mlp_bf16, qkv_bf16
    uint16_t *d_down16, *d_o16;  // (Nr, D) bf16 each, in d_down's and d_o's room, under dres16 (else NULL)
} LayerStash;

// Layer slot i's d_down: (Nr, D) fp32, or its first half (Nr, D) bf16 under dres16_mlp.
static float *stash_down(const LlamaModel *m, const Activations *a, const WeightGradStash *st, int i) {
    return st->d_down + (size_t)i * wstash_down_slot(m, (size_t)llama_rows(m, a->B * a->S));
}

// Layer slot i's d_down as bf16 (LlamaModel.dres16_mlp), NULL otherwise or for i < 0.
static uint16_t *stash_down16(const LlamaModel *m, const Activations *a, const WeightGradStash *st, int i) {
    return i < 0 || !m->dres16_mlp ? NULL : (uint16_t *)stash_down(m, a, st, i);
}

static LayerStash layer_stash(const LlamaModel *m, const Activations *a, const WeightGradStash *st,
                              const LayerSaved *s, int i) {
    const size_t N = (size_t)a->B * a->S, Nr = (size_t)llama_rows(m, a->B * a->S), D = m->D;
    const size_t k = (size_t)i;
    const int own = m->recompute == RECOMPUTE_FULL, own_dgu = own || m->mlp_bf16;
    LayerStash ls = {stash_down(m, a, st, i),
                     own_dgu ? st->dgu + k * wstash_dgu_slot(m, N) : s->gu,
                     st->d_ln2 + k * Nr * D,
                     st->d_o + k * wstash_o_slot(m, Nr),
                     own ? st->dqkv + k * wstash_dqkv_slot(m, N) : s->qkv,
                     st->d_ln1 + k * Nr * D,
                     st->norm_w + k * 2 * D,
                     NULL,
                     NULL,
                     stash_down16(m, a, st, i),
                     NULL};
    if (m->dres16_o) ls.d_o16 = (uint16_t *)ls.d_o;  // in d_o's room
    if (m->mlp_bf16) ls.dgu16 = (uint16_t *)ls.dgu, ls.dgu = NULL;
    if (m->qkv_bf16) ls.dqkv16 = (uint16_t *)ls.dqkv, ls.dqkv = NULL;  // in qkv's own slot: N x QKV halves fit
    return ls;
}

// ------------------------------------------------------------------------- B

// One layer's input-gradient half: dres (Nr, D) holds the gradient of the layer
// output on entry and of its input on exit, as in the fused layer_backward; the
// norms' output gradients are written straight into the stash where the fused
// backward uses scratch (dbuf_d), the two residual-stream gradients that later
// kernels overwrite (d_down, d_o) are copied there (or kept there as bf16, written
// by the norms' backwards: LayerStash), and dgu and dqkv are computed in the
// scratch as in the fused backward, then copied where W reads them (a bf16 dgu is
// written there directly). carried: d_down16 holds dres already (the norm above
// wrote it); else it is rounded here.
static void layer_backward_input(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 const WeightGradStash *st, int i, int carried) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid;
    const LayerWeights lw = llama_layer_acquire(m, pa, u);
    const float *w = lw.w;
    if (m->recompute == RECOMPUTE_FULL) llama_layer_forward_with(m, a, lw, i, 1);
    const LayerSaved s = layer_saved(m, a, i);
    const LayerStash k = layer_stash(m, a, st, &s, i);

    // MLP
    if (!k.d_down16) copy_f32(k.d_down, dres, (size_t)Nr * D);
    else if (!carried) round_to_bf16(k.d_down16, dres, (size_t)Nr * D);
    if (m->mlp_bf16) {  // down's input gradient as bf16 (dgu's second half), then dgu as bf16 into the stash,
                        // read from there (dgu: room to widen it); W rebuilds down's input itself
        uint16_t *dh16 = (uint16_t *)(a->dgu + (size_t)N * Fl);  // (N, Fl) bf16
        if (k.d_down16)
            matmul_backward_bf16_to_bf16(dh16, a->dbuf_i, NULL, tp_gather_bf16(tp, k.d_down16, a->tp_full, N, D), NULL,
                                         AT(w, u, lo->down), N, Fl, D);
        else tp_row_backward_input_to_bf16(tp, dh16, a->dbuf_i, dres, AT(w, u, lo->down), a->tp_full, N, Fl, D);
        swiglu_backward_bf16(k.dgu16, NULL, dh16, s.gu16, N, Fl);
        tp_column_backward_bf16(tp, k.d_ln2, NULL, k.dgu16, a->dgu, NULL, AT(w, u, lo->gate_up), NULL,
                                a->tp_partial, N, D, 2 * Fl);
    } else {
        tp_row_backward_input(tp, a->dbuf_i, dres, AT(w, u, lo->down), a->tp_full, N, Fl, D);
        swiglu_backward(a->dgu, a->dbuf_i, s.gu, N, Fl);
        copy_f32(k.dgu, a->dgu, (size_t)N * 2 * Fl);  // gu is read for the last time just above
        tp_column_backward_input(tp, k.d_ln2, a->dgu, AT(w, u, lo->gate_up), a->tp_partial, N, D, 2 * Fl);
    }
    tp_norm_backward_input(dres, k.d_o16, k.d_ln2, s.ln2, AT(w, u, lo->ln2), s.ln2_rstd, Nr, D);
    // Attention
    // cuDNN reads the attention output's gradient as bf16, as the product writes it
    if (k.d_o16) {
        matmul_backward_bf16_to_bf16((uint16_t *)a->dbuf_i, a->dbuf_i, NULL,
                                     tp_gather_bf16(tp, k.d_o16, a->tp_full, N, D), NULL, AT(w, u, lo->o), N, A, D);
    } else {
        copy_f32(k.d_o, dres, (size_t)Nr * D);
        if (m->att_bf16)
            tp_row_backward_input_to_bf16(tp, (uint16_t *)a->dbuf_i, a->dbuf_i, dres, AT(w, u, lo->o), a->tp_full, N,
                                          A, D);
        else tp_row_backward_input(tp, a->dbuf_i, dres, AT(w, u, lo->o), a->tp_full, N, A, D);
    }
    // the q|k|v gradient as bf16 into the stash under bf16 activations (qkv is read for
    // the last time there), read from there
    llama_attention_core_backward(m, a, &s, k.dqkv16);
    if (m->qkv_bf16) {
        tp_column_backward_bf16(tp, k.d_ln1, NULL, k.dqkv16, a->dqkv, NULL, AT(w, u, lo->qkv), NULL,
                                a->tp_partial, N, D, QKV);
    } else {
        copy_f32(k.dqkv, a->dqkv, (size_t)N * QKV);  // qkv is read for the last time just above
        tp_column_backward_input(tp, k.d_ln1, a->dqkv, AT(w, u, lo->qkv), a->tp_partial, N, D, QKV);
    }
    tp_norm_backward_input(dres, stash_down16(m, a, st, i - 1), k.d_ln1, s.ln1, AT(w, u, lo->ln1), s.ln1_rstd, Nr, D);
    copy_f32(k.norm_w, AT(w, u, lo->ln1), (size_t)D);  // for W's rebuilt product inputs
    copy_f32(k.norm_w + D, AT(w, u, lo->ln2), (size_t)D);
    llama_layer_release(m, pa, u);
}

// The head's input half, piece by piece in the fused backward's order (the same
// accumulation of din): din(N, D) (+)= dlogits[:, r0:r1] @ head[r0:r1], reduced over
// the tensor group into the final norm's output gradient (kept for W), then the
// norm's input gradient into a->dresid. a->logits holds dlogits (kept for W too).
static void head_piece_input(const LlamaModel *m, Activations *a, const float *w, size_t hoff, size_t lo,
                             size_t hi, int N, float *din, int *first) {
    int r0, r1;
    llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
    if (r1 <= r0) return;
    llama_head_products(m, a, din, NULL, NULL, w + (hoff + (size_t)r0 * m->D - lo), r0, r1, N, !*first);
    *first = 0;
}

static void head_backward_input(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 WeightGradStash *st, int N) {
    const TensorParallel *tp = &m->tp;
    const int Nr = llama_rows(m, N), D = m->D, uf = m->L + 1, tied = m->cfg.tie_word_embeddings;
    const int uh = tied ? 0 : uf;  // the unit holding the head's weight
    const size_t hoff = tied ? m->embed : m->head;
    float *din = tp->sp ? a->tp_partial : st->d_lnf;  // (N, D) before the tp reduction
    int first = 1;
    size_t lo, hi;
    const int np = llama_unit_n_pieces(m, uh, pa->piece_max), k_end = uh == uf ? 1 : 0;
    for (int k = np - 1; k >= k_end; k--) {
        llama_unit_piece(m, uh, pa->piece_max, k, &lo, &hi);
        head_piece_input(m, a, pa->acquire_piece(pa->ctx, uh, k), hoff, lo, hi, N, din, &first);
        pa->release_piece(pa->ctx, uh, k);
    }
    llama_unit_piece(m, uf, pa->piece_max, 0, &lo, &hi);
    const float *wf = pa->acquire_piece(pa->ctx, uf, 0);
    if (uh == uf) head_piece_input(m, a, wf, hoff, lo, hi, N, din, &first);
    tp_reduce(tp, din, st->d_lnf, N, D);
    zero_f32(a->dresid, (size_t)Nr * D);
    tp_norm_backward_input(a->dresid, stash_down16(m, a, st, a->nl - 1), st->d_lnf, a->lnf_xhat,
                           wf + (m->final_norm - lo), a->lnf_rstd, Nr, D);
    pa->release_piece(pa->ctx, uf, 0);
}

const float *llama_stage_backward_input(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                        const float *dx_out, WeightGradStash *st) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D;
    float *dres = a->dresid;  // (Nr, D) gradient of the residual stream
    if (a->has_head)
        head_backward_input(m, pa, a, st, N);
    else
        copy_f32(dres, dx_out, (size_t)Nr * D);
    for (int i = a->nl - 1; i >= 0; i--)  // d_down16 carried from the norm above, except into the stage's top
        layer_backward_input(m, pa, a, st, i, i < a->nl - 1 || a->has_head);
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
    const int QKV = (m->Hl + 2 * m->KVl) * m->hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    if (m->recompute == RECOMPUTE_FULL) {  // the working set again, from the kept input
        llama_layer_forward_with(m, a, llama_layer_acquire(m, pa, u), i, 1);
        llama_layer_release(m, pa, u);
    }
    float *g = llama_layer_grads(m, pa, u).g;
    const LayerSaved s = layer_saved(m, a, i);
    const LayerStash k = layer_stash(m, a, st, &s, i);
    llama_down_backward(m, a, &s, NULL, AT(g, u, lo->down), k.d_down, k.d_down16, NULL);
    // The products' inputs rebuilt as the forward wrote them (bf16: llama_norm16, or
    // kept by the forward under m->inputs16_kept), then their weight gradients.
    if (m->mlp_bf16) {  // h16, down's rebuilt input, read above: dgu is free room again
        uint16_t *normed16 = llama_norm16(a, s.ln2_16, s.ln2, k.norm_w + D, Nr, D);  // (Nr, D)
        tp_column_backward_bf16(tp, NULL, AT(g, u, lo->gate_up), k.dgu16, a->dgu, normed16, NULL, a->tp_full, NULL, N,
                                D, 2 * Fl);
    } else {
        rmsnorm_rebuild(a->normed, s.ln2, k.norm_w + D, Nr, D);
        tp_column_backward_weight(tp, AT(g, u, lo->gate_up), k.dgu, a->normed, a->tp_full, N, D, 2 * Fl);
    }
    tp_norm_backward_weight(tp, AT(g, u, lo->ln2), k.d_ln2, s.ln2, a->tp_dw, Nr, D);
    llama_o_backward(m, a, &s, NULL, AT(g, u, lo->o), k.d_o, k.d_o16, NULL);
    if (m->qkv_bf16) {
        uint16_t *normed16 = llama_norm16(a, s.ln1_16, s.ln1, k.norm_w, Nr, D);  // (Nr, D)
        tp_column_backward_bf16(tp, NULL, AT(g, u, lo->qkv), k.dqkv16, a->dqkv, normed16, NULL, a->tp_full, NULL, N, D,
                                QKV);
    } else {
        rmsnorm_rebuild(a->normed, s.ln1, k.norm_w, Nr, D);
        tp_column_backward_weight(tp, AT(g, u, lo->qkv), k.dqkv, a->normed, a->tp_full, N, D, QKV);
    }
    tp_norm_backward_weight(tp, AT(g, u, lo->ln1), k.d_ln1, s.ln1, a->tp_dw, Nr, D);
    llama_layer_grads_done(m, pa, u);
}

// The head's weight half, in the fused backward's order of pieces and hand-overs:
// dhead[r0:r1] += dlogits[:, r0:r1]^T @ gather(lnf), piece by piece (each handed
// over when done), then the final norm's weight from its stashed output gradient.
static void head_piece_weight(const LlamaModel *m, Activations *a, const float *x_full, float *g, size_t hoff,
                              size_t lo, size_t hi, int N) {
    int r0, r1;
    llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
    if (r1 > r0)
        llama_head_products(m, a, NULL, g + (hoff + (size_t)r0 * m->D - lo), x_full, NULL, r0, r1, N, 0);
}

static void head_backward_weight(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 const WeightGradStash *st, int N) {
    const TensorParallel *tp = &m->tp;
    const int Nr = llama_rows(m, N), D = m->D, uf = m->L + 1, tied = m->cfg.tie_word_embeddings;
    const int uh = tied ? 0 : uf;
    const size_t hoff = tied ? m->embed : m->head;
    const float *x_full = tp_gather(tp, a->lnf, a->tp_full, N, D);  // (N, D) re-gathered
    size_t lo, hi;
    const int np = llama_unit_n_pieces(m, uh, pa->piece_max), k_end = uh == uf ? 1 : 0;
    for (int k = np - 1; k >= k_end; k--) {
        llama_unit_piece(m, uh, pa->piece_max, k, &lo, &hi);
        head_piece_weight(m, a, x_full, pa->piece_grads(pa->ctx, uh, k), hoff, lo, hi, N);
        pa->piece_grads_done(pa->ctx, uh, k);
    }
    llama_unit_piece(m, uf, pa->piece_max, 0, &lo, &hi);
    float *gf = pa->piece_grads(pa->ctx, uf, 0);
    if (uh == uf) head_piece_weight(m, a, x_full, gf, hoff, lo, hi, N);
    tp_norm_backward_weight(tp, gf + (m->final_norm - lo), st->d_lnf, a->lnf_xhat, a->tp_dw, Nr, D);
    pa->piece_grads_done(pa->ctx, uf, 0);
}

void llama_stage_backward_weight(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                 const int32_t *tokens, const WeightGradStash *st) {
    const int N = a->B * a->S;
    if (a->has_head) head_backward_weight(m, pa, a, st, N);
    for (int i = a->nl - 1; i >= 0; i--) layer_backward_weight(m, pa, a, st, i);
    if (a->has_embed) llama_embed_backward(m, pa, a, tokens, st->d_embed, N);  // the fused backward's, from the stash
}
