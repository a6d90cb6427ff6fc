// tests/unit/test_moe.c — the mixture-of-experts block (model/moe.h) and its kernels
// (ops/ops.h, "mixture of experts"), written from those headers' comments alone.
//
//   * routing: top-k by decreasing probability with ties to the lower expert index,
//     weights renormalised over the chosen k; the grouping is a stable sort by expert
//     with row_of and slot_of inverse to each other;
//   * forward: moe_forward (fp32, one GEMM pair per expert) against a per-token loop
//     in double (softmax, top-k, k SwiGLU experts, weighted sum), max-abs normalised;
//   * backward: the scalar loss L = sum(out * R) + sum_{t,e} G[b(t), e] * probs[t, e]
//     (G stands for the load-balancing loss's gradient, aux_g), so moe_backward is fed
//     dout = R and aux_g = G, and is compared with central finite differences of the
//     SAME double loop, for every element of x, the router and every expert; the
//     weight gradients are pre-filled (they are +=), dx with garbage (overwritten).
//     Routing is piecewise constant; the inputs are drawn so that every token's k-th
//     and (k+1)-th probabilities differ by far more than a step moves them.
//   * an expert with no tokens: its rows are empty, its gradient untouched;
//   * the load-balancing loss: moe_route_stats + moe_aux_loss over L layers of a
//     sequence against transformers' load_balancing_loss_func written out here
//     (concatenate the layers' tokens, mean of the top-k one-hot mask and of the
//     probabilities, E * sum of their product), and its gradient against finite
//     differences of that formula with the counts held (they have no gradient).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/moe.h"
#include "ops/ops.h"

#define TOL_FWD 1e-5
#define TOL_BWD 1e-5

static uint64_t rng_state;
static double rng_unif(void) {  // splitmix64 -> [0, 1)
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
static void fill_d(double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_unif();
}
static float *to_f(const double *x, size_t n) {
    float *f = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}
// max_i |a_i - b_i| / max_i |b_i|
static double nerr(const float *a, const double *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!isfinite(d)) return INFINITY;
        md = d > md ? d : md;
        mb = fabs(b[i]) > mb ? fabs(b[i]) : mb;
    }
    return md / (mb > 1e-300 ? mb : 1e-300);
}

// ------------------------------------------------------------ the double loop

typedef struct {
    int B, S, D, F, E, K;
    double *x, *router, *experts, *R, *G;  // (N,D) (E,D) (E,3FD) (N,D) (B,E)
} Block;

// Top-k of p(E) by decreasing value, ties to the lower index.
static void topk_d(const double *p, int E, int K, int *sel) {
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
    }
}

static void softmax_d(const double *x, const double *router, int D, int E, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) {
        double z = 0;
        for (int d = 0; d < D; d++) z += router[(size_t)e * D + d] * x[d];
        p[e] = z;
        mx = z > mx ? z : mx;
    }
    for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
}

// out(N, D) of the block (when out is not NULL); returns L.
static double block_loss(const Block *b, double *out) {
    const int N = b->B * b->S, D = b->D, F = b->F, E = b->E, K = b->K;
    double L = 0, p[64], gate[64], up[64], y[64];
    int sel[64];
    for (int t = 0; t < N; t++) {
        const double *x = b->x + (size_t)t * D;
        softmax_d(x, b->router, D, E, p);
        topk_d(p, E, K, sel);
        double z = 0;
        for (int j = 0; j < K; j++) z += p[sel[j]];
        for (int d = 0; d < D; d++) y[d] = 0;
        for (int j = 0; j < K; j++) {
            const double *w1 = b->experts + (size_t)sel[j] * 3 * F * D, *w3 = w1 + (size_t)F * D,
                         *w2 = w3 + (size_t)F * D;
            for (int f = 0; f < F; f++) {
                gate[f] = up[f] = 0;
                for (int d = 0; d < D; d++) {
                    gate[f] += w1[(size_t)f * D + d] * x[d];
                    up[f] += w3[(size_t)f * D + d] * x[d];
                }
                gate[f] = gate[f] / (1 + exp(-gate[f])) * up[f];  // silu(gate) * up
            }
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int f = 0; f < F; f++) o += w2[(size_t)d * F + f] * gate[f];
                y[d] += p[sel[j]] / z * o;
            }
        }
        for (int d = 0; d < D; d++) {
            if (out) out[(size_t)t * D + d] = y[d];
            L += y[d] * b->R[(size_t)t * D + d];
        }
        for (int e = 0; e < E; e++) L += b->G[(size_t)(t / b->S) * E + e] * p[e];
    }
    return L;
}

