// tests/unit/test_ops_loss_optim.c — independent tests of SwiGLU (fp32, and on
// gate|up kept as bf16), the cross-entropy (fp32 and with its gradient as bf16),
// the gradient norm's sum of squares and scale, and AdamW, all of src/ops/ops.h,
// by test_ops.c's method: naive double loops and central finite differences
// (ops_reference.h).

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/bf16.h"
#include "ops/ops.h"
#include "ops_reference.h"

// ------------------------------------------------------------------ SwiGLU ----

typedef struct { double *gu, *R, *out; int N, I; } swi_ctx;
static double swi_loss(void *p) {
    swi_ctx *c = p;
    swiglu_d(c->out, c->gu, c->N, c->I);
    return dot_d(c->out, c->R, (size_t)c->N * c->I);
}

static void test_swiglu(void) {
    for (int k = 0; k < 2; k++) {
        int N = 7, I = 10;
        size_t ngu = (size_t)N * 2 * I, no = (size_t)N * I;
        rng_seed(70 + k);
        float *gu = fnew(ngu), *out = fnew(no), *R = fnew(no), *dgu = fnew(ngu);
        fill(gu, ngu, -4, 4);
        if (k == 1)  // saturated gates: exp(-gate) overflows fp32 for gate < -88
            for (int n = 0; n < N; n++)
                for (int i = 0; i < I; i += 2) gu[(size_t)n * 2 * I + i] = (i % 4 ? 100.0f : -100.0f) + (float)n;
        fill(R, no, -1, 1);
        fill(out, no, 5, 6);
        swiglu_forward(out, gu, N, I);
        swi_ctx c = {to_d(gu, ngu), to_d(R, no), dnew(no), N, I};
        double *ref = dnew(no);
        swiglu_d(ref, c.gu, N, I);
        double e = nerr_f(out, ref, no);
        const char *what = k ? "with gates +-100" : "";
        CHECK(e < TOL_FWD, "swiglu_forward silu(gate)*up %s vs double loop (err %.2e)", what, e);
        double *g = dnew(ngu);
        fd_grad(swi_loss, &c, c.gu, ngu, g);
        fill(dgu, ngu, 200, 300);  // garbage: dgu is overwritten
        swiglu_backward(dgu, R, gu, N, I);
        double eb = nerr_f(dgu, g, ngu);
        CHECK(eb < TOL_BWD, "swiglu_backward %s vs FD, overwrites garbage dgu (err %.2e)", what, eb);
        tfree_all();
    }
}

