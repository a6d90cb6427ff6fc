// ops/rmsnorm_cuda.cu — the CUDA kernels of ops.h's RMSNorm: the forward (fp32 or
// bf16 output, xhat and rstd kept), its rebuild from xhat, and the backward (input
// gradient, optionally with its bf16 copy, and the weight gradient). Same
// semantics as ops/cpu.c. Sums run in a fixed order, never by atomics, so the bits
// are the same every run: the weight gradient over fixed chunks of rows whose
// partials are then added in order.
#include <cuda_bf16.h>
#include <math.h>

#include "ops/bf16_cuda.cuh"
#include "ops/cuda_common.cuh"
#include "ops/reduce_cuda.cuh"

extern "C" {
#include "ops/ops.h"
}

#define THREADS 256

// ---------------------------------------------------------------------- RMSNorm

// One block per row: ss = sum x^2 (fixed tree), rstd = 1/sqrt(ss/D + eps),
// xhat = x rstd (kept when xhat is not NULL), y = w xhat. O: float
// (rmsnorm_forward, _rebuild) or __nv_bfloat16 (the _to_bf16 ops; ops/bf16_cuda.cuh).
template <typename O>
__global__ void k_rmsnorm(O *out, float *xhat, float *rstd, const float *in, const float *weight, int D,
                          float eps) {
    __shared__ float sh[ROW_THREADS];
    const float *x = in + (size_t)blockIdx.x * D;
    O *y = out + (size_t)blockIdx.x * D;
    float *xh = xhat ? xhat + (size_t)blockIdx.x * D : NULL;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) ss += x[i] * x[i];
    ss = block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) {
        float v = x[i] * r;
        if (xh) xh[i] = v;
        store(y + i, weight[i] * v);
    }
}

// out = w xhat, a row at a time, VEC values a thread.
template <typename O, int VEC>
__global__ void k_rmsnorm_rebuild(O *out, const float *xhat, const float *weight, int N, int D) {
    ROWS_LOOP(n, N) {
        const float *x = xhat + n * D;
        O *y = out + n * D;
        COLS_LOOP(i, D, VEC) {
            float xv[VEC], wv[VEC], r[VEC];
            load_vals<VEC>(xv, x + i);
            load_vals<VEC>(wv, weight + i);
            for (int k = 0; k < VEC; k++) r[k] = wv[k] * xv[k];
            store_vals<VEC>(y + i, r);
        }
    }
}

// dx_j += r (w_j dy_j - xh_j sum_i(w_i dy_i xh_i) / D)   (ops/cpu.c derives it);
// din16 (when not NULL) the sum rounded to bf16 as it is written.
__global__ void k_rmsnorm_back_dx(float *din, __nv_bfloat16 *din16, const float *dout, const float *xhat,
                                  const float *weight, const float *rstd, int D) {
    __shared__ float sh[ROW_THREADS];
    const size_t off = (size_t)blockIdx.x * D;
    const float *xh = xhat + off, *dy = dout + off;
    float *dx = din + off;
    float r = rstd[blockIdx.x], dot = 0.0f;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) dot += weight[i] * dy[i] * xh[i];
    dot = block_sum(dot, sh);
    float c = dot / (float)D;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) {
        const float v = dx[i] + r * (weight[i] * dy[i] - c * xh[i]);
        dx[i] = v;
        if (din16) store(din16 + off + i, v);
    }
}

// dw_i += sum_n dy_i xh_i in two passes with a fixed association, so every SM
// takes part (one thread per column walking all N rows kept 16 blocks busy: about
// 1 ms a call at N = 8192, D = 2048, 49 calls a micro-batch for a 24-layer model)
// and the bits are the same every run (no atomics). Pass 1: chunk k of at most
// OPS_CUDA_COL_CHUNKS (rows [k c, (k+1) c), c = ceil(N / OPS_CUDA_COL_CHUNKS), in
// order) into partial(chunks, D) (here, or folded into the dx pass below,
// k_rmsnorm_back_fused); pass 2: dw_i += the chunks' partials, k in order.
__global__ void k_rmsnorm_back_dw_part(float *partial, const float *dout, const float *xhat, int N, int D,
                                       int chunk) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (i >= D) return;
    const int n1 = (k + 1) * chunk < N ? (k + 1) * chunk : N;
    float acc = 0.0f;
    for (int n = k * chunk; n < n1; n++) acc += dout[(size_t)n * D + i] * xhat[(size_t)n * D + i];
    partial[(size_t)k * D + i] = acc;
}

__global__ void k_rmsnorm_back_dw_sum(float *dweight, const float *partial, int D, int chunks) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float acc = 0.0f;
    for (int k = 0; k < chunks; k++) acc += partial[(size_t)k * D + i];
    dweight[i] += acc;
}

