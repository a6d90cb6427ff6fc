// ops/matmul_cpu.c — the CPU's matrix products (ops.h, "linear layers" and the
// bf16 operands' products) through BLAS (OpenBLAS sgemm, or BLIS: make BLAS=blis, or
// oneMKL: make BLAS=mkl),
// and the thread count BLAS and OpenMP share. sgemm reads and writes fp32 only: a
// bf16 operand is widened into its scratch first, a bf16 output rounded after.
// With bf16 products on (training.precision = bf16, the oneMKL build) every product
// goes to ops/matmul_bf16_cpu.c's bf16 product instead: fp32 operands rounded,
// bf16 ones read as they are. The element-wise kernels are in ops/cpu.c.
#include <limits.h>
#include <omp.h>
#include <stdio.h>

#include "ops/bf16.h"
#include "ops/blas_api.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/matmul_cpu.h"
#include "ops/ops.h"
#include "util.h"

// The BLAS's own thread count: OpenBLAS's extension (declared in its cblas.h on some
// builds only), or BLIS's (make BLAS=blis).
#ifdef FEMTOTRON_BLIS
void bli_thread_set_num_threads(long num_threads);
const char *bli_info_get_version_str(void);
#define blas_set_threads(n) bli_thread_set_num_threads(n)
void ops_blas_name(char *out, size_t size) { snprintf(out, size, "BLIS %s", bli_info_get_version_str()); }
#elif defined(FEMTOTRON_MKL)
// oneMKL (make BLAS=mkl): its GNU threading layer runs on libgomp, our pool.
#include <mkl_service.h>
#define blas_set_threads(n) mkl_set_num_threads(n)
void ops_blas_name(char *out, size_t size) { mkl_get_version_string(out, size < INT_MAX ? (int)size : INT_MAX); }
#else
void openblas_set_num_threads(int num_threads);
#define blas_set_threads(n) openblas_set_num_threads(n)
void ops_blas_name(char *out, size_t size) {
    const char *cfg = openblas_get_config();
    snprintf(out, size, "%s", cfg ? cfg : "OpenBLAS (unknown build)");
}
#endif

void ops_set_threads(int threads) {
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    blas_set_threads(threads);
}

// ---------------------------------------------------------------- linear layers

// C(M, N) = op(A) @ op(B) + beta C, row-major, C's rows cut into one block of rows a
// thread, each block one single-threaded sgemm (OpenBLAS runs single-threaded
// inside a parallel region), where the BLAS runs on OpenMP's threads (Debian's
// OpenBLAS). OpenBLAS's own 2-thread sgemm splits the same product into parts
// whose threads share packed panels of B and wait on each other for them block by
// block; at the step's shapes (K 512-8192, M 512-8192) that waiting cost more than
// each thread packing all of B itself. Measured alone on the AMD EPYC (15 step
// shapes of the small config): the split's products 1-6% faster over a step, most on
// the smallest (2048x512x512: 151-176 -> 180-190 GFLOP/s). Each element of C sums
// over K in the same blocks and order as the whole product, so the bits are the
// ones the unsplit sgemm gives, as long as both take OpenBLAS's general kernels:
// it multiplies products of up to 10^6 multiply-adds with small-matrix kernels of
// their own (Skylake-X and later), so a block is never cut below ROWS_BLOCK_MIN_MNK.
// Block starts are multiples of 16 rows (64 bytes of a transposed A's row).
#define ROWS_BLOCK_MIN_MNK 4e6  // multiply-adds a block at least (the step's least: 2.7e8)
#define ROWS_BLOCK_MIN_ROWS 64

int matmul_cpu_row_blocks(int M, int N, int K) {
#if defined(FEMTOTRON_BLIS) || defined(FEMTOTRON_MKL) || defined(FEMTOTRON_SCIPY_OPENBLAS)
    (void)M, (void)N, (void)K;
    return 1;  // BLIS and PyPI's OpenBLAS run threads of their own; oneMKL's products ran no faster cut
#else
    if (omp_in_parallel() || openblas_get_parallel() != 2) return 1;
    int threads = omp_get_max_threads();
    double block_rows = (double)M / threads;
    return block_rows >= ROWS_BLOCK_MIN_ROWS && block_rows * N * K >= ROWS_BLOCK_MIN_MNK ? threads : 1;
#endif
}

static int rows_block_start(int M, int threads, int t) {
    return t == threads ? M : (int)((long long)M * t / threads) / 16 * 16;
}

static void sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    int threads = matmul_cpu_row_blocks(M, N, K);
    if (threads < 2) {
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
        int m0 = rows_block_start(M, threads, t), m1 = rows_block_start(M, threads, t + 1);
        const float *a = ta == CblasNoTrans ? A + (size_t)m0 * lda : A + m0;  // op(A)'s rows m0..m1
        if (m1 > m0)
            cblas_sgemm(CblasRowMajor, ta, tb, m1 - m0, N, K, 1.0f, a, lda, B, ldb, beta, C + (size_t)m0 * ldc,
                        ldc);
    }
}

