// ops/loss_optim_cuda.cu — the CUDA kernels of ops.h for cross-entropy (whole and
// vocab-parallel shards), the sum of squares, scaling and AdamW, in fp32.
//
// Sums stay on the device (ops.h: the host reads a step's loss and norm once):
// per-row (or per-block, fixed grid) partial sums in double, then one block adds
// them by a fixed tree into the caller's accumulator, so they are deterministic.
#include <cuda_bf16.h>
#include <math.h>

#include "ops/adamw_element.h"
#include "ops/cuda_common.cuh"
#include "ops/reduce_cuda.cuh"

extern "C" {
#include "ops/ops.h"
}

#define THREADS 256
#define SQ_BLOCKS 256  // sum_squares: fixed grid, so its partials' order never changes

// *acc += the sum of part(n): thread t adds parts t, t + ROW_THREADS, ... in order,
// then the block's fixed tree; one block, so the order depends on n alone.
__global__ void k_add_sum(const double *part, size_t n, double *acc) {
    __shared__ double sh[ROW_THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += ROW_THREADS) s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) *acc += s;
}

// Queue *acc += sum of the n doubles a kernel left in device memory.
static void add_sum(const double *part, size_t n, double *acc, const char *what) {
    k_add_sum<<<1, ROW_THREADS, 0, cuda_stream()>>>(part, n, acc);
    cuda_done(what);
}

// ---------------------------------------------------------------- cross-entropy

// A row's maximum and sum of exp(x - max) in one read of the row (the logits are
// the step's largest buffer: N x V floats, 1.6 GB at 8192 tokens of a 49152 vocab):
// each thread keeps a running (maximum, sum) over its columns in order, a new
// maximum rescaling its sum; the block then takes the maximum, rescales each
// thread's sum to it and adds them by its fixed tree. The same order every run.
__device__ static void row_max_sumexp(const float *x, int V, float *sh, float *mx, float *sum) {
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += ROW_THREADS) {
        const float v = x[j];
        if (v > m) {
            s = s * expf(m - v) + 1.0f;  // expf(-inf) = 0 for the first
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    const float row_max = block_max(m, sh);
    *sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), sh);
    *mx = row_max;
}

// Values a thread holds between its reads and its writes in ce_row_grads' bf16 form.
#define CE_CHUNK 8

// Column j's value of ce_row_grads' gradient (0 from `valid` on, the target's less grad_scale).
__device__ static float ce_grad(const float *x, int j, int valid, float mx, float inv, int t, float grad_scale) {
    const float p = j < valid ? expf(x[j] - mx) * inv : 0.0f;
    return j == t ? p - grad_scale : p;
}

// A row's gradient in place, (softmax - onehot(t)) * grad_scale: x(Vl), its columns
// from `valid` on padding (0), t the target's column or -1 where it lies elsewhere;
// inv = grad_scale / sum exp(x - mx). fp32, or with BF16 each value rounded to bf16
// at (bf16 *)x + j (ops.h: cross_entropy_forward_backward_bf16), where value j lands
// on the bytes of float j/2, which another warp may not have read yet. So the row
// goes in chunks of CE_CHUNK values a thread: read whole into registers, a barrier,
// then written. Chunk k (values [kC, (k+1)C), C = CE_CHUNK * ROW_THREADS) writes
// floats below (k+1)C/2, all read before its barrier; chunk k+1 reads from (k+1)C
// on, above every write so far. Every thread of the block must call it.
template <bool BF16>
__device__ static void ce_row_grads(float *x, int Vl, int valid, float mx, float inv, int t, float grad_scale) {
    if (!BF16) {
        for (int j = threadIdx.x; j < Vl; j += ROW_THREADS) x[j] = ce_grad(x, j, valid, mx, inv, t, grad_scale);
        return;
    }
    __nv_bfloat16 *x16 = (__nv_bfloat16 *)x;  // (Vl) in the first half of the row's bytes
    for (int k0 = 0; k0 < Vl; k0 += CE_CHUNK * ROW_THREADS) {
        float g[CE_CHUNK];
        for (int i = 0; i < CE_CHUNK; i++)
            g[i] = ce_grad(x, k0 + i * ROW_THREADS + threadIdx.x, valid, mx, inv, t, grad_scale);
        __syncthreads();  // the chunk read by every thread before any value lands
        for (int i = 0; i < CE_CHUNK; i++) {
            const int j = k0 + i * ROW_THREADS + threadIdx.x;
            if (j < Vl) x16[j] = __float2bfloat16_rn(g[i]);
        }
    }
}