// bf16 activations: round_to_bf16 rounds each value to a nearest bf16 (the
// shared bit trick, and within half a bf16 ulp: 8 significant bits, so 2^-8 of |x|); the SwiGLU ops on a
// gu kept as bf16 equal the fp32 ops on the widened values bit for bit, the
// forward's output rounded to bf16 (a row of 300 values: wider than the 256-value
// spans the CPU widens at a time), and differ from the fp32 ops on the unrounded
// gu (the rounding is not lost); the products with a bf16 output, input or
// output gradient equal the fp32 product rounded, or of the widened operand, bit
// for bit.
static void test_swiglu_bf16(void) {
    const int N = 5, F = 300;
    const size_t ngu = (size_t)N * 2 * F, no = (size_t)N * F;
    rng_seed(77);
    float *gu = fnew(ngu), *wide = fnew(ngu), *dout = fnew(no), *a = fnew(no), *b = fnew(no);
    float *da = fnew(ngu);
    uint16_t *gu16 = talloc(ngu * sizeof(uint16_t)), *a16 = talloc(no * sizeof(uint16_t));
    uint16_t *b16 = talloc(no * sizeof(uint16_t));
    fill(gu, ngu, -4, 4);
    fill(dout, no, -1, 1);
    round_to_bf16(gu16, gu, ngu);
    size_t same = 0, near = 0, changed = 0;
    for (size_t i = 0; i < ngu; i++) {
        wide[i] = bf16_to_f32(gu16[i]);
        same += gu16[i] == bf16_from_f32(gu[i]);
        near += fabsf(wide[i] - gu[i]) <= ldexpf(fabsf(gu[i]), -8);
        changed += wide[i] != gu[i];
    }
    CHECK(same == ngu && near == ngu && changed > ngu / 2,
          "round_to_bf16: %zu of %zu the nearest bf16 (%zu within 2^-8 relative, %zu changed)", same, ngu, near,
          changed);
    for (size_t i = 0; i < no; i++) b16[i] = 0x7fc0;  // garbage (NaN): out is overwritten
    swiglu_forward(a, wide, N, F);
    swiglu_forward_bf16(b16, gu16, N, F);
    round_to_bf16(a16, a, no);
    CHECK(!memcmp(a16, b16, no * sizeof(uint16_t)),
          "swiglu_forward_bf16 = swiglu_forward of the widened gu rounded to bf16, bit for bit");
    widen_from_bf16(b, b16, no);
    size_t exact = 0;
    for (size_t i = 0; i < no; i++) exact += b[i] == bf16_to_f32(b16[i]);
    CHECK(exact == no, "widen_from_bf16: %zu of %zu values exact", exact, no);
    uint16_t *dgu16 = talloc(ngu * sizeof(uint16_t)), *dref16 = talloc(ngu * sizeof(uint16_t));
    for (size_t i = 0; i < ngu; i++) dgu16[i] = 0x7fc0;  // garbage (NaN): dgu16 is overwritten
    swiglu_backward(da, dout, wide, N, F);
    swiglu_backward_to_bf16(dgu16, dout, gu16, N, F);
    round_to_bf16(dref16, da, ngu);
    CHECK(!memcmp(dgu16, dref16, ngu * sizeof(uint16_t)),
          "swiglu_backward_to_bf16 = swiglu_backward of the widened gu rounded to bf16, bit for bit");
    swiglu_forward(a, gu, N, F);
    double e = 0.0, top = 0.0;
    for (size_t i = 0; i < no; i++) e = fmax(e, fabs((double)a[i] - b[i])), top = fmax(top, fabs((double)a[i]));
    CHECK(e / top > 1e-4 && e / top < 2e-2,
          "swiglu_forward_bf16 differs from the fp32 op on the unrounded gu by %.2e relative (max-norm)", e / top);
    // matmul_forward_bf16 on the CPU: the bf16 input x16 (N, I) widened into its
    // scratch, the fp32 product into the other, rounded; the input's scratch may be
    // x16's own buffer (widened in place), with the same result.
    const int I = 24;
    float *x = fnew((size_t)N * I), *w = fnew((size_t)2 * F * I), *y = fnew(ngu), *scr = fnew(ngu);
    float *xs = fnew((size_t)N * I), *room = fnew((size_t)N * I);
    uint16_t *y16 = talloc(ngu * sizeof(uint16_t)), *x16 = talloc((size_t)N * I * sizeof(uint16_t));
    fill(x, (size_t)N * I, -1, 1);
    fill(w, (size_t)2 * F * I, -1, 1);
    round_to_bf16(x16, x, (size_t)N * I);
    widen_from_bf16(x, x16, (size_t)N * I);  // x: the widened input from here on
    fill(scr, ngu, 7, 8);
    matmul_forward(y, x, w, N, I, 2 * F);
    matmul_forward_bf16(y16, scr, x16, xs, w, N, I, 2 * F);
    round_to_bf16(gu16, y, ngu);
    int ok = !memcmp(scr, y, ngu * sizeof(float)) && !memcmp(y16, gu16, ngu * sizeof(uint16_t));
    memcpy(room, x16, (size_t)N * I * sizeof(uint16_t));
    matmul_forward_bf16(y16, scr, (uint16_t *)room, room, w, N, I, 2 * F);
    ok &= !memcmp(y16, gu16, ngu * sizeof(uint16_t)) && !memcmp(room, x, (size_t)N * I * sizeof(float));
    CHECK(ok, "matmul_forward_bf16 = round_to_bf16 of matmul_forward of the widened input, bit for bit (its "
              "scratch: the fp32 product), the input widened in place too");
    // matmul_*_from_bf16 on the CPU: the input widened into the scratch, then sgemm.
    // in16 = gu16 (N, 2F) as the input of a product 2F -> I (a down projection).
    float *dw1 = fnew((size_t)I * 2 * F), *dw2 = fnew((size_t)I * 2 * F), *o1 = fnew((size_t)N * I);
    float *o2 = fnew((size_t)N * I), *dx1 = fnew(ngu), *dx2 = fnew(ngu), *dy = fnew((size_t)N * I);
    fill(dy, (size_t)N * I, -1, 1);
    widen_from_bf16(y, gu16, ngu);  // the widened input, by hand
    matmul_forward(o1, y, w, N, 2 * F, I);
    fill(scr, ngu, 7, 8);
    matmul_forward_from_bf16(o2, gu16, scr, w, N, 2 * F, I);
    ok = !memcmp(o1, o2, (size_t)N * I * sizeof(float));
    memcpy(scr, gu16, ngu * sizeof(uint16_t));
    matmul_forward_from_bf16(o2, (uint16_t *)scr, scr, w, N, 2 * F, I);
    CHECK(ok && !memcmp(o1, o2, (size_t)N * I * sizeof(float)),
          "matmul_forward_from_bf16 = matmul_forward of the widened input, bit for bit (in place too)");
    // The residual add after the product (matmul_*_add): the product, then + add.
    float *res = fnew((size_t)N * I), *o3 = fnew((size_t)N * I);
    fill(res, (size_t)N * I, -3, 3);
    fill(scr, ngu, 7, 8);
    matmul_forward_from_bf16_add(o2, res, gu16, scr, w, N, 2 * F, I);
    matmul_forward_add(o3, res, y, w, N, 2 * F, I);
    ok = 1;
    for (size_t i = 0; i < (size_t)N * I; i++) {
        const float want = o1[i] + res[i];
        ok &= !memcmp(&o2[i], &want, sizeof want) && !memcmp(&o3[i], &want, sizeof want);
    }
    CHECK(ok, "matmul_forward_add and matmul_forward_from_bf16_add = the product + the residual, bit for bit");
    matmul_backward(dx1, dw1, dy, y, w, N, 2 * F, I, 0);
    fill(scr, ngu, 7, 8);
    matmul_backward_from_bf16(dx2, dw2, dy, gu16, scr, w, N, 2 * F, I, 0);
    CHECK(!memcmp(dx1, dx2, ngu * sizeof(float)) && !memcmp(dw1, dw2, (size_t)I * 2 * F * sizeof(float)),
          "matmul_backward_from_bf16 = matmul_backward of the widened input (din, dweight), bit for bit");
    // matmul_backward_bf16 on the CPU: the output gradient and the input widened
    // into their scratches, then sgemm. dout16 = dgu16 (N, 2F) as a gate|up
    // product's (I -> 2F) gradient, in16 = x16; din and dweight in one call and in
    // two, and the input widened in place: the same bits.
    float *din1 = fnew((size_t)N * I), *din2 = fnew((size_t)N * I), *gw1 = fnew((size_t)2 * F * I);
    float *gw2 = fnew((size_t)2 * F * I);
    widen_from_bf16(y, dgu16, ngu);  // the widened gradient, by hand
    matmul_backward(din1, gw1, y, x, w, N, I, 2 * F, 0);
    fill(scr, ngu, 7, 8);
    matmul_backward_bf16(din2, gw2, dgu16, scr, x16, xs, w, N, I, 2 * F, 0);
    CHECK(!memcmp(din1, din2, (size_t)N * I * sizeof(float)) && !memcmp(gw1, gw2, (size_t)2 * F * I * sizeof(float)),
          "matmul_backward_bf16 = matmul_backward of the widened output gradient and input (din, dweight), bit for "
          "bit");
    fill(din2, (size_t)N * I, 7, 8), fill(gw2, (size_t)2 * F * I, 0, 0);
    memcpy(room, x16, (size_t)N * I * sizeof(uint16_t));
    matmul_backward_bf16(din2, NULL, dgu16, scr, NULL, NULL, w, N, I, 2 * F, 0);
    matmul_backward_bf16(NULL, gw2, dgu16, scr, (uint16_t *)room, room, NULL, N, I, 2 * F, 0);
    CHECK(!memcmp(din1, din2, (size_t)N * I * sizeof(float)) && !memcmp(gw1, gw2, (size_t)2 * F * I * sizeof(float)),
          "matmul_backward_bf16 asked for din and dweight apart, the input widened in place: the same bits");
    tfree_all();
}

