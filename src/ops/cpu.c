// ops/cpu.c — CPU kernels: every elementwise/row-wise loop through OpenMP. Shapes
// and semantics are in ops.h; the matrix products (BLAS) are in ops/matmul_cpu.c,
// the attention kernels in ops/attention_cpu.c, the loss and the optimizer in
// ops/loss_optim_cpu.c. Row sums and maxima carry
// `omp simd reduction`: without it GCC keeps a float sum in source order (one add
// per element, each waiting for the last: a 4-cycle chain) and a max not vectorized
// at all, which made the norms' and the loss's reductions their slowest part.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "ops/bf16.h"
#include "ops/fast_exp.h"
#include "ops/ops.h"
#include "util.h"

// -------------------------------------------------------------------- embedding

void ops_check_ids(const int32_t *ids, int N, int V, const char *what) {
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            die("%s: id %d at position %d is outside the vocabulary [0, %d): refused before any table "
                "is indexed", what, ids[n], n, V);
}

void embedding_forward(float *out, const int32_t *tokens, const float *table, int N, int D, int V) {
    ops_check_ids(tokens, N, V, "embedding");
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * (size_t)D);
}

void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int N, int D, int V) {
    ops_check_ids(tokens, N, V, "embedding backward");
    // Rows of dtable are shared by repeated tokens, so split the work over columns:
    // each thread owns a column range of every row and never races.
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *row = dtable + (size_t)tokens[n] * D;
            const float *g = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) row[c] += g[c];
        }
    }
}

void embedding_forward_range(float *out, const int32_t *tokens, const float *table, int N, int D,
                             int v0, int rows) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - v0;
        if (r >= 0 && r < rows)
            memcpy(out + (size_t)n * D, table + (size_t)r * D, sizeof(float) * (size_t)D);
        else
            memset(out + (size_t)n * D, 0, sizeof(float) * (size_t)D);
    }
}

void embedding_copy_range(float *out, const int32_t *tokens, const float *table, int N, int D, int v0,
                          int rows) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - v0;
        if (r >= 0 && r < rows) memcpy(out + (size_t)n * D, table + (size_t)r * D, sizeof(float) * (size_t)D);
    }
}

void embedding_backward_range(float *dtable, const float *dout, const int32_t *tokens, int N, int D,
                              int v0, int rows) {
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            int r = tokens[n] - v0;
            if (r < 0 || r >= rows) continue;
            float *row = dtable + (size_t)r * D;
            const float *g = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) row[c] += g[c];
        }
    }
}

// ---------------------------------------------------------------------- RMSNorm

// One row's r = 1/sqrt(mean(x^2) + eps), and xhat = x r into xh unless NULL.
static inline float rms_row(const float *x, float *xh, int D, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < D; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (xh)
        for (int i = 0; i < D; i++) xh[i] = x[i] * r;
    return r;
}

void rmsnorm_forward(float *out, float *xhat, float *rstd, const float *in, const float *weight, int N, int D,
                     float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * D;
        float *y = out + (size_t)n * D;
        const float r = rstd[n] = rms_row(x, xhat ? xhat + (size_t)n * D : NULL, D, eps);
        for (int i = 0; i < D; i++) y[i] = weight[i] * (x[i] * r);
    }
}

void rmsnorm_rebuild(float *out, const float *xhat, const float *weight, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xh = xhat + (size_t)n * D;
        float *y = out + (size_t)n * D;
        for (int i = 0; i < D; i++) y[i] = weight[i] * xh[i];
    }
}

// The bf16 outputs: the same float operations as above, each result rounded as it
// is stored.
void rmsnorm_forward_to_bf16(uint16_t *out16, float *xhat, float *rstd, const float *in, const float *weight,
                             int N, int D, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * D;
        uint16_t *y = out16 + (size_t)n * D;
        const float r = rstd[n] = rms_row(x, xhat ? xhat + (size_t)n * D : NULL, D, eps);
        for (int i = 0; i < D; i++) y[i] = bf16_from_f32(weight[i] * (x[i] * r));
    }
}

void rmsnorm_rebuild_to_bf16(uint16_t *out16, const float *xhat, const float *weight, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *xh = xhat + (size_t)n * D;
        uint16_t *y = out16 + (size_t)n * D;
        for (int i = 0; i < D; i++) y[i] = bf16_from_f32(weight[i] * xh[i]);
    }
}

void rmsnorm_backward(float *din, float *dweight, const float *dout, const float *xhat,
                      const float *weight, const float *rstd, int N, int D) {
    rmsnorm_backward_with_bf16(din, NULL, dweight, dout, xhat, weight, rstd, N, D);
}