// bf16 products: out(N, out_dim), rows ld_out apart, = in16(N, in_dim) @ W^T, W's
// bf16 operand (slot 0) from its kept copy or rounded.
static void forward_bf16(float *out, int ld_out, const uint16_t *in16, const float *weight, int N, int in_dim,
                         int out_dim) {
    const uint16_t *w16 = cpu_bf16_operand(0, weight, out_dim, in_dim, in_dim);
    cpu_gemm_bf16(0, 1, N, out_dim, in_dim, 1.0f, in16, in_dim, w16, in_dim, 0.0f, out, ld_out);
}

// bf16 products: dW += dout16^T @ in16 and din (+)= dout16 @ W (W in slot 2), with
// dout16(N, out_dim) bf16, rows ld_d apart, and in16(N, in_dim) contiguous bf16
// (in16 read only for dW).
static void backward_bf16(float *din, float *dweight, const uint16_t *dout16, int ld_d, const uint16_t *in16,
                          const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (dweight) cpu_gemm_bf16(1, 0, out_dim, in_dim, N, 1.0f, dout16, ld_d, in16, in_dim, 1.0f, dweight, in_dim);
    if (!din) return;
    const uint16_t *w16 = cpu_bf16_operand(2, weight, out_dim, in_dim, in_dim);
    cpu_gemm_bf16(0, 0, N, in_dim, out_dim, 1.0f, dout16, ld_d, w16, in_dim, accumulate_din ? 1.0f : 0.0f, din, in_dim);
}

void matmul_forward_ld(float *out, int ld_out, const float *in, const float *weight, int N, int in_dim,
                       int out_dim) {
    if (ops_matmul_bf16()) {
        forward_bf16(out, ld_out, cpu_bf16_operand(1, in, N, in_dim, in_dim), weight, N, in_dim, out_dim);
        return;
    }
    // out = in @ W^T : (N, in) x (in, out), rows of out ld_out apart
    sgemm_rows(CblasNoTrans, CblasTrans, N, out_dim, in_dim, in, in_dim, weight, in_dim, 0.0f, out, ld_out);
}

void matmul_forward(float *out, const float *in, const float *weight, int N, int in_dim,
                    int out_dim) {
    matmul_forward_ld(out, out_dim, in, weight, N, in_dim, out_dim);
}

// The product, then the add: sgemm with beta 1 would add the residual into its
// partial sums block by block (another rounding order than the GPU's epilogue).
void matmul_forward_add(float *out, const float *add, const float *in, const float *weight, int N, int in_dim,
                        int out_dim) {
    if (out == add) die("matmul_forward_add: out must not alias the residual it adds");
    matmul_forward(out, in, weight, N, in_dim, out_dim);
    residual_forward(out, out, add, (size_t)N * out_dim);
}

void matmul_backward_ld(float *din, float *dweight, const float *dout, int ld_dout, const float *in,
                        const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (ops_matmul_bf16()) {
        if (!din && !dweight) return;
        const uint16_t *d16 = cpu_bf16_operand(0, dout, N, out_dim, ld_dout);
        const uint16_t *in16 = dweight ? cpu_bf16_operand(1, in, N, in_dim, in_dim) : NULL;
        backward_bf16(din, dweight, d16, out_dim, in16, weight, N, in_dim, out_dim, accumulate_din);
        return;
    }
    // dW += dout^T @ in : (out, N) x (N, in)
    if (dweight)
        sgemm_rows(CblasTrans, CblasNoTrans, out_dim, in_dim, N, dout, ld_dout, in, in_dim, 1.0f, dweight, in_dim);
    if (din == NULL) return;
    // din (+)= dout @ W : (N, out) x (out, in)
    sgemm_rows(CblasNoTrans, CblasNoTrans, N, in_dim, out_dim, dout, ld_dout, weight, in_dim,
               accumulate_din ? 1.0f : 0.0f, din, in_dim);
}

void matmul_backward(float *din, float *dweight, const float *dout, const float *in,
                     const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    matmul_backward_ld(din, dweight, dout, out_dim, in, weight, N, in_dim, out_dim, accumulate_din);
}

// oneMKL's bf16 product reads dout16 with its leading dimension as it is.
void matmul_backward_ld16(float *din, float *dweight, const uint16_t *dout16, size_t ld16, const float *in,
                          const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (!ops_matmul_bf16()) die("matmul_backward_ld16: a bf16 output gradient needs bf16 products (a bug)");
    if (!din && !dweight) return;
    if (ld16 > INT_MAX) die("matmul_backward_ld16: rows %zu values apart, more than a BLAS index holds", ld16);
    const uint16_t *in16 = dweight ? cpu_bf16_operand(1, in, N, in_dim, in_dim) : NULL;
    backward_bf16(din, dweight, dout16, (int)ld16, in16, weight, N, in_dim, out_dim, accumulate_din);
}

// ------------------------------------------------------------ bf16 operands

// sgemm reads fp32 only: a bf16 operand x16(n) widened into its scratch, which
// may be x16's own buffer (ops.h): then from the last value to the first, so
// each float lands on bytes whose halves were read already (value i's float
// covers halves 2i and 2i+1, never below i).
static const float *widened(float *scratch, const uint16_t *x16, size_t n) {
    if ((const void *)scratch != (const void *)x16) {
        widen_from_bf16(scratch, x16, n);
        return scratch;
    }
    for (size_t i = n; i-- > 0;) scratch[i] = bf16_to_f32(x16[i]);
    return scratch;
}