// One block per row of logits(N, V): loss[n] = log(sum exp(x - max)) + max - x_t;
// with grads, x becomes (softmax - onehot(t)) * grad_scale (BF16: ce_row_grads).
template <bool BF16>
__global__ void k_ce(float *logits, const int32_t *targets, int V, float grad_scale, int want_grads, double *loss) {
    __shared__ float sh[ROW_THREADS];
    float *x = logits + (size_t)blockIdx.x * V;
    // A target outside [0, V) is refused by ops_check_ids at the next host wait;
    // meanwhile it indexes nothing (its row's loss 0, no onehot).
    const int t = targets[blockIdx.x];
    const bool valid = t >= 0 && t < V;
    float mx, sum;
    row_max_sumexp(x, V, sh, &mx, &sum);
    const float xt = valid ? x[t] : 0.0f;
    __syncthreads();  // every thread has read x[t] before anyone overwrites it
    if (threadIdx.x == 0) loss[blockIdx.x] = valid ? (double)logf(sum) + (double)mx - (double)xt : 0.0;
    if (!want_grads) return;
    ce_row_grads<BF16>(x, V, V, mx, grad_scale / sum, valid ? t : -1, grad_scale);
}

// want_grads: CE_NO_GRADS, CE_GRADS_F32 or CE_GRADS_BF16 (ops.h).
static void ce(float *logits, const int32_t *targets, int N, int V, float grad_scale, int want_grads,
               double *loss_sum, const char *what) {
    ops_check_ids(targets, N, V, "cross-entropy target");
    if (N <= 0) return;
    const int32_t *t = cuda_device_ints(targets, (size_t)N, 0);
    double *loss = (double *)cuda_scratch((size_t)N * sizeof(double));  // (N)
    const auto kernel = want_grads == CE_GRADS_BF16 ? k_ce<true> : k_ce<false>;
    kernel<<<N, ROW_THREADS, 0, cuda_stream()>>>(logits, t, V, grad_scale, want_grads, loss);
    cuda_done(what);
    add_sum(loss, (size_t)N, loss_sum, what);
}

extern "C" void cross_entropy_forward_backward(float *logits, const int32_t *targets, int N, int V,
                                               float grad_scale, double *loss_sum) {
    ce(logits, targets, N, V, grad_scale, CE_GRADS_F32, loss_sum, "cross_entropy_forward_backward");
}

extern "C" void cross_entropy_forward_backward_bf16(float *logits, const int32_t *targets, int N, int V,
                                                    float grad_scale, double *loss_sum) {
    ce(logits, targets, N, V, grad_scale, CE_GRADS_BF16, loss_sum, "cross_entropy_forward_backward_bf16");
}

extern "C" void cross_entropy_forward(const float *logits, const int32_t *targets, int N, int V, double *loss_sum) {
    ce((float *)logits, targets, N, V, 0.0f, CE_NO_GRADS, loss_sum, "cross_entropy_forward");  // read only
}

__global__ void k_shard_max(const float *logits, int Vl, int valid, float *rowmax) {
    __shared__ float sh[ROW_THREADS];
    const float *x = logits + (size_t)blockIdx.x * Vl;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < valid; j += ROW_THREADS) mx = fmaxf(mx, x[j]);
    mx = block_max(mx, sh);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}