void rmsnorm_backward_with_bf16(float *din, uint16_t *din16, float *dweight, const float *dout, const float *xhat,
                                const float *weight, const float *rstd, int N, int D) {
    // y_i = w_i xh_i, xh_i = x_i r, r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / D
    // dx_j = r w_j dy_j - (r^3 / D) x_j sum_i(w_i dy_i x_i) = r (w_j dy_j - xh_j c),
    // c = sum_i(w_i dy_i xh_i) / D: x enters only through xh.
    if (din16 && !din) die("rmsnorm_backward_with_bf16: a bf16 copy of no input gradient (a bug)");
    // Either half may be skipped (din or dweight NULL: the split backward of a
    // zero-bubble schedule); each half is the same loop either way, so the bits are too.
    if (din) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *xh = xhat + (size_t)n * D, *dy = dout + (size_t)n * D;
            float *dx = din + (size_t)n * D;
            float r = rstd[n], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < D; i++) dot += weight[i] * dy[i] * xh[i];
            float c = dot / (float)D;
            for (int i = 0; i < D; i++) dx[i] += r * (weight[i] * dy[i] - c * xh[i]);
            if (din16) bf16_round_rows(din16 + (size_t)n * D, D, dx, D, 1, D);  // the sum, as written
        }
    }
    // dw_i = sum_n dy_i xh_i: split over columns so threads never share an output.
    if (!dweight) return;
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            const float *xh = xhat + (size_t)n * D, *dy = dout + (size_t)n * D;
            for (int i = c0; i < c1; i++) dweight[i] += dy[i] * xh[i];
        }
    }
}

// --------------------------------------------------------------------- residual

void residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ------------------------------------------------------------------------- RoPE

void rope_tables_at(float *cos_t, float *sin_t, const int *pos, int S, int hd, const double *freq) {
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)pos[p] * freq[i];
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

void rope_tables(float *cos_t, float *sin_t, int S, int hd, const double *freq, int pos0) {
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos0 + p) * freq[i];
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

// Rotate the q and k heads of every token by +angle (dir = 1) or -angle (dir = -1).
// The transpose of a rotation is the rotation by the opposite angle, so the
// backward is the same loop with sin negated.
// One pair of a head rotated: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s); the fp32 and
// the bf16-output ops share it.
static inline void rope_pair(float a, float b, float c, float sn, float *y1, float *y2) {
    *y1 = a * c - b * sn;
    *y2 = b * c + a * sn;
}

static void rope_rotate(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H,
                        int KV, int hd, float dir) {
    int half = hd / 2, row = (H + 2 * KV) * hd, heads = H + KV;  // q and k heads
#pragma omp parallel for schedule(static)
    for (int t = 0; t < B * S; t++) {
        const float *c = cos_t + (size_t)(t % S) * half, *s = sin_t + (size_t)(t % S) * half;
        for (int h = 0; h < heads; h++) {
            float *x1 = qkv + (size_t)t * row + (size_t)h * hd, *x2 = x1 + half;
            for (int i = 0; i < half; i++) rope_pair(x1[i], x2[i], c[i], dir * s[i], &x1[i], &x2[i]);
        }
    }
}

void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                  int hd) {
    rope_rotate(qkv, cos_t, sin_t, B, S, H, KV, hd, 1.0f);
}

void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int S, int H,
                   int KV, int hd) {
    rope_rotate(dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f);
}

// RoPE written as bf16, from fp32 values (x32) or bf16 ones (x16, widened): each
// pair rotated in fp32 by rope_pair and rounded as written; v's columns rounded
// (x32) or copied (x16, where dst is not x16: the forward rotates in place).
static void rope_rotate_to_bf16(uint16_t *dst, const float *x32, const uint16_t *x16, const float *cos_t,
                                const float *sin_t, int B, int S, int H, int KV, int hd, float dir) {
    const int half = hd / 2, row = (H + 2 * KV) * hd, heads = H + KV;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < B * S; t++) {
        const float *c = cos_t + (size_t)(t % S) * half, *s = sin_t + (size_t)(t % S) * half;
        const size_t r = (size_t)t * row;
        uint16_t *y = dst + r;
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                const size_t j = (size_t)h * hd + i;
                const float a = x32 ? x32[r + j] : bf16_to_f32(x16[r + j]);
                const float b = x32 ? x32[r + j + half] : bf16_to_f32(x16[r + j + half]);
                float y1, y2;
                rope_pair(a, b, c[i], dir * s[i], &y1, &y2);
                y[j] = bf16_from_f32(y1), y[j + half] = bf16_from_f32(y2);
            }
        for (int j = heads * hd; j < row; j++)  // v: rounded as it is, or copied
            if (x32 || dst != x16) y[j] = x32 ? bf16_from_f32(x32[r + j]) : x16[r + j];
    }
}

void rope_backward_to_bf16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t, int B,
                           int S, int H, int KV, int hd) {
    rope_rotate_to_bf16(dqkv16, dqkv, NULL, cos_t, sin_t, B, S, H, KV, hd, -1.0f);
}

void rope_forward_bf16(uint16_t *qkv16, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                       int hd) {
    rope_rotate_to_bf16(qkv16, NULL, qkv16, cos_t, sin_t, B, S, H, KV, hd, 1.0f);
}

