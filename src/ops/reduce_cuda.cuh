// ops/reduce_cuda.cuh — block-wide reductions for the row kernels of the CUDA
// backend. A fixed tree over a fixed block size (ROW_THREADS): the order of every
// sum depends on the shape only, never on timing, so results are bit-identical
// from run to run (issue 14: no atomics whose order changes a sum).
#ifndef FEMTOTRON_REDUCE_CUDA_CUH
#define FEMTOTRON_REDUCE_CUDA_CUH

#define ROW_THREADS 256

// Sum (op 0) or max (op 1) of every thread's v over the block; every thread gets
// the result. `sh` is shared memory of ROW_THREADS elements.
template <typename T, int op>
__device__ T block_reduce(T v, T *sh) {
    const int t = threadIdx.x;
    __syncthreads();  // sh may still be read by a previous reduction
    sh[t] = v;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = op == 0 ? sh[t] + sh[t + s] : (sh[t] > sh[t + s] ? sh[t] : sh[t + s]);
        __syncthreads();
    }
    return sh[0];
}

template <typename T>
__device__ T block_sum(T v, T *sh) { return block_reduce<T, 0>(v, sh); }
template <typename T>
__device__ T block_max(T v, T *sh) { return block_reduce<T, 1>(v, sh); }

#endif
