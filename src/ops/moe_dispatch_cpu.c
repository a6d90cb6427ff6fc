// ops/moe_dispatch_cpu.c — the mixture-of-experts block's data movement on the CPU
// (ops/ops.h, "mixture of experts"): dispatch of tokens to their experts' grouped
// rows, the weighted combine back, and both backwards. Per token or per row, with a
// fixed summation order (j = 0 .. K-1), so results never depend on threads. The
// CUDA build has its own (ops/moe_dispatch_cuda.cu); the routing is ops/moe_cpu.c.
#include <string.h>

#include "ops/ops.h"

void moe_dispatch(float *xg, const float *x, const int32_t *slot_of, int N, int K, int D) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < (size_t)N * K; r++)
        memcpy(xg + r * D, x + (size_t)(slot_of[r] / K) * D, sizeof(float) * (size_t)D);
}

void moe_combine(float *out, const float *y, const float *wts, const int32_t *row_of, int N, int K,
                 int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *o = out + (size_t)t * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int j = 0; j < K; j++) {
            const float w = wts[(size_t)t * K + j];
            const float *yr = y + (size_t)row_of[(size_t)t * K + j] * D;
            for (int d = 0; d < D; d++) o[d] += w * yr[d];
        }
    }
}

void moe_combine_backward(float *dy, float *dwts, const float *dout, const float *y,
                          const float *wts, const int32_t *row_of, int N, int K, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *g = dout + (size_t)t * D;
        for (int j = 0; j < K; j++) {
            const size_t r = (size_t)row_of[(size_t)t * K + j];
            const float w = wts[(size_t)t * K + j], *yr = y + r * D;
            float *dyr = dy + r * D;
            double dot = 0.0;
            for (int d = 0; d < D; d++) {
                dyr[d] = w * g[d];
                dot += (double)g[d] * yr[d];
            }
            dwts[(size_t)t * K + j] = (float)dot;
        }
    }
}

void moe_dispatch_backward(float *dx, const float *dxg, const int32_t *row_of, int N, int K, int D) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *o = dx + (size_t)t * D;
        for (int j = 0; j < K; j++) {
            const float *g = dxg + (size_t)row_of[(size_t)t * K + j] * D;
            for (int d = 0; d < D; d++) o[d] += g[d];
        }
    }
}
