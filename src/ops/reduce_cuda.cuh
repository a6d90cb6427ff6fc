// ops/reduce_cuda.cuh — block-wide reductions for the row kernels of the CUDA
// backend. A fixed tree over a fixed block size (ROW_THREADS): the order of every
// sum depends on the shape only, never on timing, so results are bit-identical
// from run to run (issue 14: no atomics whose order changes a sum).
#ifndef FEMTOTRON_REDUCE_CUDA_CUH
#define FEMTOTRON_REDUCE_CUDA_CUH

#define ROW_THREADS 256  // a multiple of 64: the shared-memory levels end at 32 partial results

template <typename T, int op>
__device__ __forceinline__ T reduce_pair(T a, T b) { return op == 0 ? a + b : (a > b ? a : b); }

// Sum (op 0) or max (op 1) of every thread's v over the block; every thread gets
// the result. `sh` is shared memory of ROW_THREADS elements. The tree halves the
// partial results each level, element t taking t + s: across warps in shared
// memory (s = 128, 64, 32: a barrier each), then within warp 0 by shuffles (s = 16
// .. 1: lane t takes lane t ^ s, which for the lanes t < s that carry on is t + s,
// and the same operand order), so lane 0 ends on the sum a tree of barriers to the
// last level gave, bit for bit: 6 barriers instead of 10.
template <typename T, int op>
__device__ T block_reduce(T v, T *sh) {
    const int t = threadIdx.x;
    __syncthreads();  // sh may still be read by a previous reduction
    sh[t] = v;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s >= 32; s >>= 1) {
        if (t < s) sh[t] = reduce_pair<T, op>(sh[t], sh[t + s]);
        __syncthreads();
    }
    if (t < 32) {  // warp 0, every lane (full mask)
        T w = sh[t];
        for (int s = 16; s > 0; s >>= 1) w = reduce_pair<T, op>(w, __shfl_xor_sync(0xffffffffu, w, s));
        if (t == 0) sh[0] = w;
    }
    __syncthreads();
    return sh[0];
}

template <typename T>
__device__ T block_sum(T v, T *sh) { return block_reduce<T, 0>(v, sh); }
template <typename T>
__device__ T block_max(T v, T *sh) { return block_reduce<T, 1>(v, sh); }

#endif