static void fd(Block *b, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double lp = block_loss(b, NULL);
        x[i] = x0 - h;
        double lm = block_loss(b, NULL);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}

// Smallest gap between the k-th and (k+1)-th probability over the tokens (K < E).
static double routing_margin(const Block *b) {
    double p[64], m = INFINITY;
    int sel[64];
    for (int t = 0; t < b->B * b->S; t++) {
        softmax_d(b->x + (size_t)t * b->D, b->router, b->D, b->E, p);
        topk_d(p, b->E, b->K + 1, sel);
        double gap = p[sel[b->K - 1]] - p[sel[b->K]];
        m = gap < m ? gap : m;
    }
    return m;
}

static void test_block(int B, int S, int D, int F, int E, int K, uint64_t seed) {
    const int N = B * S;
    const size_t nx = (size_t)N * D, nr = (size_t)E * D, ne = (size_t)E * 3 * F * D;
    Block b = {B, S, D, F, E, K, malloc(nx * 8), malloc(nr * 8), malloc(ne * 8), malloc(nx * 8),
               malloc((size_t)B * E * 8)};
    rng_state = seed;
    for (int tries = 0;; tries++) {  // redraw until no token sits near a routing boundary
        fill_d(b.x, nx, -1, 1);
        fill_d(b.router, nr, -1.5, 1.5);
        if (K == E || routing_margin(&b) > 1e-3) break;
        if (tries > 100) { CHECK(0, "moe block: could not draw inputs away from routing ties"); return; }
    }
    fill_d(b.experts, ne, -0.6, 0.6);
    fill_d(b.R, nx, -1, 1);
    fill_d(b.G, (size_t)B * E, -0.5, 0.5);
    double *ref = malloc(nx * 8);
    block_loss(&b, ref);

    const MoeDims md = {N, B, S, D, F, E, K, {1, 0}};
    float *saved = calloc(moe_saved_floats(&md), 4), *scr = calloc(moe_scratch_floats(&md), 4);
    const MoeSaved ms = moe_saved_at(&md, saved);
    const MoeScratch sc = moe_scratch_at(&md, scr);
    float *x = to_f(b.x, nx), *router = to_f(b.router, nr), *experts = to_f(b.experts, ne);
    float *out = malloc(nx * 4), *R = to_f(b.R, nx), *G = to_f(b.G, (size_t)B * E);
    for (size_t i = 0; i < nx; i++) out[i] = 1e30f;  // overwritten
    moe_forward(&md, &ms, &sc, out, x, router, experts);
    double e = nerr(out, ref, nx);
    CHECK(e < TOL_FWD, "moe_forward N=%d D=%d F=%d E=%d K=%d vs per-token double loop (err %.2e)", N, D, F,
          E, K, e);
    int sorted = 1, inverse = 1;
    for (int ex = 0; ex < E; ex++)
        for (int r = ms.start[ex]; r < ms.start[ex + 1]; r++) {
            sorted &= ms.sel[ms.slot_of[r]] == ex;                                   // expert ex's block
            if (r > ms.start[ex]) sorted &= ms.slot_of[r] > ms.slot_of[r - 1];     // tokens in order
        }
    for (int q = 0; q < N * K; q++) inverse &= ms.slot_of[ms.row_of[q]] == q;
    CHECK(sorted && inverse && ms.start[0] == 0 && ms.start[E] == N * K,
          "moe_group: rows grouped by expert, tokens in order, row_of and slot_of inverse");

    // Backward: weight gradients pre-filled (+=), dx garbage (overwritten).
    float *dx = malloc(nx * 4), *drouter = malloc(nr * 4), *dexp = malloc(ne * 4);
    double *pre_r = malloc(nr * 8), *pre_e = malloc(ne * 8);
    fill_d(pre_r, nr, -1, 1);
    fill_d(pre_e, ne, -1, 1);
    for (size_t i = 0; i < nr; i++) drouter[i] = (float)pre_r[i];
    for (size_t i = 0; i < ne; i++) dexp[i] = (float)pre_e[i];
    for (size_t i = 0; i < nx; i++) dx[i] = -1e30f;
    moe_backward(&md, &ms, &sc, dx, drouter, dexp, R, x, router, experts, G);
    for (size_t i = 0; i < nr; i++) drouter[i] = (float)((double)drouter[i] - (float)pre_r[i]);
    for (size_t i = 0; i < ne; i++) dexp[i] = (float)((double)dexp[i] - (float)pre_e[i]);
    double *gx = malloc(nx * 8), *gr = malloc(nr * 8), *ge = malloc(ne * 8);
    fd(&b, b.x, nx, gx);
    fd(&b, b.router, nr, gr);
    fd(&b, b.experts, ne, ge);
    double ex_ = nerr(dx, gx, nx), er = nerr(drouter, gr, nr), ee = nerr(dexp, ge, ne);
    CHECK(ex_ < TOL_BWD, "moe_backward dx (overwritten) vs finite differences (err %.2e)", ex_);
    CHECK(er < TOL_BWD, "moe_backward router gradient += (renormalisation, softmax and aux_g) vs FD (err %.2e)", er);
    CHECK(ee < TOL_BWD, "moe_backward expert gradients += vs FD (err %.2e)", ee);
    // Experts no token chose: no rows, gradient exactly as pre-filled.
    int idle = 0, untouched = 1;
    for (int ex = 0; ex < E; ex++)
        if (ms.start[ex + 1] == ms.start[ex]) {
            idle++;
            for (size_t i = 0; i < (size_t)3 * F * D; i++) untouched &= dexp[(size_t)ex * 3 * F * D + i] == 0.0f;
        }
    if (E > N * K) CHECK(idle > 0 && untouched, "moe_backward: %d idle experts keep their gradient", idle);
    free(b.x), free(b.router), free(b.experts), free(b.R), free(b.G), free(ref), free(saved), free(scr);
    free(x), free(router), free(experts), free(out), free(R), free(G), free(dx), free(drouter), free(dexp);
    free(pre_r), free(pre_e), free(gx), free(gr), free(ge);
}