// Both gradients in one pass over dout and xhat, for rows of D <= 4 ROW_THREADS G
// values (D a multiple of 4, 16-byte aligned rows): block k takes the chunk's
// rows [k c, (k+1) c) in order, each thread 4 consecutive columns in each of G
// groups, the weight held in registers. Per row, with DIN, the dot product (this
// thread's 4 G products, then the block's fixed tree) and dx as k_rmsnorm_back_dx;
// with DW, dy xh added to the thread's running column sums, which end as the
// chunk's partial(k, D), summed by k_rmsnorm_back_dw_sum as before. The two-kernel
// path read dout and xhat twice (at SmolLM-1.7B's micro-batch 134 MB more a norm);
// here once. DIN alone and DW alone (the zero-bubble split's halves) run the same
// sums as both together, so the same bits. din16 (with DIN; NULL: not wanted):
// each row's sums rounded to bf16 as they are written, 8 bytes a thread a group.
template <int G, bool DIN, bool DW>
__global__ void k_rmsnorm_back_fused(float *din, __nv_bfloat16 *din16, float *partial, const float *dout,
                                     const float *xhat, const float *weight, const float *rstd, int N, int D,
                                     int chunk) {
    __shared__ float sh[ROW_THREADS];
    const int n0 = blockIdx.x * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
    float w[G][4], acc[G][4];
    for (int g = 0; g < G; g++) {
        const int c = 4 * (threadIdx.x + g * ROW_THREADS);
        for (int j = 0; j < 4; j++) w[g][j] = 0.0f, acc[g][j] = 0.0f;
        if (DIN && c < D) load_vals<4>(w[g], weight + c);
    }
    for (int n = n0; n < n1; n++) {
        const size_t off = (size_t)n * D;
        float dy[G][4], xh[G][4], dot = 0.0f;
        for (int g = 0; g < G; g++) {
            const int c = 4 * (threadIdx.x + g * ROW_THREADS);
            if (c < D) {
                load_vals<4>(dy[g], dout + off + c);
                load_vals<4>(xh[g], xhat + off + c);
            } else {
                for (int j = 0; j < 4; j++) dy[g][j] = 0.0f, xh[g][j] = 0.0f;
            }
            for (int j = 0; j < 4; j++) {
                if (DIN) dot += w[g][j] * dy[g][j] * xh[g][j];
                if (DW) acc[g][j] += dy[g][j] * xh[g][j];
            }
        }
        if (!DIN) continue;
        dot = block_sum(dot, sh);
        const float cc = dot / (float)D, r = rstd[n];
        for (int g = 0; g < G; g++) {
            const int c = 4 * (threadIdx.x + g * ROW_THREADS);
            if (c >= D) continue;
            float dx[4];
            load_vals<4>(dx, din + off + c);
            for (int j = 0; j < 4; j++) dx[j] += r * (w[g][j] * dy[g][j] - cc * xh[g][j]);
            store_vals<4>(din + off + c, dx);
            if (din16) store_vals<4>(din16 + off + c, dx);
        }
    }
    if (DW)
        for (int g = 0; g < G; g++) {
            const int c = 4 * (threadIdx.x + g * ROW_THREADS);
            if (c < D) store_vals<4>(partial + (size_t)blockIdx.x * D + c, acc[g]);
        }
}

template <int G>
static void rmsnorm_back_fused(float *din, __nv_bfloat16 *din16, float *partial, const float *dout, const float *xhat,
                               const float *weight, const float *rstd, int N, int D, int chunk, int chunks) {
    if (din && partial)
        k_rmsnorm_back_fused<G, true, true><<<chunks, ROW_THREADS, 0, cuda_stream()>>>(din, din16, partial, dout, xhat,
                                                                                      weight, rstd, N, D, chunk);
    else if (din)
        k_rmsnorm_back_fused<G, true, false><<<chunks, ROW_THREADS, 0, cuda_stream()>>>(din, din16, partial, dout,
                                                                                       xhat, weight, rstd, N, D, chunk);
    else
        k_rmsnorm_back_fused<G, false, true><<<chunks, ROW_THREADS, 0, cuda_stream()>>>(din, din16, partial, dout,
                                                                                       xhat, weight, rstd, N, D, chunk);
}

template <typename O>
static void rmsnorm_fwd(O *out, float *xhat, float *rstd, const float *in, const float *weight, int N, int D, float eps,
                        const char *what) {
    if (N <= 0) return;
    k_rmsnorm<O><<<N, ROW_THREADS, 0, cuda_stream()>>>(out, xhat, rstd, in, weight, D, eps);
    cuda_done(what);
}

