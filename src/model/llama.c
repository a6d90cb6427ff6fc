// model/llama.c — the forward and backward of one pipeline stage of a Llama decoder
// stack, written as a sequence of kernel calls (ops/ops.h) and parallel pieces
// (parallel_layers/): what runs column- or row-parallel, and the ring attention,
// is named at the call. Buffers: model/activations.h; shape letters: model/llama.h.
//
// One layer (pre-norm):
//   h   = x + o_proj(attention(rope(qkv_proj(rmsnorm1(x)))))
//   out = h + down_proj(silu(gate_proj(rmsnorm2(h))) * up_proj(rmsnorm2(h)))
// then a final RMSNorm, the output head, and the cross-entropy. In a Mixtral model
// the MLP is the sparse mixture-of-experts block (model/moe.h):
//   out = h + moe(rmsnorm2(h))
#include "model/llama.h"

#include "model/activations.h"
#include "model/llama_layer.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "util.h"

// Address of the tensor at flat offset `off` inside unit u, whose data starts at `base`.
float *llama_stage_output(const LlamaModel *m, Activations *a) {
    const size_t slot = m->recompute == RECOMPUTE_FULL ? (size_t)a->nl : 0;  // model/activations.h: resid
    return a->resid + slot * llama_rows(m, a->B * a->S) * m->D;
}

// --------------------------------------------------------------------- forward

// One decoder layer forward with its weights w (unit u = 1 + l); i is the local
// slot, l the global layer index. `recompute` (full recomputation, from the
// backward) stops once every buffer the backward reads is rebuilt: the down
// projection only makes the layer output, which is kept — and for the last layer
// of a stage may still be on its way to the next stage, so it must not be written.
void llama_layer_forward_with(const LlamaModel *m, Activations *a, LayerWeights lw, int i, int recompute) {
    const float *w = lw.w;
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    const float eps = (float)m->cfg.rms_norm_eps;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    const LayerSaved s = layer_saved(m, a, i);
    if (m->inputs16_kept && !ops_matmul_bf16())  // fp32 products would widen them in place
        die("kept bf16 product inputs need bf16 products (a bug: ModelShard.keep16 without training.precision bf16)");
    if ((m->dres16_mlp || m->dres16_o) && !ops_matmul_bf16())  // only bf16 products read a bf16 gradient as it is
        die("a bf16 residual gradient needs bf16 products (a bug: ModelShard.products16 without ops_set_matmul_bf16)");

    // Each norm keeps its xhat (s.ln1, s.ln2); its output goes to the shared `normed`,
    // the input of the product after it (under bf16 activations as bf16, normed16,
    // read as it is, once), or where the layer keeps it (m->inputs16_kept: s.ln2_16,
    // and SwiGLU's output in s.h16, read again by the weight gradients). Without full
    // recomputation s.x and s.out are the one stream buffer: x is last read by the o
    // product, which adds it into mid.
    uint16_t *normed16 = s.ln2_16 ? s.ln2_16 : (uint16_t *)a->normed;  // (Nr, D) bf16
    llama_attention_forward(m, a, &s, w, u);  // mid = x + o(...)
    if (m->mlp_bf16) rmsnorm_forward_to_bf16(normed16, s.ln2, s.ln2_rstd, s.mid, AT(w, u, lo->ln2), Nr, D, eps);
    else rmsnorm_forward(a->normed, s.ln2, s.ln2_rstd, s.mid, AT(w, u, lo->ln2), Nr, D, eps);
    if (m->E > 0) {  // Mixtral's sparse block (model/moe.h)
        // Tensor parallel as a dense MLP: every rank routes every token (the router is
        // replicated, so the routing is the same everywhere) and holds an Fl-wide
        // slice of each expert; the combined outputs are partial sums, reduced.
        const MoeDims md = activations_moe_dims(m, a);
        const MoeSaved ms = activations_moe_saved(m, a, i);
        const MoeScratch sc = activations_moe_scratch(m, a);
        const float *X = tp_gather(tp, a->normed, a->tp_full, N, D);  // (N, D)
        float *partial = recompute ? NULL : tp->sp ? a->tp_partial : s.out;  // (N, D)
        moe_forward(&md, &ms, &sc, partial, X, AT(w, u, lo->router), lw.experts);
        if (m->Fs > 0) {  // shared experts, in the dense MLP's buffers: gate|up, SwiGLU ...
            const int Fsl = m->Fsl;
            matmul_forward(s.gu, X, AT(w, u, lo->gate_up), N, D, 2 * Fsl);
            swiglu_forward(s.h, s.gu, N, Fsl);
            if (!recompute) {  // ... down into sc.dy (free in the forward), added to the partial sum
                matmul_forward(sc.dy, s.h, AT(w, u, lo->down), N, Fsl, D);
                residual_forward(partial, partial, sc.dy, (size_t)N * D);
            }
        }
        if (recompute) return;  // the statistics were taken by the first forward
        tp_reduce(tp, partial, s.out, N, D);
        if (m->moe_aux) moe_route_stats(a->moe_stats, a->moe_stats + (size_t)B * m->E, ms.probs, ms.sel,
                                        B, S, m->E, m->K);
        residual_forward(s.out, s.out, s.mid, (size_t)Nr * D);
        return;
    }
    if (m->mlp_bf16) {  // bf16 activations: gate|up, and the SwiGLU output, written as bf16 by their ops
        // gate|up into its kept slot (the scratch dgu for a backend that rounds after);
        // the SwiGLU output, down's input, into dgu as bf16 (mlp_h16), not kept: down
        // reads it as its bf16 operand (dbuf_i: room to widen it for a backend that must).
        tp_column_forward_bf16(tp, s.gu16, a->dgu, normed16, a->tp_full, AT(w, u, lo->gate_up), N, D, 2 * Fl);
        if (recompute) return;  // the backward rebuilds the SwiGLU output itself
        uint16_t *h16 = s.h16 ? s.h16 : mlp_h16(a);
        swiglu_forward_bf16(h16, s.gu16, N, Fl);
        tp_row_forward_from_bf16(tp, s.out, s.mid, h16, a->dbuf_i, AT(w, u, lo->down), a->tp_partial, N, Fl,
                                 D);  // out = mid + down
    } else {
        tp_column_forward(tp, s.gu, a->normed, a->tp_full, AT(w, u, lo->gate_up), N, D, 2 * Fl);  // gate|up
        swiglu_forward(s.h, s.gu, N, Fl);
        if (recompute) return;
        tp_row_forward(tp, s.out, s.mid, s.h, AT(w, u, lo->down), a->tp_partial, N, Fl, D);  // out = mid + down
    }
}

