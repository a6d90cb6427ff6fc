// model/llama.c — the forward and backward of one pipeline stage of a Llama decoder
// stack, written as a sequence of kernel calls (ops/ops.h) and parallel pieces
// (parallel_layers/): what runs column- or row-parallel, and the ring attention,
// is named at the call. Buffers: model/activations.h; shape letters: model/llama.h.
//
// One layer (pre-norm):
//   h   = x + o_proj(attention(rope(qkv_proj(rmsnorm1(x)))))
//   out = h + down_proj(silu(gate_proj(rmsnorm2(h))) * up_proj(rmsnorm2(h)))
// then a final RMSNorm, the output head, and the cross-entropy.
#include "model/llama.h"

#include "model/activations.h"
#include "model/llama_layer.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "util.h"

// Address of the tensor at flat offset `off` inside unit u, whose data starts at `base`.
float *llama_stage_output(const LlamaModel *m, Activations *a) {
    return a->resid + (size_t)a->nl * llama_rows(m, a->B * a->S) * m->D;
}

// --------------------------------------------------------------------- forward

// One decoder layer forward with its weights w (unit u = 1 + l); i is the local
// slot, l the global layer index. `recompute` (full recomputation, from the
// backward) stops once every buffer the backward reads is rebuilt: the down
// projection only makes the layer output, which is kept — and for the last layer
// of a stage may still be on its way to the next stage, so it must not be written.
void llama_layer_forward_with(const LlamaModel *m, Activations *a, const float *w, int i, int recompute) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    const LayerSaved s = layer_saved(m, a, i);
    const RingAttention ra = activations_ring(m, a);

    rmsnorm_forward(s.ln1, s.ln1_rstd, s.x, AT(w, u, lo->ln1), Nr, D, eps);
    tp_column_forward(tp, s.qkv, s.ln1, a->tp_full, AT(w, u, lo->qkv), N, D, QKV);  // q|k|v
    rope_forward(s.qkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    ring_attention_forward(&m->cp, &ra, s.qkv, s.attn, s.lse);
    tp_row_forward(tp, s.mid, s.attn, AT(w, u, lo->o), a->tp_partial, N, A, D);      // o
    residual_forward(s.mid, s.mid, s.x, (size_t)Nr * D);
    rmsnorm_forward(s.ln2, s.ln2_rstd, s.mid, AT(w, u, lo->ln2), Nr, D, eps);
    tp_column_forward(tp, s.gu, s.ln2, a->tp_full, AT(w, u, lo->gate_up), N, D, 2 * Fl);  // gate|up
    swiglu_forward(s.h, s.gu, N, Fl);
    if (recompute) return;
    tp_row_forward(tp, s.out, s.h, AT(w, u, lo->down), a->tp_partial, N, Fl, D);     // down
    residual_forward(s.out, s.out, s.mid, (size_t)Nr * D);
}

static void layer_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int u = 1 + a->l0 + i;
    llama_layer_forward_with(m, a, pa->acquire_params(pa->ctx, u), i, 0);
    pa->release_params(pa->ctx, u);
}

// ------------------------------------------------- the row tables, in pieces

// Rows [*r0, *r1) of a (rows, D) table at flat offset `off` that lie in the flat
// range [lo, hi) of a piece (model/param_access.h: pieces are whole rows).
void llama_piece_rows(const LlamaModel *m, size_t off, int rows, size_t lo, size_t hi, int *r0, int *r1) {
    const size_t D = (size_t)m->D, end = off + (size_t)rows * D;
    const size_t a = lo > off ? lo : off, b = hi < end ? hi : end;
    *r0 = a < b ? (int)((a - off) / D) : 0;
    *r1 = a < b ? (int)((b - off) / D) : 0;
}