template <typename O>
static void rmsnorm_rebuild_to(O *out, const float *xhat, const float *weight, int N, int D, const char *what) {
    if ((size_t)N * D == 0) return;
    const bool vec = D % 4 == 0 && aligned_vec4(out, sizeof(O)) && aligned_vec4(xhat, 4) && aligned_vec4(weight, 4);
    if (vec)
        k_rmsnorm_rebuild<O, 4><<<rows_grid(N, D, THREADS, 4), THREADS, 0, cuda_stream()>>>(out, xhat, weight, N, D);
    else
        k_rmsnorm_rebuild<O, 1><<<rows_grid(N, D, THREADS, 1), THREADS, 0, cuda_stream()>>>(out, xhat, weight, N, D);
    cuda_done(what);
}

extern "C" void rmsnorm_forward(float *out, float *xhat, float *rstd, const float *in, const float *weight, int N,
                                int D, float eps) {
    rmsnorm_fwd(out, xhat, rstd, in, weight, N, D, eps, "rmsnorm_forward");
}

extern "C" void rmsnorm_rebuild(float *out, const float *xhat, const float *weight, int N, int D) {
    rmsnorm_rebuild_to(out, xhat, weight, N, D, "rmsnorm_rebuild");
}

extern "C" void rmsnorm_forward_to_bf16(uint16_t *out16, float *xhat, float *rstd, const float *in,
                                        const float *weight, int N, int D, float eps) {
    rmsnorm_fwd((__nv_bfloat16 *)out16, xhat, rstd, in, weight, N, D, eps, "rmsnorm_forward_to_bf16");
}

extern "C" void rmsnorm_rebuild_to_bf16(uint16_t *out16, const float *xhat, const float *weight, int N, int D) {
    rmsnorm_rebuild_to((__nv_bfloat16 *)out16, xhat, weight, N, D, "rmsnorm_rebuild_to_bf16");
}

extern "C" void rmsnorm_backward(float *din, float *dweight, const float *dout, const float *xhat,
                                 const float *weight, const float *rstd, int N, int D) {
    rmsnorm_backward_with_bf16(din, NULL, dweight, dout, xhat, weight, rstd, N, D);
}

extern "C" void rmsnorm_backward_with_bf16(float *din, uint16_t *din16_bits, float *dweight, const float *dout,
                                           const float *xhat, const float *weight, const float *rstd, int N, int D) {
    if (din16_bits && !din) die("rmsnorm_backward_with_bf16: a bf16 copy of no input gradient (a bug)");
    if (N <= 0 || (!din && !dweight)) return;
    __nv_bfloat16 *din16 = (__nv_bfloat16 *)din16_bits;  // (N, D) or NULL
    // Either half may be skipped (ops.h: din or dweight NULL, the split backward).
    const int chunk = (N + OPS_CUDA_COL_CHUNKS - 1) / OPS_CUDA_COL_CHUNKS, chunks = (N + chunk - 1) / chunk;
    float *partial = dweight ? (float *)cuda_scratch((size_t)OPS_CUDA_COL_CHUNKS * D * sizeof(float)) : NULL;  // (chunks, D)
    const int groups = D <= 4 * ROW_THREADS ? 1 : D <= 8 * ROW_THREADS ? 2 : D <= 16 * ROW_THREADS ? 4 : 0;
    const bool fused = groups && D % 4 == 0 && aligned_vec4(dout, 4) && aligned_vec4(xhat, 4) &&
                       (!din || (aligned_vec4(din, 4) && aligned_vec4(weight, 4))) &&
                       (!din16 || aligned_vec4(din16, sizeof *din16));
    if (fused) {  // one pass (k_rmsnorm_back_fused)
        if (groups == 1) rmsnorm_back_fused<1>(din, din16, partial, dout, xhat, weight, rstd, N, D, chunk, chunks);
        else if (groups == 2) rmsnorm_back_fused<2>(din, din16, partial, dout, xhat, weight, rstd, N, D, chunk, chunks);
        else rmsnorm_back_fused<4>(din, din16, partial, dout, xhat, weight, rstd, N, D, chunk, chunks);
    } else {  // wider or unaligned rows: a pass for each gradient
        if (din) k_rmsnorm_back_dx<<<N, ROW_THREADS, 0, cuda_stream()>>>(din, din16, dout, xhat, weight, rstd, D);
        if (dweight) {
            const dim3 grid(cuda_blocks((size_t)D, THREADS), chunks);
            k_rmsnorm_back_dw_part<<<grid, THREADS, 0, cuda_stream()>>>(partial, dout, xhat, N, D, chunk);
        }
    }
    if (dweight)
        k_rmsnorm_back_dw_sum<<<cuda_blocks((size_t)D, THREADS), THREADS, 0, cuda_stream()>>>(dweight, partial, D,
                                                                                           chunks);
    cuda_done("rmsnorm_backward");
}