// Ties: equal probabilities go to the lower expert index, weights renormalised.
static void test_ties(void) {
    float p[2][4] = {{1, 3, 3, 0}, {0, 0, 0, 0}}, w[2][3];
    int32_t s[2][3];
    moe_route(p[0], s[0], w[0], 1, 4, 2);
    CHECK(s[0][0] == 1 && s[0][1] == 2 && fabsf(w[0][0] - 0.5f) < 1e-7f && fabsf(w[0][1] - 0.5f) < 1e-7f,
          "moe_route: a tie between experts 1 and 2 picks 1 first (got %d, %d), weights 1/2 each", s[0][0],
          s[0][1]);
    moe_route(p[1], s[1], w[1], 1, 4, 3);
    CHECK(s[1][0] == 0 && s[1][1] == 1 && s[1][2] == 2 && fabsf(w[1][0] + w[1][1] + w[1][2] - 1) < 1e-6f &&
              fabsf(p[1][3] - 0.25f) < 1e-7f,
          "moe_route: four equal logits, k = 3 picks experts 0, 1, 2 (got %d %d %d), probs 1/4", s[1][0],
          s[1][1], s[1][2]);
}

// The load-balancing loss of one sequence over L layers, as transformers' (>= 4.38)
// load_balancing_loss_func computes it on the concatenated (L*S, E) router logits:
//   routing_weights = softmax(logits); selected = topk(routing_weights, k)
//   tokens_per_expert = mean(one_hot(selected), dim 0)     (k, E)
//   router_prob = mean(routing_weights, dim 0)             (E)
//   E * sum(tokens_per_expert * router_prob)
static double hf_aux(const double *probs, const int *sel, int T, int E, int K) {
    double loss = 0;
    for (int j = 0; j < K; j++)
        for (int e = 0; e < E; e++) {
            double tok = 0, prob = 0;
            for (int t = 0; t < T; t++) {
                tok += sel[t * K + j] == e;
                prob += probs[(size_t)t * E + e];
            }
            loss += (tok / T) * (prob / T);
        }
    return E * loss;
}