// ----------------------------------------------------------- cross-entropy ----

typedef struct { double *logits; const int32_t *tg; int N, V; double scale; } ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    return c->scale * ce_d(c->logits, c->tg, c->N, c->V);
}

static void test_cross_entropy(void) {
    static const int cfg[][2] = {{6, 11}, {5, 50}, {6, 23}};  // N, V; the last: huge logits
    for (int k = 0; k < 3; k++) {
        int N = cfg[k][0], V = cfg[k][1];
        size_t nl = (size_t)N * V;
        rng_seed(80 + k);
        float *logits = fnew(nl);
        int32_t *tg = talloc(N * sizeof(int32_t));
        fill(logits, nl, -3, 3);
        for (int n = 0; n < N; n++) tg[n] = (int32_t)(rng_u64() % (uint64_t)V);
        tg[0] = 0;
        tg[N - 1] = V - 1;  // both ends of the vocabulary
        const char *what = "";
        if (k == 2) {
            // exp(100) overflows fp32: only a max-subtracted softmax survives
            what = " (logits up to +100)";
            for (size_t i = 0; i < (size_t)V; i++) logits[i] += 100.0f;       // row 0: all ~100
            logits[1 * V + 5] = 100.0f;                                      // row 1: one peak
            logits[2 * V + tg[2]] = -100.0f;                                 // row 2: target far below
            for (size_t i = 0; i < (size_t)V; i++) logits[3 * V + i] = 80.0f + 0.01f * (float)i;
        }
        float grad_scale = 0.37f;
        ce_ctx c = {to_d(logits, nl), tg, N, V, (double)grad_scale};
        double ref = ce_d(c.logits, tg, N, V);
        float *keep = fcopy(logits, nl);
        double l1 = 0.0;
        cross_entropy_forward(logits, tg, N, V, &l1);
        CHECK(rel_diff(l1, ref) < 1e-6, "cross_entropy_forward N=%d V=%d%s sum=%.9g vs double %.9g", N, V, what, l1, ref);
        CHECK(memcmp(keep, logits, nl * sizeof(float)) == 0, "cross_entropy_forward N=%d V=%d leaves logits untouched", N, V);
        double *g = dnew(nl);
        fd_grad(ce_loss, &c, c.logits, nl, g);
        double l2 = 1.5;  // the ops add their sum to the accumulator
        cross_entropy_forward_backward(logits, tg, N, V, grad_scale, &l2);
        CHECK(rel_diff(l2, 1.5 + ref) < 1e-6, "cross_entropy_forward_backward N=%d V=%d%s adds sum=%.9g vs 1.5 + double %.9g", N, V, what, l2, ref);
        double e = nerr_f(logits, g, nl);
        CHECK(e < TOL_BWD, "cross_entropy_forward_backward N=%d V=%d%s dlogits vs FD * grad_scale (err %.2e)", N, V, what, e);
        tfree_all();
    }
}