// A layer's weights and gradients: one piece, or under expert parallelism the
// dense piece and the experts' piece (model/param_access.h).

LayerWeights llama_layer_acquire(const LlamaModel *m, const ParamAccess *pa, int u) {
    LayerWeights lw = {NULL, NULL};
    if (llama_unit_split_experts(m, u)) {
        lw.w = pa->acquire_piece(pa->ctx, u, 0);
        lw.experts = pa->acquire_piece(pa->ctx, u, 1);
    } else {
        lw.w = pa->acquire_params(pa->ctx, u);
        if (m->E > 0) lw.experts = AT(lw.w, u, m->layer[u - 1].experts);
    }
    return lw;
}

void llama_layer_release(const LlamaModel *m, const ParamAccess *pa, int u) {
    if (!llama_unit_split_experts(m, u)) {
        pa->release_params(pa->ctx, u);
        return;
    }
    pa->release_piece(pa->ctx, u, 1);
    pa->release_piece(pa->ctx, u, 0);
}

LayerGrads llama_layer_grads(const LlamaModel *m, const ParamAccess *pa, int u) {
    LayerGrads lg = {NULL, NULL};
    if (llama_unit_split_experts(m, u)) {
        lg.g = pa->piece_grads(pa->ctx, u, 0);
        lg.experts = pa->piece_grads(pa->ctx, u, 1);
    } else {
        lg.g = pa->grads(pa->ctx, u);
        if (m->E > 0) lg.experts = AT(lg.g, u, m->layer[u - 1].experts);
    }
    return lg;
}

