// ops/moe_dispatch_cuda.cu — the mixture-of-experts block's data movement on the GPU
// (ops/ops.h, "mixture of experts"): dispatch of tokens to their experts' grouped
// rows, the weighted combine back, and both backwards, queued like every op. The
// routing tables they read (slot_of, row_of, wts) are written on the host by
// ops/moe_cpu.c (after its wait), before these are queued. Each output element is
// one thread's, summing over a token's K slots in order j = 0 .. K-1 as the CPU
// does (ops/moe_dispatch_cpu.c); the routing weights' gradient <dout, y> is one
// block per slot, a fixed tree in double: no atomics, the same bits every run.
#include "ops/cuda_common.cuh"
#include "ops/reduce_cuda.cuh"

extern "C" {
#include "ops/ops.h"
}

#define THREADS 256

// xg(N*K, D) row r = x(N, D) row slot_of[r] / K.
__global__ void k_moe_dispatch(float *xg, const float *x, const int32_t *slot_of, size_t rows, int K, int D) {
    const size_t total = rows * (size_t)D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / D, c = i % D;
        xg[i] = x[(size_t)(slot_of[r] / K) * D + c];
    }
}

extern "C" void moe_dispatch(float *xg, const float *x, const int32_t *slot_of, int N, int K, int D) {
    const size_t rows = (size_t)N * K;
    if (rows == 0 || D <= 0) return;
    k_moe_dispatch<<<cuda_blocks(rows * D, THREADS), THREADS, 0, cuda_stream()>>>(xg, x, slot_of, rows, K, D);
    cuda_done("moe_dispatch");
}

// out(N, D) = sum over j in order of wts[t, j] * y[row_of[t*K + j]] (overwritten).
__global__ void k_moe_combine(float *out, const float *y, const float *wts, const int32_t *row_of, int N, int K,
                              int D) {
    const size_t total = (size_t)N * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / D, c = i % D;
        float o = 0.0f;
        for (int j = 0; j < K; j++) o += wts[t * K + j] * y[(size_t)row_of[t * K + j] * D + c];
        out[i] = o;
    }
}

extern "C" void moe_combine(float *out, const float *y, const float *wts, const int32_t *row_of, int N, int K,
                            int D) {
    if (N <= 0 || D <= 0) return;
    k_moe_combine<<<cuda_blocks((size_t)N * D, THREADS), THREADS, 0, cuda_stream()>>>(out, y, wts, row_of, N, K,
                                                                                      D);
    cuda_done("moe_combine");
}

// One block per slot q = t*K + j: dy row row_of[q] = wts[q] * dout[t] (overwritten),
// dwts[q] = <dout[t], y[row_of[q]]> summed in double.
__global__ void k_moe_combine_back(float *dy, float *dwts, const float *dout, const float *y, const float *wts,
                                   const int32_t *row_of, int K, int D) {
    __shared__ double sh[ROW_THREADS];
    const size_t q = blockIdx.x, t = q / K, r = (size_t)row_of[q];
    const float w = wts[q], *g = dout + t * D, *yr = y + r * D;
    float *dyr = dy + r * D;
    double dot = 0.0;
    for (int c = threadIdx.x; c < D; c += ROW_THREADS) {
        dyr[c] = w * g[c];
        dot += (double)g[c] * yr[c];
    }
    dot = block_sum(dot, sh);
    if (threadIdx.x == 0) dwts[q] = (float)dot;
}

extern "C" void moe_combine_backward(float *dy, float *dwts, const float *dout, const float *y, const float *wts,
                                     const int32_t *row_of, int N, int K, int D) {
    const size_t slots = (size_t)N * K;
    if (slots == 0) return;
    k_moe_combine_back<<<(unsigned)slots, ROW_THREADS, 0, cuda_stream()>>>(dy, dwts, dout, y, wts, row_of, K, D);
    cuda_done("moe_combine_backward");
}

// dx(N, D) += sum over j in order of dxg[row_of[t*K + j]].
__global__ void k_moe_dispatch_back(float *dx, const float *dxg, const int32_t *row_of, int N, int K, int D) {
    const size_t total = (size_t)N * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / D, c = i % D;
        float o = dx[i];
        for (int j = 0; j < K; j++) o += dxg[(size_t)row_of[t * K + j] * D + c];
        dx[i] = o;
    }
}

extern "C" void moe_dispatch_backward(float *dx, const float *dxg, const int32_t *row_of, int N, int K, int D) {
    if (N <= 0 || D <= 0) return;
    k_moe_dispatch_back<<<cuda_blocks((size_t)N * D, THREADS), THREADS, 0, cuda_stream()>>>(dx, dxg, row_of, N, K,
                                                                                           D);
    cuda_done("moe_dispatch_backward");
}