__global__ void k_shard_sums(const float *logits, const int32_t *targets, int Vl, int valid, int v0,
                             const float *rowmax, float *sumexp, float *tlogit) {
    __shared__ float sh[ROW_THREADS];
    const float *x = logits + (size_t)blockIdx.x * Vl;
    const float mx = rowmax[blockIdx.x];
    float s = 0.0f;
    for (int j = threadIdx.x; j < valid; j += ROW_THREADS) s += expf(x[j] - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        sumexp[blockIdx.x] = s;
        int t = targets[blockIdx.x] - v0;
        tlogit[blockIdx.x] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
}

template <bool BF16>
__global__ void k_shard_finish(float *logits, const int32_t *targets, int Vl, int valid, int v0, const float *rowmax,
                               const float *sumexp, const float *tlogit, float grad_scale, int want_grads,
                               double *loss) {
    const int n = blockIdx.x;
    if (threadIdx.x == 0) loss[n] = (double)logf(sumexp[n]) + (double)rowmax[n] - (double)tlogit[n];
    if (!want_grads) return;
    const int t = targets[n] - v0;  // a target outside the shard: no onehot here
    ce_row_grads<BF16>(logits + (size_t)n * Vl, Vl, valid, rowmax[n], grad_scale / sumexp[n],
                       t >= 0 && t < valid ? t : -1, grad_scale);
}

extern "C" void ce_shard_max(const float *logits, int N, int Vl, int valid, float *rowmax) {
    if (N <= 0) return;
    k_shard_max<<<N, ROW_THREADS, 0, cuda_stream()>>>(logits, Vl, valid, rowmax);
    cuda_done("ce_shard_max");
}

extern "C" void ce_shard_sums(const float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                              const float *rowmax, float *sumexp, float *tlogit) {
    if (N <= 0) return;
    const int32_t *t = cuda_device_ints(targets, (size_t)N, 0);
    k_shard_sums<<<N, ROW_THREADS, 0, cuda_stream()>>>(logits, t, Vl, valid, v0, rowmax, sumexp, tlogit);
    cuda_done("ce_shard_sums");
}

extern "C" void ce_shard_finish(float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                                const float *rowmax, const float *sumexp, const float *tlogit, float grad_scale,
                                int want_grads, double *loss_sum) {
    if (N <= 0) return;
    const int32_t *t = cuda_device_ints(targets, (size_t)N, 0);
    double *loss = (double *)cuda_scratch((size_t)N * sizeof(double));  // (N)
    const auto kernel = want_grads == CE_GRADS_BF16 ? k_shard_finish<true> : k_shard_finish<false>;
    kernel<<<N, ROW_THREADS, 0, cuda_stream()>>>(logits, t, Vl, valid, v0, rowmax, sumexp, tlogit, grad_scale,
                                                 want_grads, loss);
    cuda_done("ce_shard_finish");
    add_sum(loss, (size_t)N, loss_sum, "ce_shard_finish");
}

// -------------------------------------------------------------------- optimizer

// partial[block] = sum of x^2 over a fixed grid-stride slice, in double.
__global__ void k_sum_squares(const float *x, size_t n, double *partial) {
    __shared__ double sh[ROW_THREADS];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)ROW_THREADS + threadIdx.x; i < n; i += (size_t)SQ_BLOCKS * ROW_THREADS)
        s += (double)x[i] * (double)x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

extern "C" void sum_squares(const float *x, size_t n, double *acc) {
    if (n == 0) return;
    double *partial = (double *)cuda_scratch(SQ_BLOCKS * sizeof(double));  // (SQ_BLOCKS)
    k_sum_squares<<<SQ_BLOCKS, ROW_THREADS, 0, cuda_stream()>>>(x, n, partial);
    cuda_done("sum_squares");
    add_sum(partial, SQ_BLOCKS, acc, "sum_squares");
}


// PyTorch's AdamW (ops.h), the bias corrections computed on the host in double;
// copy (NULL: none) gets the updated weight rounded to bf16, as the products round
// it (the kept copy, cuda_bf16_copy_for_update).
__global__ void k_adamw(float *param, const float *grad, float *m, float *v, size_t n, float grad_scale,
                        float beta1, float beta2, float eps, float decay, float step_size, float bc2_sqrt,
                        __nv_bfloat16 *copy) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float p = adamw_element(param, grad, m, v, i, grad_scale, beta1, beta2, eps, bc2_sqrt, step_size, decay);
        if (copy) copy[i] = __float2bfloat16_rn(p);
    }
}

extern "C" void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float grad_scale,
                             float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    if (n == 0) return;
    const float bc1 = (float)(1.0 - pow(beta1, t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
    k_adamw<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream()>>>(param, grad, m, v, n, grad_scale, beta1, beta2, eps,
                                                                    1.0f - lr * weight_decay, lr / bc1, bc2_sqrt,
                                                                    (__nv_bfloat16 *)cuda_bf16_copy_for_update(param, n));
    cuda_done("adamw_update");
}