// Embedding forward: this rank's rows of the lookup, piece by piece, zeros for the
// ids of other tensor-parallel ranks; the sum over the group is the lookup.
static void embed_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, const int32_t *tokens,
                          int N) {
    const TensorParallel *tp = &m->tp;
    const int D = m->D;
    ops_check_ids(tokens, N, m->V, tp->size > 1 ? "vocab-parallel embedding" : "embedding");
    float *partial = tp->sp ? a->tp_full : a->resid;  // (N, D)
    zero_f32(partial, (size_t)N * D);
    const int np = llama_unit_n_pieces(m, 0, pa->piece_max);
    for (int k = 0; k < np; k++) {
        size_t lo, hi;
        int r0, r1;
        llama_unit_piece(m, 0, pa->piece_max, k, &lo, &hi);
        llama_piece_rows(m, m->embed, m->Vl, lo, hi, &r0, &r1);
        const float *w = pa->acquire_piece(pa->ctx, 0, k);  // rows [r0, r1) of the (Vl, D) table
        embedding_copy_range(partial, tokens, w + (m->embed + (size_t)r0 * D - lo), N, D, m->vocab.v0 + r0,
                             r1 - r0);
        pa->release_piece(pa->ctx, 0, k);
    }
    tp_reduce(tp, partial, a->resid, N, D);
}

// Head rows [r0, r1) of a piece whose first element w is at flat offset lo:
// logits(N, Vl)[:, r0:r1] = x_full(N, D) @ head[r0:r1]^T.
static void head_piece_forward(const LlamaModel *m, Activations *a, const float *x_full, const float *w,
                               size_t hoff, size_t lo, size_t hi, int N) {
    int r0, r1;
    llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
    if (r1 > r0)
        matmul_forward_ld(a->logits + r0, m->Vl, x_full, w + (hoff + (size_t)r0 * m->D - lo), N, m->D, r1 - r0);
}

// Final norm and the vocab-parallel head, the head's weight piece by piece (a tied
// head's weight is the embedding, unit 0). The norm's piece (piece 0 of the final
// unit) also holds the head's rows when the final unit is one piece.
static void head_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int N) {
    const int Nr = llama_rows(m, N), uf = m->L + 1, tied = m->cfg.tie_word_embeddings;
    const int uh = tied ? 0 : uf;  // the unit holding the head's weight
    const size_t hoff = tied ? m->embed : m->head;
    size_t lo, hi;
    llama_unit_piece(m, uf, pa->piece_max, 0, &lo, &hi);
    const float *wf = pa->acquire_piece(pa->ctx, uf, 0);
    rmsnorm_forward(a->lnf, a->lnf_rstd, llama_stage_output(m, a), wf + (m->final_norm - lo), Nr, m->D,
                    (float)m->cfg.rms_norm_eps);
    const float *x_full = tp_gather(&m->tp, a->lnf, a->tp_full, N, m->D);  // (N, D)
    if (uh == uf) head_piece_forward(m, a, x_full, wf, hoff, lo, hi, N);
    pa->release_piece(pa->ctx, uf, 0);
    const int np = llama_unit_n_pieces(m, uh, pa->piece_max);
    for (int k = uh == uf ? 1 : 0; k < np; k++) {
        llama_unit_piece(m, uh, pa->piece_max, k, &lo, &hi);
        head_piece_forward(m, a, x_full, pa->acquire_piece(pa->ctx, uh, k), hoff, lo, hi, N);
        pa->release_piece(pa->ctx, uh, k);
    }
}

double llama_stage_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                           const int32_t *tokens, const float *x_in, const int32_t *targets,
                           float grad_scale, int want_grads) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D;
    if (a->has_embed)
        embed_forward(m, pa, a, tokens, N);
    else if (x_in != a->resid)
        copy_f32(a->resid, x_in, (size_t)Nr * D);  // kept for this stage's backward
    for (int i = 0; i < a->nl; i++) layer_forward(m, pa, a, i);
    if (!a->has_head) return 0.0;
    head_forward(m, pa, a, N);
    return tp_cross_entropy(&m->tp, &m->vocab, m->V, a->logits, targets, N, grad_scale, want_grads,
                            a->tp_stats);
}