void llama_layer_grads_done(const LlamaModel *m, const ParamAccess *pa, int u) {
    if (!llama_unit_split_experts(m, u)) {
        pa->grads_done(pa->ctx, u);
        return;
    }
    pa->piece_grads_done(pa->ctx, u, 1);
    pa->piece_grads_done(pa->ctx, u, 0);
}

static void layer_forward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i) {
    const int u = 1 + a->l0 + i;
    llama_layer_forward_with(m, a, llama_layer_acquire(m, pa, u), i, 0);
    llama_layer_release(m, pa, u);
}

// The load-balancing loss of the micro-batch's B sequences (model/moe.h), on the last
// stage, after the forward of every layer (earlier stages' statistics arrive with the
// input, engines/pipeline_exec.c; the gradient goes back with the input gradients). Its statistics
// are summed over the context-parallel ranks first (each holds part of every
// sequence). The step's loss adds coef * (mean over its sequences of aux); the
// trainer divides the returned sum by the step's tokens (grad_scale = 1 / tokens), so
// each sequence's aux enters as coef * seq_length * aux, and its gradient per router
// probability is coef * seq_length * grad_scale * E c_e / T^2 (left in moe_stats'
// third block for the backward). Context-parallel rank 0 alone adds it to the sum.
static double aux_loss(const LlamaModel *m, Activations *a, float grad_scale) {
    const int B = a->B, E = m->E, seq = a->S * m->cp.size;
    float *count = a->moe_stats, *psum = count + (size_t)B * E, *aux_g = psum + (size_t)B * E;
    cp_allreduce_sum(&m->cp, count, 2 * (size_t)B * E);
    const double coef = m->cfg.router_aux_loss_coef, T = (double)m->L * seq;
    a->moe_aux = moe_aux_loss(aux_g, count, psum, B, E, T, (float)(coef * seq * grad_scale));
    if (m->cp.rank != 0) a->moe_aux = 0.0;
    return coef * seq * a->moe_aux;
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
    rmsnorm_forward(a->lnf, a->lnf_xhat, a->lnf_rstd, llama_stage_output(m, a), wf + (m->final_norm - lo), Nr,
                    m->D, (float)m->cfg.rms_norm_eps);
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
                           float grad_scale, int want_grads, double *loss_sum) {
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D;
    if (a->has_embed)
        embed_forward(m, pa, a, tokens, N);
    else if (x_in != a->resid)
        copy_f32(a->resid, x_in, (size_t)Nr * D);  // kept for this stage's backward
    // The first stage starts the load-balancing statistics (counts, probability sums);
    // a later stage continues those the pipeline received with its input.
    if (m->moe_aux && (a->has_embed || !want_grads)) zero_f32(a->moe_stats, 2 * (size_t)a->B * m->E);
    for (int i = 0; i < a->nl; i++) layer_forward(m, pa, a, i);
    if (!a->has_head) return 0.0;
    head_forward(m, pa, a, N);
    // Under bf16 products only the head's products read dlogits, each rounding them
    // to bf16 as it reads: the loss writes them rounded in the first place (ops.h).
    a->dlogits16 = want_grads && ops_matmul_bf16();
    tp_cross_entropy(&m->tp, &m->vocab, m->V, a->logits, targets, N, grad_scale,
                     !want_grads ? CE_NO_GRADS : a->dlogits16 ? CE_GRADS_BF16 : CE_GRADS_F32, a->tp_stats, loss_sum);
    return want_grads && m->moe_aux ? aux_loss(m, a, grad_scale) : 0.0;
}

// -------------------------------------------------------------------- backward

uint16_t *llama_norm16(Activations *a, uint16_t *kept, const float *xhat, const float *w, int Nr, int D) {
    if (kept) return kept;
    rmsnorm_rebuild_to_bf16((uint16_t *)a->normed, xhat, w, Nr, D);
    return (uint16_t *)a->normed;
}

