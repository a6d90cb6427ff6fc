// ops/kernels_cuda.cu — the CUDA kernels of ops.h for the residual, RoPE, SwiGLU and
// the bf16 activation copies, in fp32 (SwiGLU also from a gate|up kept in bf16);
// RMSNorm's are in ops/rmsnorm_cuda.cu, the embedding's and the id checks' in
// ops/embedding_cuda.cu. Same semantics as ops/cpu.c. The element-wise ones walk
// (rows, cols) grids, 4 values a thread where the rows are aligned for it
// (ops/bf16_cuda.cuh: rows_grid, launch_rows), with no division per value.
#include <cuda_bf16.h>
#include <math.h>

#include "ops/bf16_cuda.cuh"
#include "ops/cuda_common.cuh"

extern "C" {
#include "ops/ops.h"
}

#define THREADS 256

// Queue an element-wise kernel over a (rows, cols) grid (ops/bf16_cuda.cuh's
// rows_grid): its 4-values-a-thread instance k4 where vec holds (every row start
// aligned for it), else its one-value instance k1, with the same arguments.
template <typename... P, typename... A>
static void launch_rows(void (*k4)(P...), void (*k1)(P...), bool vec, size_t rows, size_t cols, A... args) {
    if (vec) k4<<<rows_grid(rows, cols, THREADS, 4), THREADS, 0, cuda_stream()>>>(args...);
    else k1<<<rows_grid(rows, cols, THREADS, 1), THREADS, 0, cuda_stream()>>>(args...);
}

// --------------------------------------------------------------------- residual

// out = a + b, VEC values a thread (one row of n).
template <int VEC>
__global__ void k_add(float *out, const float *a, const float *b, size_t n) {
    COLS_LOOP(i, n, VEC) {
        float av[VEC], bv[VEC], r[VEC];
        load_vals<VEC>(av, a + i);
        load_vals<VEC>(bv, b + i);
        for (int k = 0; k < VEC; k++) r[k] = av[k] + bv[k];
        store_vals<VEC>(out + i, r);
    }
}

extern "C" void residual_forward(float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    const bool vec = n % 4 == 0 && aligned_vec4(out, 4) && aligned_vec4(a, 4) && aligned_vec4(b, 4);
    launch_rows(&k_add<4>, &k_add<1>, vec, 1, n, out, a, b, n);
    cuda_done("residual_forward");
}

// ------------------------------------------------------------------------- RoPE

// The tables are computed on the host, in double as on the CPU, straight into the
// (managed) table buffers: they are made once at start-up or per context chunk.
static void tables_host(float *cos_t, float *sin_t, const int *pos, int pos0, int S, int hd, const double *freq) {
    ops_sync();
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos ? pos[p] : pos0 + p) * freq[i];
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

extern "C" void rope_tables_at(float *cos_t, float *sin_t, const int *pos, int S, int hd, const double *freq) {
    tables_host(cos_t, sin_t, pos, 0, S, hd, freq);
}

extern "C" void rope_tables(float *cos_t, float *sin_t, int S, int hd, const double *freq, int pos0) {
    tables_host(cos_t, sin_t, NULL, pos0, S, hd, freq);
}

// One thread per (token, q-or-k head, pair i): x1' = x1 c - x2 s, x2' = x2 c + x1 s,
// with s negated for the backward (the transpose of a rotation). O: float (in
// place, out = in) or __nv_bfloat16 (rope_backward_to_bf16: out apart from in);
// I: float, or __nv_bfloat16 widened (rope_forward_bf16 in place,
// rope_backward_bf16 in place or apart): a pair is read whole before it is written.
template <typename O, typename I>
__global__ void k_rope(O *out, const I *in, const float *cos_t, const float *sin_t, int BS, int S, int heads,
                       int row, int hd, float dir) {
    const unsigned half = (unsigned)hd / 2, pairs = (unsigned)heads * half;
    ROWS_LOOP(t, BS) {  // a token a row: its table rows, then (head, pair) by a 32-bit division
        const float *ct = cos_t + (t % (size_t)S) * half, *st = sin_t + (t % (size_t)S) * half;
        const size_t base = t * (size_t)row;
        COLS_LOOP(e, pairs, 1) {
            const unsigned h = (unsigned)e / half, i = (unsigned)e - h * half;
            const size_t j1 = base + (size_t)h * hd + i, j2 = j1 + half;
            const float c = ct[i], s = dir * st[i];
            const float a = widen(in[j1]), b = widen(in[j2]);
            store(out + j1, a * c - b * s);
            store(out + j2, b * c + a * s);
        }
    }
}

template <typename O, typename I>
static void rope(O *out, const I *in, const float *cos_t, const float *sin_t, int B, int S, int H, int KV, int hd,
                 float dir, const char *what) {
    if ((size_t)B * S * (H + KV) * (hd / 2) == 0) return;
    const dim3 grid = rows_grid((size_t)B * S, (size_t)(H + KV) * (hd / 2), THREADS, 1);
    k_rope<O, I><<<grid, THREADS, 0, cuda_stream()>>>(out, in, cos_t, sin_t, B * S, S, H + KV,
                                                                          (H + 2 * KV) * hd, hd, dir);
    cuda_done(what);
}