void rope_backward_bf16(uint16_t *dst16, const uint16_t *src16, const float *cos_t, const float *sin_t, int B, int S,
                        int H, int KV, int hd) {
    rope_rotate_to_bf16(dst16, NULL, src16, cos_t, sin_t, B, S, H, KV, hd, -1.0f);
}

// ----------------------------------------------------------------------- SwiGLU

// One run of n values of a token: o = silu(g) * u, and its backward
// dg = dout * u * silu'(g), du = dout * silu(g), with silu(g) = g s(g) and
// silu'(g) = s(g) (1 + g (1 - s(g))). The fp32 and the bf16 ops share them.
static inline void swiglu_span(float *o, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) o[i] = g[i] / (1.0f + fast_expf(-g[i])) * u[i];
}

static inline void swiglu_back_span(float *dg, float *du, const float *d, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + fast_expf(-g[i]));
        du[i] = d[i] * g[i] * s;
        dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

// swiglu_back_span, and o = swiglu_span's values (the same expressions on the same
// exp, so the same bits) from one exp a value instead of two.
static inline void swiglu_back_span_rebuild(float *dg, float *du, float *o, const float *d, const float *g,
                                            const float *u, int n) {
    for (int i = 0; i < n; i++) {
        const float e = fast_expf(-g[i]), s = 1.0f / (1.0f + e);
        du[i] = d[i] * g[i] * s;
        dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        o[i] = g[i] / (1.0f + e) * u[i];
    }
}

void swiglu_forward(float *out, const float *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F;
        swiglu_span(out + (size_t)n * F, g, g + F, F);
    }
}

void swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F;
        float *dg = dgu + (size_t)n * 2 * F;
        swiglu_back_span(dg, dg + F, dout + (size_t)n * F, g, g + F, F);
    }
}

// ------------------------------------------------------------ bf16 activations

void round_to_bf16(uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

void widen_from_bf16(float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

// A bf16 token row is widened BF16_SPAN values at a time into fp32 on the stack,
// then the fp32 loops above run on it: the same float operations as swiglu_forward
// and swiglu_backward on the widened values, the results rounded as they are stored.
#define BF16_SPAN 256

static void widen_span(float *dst, const uint16_t *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

static void round_span(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = bf16_from_f32(src[i]);
}

void swiglu_forward_bf16(uint16_t *out16, const uint16_t *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *g = gu + (size_t)n * 2 * F, *u = g + F;
        float gw[BF16_SPAN], uw[BF16_SPAN], ow[BF16_SPAN];
        for (int i0 = 0; i0 < F; i0 += BF16_SPAN) {
            const int k = F - i0 < BF16_SPAN ? F - i0 : BF16_SPAN;
            widen_span(gw, g + i0, k);
            widen_span(uw, u + i0, k);
            swiglu_span(ow, gw, uw, k);
            round_span(out16 + (size_t)n * F + i0, ow, k);
        }
    }
}

void swiglu_backward_to_bf16(uint16_t *dgu16, const float *dout, const uint16_t *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *g = gu + (size_t)n * 2 * F, *u = g + F;
        uint16_t *dg = dgu16 + (size_t)n * 2 * F;
        float gw[BF16_SPAN], uw[BF16_SPAN], dgw[BF16_SPAN], duw[BF16_SPAN];
        for (int i0 = 0; i0 < F; i0 += BF16_SPAN) {
            const int k = F - i0 < BF16_SPAN ? F - i0 : BF16_SPAN;
            widen_span(gw, g + i0, k);
            widen_span(uw, u + i0, k);
            swiglu_back_span(dgw, duw, dout + (size_t)n * F + i0, gw, uw, k);
            round_span(dg + i0, dgw, k);
            round_span(dg + F + i0, duw, k);
        }
    }
}

void swiglu_backward_bf16(uint16_t *dgu16, uint16_t *h16, const uint16_t *dout16, const uint16_t *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t *g = gu + (size_t)n * 2 * F, *u = g + F, *d = dout16 + (size_t)n * F;
        uint16_t *dg = dgu16 + (size_t)n * 2 * F;
        float gw[BF16_SPAN], uw[BF16_SPAN], dw[BF16_SPAN], dgw[BF16_SPAN], duw[BF16_SPAN], hw[BF16_SPAN];
        for (int i0 = 0; i0 < F; i0 += BF16_SPAN) {
            const int k = F - i0 < BF16_SPAN ? F - i0 : BF16_SPAN;
            widen_span(gw, g + i0, k);
            widen_span(uw, u + i0, k);
            widen_span(dw, d + i0, k);
            if (h16) {  // with swiglu_forward_bf16's values
                swiglu_back_span_rebuild(dgw, duw, hw, dw, gw, uw, k);
                round_span(h16 + (size_t)n * F + i0, hw, k);
            } else {
                swiglu_back_span(dgw, duw, dw, gw, uw, k);
            }
            round_span(dg + i0, dgw, k);
            round_span(dg + F + i0, duw, k);
        }
    }
}
