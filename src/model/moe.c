// model/moe.c — forward and backward of the mixture-of-experts block (model/moe.h):
// router and top-k (ops), grouping by expert, then per expert two GEMMs over its
// contiguous rows, SwiGLU, and the weighted combine.
#include "model/moe.h"

#include "ops/ops.h"
#include "util.h"

#define ALIGN16(n) (((n) + 15) / 16 * 16)  // floats: keep every piece 64-byte aligned

size_t moe_expert_rows(const MoeDims *d) {
    const int El = d->E / d->ep.size;
    return d->ep.size > 1 ? ep_max_rows(&d->ep, d->N, d->K, El) : (size_t)d->N * d->K;
}

static size_t route_ints(const MoeDims *d) {
    return d->ep.size > 1 ? ep_route_ints(&d->ep, d->E / d->ep.size, moe_expert_rows(d)) : 0;
}

size_t moe_saved_floats(const MoeDims *d) {
    const size_t N = (size_t)d->N, NK = N * d->K, E = (size_t)d->E, R = moe_expert_rows(d);
    const size_t xe = d->ep.size > 1 ? R * d->D : 0;
    return ALIGN16(N * E) + 2 * ALIGN16(N * d->K) + ALIGN16(E + 1) + 2 * ALIGN16(NK) +
           ALIGN16(R * 2 * d->F) + ALIGN16(R * d->F) + ALIGN16(NK * d->D) + ALIGN16(xe) + ALIGN16(route_ints(d));
}

size_t moe_scratch_floats(const MoeDims *d) {
    const size_t N = (size_t)d->N, NK = N * d->K, R = moe_expert_rows(d);
    const size_t ye = d->ep.size > 1 ? R * d->D : 0;
    return 2 * ALIGN16(NK * d->D) + ALIGN16(R * d->F) + ALIGN16(R * 2 * d->F) + ALIGN16(N * d->E) +
           ALIGN16(N * d->K) + 2 * ALIGN16(ye);
}

MoeSaved moe_saved_at(const MoeDims *d, float *base) {
    const size_t N = (size_t)d->N, NK = N * d->K, E = (size_t)d->E, R = moe_expert_rows(d);
    MoeSaved s;
    float *p = base;
    s.probs = p, p += ALIGN16(N * E);
    s.wts = p, p += ALIGN16(N * d->K);
    s.sel = (int32_t *)p, p += ALIGN16(N * d->K);
    s.start = (int32_t *)p, p += ALIGN16(E + 1);
    s.slot_of = (int32_t *)p, p += ALIGN16(NK);
    s.row_of = (int32_t *)p, p += ALIGN16(NK);
    s.gu = p, p += ALIGN16(R * 2 * d->F);
    s.h = p, p += ALIGN16(R * d->F);
    s.y = p, p += ALIGN16(NK * d->D);
    s.xe = d->ep.size > 1 ? p : NULL, p += ALIGN16(d->ep.size > 1 ? R * d->D : 0);
    s.route = d->ep.size > 1 ? (int32_t *)p : NULL;
    return s;
}

MoeScratch moe_scratch_at(const MoeDims *d, float *base) {
    const size_t N = (size_t)d->N, NK = N * d->K, R = moe_expert_rows(d);
    const size_t ye = d->ep.size > 1 ? R * d->D : 0;
    MoeScratch s;
    float *p = base;
    s.xg = p, p += ALIGN16(NK * d->D);
    s.dy = p, p += ALIGN16(NK * d->D);
    s.dh = p, p += ALIGN16(R * d->F);
    s.dgu = p, p += ALIGN16(R * 2 * d->F);
    s.dlogits = p, p += ALIGN16(N * d->E);
    s.dwts = p, p += ALIGN16(N * d->K);
    s.ye = ye ? p : NULL, p += ALIGN16(ye);
    s.stage = ye ? p : NULL;
    s.ep_seconds = NULL;
    return s;
}

// The layer's expert-parallel route, carved from its saved cells (after ep_route
// filled them in the forward, rows is the regrouped block's length).
static EpRoute route_of(const MoeDims *d, const MoeSaved *s) {
    const int El = d->E / d->ep.size;
    EpRoute rt = ep_route_at(&d->ep, El, moe_expert_rows(d), s->route);
    rt.rows = rt.estart[El];
    return rt;
}

// Expert e's weights: w1|w3 (2F, D) — one fused gate|up GEMM — then w2 (D, F).
static const float *expert_w13(const MoeDims *d, const float *experts, int e) {
    return experts + (size_t)e * 3 * d->F * d->D;
}
static const float *expert_w2(const MoeDims *d, const float *experts, int e) {
    return experts + ((size_t)e * 3 + 2) * d->F * d->D;
}

