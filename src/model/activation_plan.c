// model/activation_plan.c — the activation plan of one pipeline stage: every buffer
// a micro-batch's forward writes for its backward, and the backward's scratch, with
// their sizes (activations_bytes, which the planner also calls) and their
// allocation in one arena.
#include "model/activation_plan.h"

#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "util.h"

// The activation plan: every buffer and its size in floats. With a->arena set the
// buffers are carved out of it in this order; either way the total is returned.
// Scratch buffers are planned only when with_scratch is set.
// Recomputation (m->recompute) decides how many layer slots the saved buffers have:
// nl (one per layer), or one working layer that belongs to the shared scratch — the
// lse under selective, everything but the residual stream under full, which alone
// keeps the stream per layer (model/activations.h).
static size_t activation_floats(const LlamaModel *m, int B, int S, Activations *a,
                                int with_scratch) {
    const size_t N = (size_t)B * S, Nr = (size_t)llama_rows(m, B * S), D = m->D, Fl = m->Fl;
    const size_t nl = (size_t)a->nl, QKV = (size_t)(m->Hl + 2 * m->KVl) * m->hd;
    const size_t A = (size_t)m->Hl * m->hd, R = (size_t)B * m->Hl * S, half = (size_t)m->hd / 2;
    const size_t ring = cp_ring_floats(&m->cp, B, S, m->KVl, m->hd);
    const size_t head = a->has_head ? 1 : 0, scr = with_scratch ? 1 : 0;
    const size_t tps = with_scratch && m->tp.size > 1 ? 1 : 0;
    const size_t nk = m->recompute == RECOMPUTE_FULL ? scr : nl;    // slots of ln1 .. mlp_h
    const size_t nlse = m->recompute == RECOMPUTE_NONE ? nl : scr;  // slots of lse
    const size_t nres = m->recompute == RECOMPUTE_FULL ? nl + 1 : 1;  // slots of the stream
    const size_t n16 = m->inputs16_kept ? nk : 0;                     // slots of the kept bf16 inputs
    // A mixture-of-experts layer (model/moe.h) keeps its routing and expert rows in
    // moe, and its backward uses moe_scr; gu / mlp_h / dgu then hold the shared experts.
    // The shared experts (E > 0, Fs > 0) use the dense MLP's buffers at their width.
    const size_t Fd = m->E > 0 ? (size_t)m->Fsl : Fl;
    const MoeDims md = {(int)N, B, S, m->D, m->Fl, m->E, m->K, m->ep};
    const size_t moe_saved = m->E > 0 ? moe_saved_floats(&md) : 0;
    const size_t moe_scr = m->E > 0 ? moe_scratch_floats(&md) : 0;
    const size_t moe_stats = m->moe_aux ? 4 * (size_t)B * m->E : 0;
    // bf16 activations (m->mlp_bf16): gate|up as 2Fd bf16 values a token, Fd floats'
    // room, carved as gu and handed over as gu16 below; no SwiGLU output kept.
    const size_t gu_floats = m->mlp_bf16 ? N * Fd : N * 2 * Fd, h_floats = m->mlp_bf16 ? 0 : N * Fd;
    // dbuf_i: SwiGLU's input gradient (N, Fd), or a bf16 gate|up gradient (N, 2Fd)
    // halves, then the attention output's (N, A), then a bf16 q|k|v gradient (N, QKV)
    // halves (m->qkv_bf16; model/llama.c)
    size_t dbuf_i = N * (Fd > A ? Fd : A);
    if (m->qkv_bf16 && (N * QKV + 1) / 2 > dbuf_i) dbuf_i = (N * QKV + 1) / 2;
    struct {
        float **ptr;
        size_t n;
    } plan[] = {
        {&a->cos_t, S * half},          {&a->sin_t, S * half},
        {&a->resid, nres * Nr * D},     {&a->ln1, nk * Nr * D},
        {&a->ln1_rstd, nk * Nr},        {&a->qkv, nk * activations_qkv_slot(m, N)},
        {&a->lse, nlse * R},            {&a->attn, nk * activations_attn_slot(m, N)},
        {&a->resid_mid, scr * Nr * D},  {&a->ln2, nk * Nr * D},
        {&a->ln2_rstd, nk * Nr},        {&a->gu, nk * gu_floats},
        {&a->mlp_h, nk * h_floats},       {&a->ln1_16, n16 * activations_norm16_slot(m, Nr)},
        {&a->ln2_16, n16 * activations_norm16_slot(m, Nr)}, {&a->h16, n16 * activations_h16_slot(m, N)},
        {&a->lnf, head * Nr * D},
        {&a->lnf_rstd, head * Nr},      {&a->lnf_xhat, head * Nr * D},
        {&a->logits, head * N * (size_t)m->Vl}, {&a->normed, scr * Nr * D},
        {&a->dresid, scr * Nr * D},     {&a->dbuf_d, scr * Nr * D},
        {&a->dqkv, scr * N * QKV},      {&a->att_m, scr * R},
        {&a->att_l, scr * R},           {&a->att_rowdot, scr * R},
        {&a->att_scratch, scr * attention_scratch_floats(m->hd)}, {&a->ring, scr * ring},
        {&a->dgu, scr * N * 2 * Fd},    {&a->dbuf_i, scr * dbuf_i},
        {&a->tp_full, tps * N * D},     {&a->tp_partial, tps * N * D},
        {&a->tp_stats, tps * 3 * N},    {&a->tp_dw, tps * D},
        {&a->moe, nk * moe_saved},      {&a->moe_scr, scr * moe_scr},
        {&a->moe_stats, moe_stats},
    };
    size_t total = 0;
    float *base = a->arena;  // NULL when only counting
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        size_t n = (plan[i].n + 15) / 16 * 16;  // keep every buffer 64-byte aligned
        if (base && plan[i].n) *plan[i].ptr = base + total;
        total += n;
    }
    if (base && m->mlp_bf16) {
        a->gu16 = (uint16_t *)a->gu;  // NULL when no slot is planned here (the shared working layer)
        a->gu = NULL;
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

// The position tables next to the arena: pos_of (cp, S) then pos (S), one block.
static size_t positions_bytes(const LlamaModel *m, int S) {
    return sizeof(int) * (size_t)S * (size_t)(m->cp.size + 1);
}

size_t activations_alloc_bytes(const LlamaModel *m, StageUnits su, int B, int S, int with_scratch) {
    return activations_bytes(m, su, B, S, with_scratch) + positions_bytes(m, S);
}

// Point a's scratch buffers (and the working layer recomputation keeps there) at
// the slot that owns them.
static void share_scratch_of(Activations *a, const LlamaModel *m, const Activations *share_scratch) {
    a->resid_mid = share_scratch->resid_mid;
    a->normed = share_scratch->normed;
    a->dresid = share_scratch->dresid;
    a->dbuf_d = share_scratch->dbuf_d;
    a->dqkv = share_scratch->dqkv;
    a->att_m = share_scratch->att_m;
    a->att_l = share_scratch->att_l;
    a->att_rowdot = share_scratch->att_rowdot;
    a->att_scratch = share_scratch->att_scratch;
    a->ring = share_scratch->ring;
    a->dgu = share_scratch->dgu;
    a->dbuf_i = share_scratch->dbuf_i;
    a->tp_full = share_scratch->tp_full;
    a->tp_partial = share_scratch->tp_partial;
    a->tp_stats = share_scratch->tp_stats;
    a->tp_dw = share_scratch->tp_dw;
    a->moe_scr = share_scratch->moe_scr;
    if (m->recompute != RECOMPUTE_NONE) a->lse = share_scratch->lse;  // the working layer
    if (m->recompute == RECOMPUTE_FULL) {
        a->ln1 = share_scratch->ln1;
        a->ln1_rstd = share_scratch->ln1_rstd;
        a->qkv = share_scratch->qkv;
        a->attn = share_scratch->attn;
        a->ln2 = share_scratch->ln2;
        a->ln2_rstd = share_scratch->ln2_rstd;
        a->gu = share_scratch->gu;
        a->mlp_h = share_scratch->mlp_h;
        a->gu16 = share_scratch->gu16;
        a->moe = share_scratch->moe;
    }
}

// The arena of `bytes` (at least this stage's own size) carved for stage su.
static void alloc_arena(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                        const Activations *share_scratch, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->S = S;
    stage_shape(a, m, su);
    a->bytes = bytes;
    a->arena = buf_alloc(MEM_ACTIVATIONS, a->bytes, "activations");
    activation_floats(m, B, S, a, share_scratch == NULL);
    if (share_scratch) share_scratch_of(a, m, share_scratch);
    // Global positions of the local tokens (zigzag chunks under context parallelism),
    // for RoPE and for the causal mask.
    a->pos_of = buf_alloc(MEM_ACTIVATIONS, positions_bytes(m, S), "token positions");  // (cp + 1, S)
    const int cp = m->cp.size;
    a->pos = a->pos_of + (size_t)cp * S;  // (S) the last row: this rank's own positions
    for (int r = 0; r < cp; r++) cp_positions(S * cp, cp, r, a->pos_of + (size_t)r * S);
    memcpy(a->pos, a->pos_of + (size_t)m->cp.rank * S, sizeof(int) * (size_t)S);
    rope_tables_at(a->cos_t, a->sin_t, a->pos, S, m->hd, m->rope_freq);
}

void activations_alloc(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                       const Activations *share_scratch) {
    alloc_arena(a, m, su, B, S, share_scratch, activations_bytes(m, su, B, S, share_scratch == NULL));
}

void activations_alloc_pool(Activations *a, const LlamaModel *m, StageUnits su, int B, int S,
                            const Activations *share_scratch, size_t bytes) {
    if (bytes < activations_bytes(m, su, B, S, share_scratch == NULL))
        die("activation pool slot of %zu bytes is smaller than its stage (a planning bug)", bytes);
    alloc_arena(a, m, su, B, S, share_scratch, bytes);
}

void activations_reshape(Activations *a, const LlamaModel *m, StageUnits su, const Activations *share_scratch) {
    stage_shape(a, m, su);
    if (a->bytes < activations_bytes(m, su, a->B, a->S, share_scratch == NULL))
        die("activation pool slot of %zu bytes is smaller than its stage (a planning bug)", a->bytes);
    // The RoPE tables come first in every shape: carving again keeps them in place.
    activation_floats(m, a->B, a->S, a, share_scratch == NULL);
    if (share_scratch) share_scratch_of(a, m, share_scratch);
}

void activations_free(Activations *a) {
    buf_free(a->pos_of);  // pos lives in the same block
    buf_free(a->arena);
    memset(a, 0, sizeof *a);
}

// ------------------------------------------------ weight-gradient stash

static size_t slot_floats(size_t values, int bf16) {
    const size_t floats = bf16 ? (values + 1) / 2 : values;
    return (floats + 15) / 16 * 16;
}

// values as bf16 halves in a slot where bf16, else values floats as they are.
static size_t half_or_floats(size_t values, int bf16) { return bf16 ? slot_floats(values, 1) : values; }

// A layer's q|k|v and attention output: fp32, or bf16 halves under m->att_bf16
// (rounded up to 16 floats, so every slot stays 64-byte aligned for the kernels).
size_t activations_qkv_slot(const LlamaModel *m, size_t N) {
    const size_t values = N * (size_t)(m->Hl + 2 * m->KVl) * m->hd;
    return half_or_floats(values, m->att_bf16);
}

size_t activations_attn_slot(const LlamaModel *m, size_t N) {
    const size_t values = N * (size_t)m->Hl * m->hd;
    return half_or_floats(values, m->att_bf16);
}

size_t activations_norm16_slot(const LlamaModel *m, size_t Nr) { return slot_floats(Nr * (size_t)m->D, 1); }

size_t activations_h16_slot(const LlamaModel *m, size_t N) { return slot_floats(N * (size_t)m->Fl, 1); }

size_t wstash_dgu_slot(const LlamaModel *m, size_t N) { return slot_floats(N * 2 * m->Fl, m->mlp_bf16); }

size_t wstash_down_slot(const LlamaModel *m, size_t Nr) {
    return half_or_floats(Nr * (size_t)m->D, m->dres16_mlp);
}

size_t wstash_o_slot(const LlamaModel *m, size_t Nr) {
    return half_or_floats(Nr * (size_t)m->D, m->dres16_o);
}

size_t wstash_dqkv_slot(const LlamaModel *m, size_t N) {
    return slot_floats(N * (size_t)(m->Hl + 2 * m->KVl) * m->hd, m->qkv_bf16);
}

// The stash's buffers and their sizes in floats, carved out of st->arena when set
// (the same 64-byte rounding as the activations); returns the total.
static size_t wstash_floats(const LlamaModel *m, StageUnits su, int B, int S, WeightGradStash *st) {
    Activations shape;
    memset(&shape, 0, sizeof shape);
    stage_shape(&shape, m, su);
    const size_t N = (size_t)B * S, Nr = (size_t)llama_rows(m, B * S), D = m->D;
    const size_t nl = (size_t)shape.nl;
    // dgu and dqkv reuse the layer's own gu and qkv (model/llama_split.c), except
    // under full recomputation, where those are the shared working layer, and dgu
    // under bf16 activations, where gu is bf16 (and read again by the W half); a
    // slot each per layer (wstash_dgu_slot, wstash_dqkv_slot). d_down and d_o hold the
    // residual stream's gradient as bf16 where the products read it so (dres16_mlp,
    // dres16_o: model/llama_split.c), half an fp32 slot.
    const size_t own = m->recompute == RECOMPUTE_FULL ? nl : 0, own_dgu = m->mlp_bf16 ? nl : own;
    const size_t d_down = wstash_down_slot(m, Nr), d_o = wstash_o_slot(m, Nr);
    struct {
        float **ptr;
        size_t n;
    } plan[] = {
        {&st->d_down, nl * d_down}, {&st->dgu, own_dgu * wstash_dgu_slot(m, N)}, {&st->d_ln2, nl * Nr * D},
        {&st->d_o, nl * d_o},       {&st->dqkv, own * wstash_dqkv_slot(m, N)},   {&st->d_ln1, nl * Nr * D},
        {&st->norm_w, nl * 2 * D},  {&st->d_lnf, (shape.has_head ? 1 : 0) * Nr * D},
        {&st->d_embed, (shape.has_embed ? 1 : 0) * Nr * D},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        if (st->arena && plan[i].n) *plan[i].ptr = st->arena + total;
        total += (plan[i].n + 15) / 16 * 16;
    }
    return total;
}

size_t wstash_bytes(const LlamaModel *m, StageUnits su, int B, int S) {
    WeightGradStash tmp;
    memset(&tmp, 0, sizeof tmp);
    return wstash_floats(m, su, B, S, &tmp) * sizeof(float);
}

void wstash_alloc(WeightGradStash *st, const LlamaModel *m, StageUnits su, int B, int S) {
    memset(st, 0, sizeof *st);
    st->bytes = wstash_bytes(m, su, B, S);
    st->arena = buf_alloc(MEM_ACTIVATIONS, st->bytes, "weight-gradient stash");
    wstash_floats(m, su, B, S, st);
}

void wstash_free(WeightGradStash *st) {
    buf_free(st->arena);
    memset(st, 0, sizeof *st);
}