// -------------------------------------------------------------------- backward

// One decoder layer backward: dres (Nr, D) holds the gradient of the layer output on
// entry and of the layer input on exit. What recomputation dropped is rebuilt first
// from the kept buffers with the forward's own kernels and inputs, so it is
// bit-identical: under full the layer forward from the kept input (the weights are
// acquired once for both: under ZeRO-3 the gather the backward makes anyway), under
// selective the attention core (its lse; the output it rewrites is identical).
static void layer_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid, *dd = a->dbuf_d;
    const float *w = pa->acquire_params(pa->ctx, u);
    if (m->recompute == RECOMPUTE_FULL) llama_layer_forward_with(m, a, w, i, 1);
    float *g = pa->grads(pa->ctx, u);
    const LayerSaved s = layer_saved(m, a, i);
    const RingAttention ra = activations_ring(m, a);

    // MLP: out = mid + down(swiglu(gate_up(rmsnorm2(mid)))); dres flows to mid as is.
    tp_row_backward(tp, a->dbuf_i, AT(g, u, lo->down), dres, s.h, AT(w, u, lo->down), a->tp_full,
                    N, Fl, D);
    swiglu_backward(a->dgu, a->dbuf_i, s.gu, N, Fl);
    tp_column_backward(tp, dd, AT(g, u, lo->gate_up), a->dgu, s.ln2, AT(w, u, lo->gate_up),
                       a->tp_full, a->tp_partial, N, D, 2 * Fl);
    tp_norm_backward(tp, dres, AT(g, u, lo->ln2), dd, s.mid, AT(w, u, lo->ln2), s.ln2_rstd, a->tp_dw,
                     Nr, D);
    // Attention: mid = x + o(attention(rope(qkv(rmsnorm1(x)))))
    tp_row_backward(tp, a->dbuf_i, AT(g, u, lo->o), dres, s.attn, AT(w, u, lo->o), a->tp_full, N, A,
                    D);
    if (m->recompute == RECOMPUTE_SELECTIVE) ring_attention_forward(&m->cp, &ra, s.qkv, s.attn, s.lse);
    ring_attention_backward(&m->cp, &ra, a->dqkv, a->dbuf_i, s.qkv, s.attn, s.lse);
    rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    tp_column_backward(tp, dd, AT(g, u, lo->qkv), a->dqkv, s.ln1, AT(w, u, lo->qkv), a->tp_full,
                       a->tp_partial, N, D, QKV);
    tp_norm_backward(tp, dres, AT(g, u, lo->ln1), dd, s.x, AT(w, u, lo->ln1), s.ln1_rstd, a->tp_dw,
                     Nr, D);
    pa->release_params(pa->ctx, u);
    pa->grads_done(pa->ctx, u);
}

// One head piece's backward: din(N, D) (+)= dlogits[:, r0:r1] @ head[r0:r1] and
// dhead[r0:r1] += dlogits[:, r0:r1]^T @ x_full. *first: nothing in din yet. The
// last piece starts the tensor-parallel reduction of din before its weight
// gradient, which then runs meanwhile.
static void head_piece_backward(const LlamaModel *m, Activations *a, const float *x_full, const float *w,
                                float *g, size_t hoff, size_t lo, size_t hi, int N, float *din, int *first,
                                int last, CommRequest *r) {
    const TensorParallel *tp = &m->tp;
    const int D = m->D;
    int r0, r1;
    llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
    const size_t at = hoff + (size_t)r0 * D - lo;
    if (r1 > r0) {
        matmul_backward_ld(din, NULL, a->logits + r0, m->Vl, x_full, w + at, N, D, r1 - r0, !*first);
        *first = 0;
    }
    if (last) *r = tp_reduce_start(tp, din, a->dbuf_d, N, D);
    if (r1 > r0) matmul_backward_ld(NULL, g + at, a->logits + r0, m->Vl, x_full, w + at, N, D, r1 - r0, 0);
}