extern "C" void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV, int hd) {
    rope(qkv, qkv, cos_t, sin_t, B, S, H, KV, hd, 1.0f, "rope_forward");
}

extern "C" void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                              int hd) {
    rope(dqkv, dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f, "rope_backward");
}

extern "C" void rope_backward_to_bf16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t,
                                      int B, int S, int H, int KV, int hd) {
    __nv_bfloat16 *out = (__nv_bfloat16 *)dqkv16;
    rope(out, dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f, "rope_backward_to_bf16");
    const int row = (H + 2 * KV) * hd, v0 = (H + KV) * hd;
    if ((size_t)B * S * (row - v0) == 0) return;
    const size_t tokens = (size_t)B * S, vw = (size_t)(row - v0);  // v: each token's last vw values, rounded
    round_rows(out + v0, dqkv + v0, tokens, vw, (size_t)row, (size_t)row);
    cuda_done("rope_backward_to_bf16 (v)");
}

extern "C" void rope_forward_bf16(uint16_t *qkv16, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                                  int hd) {
    __nv_bfloat16 *x = (__nv_bfloat16 *)qkv16;
    rope(x, (const __nv_bfloat16 *)x, cos_t, sin_t, B, S, H, KV, hd, 1.0f, "rope_forward_bf16");
}

extern "C" void rope_backward_bf16(uint16_t *dst16, const uint16_t *src16, const float *cos_t, const float *sin_t,
                                   int B, int S, int H, int KV, int hd) {
    __nv_bfloat16 *out = (__nv_bfloat16 *)dst16;
    const __nv_bfloat16 *in = (const __nv_bfloat16 *)src16;
    rope(out, in, cos_t, sin_t, B, S, H, KV, hd, -1.0f, "rope_backward_bf16");
    const int row = (H + 2 * KV) * hd, v0 = (H + KV) * hd;
    if (out == in || (size_t)B * S * (row - v0) == 0) return;  // in place: v's columns are where they go
    round_rows(out + v0, in + v0, (size_t)B * S, (size_t)(row - v0), (size_t)row, (size_t)row);  // v: copied
    cuda_done("rope_backward_bf16 (v)");
}

// ----------------------------------------------------------------------- SwiGLU

// gu(N, 2F) per token [gate | up]; out(N, F) = silu(gate) * up.

// silu(g) u, and the two halves of its gradient from dout d: dgate = d u silu'(g),
// dup = d silu(g), with silu(g) = g s(g), silu'(g) = s(g) (1 + g (1 - s(g))).
__device__ static inline float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ static inline void swiglu_grads(float g, float u, float d, float *dgate, float *dup) {
    const float s = 1.0f / (1.0f + expf(-g));
    *dup = d * g * s;
    *dgate = d * u * s * (1.0f + g * (1.0f - s));
}

// T, O: float (swiglu_forward) or __nv_bfloat16 (swiglu_forward_bf16: a kept gu, a
// bf16 output for the down product). A token a row, VEC columns a thread at a time.
template <typename T, typename O, int VEC>
__global__ void k_swiglu(O *out, const T *gu, int N, int F) {
    ROWS_LOOP(n, N) {
        const T *g = gu + n * 2 * F, *u = g + F;
        O *o = out + n * F;
        COLS_LOOP(i, F, VEC) {
            float gv[VEC], uv[VEC], r[VEC];
            load_vals<VEC>(gv, g + i);
            load_vals<VEC>(uv, u + i);
            for (int k = 0; k < VEC; k++) r[k] = swiglu_value(gv[k], uv[k]);
            store_vals<VEC>(o + i, r);
        }
    }
}

// T as above; O: float (swiglu_backward) or __nv_bfloat16 (swiglu_backward_to_bf16:
// the gate|up backward's operand); Dt: dout's type, float or __nv_bfloat16
// (swiglu_backward_bf16, which with h not NULL also writes the SwiGLU output there,
// k_swiglu's values: the same swiglu_value on the same widened inputs).
template <typename T, typename Dt, typename O, int VEC>
__global__ void k_swiglu_back(O *dgu, O *h, const Dt *dout, const T *gu, int N, int F) {
    ROWS_LOOP(n, N) {
        const T *g = gu + n * 2 * F, *u = g + F;
        const Dt *d = dout + n * F;
        O *dg = dgu + n * 2 * F, *du = dg + F;
        COLS_LOOP(i, F, VEC) {
            float gv[VEC], uv[VEC], dv[VEC], rg[VEC], ru[VEC];
            load_vals<VEC>(gv, g + i);
            load_vals<VEC>(uv, u + i);
            load_vals<VEC>(dv, d + i);
            for (int k = 0; k < VEC; k++) swiglu_grads(gv[k], uv[k], dv[k], &rg[k], &ru[k]);
            store_vals<VEC>(du + i, ru);
            store_vals<VEC>(dg + i, rg);
            if (h) {  // (uniform across the grid)
                for (int k = 0; k < VEC; k++) dv[k] = swiglu_value(gv[k], uv[k]);
                store_vals<VEC>(h + n * F + i, dv);
            }
        }
    }
}