// Under bf16 products the down products (m->mlp_bf16) and the o product under
// cuDNN's attention (m->att_bf16) read the residual stream's gradient dres as
// bf16 (ops_matmul.h: matmul_backward_bf16_to_bf16): dres16, in a->normed's first
// Nr*D halves. The norm's backward that leaves dres for them writes it too, beside
// the fp32 sums (ops.h: rmsnorm_backward_with_bf16; the second norm for o, the
// first norm, and the final one, for the next layer's down), so no product rounds
// it in a pass of its own and down's two read one copy. a->normed is free from
// the norm's backward until those products have read it: the rebuild of the next
// product's input comes after them, and only full recomputation, which rewrites
// it in the layer's forward first, comes between (there nothing is carried over).
// Which products read it so: the model's flags (LlamaModel.dres16_mlp, dres16_o).
static uint16_t *dres16_of(Activations *a) { return (uint16_t *)a->normed; }  // (Nr, D) bf16
// Whether the norm's backward above layer slot i (the first norm of slot i + 1, or
// the final norm for the stage's last slot) writes dres16 for slot i's down.
static int dres16_carried(const LlamaModel *m, int i) {
    return i >= 0 && m->dres16_mlp && m->recompute != RECOMPUTE_FULL;
}
// dres16 gathered over the tensor-parallel group, (N, D) bf16: rounded from dres
// first unless a norm's backward wrote it (fresh).
static const uint16_t *dres16_gathered(const LlamaModel *m, Activations *a, int fresh, int N) {
    if (!fresh) round_to_bf16(dres16_of(a), a->dresid, (size_t)llama_rows(m, N) * m->D);
    return tp_gather_bf16(&m->tp, dres16_of(a), a->tp_full, N, m->D);
}