// The bf16 gradient forms (ops.h: cross_entropy_forward_backward_bf16, ce_shard_finish
// with CE_GRADS_BF16) against the fp32 ones on the same logits: the same loss, and
// each row's values, narrowed in place into the first half of its bytes, the fp32
// gradient rounded to nearest even, bit for bit. Widths with a partial last chunk of
// the in-place narrowing (64 values) and a vocabulary slice with padding columns.
static void test_cross_entropy_bf16(void) {
    static const int widths[] = {11, 64, 130, 257, 1000};
    for (int k = 0; k < 5; k++) {
        const int N = 5, V = widths[k], Vl = V + 3, v0 = 7;  // the shard: ids v0 .. v0+V-1, 3 padding columns
        const size_t nl = (size_t)N * Vl;
        rng_seed(170 + k);
        float *logits = fnew(nl), *f32 = fnew(nl), *b16 = fnew(nl);
        int32_t *tg = talloc(N * sizeof(int32_t));
        fill(logits, nl, -4, 4);
        for (int n = 0; n < N; n++) tg[n] = (int32_t)(rng_u64() % (uint64_t)V);
        // whole vocabulary: rows V apart
        memcpy(f32, logits, (size_t)N * V * sizeof(float));
        memcpy(b16, logits, (size_t)N * V * sizeof(float));
        double l32 = 0.0, l16 = 0.0;
        cross_entropy_forward_backward(f32, tg, N, V, 0.29f, &l32);
        cross_entropy_forward_backward_bf16(b16, tg, N, V, 0.29f, &l16);
        int bad = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < V; j++)
                bad += ((const uint16_t *)b16)[(size_t)n * CE_LD16(V) + j] != bf16_from_f32(f32[(size_t)n * V + j]);
        CHECK(l16 == l32 && bad == 0,
              "cross_entropy_forward_backward_bf16 V=%d: loss %.17g vs fp32's %.17g, %d of %d values not the fp32 "
              "gradient rounded",
              V, l16, l32, bad, N * V);
        // a vocabulary slice: targets v0 .. v0+V-1 land in it, the statistics over it alone
        for (int n = 0; n < N; n++) tg[n] += n == 1 ? 9999 : v0;  // row 1's target lies in another slice
        float *st = fnew(3 * (size_t)N);  // rowmax, sumexp, tlogit
        ce_shard_max(logits, N, Vl, V, st);
        ce_shard_sums(logits, tg, N, Vl, V, v0, st, st + N, st + 2 * N);
        memcpy(f32, logits, nl * sizeof(float));
        memcpy(b16, logits, nl * sizeof(float));
        l32 = l16 = 0.0;
        ce_shard_finish(f32, tg, N, Vl, V, v0, st, st + N, st + 2 * N, 0.29f, CE_GRADS_F32, &l32);
        ce_shard_finish(b16, tg, N, Vl, V, v0, st, st + N, st + 2 * N, 0.29f, CE_GRADS_BF16, &l16);
        bad = 0;
        int pad = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vl; j++) {
                const uint16_t h = ((const uint16_t *)b16)[(size_t)n * CE_LD16(Vl) + j];
                bad += h != bf16_from_f32(f32[(size_t)n * Vl + j]);
                pad += j >= V && h != 0;
            }
        CHECK(l16 == l32 && bad == 0 && pad == 0,
              "ce_shard_finish CE_GRADS_BF16 Vl=%d: loss %.17g vs fp32's %.17g, %d of %d values not the fp32 "
              "gradient rounded, %d padding values not 0",
              Vl, l16, l32, bad, N * Vl, pad);
        tfree_all();
    }
}

