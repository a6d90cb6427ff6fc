// ops/bf16_cuda.cuh — the bf16 conversions the CUDA kernels share: a value as
// fp32 (widen), an fp32 result stored as fp32 or rounded to bf16 (store), and the
// launcher that rounds strided runs of values into bf16 (round_rows), and what the
// element-wise kernels over (rows, cols) matrices share: their grid, their loops
// and the vector loads and stores of 4 values.
#ifndef FEMTOTRON_BF16_CUDA_CUH
#define FEMTOTRON_BF16_CUDA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda_common.cuh"

// A value as fp32: itself, or a bf16 value widened (exactly).
__device__ static inline float widen(float x) { return x; }
__device__ static inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// An fp32 result as an output of type O: itself, or rounded to the nearest bf16
// (ties to even).
__device__ static inline void store(float *p, float x) { *p = x; }
__device__ static inline void store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

// ---- element-wise kernels over (rows, cols) matrices, without a division a value ----
// A flat index e split as (e / cols, e % cols) costs a 64-bit division and modulo
// per value (tens of instructions, more than the arithmetic of most of these ops);
// instead the grid's y walks the rows (grid-stride beyond 65535 of them) and its x
// the columns, each thread VEC consecutive values at a time: 4 (one 16-byte load of
// floats, 8 bytes of bf16) where every row start is aligned for it (aligned_vec4 of
// each base pointer, leading dimensions and row length multiples of 4), else 1.
static inline dim3 rows_grid(size_t rows, size_t cols, unsigned threads, unsigned vec) {
    const size_t per_block = (size_t)threads * vec, x = (cols + per_block - 1) / per_block;
    return dim3((unsigned)(x < 1 ? 1 : x > CUDA_MAX_BLOCKS ? CUDA_MAX_BLOCKS : x),
                (unsigned)(rows < 1 ? 1 : rows > 65535u ? 65535u : rows));
}
#define ROWS_LOOP(r, rows) for (size_t r = blockIdx.y; r < (size_t)(rows); r += gridDim.y)
#define COLS_LOOP(c, cols, vec)                                                                  \
    for (size_t c = (size_t)(vec) * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); c < (size_t)(cols); \
         c += (size_t)(vec) * gridDim.x * blockDim.x)

// 1 when p is aligned for a vector access of 4 of its values (16 bytes of floats,
// 8 of bf16); every row start is, when the leading dimensions and row lengths (in
// values) are multiples of 4 too, which the launchers check beside it.
static inline bool aligned_vec4(const void *p, size_t value_bytes) {
    return (uintptr_t)p % (4 * value_bytes) == 0;
}

// 4 bf16 values in one 8-byte access.
struct alignas(8) bf16x4 {
    __nv_bfloat16 v[4];
};

// VEC consecutive values at p as fp32 (a vector load for VEC = 4), and VEC fp32
// results stored as p's type (rounded to bf16 where it is bf16).
template <int VEC>
__device__ static inline void load_vals(float (&v)[VEC], const float *p) {
    if constexpr (VEC == 4) {
        const float4 f = *reinterpret_cast<const float4 *>(p);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
        for (int k = 0; k < VEC; k++) v[k] = p[k];
    }
}
template <int VEC>
__device__ static inline void load_vals(float (&v)[VEC], const __nv_bfloat16 *p) {
    if constexpr (VEC == 4) {
        const bf16x4 b = *reinterpret_cast<const bf16x4 *>(p);
        for (int k = 0; k < 4; k++) v[k] = widen(b.v[k]);
    } else {
        for (int k = 0; k < VEC; k++) v[k] = widen(p[k]);
    }
}
template <int VEC>
__device__ static inline void store_vals(float *p, const float (&v)[VEC]) {
    if constexpr (VEC == 4) *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    else
        for (int k = 0; k < VEC; k++) p[k] = v[k];
}
template <int VEC>
__device__ static inline void store_vals(__nv_bfloat16 *p, const float (&v)[VEC]) {
    if constexpr (VEC == 4) {
        bf16x4 b;
        for (int k = 0; k < 4; k++) b.v[k] = __float2bfloat16_rn(v[k]);
        *reinterpret_cast<bf16x4 *>(p) = b;
    } else {
        for (int k = 0; k < VEC; k++) store(p + k, v[k]);
    }
}

// dst's `lines` runs of `len` bf16 values, ld_dst apart = src's `lines` runs of
// `len` values, ld apart, each rounded to the nearest bf16: floats rounded, bf16
// values copied (the same bits); what lies between the runs is left as it is.
// Queued on the backend's stream, 4 values a thread where every run allows it
// (ops/kernels_cuda.cu).
void round_rows(__nv_bfloat16 *dst, const float *src, size_t lines, size_t len, size_t ld, size_t ld_dst);
void round_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t lines, size_t len, size_t ld, size_t ld_dst);

#endif