// One decoder layer backward: dres (Nr, D) holds the gradient of the layer output on
// entry and of the layer input on exit. What recomputation dropped is rebuilt first
// from the kept buffers with the forward's own kernels and inputs, so it is
// bit-identical: under full the layer forward from the kept input (the weights are
// acquired once for both: under ZeRO-3 the gather the backward makes anyway), under
// selective the attention core (its lse; the output it rewrites is identical).
// fresh: dres16 holds dres already (dres16_carried); returns whether the layer
// left it so for slot i - 1.
static int layer_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int i, int fresh) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D;
    const int QKV = (m->Hl + 2 * m->KVl) * m->hd;
    const int l = a->l0 + i, u = 1 + l;
    const LayerOffsets *lo = &m->layer[l];
    float *dres = a->dresid, *dd = a->dbuf_d;
    const LayerWeights lw = llama_layer_acquire(m, pa, u);
    const float *w = lw.w;
    if (m->recompute == RECOMPUTE_FULL) llama_layer_forward_with(m, a, lw, i, 1);
    const LayerGrads lg = llama_layer_grads(m, pa, u);
    float *g = lg.g;
    const LayerSaved s = layer_saved(m, a, i);

    // MLP: out = mid + down(swiglu(gate_up(rmsnorm2(mid)))); dres flows to mid as is.
    if (m->E > 0) {  // or out = mid + moe(rmsnorm2(mid)) (model/moe.h)
        const MoeDims md = activations_moe_dims(m, a);
        const MoeSaved ms = activations_moe_saved(m, a, i);
        const MoeScratch sc = activations_moe_scratch(m, a);
        const float *aux_g = m->moe_aux ? a->moe_stats + 2 * (size_t)B * m->E : NULL;
        // Under tensor parallelism the whole-token gradient and input are gathered (one
        // at a time through tp_full), the routing weights' gradient <dout, y> summed over
        // the group (each rank's y is a partial sum), the experts' input gradient
        // reduced like a row-parallel layer's; the router's share of this rank's rows
        // is added after the reduction, so it is counted once.
        const float *G = tp_gather(tp, dres, a->tp_full, N, D);  // (N, D) output gradient
        moe_backward_combine(&md, &ms, &sc, G);
        if (m->Fs > 0) {  // shared experts: down and SwiGLU backward while G is at hand
            matmul_backward(a->dbuf_i, AT(g, u, lo->down), G, s.h, AT(w, u, lo->down), N, m->Fsl, D, 0);
            swiglu_backward(a->dgu, a->dbuf_i, s.gu, N, m->Fsl);
        }
        rmsnorm_rebuild(a->normed, s.ln2, AT(w, u, lo->ln2), Nr, D);
        const float *X = tp_gather(tp, a->normed, a->tp_full, N, D);
        float *partial = tp->sp ? a->tp_partial : dd;  // (N, D)
        moe_backward_experts(&md, &ms, &sc, partial, lg.experts, X, lw.experts);
        if (m->Fs > 0)  // the shared experts' gate|up: weight gradient, input gradient added
            matmul_backward(partial, AT(g, u, lo->gate_up), a->dgu, X, AT(w, u, lo->gate_up), N, D,
                            2 * m->Fsl, 1);
        tp_allreduce_sum(tp, sc.dwts, (size_t)N * m->K);
        moe_backward_router(&md, &ms, &sc, AT(g, u, lo->router), X, aux_g);
        tp_reduce(tp, partial, dd, N, D);
        const size_t r0 = tp->sp ? (size_t)tp->rank * Nr : 0;  // this rank's rows of the stream
        matmul_backward(dd, NULL, sc.dlogits + r0 * m->E, NULL, AT(w, u, lo->router), Nr, D, m->E, 1);
    } else {
        llama_dense_mlp_backward(m, a, &s, w, g, lo, u, dd,
                                 m->dres16_mlp ? dres16_gathered(m, a, fresh, N) : NULL);
    }
    tp_norm_backward(tp, dres, m->dres16_o ? dres16_of(a) : NULL, AT(g, u, lo->ln2), dd, s.ln2,
                     AT(w, u, lo->ln2), s.ln2_rstd, a->tp_dw, Nr, D);
    // Attention: mid = x + o(attention(rope(qkv(rmsnorm1(x))))); the o product's input
    // gradient into dbuf_i, the attention's dout. Under bf16 activations the q|k|v
    // gradient goes as bf16 into dbuf_i too (dout is read first), where both q|k|v
    // products read it as it is (dqkv: room to widen it where a backend must), and
    // their input is rebuilt as bf16, as the forward wrote it. cuDNN's (att_bf16)
    // stays where cuDNN wrote it, in dqkv, and RoPE's backward rotates it there
    // (v's columns are not copied) where the products read bf16 as it is; fp32
    // products (the CPU's tests) widen it into dqkv, once for each product, so
    // there it goes to dbuf_i.
    if (m->dres16_o)  // din as bf16 (cuDNN's dout), its own buffer the CPU's room to round it in place
        matmul_backward_bf16_to_bf16((uint16_t *)a->dbuf_i, a->dbuf_i, AT(g, u, lo->o), dres16_gathered(m, a, 1, N),
                                     (const uint16_t *)s.attn, AT(w, u, lo->o), N, m->Hl * m->hd, D);
    else
        llama_o_backward(m, a, &s, a->dbuf_i, AT(g, u, lo->o), dres, NULL, AT(w, u, lo->o));
    uint16_t *dqkv16 = (uint16_t *)(m->dres16_o ? a->dqkv : a->dbuf_i);  // (N, QKV) bf16; dres16_o: att_bf16, bf16 products
    llama_attention_core_backward(m, a, &s, dqkv16);
    if (m->qkv_bf16) {
        uint16_t *normed16 = llama_norm16(a, s.ln1_16, s.ln1, AT(w, u, lo->ln1), Nr, D);  // (Nr, D)
        tp_column_backward_bf16(tp, dd, AT(g, u, lo->qkv), dqkv16, a->dqkv, normed16, AT(w, u, lo->qkv), a->tp_full,
                                a->tp_partial, N, D, QKV);
    } else {
        rmsnorm_rebuild(a->normed, s.ln1, AT(w, u, lo->ln1), Nr, D);
        tp_column_backward(tp, dd, AT(g, u, lo->qkv), a->dqkv, a->normed, AT(w, u, lo->qkv), a->tp_full,
                           a->tp_partial, N, D, QKV);
    }
    const int carried = dres16_carried(m, i - 1);
    tp_norm_backward(tp, dres, carried ? dres16_of(a) : NULL, AT(g, u, lo->ln1), dd, s.ln1, AT(w, u, lo->ln1),
                     s.ln1_rstd, a->tp_dw, Nr, D);
    llama_layer_release(m, pa, u);
    llama_layer_grads_done(m, pa, u);
    return carried;
}

