// model/llama_mlp.c — the dense MLP's backward (out = mid + down(swiglu(gate_up(
// rmsnorm2(mid))))), fused (model/llama.c) and the weight half of the down product
// in the split one (model/llama_split.c): model/llama_layer.h.
#include "model/activations.h"
#include "model/llama.h"
#include "model/llama_layer.h"
#include "ops/ops.h"
#include "util.h"

// The down projection's backward: the weight gradient dw += dout^T h and, with din
// not NULL, din(N, Fl) = dout @ w; dout(Nr, D). Under bf16 activations h is not
// kept: the SwiGLU output is rebuilt as bf16 from the kept gate|up into dgu
// (mlp_h16), the forward's op on the same values, so bit for bit, and dbuf_i is
// the room to widen it, as in the forward; there the weight gradient alone (the
// zero-bubble W's): the fused backward makes down's input gradient in bf16 and
// rebuilds h in SwiGLU's pass itself (llama_dense_mlp_backward).
void llama_down_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, float *din, float *dw,
                         const float *dout, const uint16_t *dout16, const float *w) {
    const TensorParallel *tp = &m->tp;
    const int N = a->B * a->S, Fl = m->Fl, D = m->D;
    if (!m->mlp_bf16) {  // din NULL: the kernels tp_row_backward_weight runs
        tp_row_backward(tp, din, dw, dout, s->h, w, a->tp_full, N, Fl, D);
        return;
    }
    if (din) die("llama_down_backward: under bf16 activations the weight gradient alone (a bug)");
    uint16_t *h16 = s->h16 ? s->h16 : mlp_h16(a);  // kept, or rebuilt
    if (!s->h16) swiglu_forward_bf16(h16, s->gu16, N, Fl);
    if (dout16) matmul_backward_bf16_to_bf16(NULL, NULL, dw, tp_gather_bf16(tp, dout16, a->tp_full, N, D), h16, NULL, N, Fl, D);
    else tp_row_backward_from_bf16(tp, NULL, dw, dout, h16, a->dbuf_i, NULL, a->tp_full, N, Fl, D);
}

void llama_dense_mlp_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, const float *w, float *g,
                              const LayerOffsets *lo, int u, float *dd, const uint16_t *dout16) {
    const TensorParallel *tp = &m->tp;
    const int N = a->B * a->S, Nr = llama_rows(m, N), D = m->D, Fl = m->Fl;
    if (m->mlp_bf16) {
        float *dh_room = a->dgu + (size_t)N * Fl;                                  // (N, Fl) fp32
        uint16_t *dh16 = (uint16_t *)dh_room, *h16 = s->h16 ? s->h16 : mlp_h16(a);  // (N, Fl) bf16 each
        uint16_t *dgu16 = (uint16_t *)a->dbuf_i;                                     // (N, 2Fl)
        // down's two products, row-parallel: every token's output gradient, gathered
        // once for both (tp_full is left alone in between), as bf16 where given
        const float *dout = dout16 ? NULL : tp_gather(tp, a->dresid, a->tp_full, N, D);  // (N, D)
        if (dout16) matmul_backward_bf16_to_bf16(dh16, a->dbuf_i, NULL, dout16, NULL, AT(w, u, lo->down), N, Fl, D);
        else matmul_backward_input_to_bf16(dh16, a->dbuf_i, dout, AT(w, u, lo->down), N, Fl, D);
        swiglu_backward_bf16(dgu16, s->h16 ? NULL : h16, dh16, s->gu16, N, Fl);
        if (dout16) matmul_backward_bf16_to_bf16(NULL, NULL, AT(g, u, lo->down), dout16, h16, NULL, N, Fl, D);
        else matmul_backward_from_bf16(NULL, AT(g, u, lo->down), dout, h16, dh_room, NULL, N, Fl, D, 0);
        uint16_t *normed16 = llama_norm16(a, s->ln2_16, s->ln2, AT(w, u, lo->ln2), Nr, D);  // (Nr, D)
        tp_column_backward_bf16(tp, dd, AT(g, u, lo->gate_up), dgu16, a->dgu, normed16, AT(w, u, lo->gate_up),
                                a->tp_full, a->tp_partial, N, D, 2 * Fl);
        return;
    }
    llama_down_backward(m, a, s, a->dbuf_i, AT(g, u, lo->down), a->dresid, NULL, AT(w, u, lo->down));  // dh(N, Fl)
    swiglu_backward(a->dgu, a->dbuf_i, s->gu, N, Fl);
    rmsnorm_rebuild(a->normed, s->ln2, AT(w, u, lo->ln2), Nr, D);
    tp_column_backward(tp, dd, AT(g, u, lo->gate_up), a->dgu, a->normed, AT(w, u, lo->gate_up), a->tp_full,
                       a->tp_partial, N, D, 2 * Fl);
}