// Backward of the head and the final norm; a->logits holds dlogits. Leaves the
// gradient of the stage output in a->dresid. Every head piece but the norm's is
// handed over as soon as its weight gradient is in; the norm's piece last.
static void head_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int N) {
    const TensorParallel *tp = &m->tp;
    const int Nr = llama_rows(m, N), D = m->D, uf = m->L + 1, tied = m->cfg.tie_word_embeddings;
    const int uh = tied ? 0 : uf;
    const size_t hoff = tied ? m->embed : m->head;
    const float *x_full = tp_gather(tp, a->lnf, a->tp_full, N, D);  // re-gathered, not stored
    float *din = tp->sp ? a->tp_partial : a->dbuf_d;                 // (N, D) before the tp reduction
    CommRequest r = COMM_REQUEST_IDLE;
    int first = 1;
    size_t lo, hi;
    const int np = llama_unit_n_pieces(m, uh, pa->piece_max), k_end = uh == uf ? 1 : 0;
    for (int k = np - 1; k >= k_end; k--) {
        llama_unit_piece(m, uh, pa->piece_max, k, &lo, &hi);
        const float *w = pa->acquire_piece(pa->ctx, uh, k);
        float *g = pa->piece_grads(pa->ctx, uh, k);
        head_piece_backward(m, a, x_full, w, g, hoff, lo, hi, N, din, &first, k == k_end && uh != uf, &r);
        pa->release_piece(pa->ctx, uh, k);
        pa->piece_grads_done(pa->ctx, uh, k);
    }
    llama_unit_piece(m, uf, pa->piece_max, 0, &lo, &hi);
    const float *wf = pa->acquire_piece(pa->ctx, uf, 0);
    float *gf = pa->piece_grads(pa->ctx, uf, 0);
    if (uh == uf) head_piece_backward(m, a, x_full, wf, gf, hoff, lo, hi, N, din, &first, 1, &r);
    tp_reduce_finish(&r);
    float *dres = a->dresid;  // (Nr, D)
    zero_f32(dres, (size_t)Nr * D);
    tp_norm_backward(tp, dres, gf + (m->final_norm - lo), a->dbuf_d, llama_stage_output(m, a),
                     wf + (m->final_norm - lo), a->lnf_rstd, a->tp_dw, Nr, D);
    pa->release_piece(pa->ctx, uf, 0);
    pa->piece_grads_done(pa->ctx, uf, 0);
}

// Embedding backward: every token's gradient scattered into this rank's rows of the
// table, piece by piece.
static void embed_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, const int32_t *tokens,
                           int N) {
    const TensorParallel *tp = &m->tp;
    const int D = m->D;
    ops_check_ids(tokens, N, m->V, tp->size > 1 ? "vocab-parallel embedding backward" : "embedding backward");
    const float *d = tp_gather(tp, a->dresid, a->tp_full, N, D);  // (N, D) every token's gradient
    for (int k = llama_unit_n_pieces(m, 0, pa->piece_max) - 1; k >= 0; k--) {
        size_t lo, hi;
        int r0, r1;
        llama_unit_piece(m, 0, pa->piece_max, k, &lo, &hi);
        llama_piece_rows(m, m->embed, m->Vl, lo, hi, &r0, &r1);
        float *g = pa->piece_grads(pa->ctx, 0, k);
        embedding_backward_range(g + (m->embed + (size_t)r0 * D - lo), d, tokens, N, D, m->vocab.v0 + r0,
                                 r1 - r0);
        pa->piece_grads_done(pa->ctx, 0, k);
    }
}

const float *llama_stage_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a,
                                  const int32_t *tokens, const float *dx_out) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D;
    if (a->has_head)
        head_backward(m, pa, a, N);
    else
        copy_f32(a->dresid, dx_out, (size_t)Nr * D);
    for (int i = a->nl - 1; i >= 0; i--) layer_backward(m, pa, a, i);
    if (!a->has_embed) return a->dresid;
    embed_backward(m, pa, a, tokens, N);
    return NULL;
}