void matmul_forward_from_bf16(float *out, const uint16_t *in16, float *scratch, const float *weight, int N,
                              int in_dim, int out_dim) {
    if (ops_matmul_bf16()) forward_bf16(out, out_dim, in16, weight, N, in_dim, out_dim);
    else matmul_forward(out, widened(scratch, in16, (size_t)N * in_dim), weight, N, in_dim, out_dim);
}

void matmul_forward_from_bf16_add(float *out, const float *add, const uint16_t *in16, float *scratch,
                                  const float *weight, int N, int in_dim, int out_dim) {
    if (out == add) die("matmul_forward_from_bf16_add: out must not alias the residual it adds");
    matmul_forward_from_bf16(out, in16, scratch, weight, N, in_dim, out_dim);
    residual_forward(out, out, add, (size_t)N * out_dim);
}

// The fp32 product into out_scratch, then rounded: neither sgemm nor oneMKL's bf16
// product writes bf16.
void matmul_forward_bf16(uint16_t *out16, float *out_scratch, const uint16_t *in16, float *in_scratch,
                         const float *weight, int N, int in_dim, int out_dim) {
    matmul_forward_from_bf16(out_scratch, in16, in_scratch, weight, N, in_dim, out_dim);
    round_to_bf16(out16, out_scratch, (size_t)N * out_dim);
}

void matmul_backward_from_bf16(float *din, float *dweight, const float *dout, const uint16_t *in16, float *scratch,
                               const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (ops_matmul_bf16()) {
        if (!din && !dweight) return;
        backward_bf16(din, dweight, cpu_bf16_operand(0, dout, N, out_dim, out_dim), out_dim, in16, weight, N,
                      in_dim, out_dim, accumulate_din);
        return;
    }
    const float *in = dweight ? widened(scratch, in16, (size_t)N * in_dim) : NULL;
    matmul_backward(din, dweight, dout, in, weight, N, in_dim, out_dim, accumulate_din);
}

void matmul_backward_bf16(float *din, float *dweight, const uint16_t *dout16, float *dscratch, const uint16_t *in16,
                          float *in_scratch, const float *weight, int N, int in_dim, int out_dim,
                          int accumulate_din) {
    if (!din && !dweight) return;
    if (ops_matmul_bf16()) {
        backward_bf16(din, dweight, dout16, out_dim, in16, weight, N, in_dim, out_dim, accumulate_din);
        return;
    }
    const float *dout = widened(dscratch, dout16, (size_t)N * out_dim);
    const float *in = dweight ? widened(in_scratch, in16, (size_t)N * in_dim) : NULL;
    matmul_backward(din, dweight, dout, in, weight, N, in_dim, out_dim, accumulate_din);
}

// The fp32 products (dout rounded once under bf16 products), din into din_scratch,
// then rounded (as matmul_forward_bf16): neither sgemm nor oneMKL's bf16 product
// writes bf16. In din16's own buffer the rounding goes in ascending order, one
// thread (ops/bf16.h: bf16_narrow_in_place; only tests train so on the CPU).
static void din_to_bf16(uint16_t *din16, float *din_scratch, size_t n) {
    if ((void *)din_scratch == (void *)din16) bf16_narrow_in_place(din_scratch, n);
    else round_to_bf16(din16, din_scratch, n);
}

void matmul_backward_from_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight, const float *dout,
                                       const uint16_t *in16, float *in_scratch, const float *weight, int N,
                                       int in_dim, int out_dim) {
    if (!din_scratch) die("matmul_backward_from_bf16_to_bf16: no room for the fp32 input gradient (a bug)");
    matmul_backward_from_bf16(din_scratch, dweight, dout, in16, in_scratch, weight, N, in_dim, out_dim, 0);
    din_to_bf16(din16, din_scratch, (size_t)N * in_dim);
}

// oneMKL's bf16 product reads both operands as they are; din as above.
void matmul_backward_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight, const uint16_t *dout16,
                                  const uint16_t *in16, const float *weight, int N, int in_dim, int out_dim) {
    if (!ops_matmul_bf16())
        die("matmul_backward_bf16_to_bf16: a bf16 output gradient read as it is needs bf16 products (a bug)");
    if (din16 && !din_scratch) die("matmul_backward_bf16_to_bf16: no room for the fp32 input gradient (a bug)");
    backward_bf16(din16 ? din_scratch : NULL, dweight, dout16, out_dim, in16, weight, N, in_dim, out_dim, 0);
    if (din16) din_to_bf16(din16, din_scratch, (size_t)N * in_dim);
}

void matmul_backward_input_to_bf16(uint16_t *din16, float *din_scratch, const float *dout, const float *weight,
                                   int N, int in_dim, int out_dim) {
    matmul_backward_from_bf16_to_bf16(din16, din_scratch, NULL, dout, NULL, NULL, weight, N, in_dim, out_dim);
}
