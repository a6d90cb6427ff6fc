// model/param_access.c — ParamAccess over whole buffers (param_access.h).
#include "model/param_access.h"

static const float *whole_params(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->params + wb->model->unit_lo[unit];
}

static float *whole_grads(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->grads + wb->model->unit_lo[unit];
}

static void whole_nothing(void *ctx, int unit) {  // nothing to release or reduce
    (void)ctx;
    (void)unit;
}

static size_t piece_lo(const WholeBuffers *wb, int unit, int piece) {
    size_t lo, hi;
    llama_unit_piece(wb->model, unit, 0, piece, &lo, &hi);  // whole units: piece_max 0
    return lo;
}

static const float *whole_piece(void *ctx, int unit, int piece) {
    WholeBuffers *wb = ctx;
    return wb->params + piece_lo(wb, unit, piece);
}

static float *whole_piece_grads(void *ctx, int unit, int piece) {
    WholeBuffers *wb = ctx;
    return wb->grads + piece_lo(wb, unit, piece);
}

static void whole_piece_nothing(void *ctx, int unit, int piece) {
    (void)ctx;
    (void)unit;
    (void)piece;
}

ParamAccess param_access_whole(WholeBuffers *wb) {
    ParamAccess pa = {wb,           0,          whole_params,      whole_nothing,      whole_grads,
                      whole_nothing, whole_piece, whole_piece_nothing, whole_piece_grads, whole_piece_nothing};
    return pa;
}

// ------------------------------------------------------------------ pieces

int llama_unit_split_experts(const LlamaModel *m, int u) {
    return m->E > 0 && m->ep.size > 1 && u >= 1 && u <= m->L;
}

int llama_unit_n_pieces(const LlamaModel *m, int u, size_t piece_max) {
    const size_t size = m->unit_lo[u + 1] - m->unit_lo[u], D = (size_t)m->D;
    if (llama_unit_split_experts(m, u)) return 2;
    if (piece_max == 0 || size <= piece_max || (u != 0 && u != m->L + 1)) return 1;
    const size_t per = piece_max / D > 0 ? piece_max / D : 1;  // rows per piece
    if (u == 0) return (int)((size / D + per - 1) / per);
    return 1 + (int)((size / D - 1 + per - 1) / per);  // the norm, then the head rows
}

void llama_unit_piece(const LlamaModel *m, int u, size_t piece_max, int k, size_t *lo, size_t *hi) {
    const size_t start = m->unit_lo[u], end = m->unit_lo[u + 1], D = (size_t)m->D;
    if (llama_unit_split_experts(m, u)) {  // the dense part, then the experts
        const size_t experts = m->layer[u - 1].experts;
        *lo = k == 0 ? start : experts;
        *hi = k == 0 ? experts : end;
        return;
    }
    if (llama_unit_n_pieces(m, u, piece_max) == 1) {
        *lo = start;
        *hi = end;
        return;
    }
    const size_t per = piece_max / D > 0 ? piece_max / D : 1;
    size_t rows0 = start;  // where the row runs start
    if (u == m->L + 1) {   // piece 0 is the final norm
        if (k == 0) {
            *lo = start;
            *hi = start + D;
            return;
        }
        rows0 = start + D;
        k--;
    }
    *lo = rows0 + (size_t)k * per * D;
    *hi = *lo + per * D < end ? *lo + per * D : end;
}