static void test_aux(void) {
    enum { B = 2, S = 6, E = 5, K = 2, L = 3 };
    float count[B * E] = {0}, psum[B * E] = {0}, auxg[B * E];
    double probs_d[B][L * S * E];
    int sel_d[B][L * S * K];
    rng_state = 99;
    for (int l = 0; l < L; l++) {  // each layer's probabilities of the B*S tokens
        float p[B * S * E], w[B * S * K];
        int32_t s[B * S * K];
        for (int i = 0; i < B * S * E; i++) p[i] = (float)(4 * rng_unif() - 2);  // logits
        moe_route(p, s, w, B * S, E, K);
        moe_route_stats(count, psum, p, s, B, S, E, K);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < S; t++) {
                for (int e = 0; e < E; e++) probs_d[b][((size_t)l * S + t) * E + e] = p[((size_t)b * S + t) * E + e];
                for (int j = 0; j < K; j++) sel_d[b][(l * S + t) * K + j] = s[(b * S + t) * K + j];
            }
    }
    const float g_scale = 0.37f;
    double got = moe_aux_loss(auxg, count, psum, B, E, (double)L * S, g_scale), want = 0;
    for (int b = 0; b < B; b++) want += hf_aux(probs_d[b], sel_d[b], L * S, E, K);
    CHECK(rel_diff(got, want) < 1e-6, "moe_aux_loss: sum over sequences = transformers' formula per "
          "sequence over its L layers (%.9g vs %.9g)", got, want);
    double worst = 0;  // d(g_scale * aux_b) / d probs[b][pair, e], counts held, by central differences
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++) {
            double *p = &probs_d[b][(size_t)4 * E + e], p0 = *p, h = 1e-6;
            *p = p0 + h;
            double lp = hf_aux(probs_d[b], sel_d[b], L * S, E, K);
            *p = p0 - h;
            double lm = hf_aux(probs_d[b], sel_d[b], L * S, E, K);
            *p = p0;
            worst = fmax(worst, rel_diff(auxg[b * E + e], g_scale * (lp - lm) / (2 * h)));
        }
    CHECK(worst < 1e-5, "moe_aux_loss: aux_g = g_scale * d aux / d probability vs FD (worst rel %.2e)", worst);
}

int main(void) {
    test_ties();
    test_aux();
    test_block(2, 5, 6, 4, 4, 2, 1);   // Mixtral's k = 2
    test_block(1, 7, 5, 3, 6, 1, 2);   // top-1 over 6 experts: some experts get nothing
    test_block(2, 3, 4, 5, 8, 1, 3);   // 6 tokens, 8 experts: idle experts for certain
    test_block(1, 4, 4, 3, 3, 3, 4);   // k = E: every expert takes every token
    return check_summary();
}