void llama_head_products(const LlamaModel *m, const Activations *a, float *din, float *dw, const float *x_full,
                         const float *w, int r0, int r1, int N, int accumulate_din) {
    if (a->dlogits16)
        matmul_backward_ld16(din, dw, (const uint16_t *)a->logits + r0, CE_LD16(m->Vl), x_full, w, N, m->D, r1 - r0,
                             accumulate_din);
    else
        matmul_backward_ld(din, dw, a->logits + r0, m->Vl, x_full, w, N, m->D, r1 - r0, accumulate_din);
}

// One head piece's backward: din(N, D) (+)= dlogits[:, r0:r1] @ head[r0:r1] and
// dhead[r0:r1] += dlogits[:, r0:r1]^T @ x_full. *first: nothing in din yet. Under
// tensor parallelism the last piece starts the reduction of din before its
// weight gradient, which then runs meanwhile; every other piece computes both in
// one call, which reads its dlogits once (bf16 products round them once: the
// same operand, the same bits as two calls).
static void head_piece_backward(const LlamaModel *m, Activations *a, const float *x_full, const float *w,
                                float *g, size_t hoff, size_t lo, size_t hi, int N, float *din, int *first,
                                int last, CommRequest *r) {
    const TensorParallel *tp = &m->tp;
    const int D = m->D, overlap = last && tp->size > 1;
    int r0, r1;
    llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
    const size_t at = hoff + (size_t)r0 * D - lo;
    if (r1 > r0) {
        llama_head_products(m, a, din, overlap ? NULL : g + at, x_full, w + at, r0, r1, N, !*first);
        *first = 0;
    }
    if (last) *r = tp_reduce_start(tp, din, a->dbuf_d, N, D);
    if (r1 > r0 && overlap) llama_head_products(m, a, NULL, g + at, x_full, w + at, r0, r1, N, 0);
}

// Backward of the head and the final norm; a->logits holds dlogits. Leaves the
// gradient of the stage output in a->dresid. Every head piece but the norm's is
// handed over as soon as its weight gradient is in; the norm's piece last. Returns
// whether dres16 holds that gradient too (dres16_carried).
static int head_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, int N) {
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
    const int carried = dres16_carried(m, a->nl - 1);
    tp_norm_backward(tp, dres, carried ? dres16_of(a) : NULL, gf + (m->final_norm - lo), a->dbuf_d, a->lnf_xhat,
                     wf + (m->final_norm - lo), a->lnf_rstd, a->tp_dw, Nr, D);
    pa->release_piece(pa->ctx, uf, 0);
    pa->piece_grads_done(pa->ctx, uf, 0);
    return carried;
}

// Embedding backward (model/llama_layer.h): every token's gradient dout(Nr, D)
// scattered into this rank's rows of the table, piece by piece.
void llama_embed_backward(const LlamaModel *m, const ParamAccess *pa, Activations *a, const int32_t *tokens,
                          const float *dout, int N) {
    const TensorParallel *tp = &m->tp;
    const int D = m->D;
    ops_check_ids(tokens, N, m->V, tp->size > 1 ? "vocab-parallel embedding backward" : "embedding backward");
    const float *d = tp_gather(tp, dout, a->tp_full, N, D);  // (N, D) every token's gradient
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
    int fresh = 0;  // dres16 holds dresid (layer_backward)
    if (a->has_head)
        fresh = head_backward(m, pa, a, N);
    else
        copy_f32(a->dresid, dx_out, (size_t)Nr * D);
    for (int i = a->nl - 1; i >= 0; i--) fresh = layer_backward(m, pa, a, i, fresh);
    if (!a->has_embed) return a->dresid;
    llama_embed_backward(m, pa, a, tokens, a->dresid, N);
    return NULL;
}
