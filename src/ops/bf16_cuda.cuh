// ops/bf16_cuda.cuh — the bf16 conversions the CUDA kernels share: a value as
// fp32 (widen), an fp32 result stored as fp32 or rounded to bf16 (store), and the
// kernel that rounds strided runs of values into bf16 (k_round_rows).
#ifndef FEMTOTRON_BF16_CUDA_CUH
#define FEMTOTRON_BF16_CUDA_CUH

#include <cuda_bf16.h>

// A value as fp32: itself, or a bf16 value widened (exactly).
__device__ static inline float widen(float x) { return x; }
__device__ static inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// An fp32 result as an output of type O: itself, or rounded to the nearest bf16
// (ties to even).
__device__ static inline void store(float *p, float x) { *p = x; }
__device__ static inline void store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }

// dst's `lines` runs of `len` bf16 values, ld_dst apart = src's `lines` runs of
// `len` values, ld apart, each rounded to the nearest bf16: floats rounded, bf16
// values copied (widened and rounded back: the same bits); what lies between the
// runs is left as it is.
template <typename S>
__global__ static void k_round_rows(__nv_bfloat16 *dst, const S *src, size_t lines, size_t len, size_t ld,
                                    size_t ld_dst) {
    const size_t n = lines * len, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store(dst + (i / len) * ld_dst + i % len, widen(src[(i / len) * ld + i % len]));
}

#endif