// --------------------------------------------------------------- optimizer ----

// sum_squares into a fresh accumulator.
static double sumsq(const float *x, size_t n) {
    double s = 0.0;
    sum_squares(x, n, &s);
    return s;
}

static void test_sum_squares_scale(void) {
    // One value 1e3 then 2M values ~1e-3: total ~1e6 + 2. In fp32, adding a 1e-6
    // square to 1e6 rounds away (ulp(1e6) = 0.0625), so fp32 accumulation loses
    // ~2e-6 relative; double accumulation keeps ~1e-16.
    size_t n = (size_t)1 << 21;
    rng_seed(90);
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) {
        float m = 5e-4f + 1e-3f * (float)rng_unif();
        x[i] = (rng_u64() & 1) ? m : -m;
    }
    x[0] = 1000.0f;
    long double ref = 0.0L;
    float fsum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        ref += (long double)x[i] * x[i];
        fsum += x[i] * x[i];
    }
    double s = sumsq(x, n);
    CHECK(rel_diff(s, (double)ref) < 1e-7,
          "sum_squares 1e3 then 2M values ~1e-3 = %.12g vs %.12Lg (rel %.1e; fp32 accumulation would be %.1e)",
          s, ref, rel_diff(s, (double)ref), rel_diff(fsum, (double)ref));
    // random mix of magnitudes 1e-3 and 1e3
    size_t n2 = 1000003;
    ref = 0.0L;
    for (size_t i = 0; i < n2; i++) {
        x[i] = (float)((rng_unif() - 0.5) * ((rng_u64() & 1) ? 2e-3 : 2e3));
        ref += (long double)x[i] * x[i];
    }
    s = sumsq(x, n2);
    CHECK(rel_diff(s, (double)ref) < 1e-7, "sum_squares mixed 1e-3/1e3, n=%zu (rel %.1e)", n2, rel_diff(s, (double)ref));
    CHECK(sumsq(x, 0) == 0.0 && sumsq(x, 1) == (double)x[0] * x[0], "sum_squares n=0 and n=1");
    double acc = 2.0;
    sum_squares(x, 1, &acc);
    sum_squares(x + 1, 1, &acc);
    CHECK(acc == (2.0 + (double)x[0] * x[0]) + (double)x[1] * x[1], "sum_squares adds to its accumulator");
    tfree_all();
}

// PyTorch AdamW in double, the formula of ops.h.
static void adamw_d(double *p, const double *g, double *m, double *v, size_t n, double lr,
                    double b1, double b2, double eps, double wd, int t) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        p[i] -= lr * wd * p[i];
        p[i] -= lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps);
    }
}

static double max_elem_rel(const float *a, const double *b, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = rel_diff(a[i], b[i]);
        if (!isfinite(r)) return INFINITY;
        e = fmax(e, r);
    }
    return e;
}