// Rows of F values (and 2F) allow 4 a thread when F is a multiple of 4 and every
// base pointer is aligned for it.
template <typename T, typename O>
static void swiglu_fwd(O *out, const T *gu, int N, int F, const char *what) {
    if ((size_t)N * F == 0) return;
    const bool vec = F % 4 == 0 && aligned_vec4(out, sizeof(O)) && aligned_vec4(gu, sizeof(T));
    launch_rows(&k_swiglu<T, O, 4>, &k_swiglu<T, O, 1>, vec, (size_t)N, (size_t)F, out, gu, N, F);
    cuda_done(what);
}

template <typename T, typename Dt, typename O>
static void swiglu_bwd(O *dgu, O *h, const Dt *dout, const T *gu, int N, int F, const char *what) {
    if ((size_t)N * F == 0) return;
    const bool vec = F % 4 == 0 && aligned_vec4(dgu, sizeof(O)) && aligned_vec4(gu, sizeof(T)) &&
                     aligned_vec4(dout, sizeof(Dt)) && (!h || aligned_vec4(h, sizeof(O)));
    launch_rows(&k_swiglu_back<T, Dt, O, 4>, &k_swiglu_back<T, Dt, O, 1>, vec, (size_t)N, (size_t)F, dgu, h, dout, gu,
                N, F);
    cuda_done(what);
}

extern "C" void swiglu_forward(float *out, const float *gu, int N, int F) {
    swiglu_fwd(out, gu, N, F, "swiglu_forward");
}

extern "C" void swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F) {
    swiglu_bwd(dgu, (float *)NULL, dout, gu, N, F, "swiglu_backward");
}

// ------------------------------------------------------------ bf16 activations

// dst(r, c) = src(r, c) rounded to bf16, row by row (ops/bf16_cuda.cuh: round_rows).
template <typename S, int VEC>
__global__ static void k_round_rows(__nv_bfloat16 *dst, const S *src, size_t lines, size_t len, size_t ld,
                                    size_t ld_dst) {
    ROWS_LOOP(r, lines) {
        const S *s = src + r * ld;
        __nv_bfloat16 *d = dst + r * ld_dst;
        COLS_LOOP(c, len, VEC) {
            float v[VEC];
            load_vals<VEC>(v, s + c);
            store_vals<VEC>(d + c, v);
        }
    }
}

template <typename S>
static void round_rows_any(__nv_bfloat16 *dst, const S *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    if (lines == 0 || len == 0) return;
    const bool vec = len % 4 == 0 && ld % 4 == 0 && ld_dst % 4 == 0 && aligned_vec4(src, sizeof(S)) &&
                     aligned_vec4(dst, sizeof(__nv_bfloat16));
    launch_rows(&k_round_rows<S, 4>, &k_round_rows<S, 1>, vec, lines, len, dst, src, lines, len, ld, ld_dst);
}
void round_rows(__nv_bfloat16 *dst, const float *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    round_rows_any(dst, src, lines, len, ld, ld_dst);
}
void round_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    round_rows_any(dst, src, lines, len, ld, ld_dst);
}

extern "C" void round_to_bf16(uint16_t *dst, const float *src, size_t n) {
    if (n == 0) return;
    round_rows((__nv_bfloat16 *)dst, src, 1, n, n, n);
    cuda_done("round_to_bf16");
}

__global__ static void k_widen_from_bf16(float *dst, const __nv_bfloat16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" void widen_from_bf16(float *dst, const uint16_t *src, size_t n) {
    if (n == 0) return;
    k_widen_from_bf16<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream()>>>(dst, (const __nv_bfloat16 *)src, n);
    cuda_done("widen_from_bf16");
}

extern "C" void swiglu_forward_bf16(uint16_t *out16, const uint16_t *gu, int N, int F) {
    swiglu_fwd((__nv_bfloat16 *)out16, (const __nv_bfloat16 *)gu, N, F, "swiglu_forward_bf16");
}

extern "C" void swiglu_backward_to_bf16(uint16_t *dgu16, const float *dout, const uint16_t *gu, int N, int F) {
    swiglu_bwd((__nv_bfloat16 *)dgu16, (__nv_bfloat16 *)NULL, dout, (const __nv_bfloat16 *)gu, N, F,
               "swiglu_backward_to_bf16");
}

extern "C" void swiglu_backward_bf16(uint16_t *dgu16, uint16_t *h16, const uint16_t *dout16, const uint16_t *gu,
                                    int N, int F) {
    swiglu_bwd((__nv_bfloat16 *)dgu16, (__nv_bfloat16 *)h16, (const __nv_bfloat16 *)dout16,
               (const __nv_bfloat16 *)gu, N, F, "swiglu_backward_bf16");
}
