// model/llama_attention.c — a decoder layer's attention half, the piece the fused
// backward (model/llama.c) and the split one (model/llama_split.c) share:
//   mid = x + o_proj(attention(rope(qkv_proj(rmsnorm1(x)))))
// in its three storage forms: fp32 q|k|v and output; bf16 activations (the norm's
// output and the q|k|v gradient bf16, m->qkv_bf16); and cuDNN's (m->att_bf16: q|k|v
// and the attention output kept as bf16 too, in their fp32 slots, which the
// activation plan halves). Buffers: model/activations.h.
#include "model/activations.h"
#include "model/llama.h"
#include "model/llama_layer.h"
#include "ops/ops.h"
#include "util.h"

// The attention core: s->attn(N, A) and s->lse from the rotated q|k|v, by cuDNN on
// bf16 (att_bf16) or by the ring (femtotron's kernels; one block where cp is 1).
static void core_forward(const LlamaModel *m, Activations *a, const LayerSaved *s) {
    const RingAttention ra = activations_ring(m, a);
    if (m->att_bf16)
        attention_forward_bf16((uint16_t *)s->attn, s->lse, (const uint16_t *)s->qkv, ra.pos, a->B, a->S, m->Hl,
                               m->KVl, m->hd);
    else ring_attention_forward(&m->cp, &ra, s->qkv, s->attn, s->lse);
}

void llama_attention_forward(const LlamaModel *m, Activations *a, const LayerSaved *s, const float *w, int u) {
    const TensorParallel *tp = &m->tp;
    const int B = a->B, S = a->S, N = B * S, Nr = llama_rows(m, N), D = m->D;
    const int Hl = m->Hl, KVl = m->KVl, hd = m->hd, QKV = (Hl + 2 * KVl) * hd, A = Hl * hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    const LayerOffsets *lo = &m->layer[u - 1];
    // The norm keeps its xhat (s->ln1); its output goes to the shared `normed`, the
    // q|k|v product's input (under bf16 activations as bf16, read as it is, once),
    // or where the layer keeps it (m->inputs16_kept: s->ln1_16, read again by the
    // product's weight gradient).
    uint16_t *normed16 = s->ln1_16 ? s->ln1_16 : (uint16_t *)a->normed;  // (Nr, D) bf16
    if (m->qkv_bf16) rmsnorm_forward_to_bf16(normed16, s->ln1, s->ln1_rstd, s->x, AT(w, u, lo->ln1), Nr, D, eps);
    else rmsnorm_forward(a->normed, s->ln1, s->ln1_rstd, s->x, AT(w, u, lo->ln1), Nr, D, eps);
    if (m->att_bf16) {
        // The product writes bf16 (a->dqkv, free in the forward: room for a backend
        // that rounds an fp32 result), RoPE rotates it in place, cuDNN reads it and
        // writes a bf16 output, which the o product reads as it is (dbuf_i: room to widen it).
        uint16_t *qkv16 = (uint16_t *)s->qkv;  // (N, QKV) bf16
        tp_column_forward_bf16(tp, qkv16, a->dqkv, normed16, a->tp_full, AT(w, u, lo->qkv), N, D, QKV);  // q|k|v
        rope_forward_bf16(qkv16, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
        core_forward(m, a, s);
        tp_row_forward_from_bf16(tp, s->mid, s->x, (const uint16_t *)s->attn, a->dbuf_i, AT(w, u, lo->o),
                                 a->tp_partial, N, A, D);  // mid = x + o
        return;
    }
    if (m->qkv_bf16) tp_column_forward_from_bf16(tp, s->qkv, normed16, a->tp_full, AT(w, u, lo->qkv), N, D, QKV);
    else tp_column_forward(tp, s->qkv, a->normed, a->tp_full, AT(w, u, lo->qkv), N, D, QKV);  // q|k|v
    rope_forward(s->qkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    core_forward(m, a, s);
    tp_row_forward(tp, s->mid, s->x, s->attn, AT(w, u, lo->o), a->tp_partial, N, A, D);  // mid = x + o
}

void llama_o_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, float *din, float *dw,
                      const float *dout, const uint16_t *dout16, const float *w) {
    const int N = a->B * a->S, A = m->Hl * m->hd;
    if (dout16) {  // the weight gradient from dout as bf16 (the split backward's W)
        if (din || !m->att_bf16) die("llama_o_backward: a bf16 dout for o's weight gradient alone, under cuDNN (a bug)");
        matmul_backward_bf16_to_bf16(NULL, NULL, dw, tp_gather_bf16(&m->tp, dout16, a->tp_full, N, m->D),
                                     (const uint16_t *)s->attn, NULL, N, A, m->D);
        return;
    }
    if (m->att_bf16 && din)  // din as bf16, cuDNN's dout, its own buffer the room to round it in place where a
                             // backend must; the output kept as bf16 (a->dqkv: room to widen it)
        tp_row_backward_from_bf16_to_bf16(&m->tp, (uint16_t *)din, din, dw, dout, (const uint16_t *)s->attn, a->dqkv,
                                          w, a->tp_full, N, A, m->D);
    else if (m->att_bf16)
        tp_row_backward_from_bf16(&m->tp, NULL, dw, dout, (const uint16_t *)s->attn, a->dqkv, w, a->tp_full, N, A,
                                  m->D);
    else if (din) tp_row_backward(&m->tp, din, dw, dout, s->attn, w, a->tp_full, N, A, m->D);
    else tp_row_backward_weight(&m->tp, dw, dout, s->attn, a->tp_full, N, A, m->D);
}

void llama_attention_core_backward(const LlamaModel *m, Activations *a, const LayerSaved *s, uint16_t *dqkv16) {
    const int B = a->B, S = a->S, Hl = m->Hl, KVl = m->KVl, hd = m->hd;
    const RingAttention ra = activations_ring(m, a);
    if (m->recompute == RECOMPUTE_SELECTIVE) core_forward(m, a, s);  // lse (and the output) again
    if (m->att_bf16) {  // cuDNN's bf16 gradient into dqkv's room, then RoPE's backward as bf16, in place
                        // where dqkv16 is that room (the fused backward), else into dqkv16 (v copied)
        uint16_t *raw16 = (uint16_t *)a->dqkv;  // (N, QKV) bf16
        attention_backward_bf16(raw16, (const uint16_t *)a->dbuf_i, (const uint16_t *)s->qkv,
                                (const uint16_t *)s->attn, s->lse, ra.pos, B, S, Hl, KVl, hd);
        rope_backward_bf16(dqkv16, raw16, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
        return;
    }
    ring_attention_backward(&m->cp, &ra, a->dqkv, a->dbuf_i, s->qkv, s->attn, s->lse);
    if (m->qkv_bf16) rope_backward_to_bf16(dqkv16, a->dqkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
    else rope_backward(a->dqkv, a->cos_t, a->sin_t, B, S, Hl, KVl, hd);
}