void moe_forward(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *out,
                 const float *x, const float *router, const float *experts) {
    const int N = d->N, D = d->D, F = d->F, E = d->E, K = d->K;
    matmul_forward(s->probs, x, router, N, D, E);  // router logits, then probabilities
    moe_route(s->probs, s->sel, s->wts, N, E, K);
    moe_group(s->start, s->slot_of, s->row_of, s->sel, N, E, K);
    moe_dispatch(sc->xg, x, s->slot_of, N, K, D);
    if (d->ep.size > 1) {  // the rows travel to the ranks of their experts and back
        const int El = E / d->ep.size;  // experts and dexperts: this rank's El
        EpRoute rt = ep_route_at(&d->ep, El, moe_expert_rows(d), s->route);
        double t0 = now_seconds();
        ep_route(&d->ep, &rt, s->start, El);
        ep_dispatch(&d->ep, &rt, sc->xg, s->xe, sc->stage, D);
        double t_exch = now_seconds() - t0;
        for (int e = 0; e < El; e++) {
            const size_t r0 = (size_t)rt.estart[e];
            const int n = rt.estart[e + 1] - rt.estart[e];
            if (n == 0) continue;
            matmul_forward(s->gu + r0 * 2 * F, s->xe + r0 * D, expert_w13(d, experts, e), n, D, 2 * F);
            swiglu_forward(s->h + r0 * F, s->gu + r0 * 2 * F, n, F);
            matmul_forward(sc->ye + r0 * D, s->h + r0 * F, expert_w2(d, experts, e), n, F, D);
        }
        t0 = now_seconds();
        ep_combine(&d->ep, &rt, sc->ye, s->y, sc->stage, D);
        if (sc->ep_seconds) *sc->ep_seconds += t_exch + now_seconds() - t0;
        if (out) moe_combine(out, s->y, s->wts, s->row_of, N, K, D);
        return;
    }
    for (int e = 0; e < E; e++) {  // each expert over its contiguous rows r0 .. r0+n-1
        const size_t r0 = (size_t)s->start[e];
        const int n = s->start[e + 1] - s->start[e];
        if (n == 0) continue;
        matmul_forward(s->gu + r0 * 2 * F, sc->xg + r0 * D, expert_w13(d, experts, e), n, D, 2 * F);
        swiglu_forward(s->h + r0 * F, s->gu + r0 * 2 * F, n, F);
        matmul_forward(s->y + r0 * D, s->h + r0 * F, expert_w2(d, experts, e), n, F, D);
    }
    if (out) moe_combine(out, s->y, s->wts, s->row_of, N, K, D);
}

void moe_backward_combine(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc,
                          const float *dout) {
    // out_t = sum_j w_tj y_{row(t,j)}: dy = w * dout, dw = <dout, y>.
    moe_combine_backward(sc->dy, sc->dwts, dout, s->y, s->wts, s->row_of, d->N, d->K, d->D);
}

void moe_backward_experts(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *dx,
                          float *dexperts, const float *x, const float *experts) {
    const int N = d->N, D = d->D, F = d->F, E = d->E, K = d->K;
    if (d->ep.size > 1) {  // output gradients along the dispatch path, input gradients back
        const int El = E / d->ep.size;  // experts and dexperts: this rank's El
        const EpRoute rt = route_of(d, s);
        double t0 = now_seconds();
        ep_dispatch(&d->ep, &rt, sc->dy, sc->ye, sc->stage, D);
        double t_exch = now_seconds() - t0;
        for (int e = 0; e < El; e++) {
            const size_t r0 = (size_t)rt.estart[e];
            const int n = rt.estart[e + 1] - rt.estart[e];
            if (n == 0) continue;
            float *dw13 = dexperts + (size_t)e * 3 * F * D, *dw2 = dw13 + (size_t)2 * F * D;
            matmul_backward(sc->dh + r0 * F, dw2, sc->ye + r0 * D, s->h + r0 * F,
                            expert_w2(d, experts, e), n, F, D, 0);
            swiglu_backward(sc->dgu + r0 * 2 * F, sc->dh + r0 * F, s->gu + r0 * 2 * F, n, F);
            matmul_backward(sc->ye + r0 * D, dw13, sc->dgu + r0 * 2 * F, s->xe + r0 * D,
                            expert_w13(d, experts, e), n, D, 2 * F, 0);
        }
        t0 = now_seconds();
        ep_combine(&d->ep, &rt, sc->ye, sc->xg, sc->stage, D);  // each slot's input gradient, home
        if (sc->ep_seconds) *sc->ep_seconds += t_exch + now_seconds() - t0;
        zero_f32(dx, (size_t)N * D);
        moe_dispatch_backward(dx, sc->xg, s->row_of, N, K, D);
        return;
    }
    moe_dispatch(sc->xg, x, s->slot_of, N, K, D);  // the dispatched inputs again (not kept)
    for (int e = 0; e < E; e++) {
        const size_t r0 = (size_t)s->start[e];
        const int n = s->start[e + 1] - s->start[e];
        if (n == 0) continue;
        float *dw13 = dexperts + (size_t)e * 3 * F * D, *dw2 = dw13 + (size_t)2 * F * D;
        matmul_backward(sc->dh + r0 * F, dw2, sc->dy + r0 * D, s->h + r0 * F, expert_w2(d, experts, e),
                        n, F, D, 0);
        swiglu_backward(sc->dgu + r0 * 2 * F, sc->dh + r0 * F, s->gu + r0 * 2 * F, n, F);
        // The expert's input gradient overwrites its rows of dy (read above, no longer needed).
        matmul_backward(sc->dy + r0 * D, dw13, sc->dgu + r0 * 2 * F, sc->xg + r0 * D,
                        expert_w13(d, experts, e), n, D, 2 * F, 0);
    }
    // Rows of a token's k experts summed back to the token.
    zero_f32(dx, (size_t)N * D);
    moe_dispatch_backward(dx, sc->dy, s->row_of, N, K, D);
}

void moe_backward_router(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *drouter,
                         const float *x, const float *aux_g) {
    moe_route_backward(sc->dlogits, s->probs, s->sel, s->wts, sc->dwts, aux_g, d->N, d->S, d->E, d->K);
    matmul_backward(NULL, drouter, sc->dlogits, x, NULL, d->N, d->D, d->E, 0);
}

void moe_backward(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *dx,
                  float *drouter, float *dexperts, const float *dout, const float *x,
                  const float *router, const float *experts, const float *aux_g) {
    moe_backward_combine(d, s, sc, dout);
    moe_backward_experts(d, s, sc, dx, dexperts, x, experts);
    moe_backward_router(d, s, sc, drouter, x, aux_g);
    matmul_backward(dx, NULL, sc->dlogits, x, router, d->N, d->D, d->E, 1);  // dx += dlogits @ Wg
}