static void test_adamw(void) {
    size_t n = 1003;
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    rng_seed(100);
    float *p = fnew(n), *m = fnew(n), *v = fnew(n), *g = fnew(n), *pprev = fnew(n);
    fill(p, n, -1, 1);
    double *pd = to_d(p, n), *md = dnew(n), *vd = dnew(n), *gd = dnew(n), *pdprev = dnew(n);
    for (int t = 1; t <= 2; t++) {
        fill(g, n, -1, 1);
        for (size_t i = 0; i < n; i += 3) g[i] *= 1e-3f;  // a spread of magnitudes
        for (size_t i = 1; i < n; i += 7) g[i] *= 30.0f;
        g[5] = 0.0f;  // weight decay only
        g[8] = 2e-9f;  // |g| ~ eps: eps matters here
        g[11] = -5e-9f;
        for (size_t i = 0; i < n; i++) gd[i] = g[i];
        memcpy(pprev, p, n * sizeof(float));
        memcpy(pdprev, pd, n * sizeof(double));
        adamw_update(p, g, m, v, n, 1.0f, lr, b1, b2, eps, wd, t);
        adamw_d(pd, gd, md, vd, n, lr, b1, b2, eps, wd, t);
        // m can cancel (b1 m + (1-b1) g), so it is compared max-abs normalised;
        // v is a sum of positive terms, compared element by element
        double em = nerr_f(m, md, n), ev = max_elem_rel(v, vd, n);
        CHECK(em < 1e-6, "adamw_update t=%d first moment m (err %.2e)", t, em);
        CHECK(ev < 1e-5, "adamw_update t=%d second moment v (max rel %.2e)", t, ev);
        // the step itself, p_t - p_{t-1}, against the double step (weight decay, bias
        // corrections 1-b^t and eps all change it by far more than the tolerance)
        double *step = added(p, pprev, n), *stepd = dnew(n);
        for (size_t i = 0; i < n; i++) stepd[i] = pd[i] - pdprev[i];
        double es = nerr(step, stepd, n);
        CHECK(es < 5e-5, "adamw_update t=%d parameter step vs double PyTorch formula (err %.2e)", t, es);
        double ep = nerr_f(p, pd, n);
        CHECK(ep < 1e-6, "adamw_update t=%d parameters (err %.2e)", t, ep);
        // elements where eps and weight decay dominate, checked one by one
        double e5 = rel_diff(step[5], stepd[5]), e8 = rel_diff(step[8], stepd[8]);
        CHECK(e5 < 1e-3 && e8 < 1e-3, "adamw_update t=%d g=0 (decay only, %.3e vs %.3e) and g~eps (%.4e vs %.4e)",
              t, step[5], stepd[5], step[8], stepd[8]);
    }
    // Clipping folded in: grad_scale s on g is the update on the gradients s*g (what
    // scaling them in place first gave), bit for bit, and g is left as it was.
    {
        const float s = 0.3141f;
        float *p1 = fnew(n), *m1 = fnew(n), *v1 = fnew(n), *g1 = fnew(n), *gs = fnew(n);
        memcpy(p1, p, n * sizeof(float));
        memcpy(m1, m, n * sizeof(float));
        memcpy(v1, v, n * sizeof(float));
        memcpy(g1, g, n * sizeof(float));
        for (size_t i = 0; i < n; i++) gs[i] = g[i] * s;
        memcpy(pprev, p, n * sizeof(float));
        adamw_update(p, gs, m, v, n, 1.0f, lr, b1, b2, eps, wd, 3);
        adamw_update(p1, g1, m1, v1, n, s, lr, b1, b2, eps, wd, 3);
        int same = memcmp(p, p1, n * sizeof(float)) == 0 && memcmp(m, m1, n * sizeof(float)) == 0 &&
                   memcmp(v, v1, n * sizeof(float)) == 0 && memcmp(g, g1, n * sizeof(float)) == 0;
        double moved = nerr_ff(p, pprev, n);
        CHECK(same && moved > 0, "adamw_update grad_scale %.4f == gradients scaled first, bitwise (p, m, v; grad untouched; step moved p by %.1e)",
              s, moved);
    }
    tfree_all();
}

int main(void) {
    ops_set_threads(2);
    test_swiglu();
    test_swiglu_bf16();
    test_cross_entropy();
    test_cross_entropy_bf16();
    test_sum_squares_scale();
    test_adamw();
    return check_summary();
}
