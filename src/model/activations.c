// model/activations.c — views into a stage's activations: a layer slot's saved
// buffers under the recomputation mode, and the ring-attention workspace.
#include "model/activations.h"

#include "model/activation_plan.h"

LayerSaved layer_saved(const LlamaModel *m, const Activations *a, int i) {
    const size_t N = (size_t)a->B * a->S, Nr = (size_t)llama_rows(m, a->B * a->S), D = m->D;
    const size_t R = (size_t)a->B * m->Hl * a->S, Fl = m->E > 0 ? (size_t)m->Fsl : (size_t)m->Fl;
    const size_t k = m->recompute == RECOMPUTE_FULL ? 0 : (size_t)i;    // slot of ln1 .. mlp_h
    const size_t kl = m->recompute == RECOMPUTE_NONE ? (size_t)i : 0;   // slot of lse
    const size_t kx = m->recompute == RECOMPUTE_FULL ? (size_t)i : 0;   // slot of the stream
    LayerSaved s = {
        .x = a->resid + kx * Nr * D,
        .ln1 = a->ln1 + k * Nr * D,
        .ln1_rstd = a->ln1_rstd + k * Nr,
        .qkv = a->qkv + k * activations_qkv_slot(m, N),
        .lse = a->lse + kl * R,
        .attn = a->attn + k * activations_attn_slot(m, N),
        .mid = a->resid_mid,
        .ln2 = a->ln2 + k * Nr * D,
        .ln2_rstd = a->ln2_rstd + k * Nr,
        .gu = a->gu ? a->gu + k * N * 2 * Fl : NULL,
        .h = a->mlp_h ? a->mlp_h + k * N * Fl : NULL,
        .gu16 = a->gu16 ? a->gu16 + k * N * 2 * Fl : NULL,
        .ln1_16 = a->ln1_16 ? (uint16_t *)(a->ln1_16 + k * activations_norm16_slot(m, Nr)) : NULL,
        .ln2_16 = a->ln2_16 ? (uint16_t *)(a->ln2_16 + k * activations_norm16_slot(m, Nr)) : NULL,
        .h16 = a->h16 ? (uint16_t *)(a->h16 + k * activations_h16_slot(m, N)) : NULL,
        .out = a->resid + (kx + (m->recompute == RECOMPUTE_FULL)) * Nr * D,
    };
    return s;
}

RingAttention activations_ring(const LlamaModel *m, const Activations *a) {
    RingAttention ra = {
        .B = a->B, .S = a->S, .H = m->Hl, .KV = m->KVl, .hd = m->hd,
        .pos = a->pos, .pos_of = a->pos_of,
        .m = a->att_m, .l = a->att_l, .rowdot = a->att_rowdot,
        .scratch = a->att_scratch, .ring = a->ring,
    };
    return ra;
}

MoeDims activations_moe_dims(const LlamaModel *m, const Activations *a) {
    MoeDims d = {a->B * a->S, a->B, a->S, m->D, m->Fl, m->E, m->K, m->ep};  // Fl: tp's slice of each expert
    return d;
}

MoeSaved activations_moe_saved(const LlamaModel *m, const Activations *a, int i) {
    const MoeDims d = activations_moe_dims(m, a);
    const size_t k = m->recompute == RECOMPUTE_FULL ? 0 : (size_t)i;  // as ln1 .. mlp_h
    return moe_saved_at(&d, a->moe + k * moe_saved_floats(&d));
}

MoeScratch activations_moe_scratch(const LlamaModel *m, Activations *a) {
    const MoeDims d = activations_moe_dims(m, a);
    MoeScratch s = moe_scratch_at(&d, a->moe_scr);
    s.ep_seconds = &a->moe_ep_s;
    return s;
}
