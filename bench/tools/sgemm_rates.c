// bench/tools/sgemm_rates.c — an LD_PRELOAD shim that times every cblas_sgemm a
// process makes and, at exit, prints its rate per shape (bench/gemm_in_situ.sh).
// Calls under 2e8 FLOPs (the attention's tiles, made inside OpenMP regions, one
// thread each) are summed as one "small" row, in thread-seconds. A larger call
// inside an OpenMP region is one thread's block of rows of a linear layer's
// product, which ops/matmul_cpu.c cuts among the team (sgemm_rows): the team's
// blocks run side by side, so thread 0's block stands for the product, recorded as
// the product's shape (its rows times the team: the whole M where the rows divide
// evenly, as at the benchmark's shapes) and its own time; the other blocks are not
// recorded.
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

#include "sgemm_tool.h"

typedef void (*SgemmFn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                        const blasint, const blasint, const blasint, const float, const float *, const blasint,
                        const float *, const blasint, const float, float *, const blasint);

#define MAX_SHAPES 64
static struct {
    int m, n, k, ta, tb;
    long calls;
    double seconds;
} shapes[MAX_SHAPES];
static int n_shapes;
static long small_calls;
static double small_s, small_flops;

void cblas_sgemm(const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                 const blasint M, const blasint N, const blasint K, const float alpha, const float *A,
                 const blasint lda, const float *B, const blasint ldb, const float beta, float *C,
                 const blasint ldc) {
    static SgemmFn real;
    if (!real) real = (SgemmFn)dlsym(RTLD_NEXT, "cblas_sgemm");
    double t = now();
    real(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    t = now() - t;
    const double flops = 2.0 * M * N * K;
    if (flops < 2e8) {  // several threads may land here at once: counts only, approximate
#pragma omp atomic
        small_calls++;
#pragma omp atomic
        small_s += t;
#pragma omp atomic
        small_flops += flops;
        return;
    }
    int rows = M;
    if (omp_in_parallel()) {
        if (omp_get_thread_num() != 0) return;
        rows = M * omp_get_num_threads();
    }
    int i = 0;
    while (i < n_shapes && !(shapes[i].m == rows && shapes[i].n == N && shapes[i].k == K &&
                             shapes[i].ta == (int)ta && shapes[i].tb == (int)tb))
        i++;
    if (i == n_shapes) {
        if (n_shapes == MAX_SHAPES) return;
        shapes[n_shapes].m = rows, shapes[n_shapes].n = N, shapes[n_shapes].k = K;
        shapes[n_shapes].ta = ta, shapes[n_shapes].tb = tb;
        n_shapes++;
    }
    shapes[i].calls++;
    shapes[i].seconds += t;
}

__attribute__((destructor)) static void report(void) {
    for (int i = 0; i < n_shapes; i++)
        fprintf(stderr, "sgemm %d %d %d %c%c %ld %.4f\n", shapes[i].m, shapes[i].n, shapes[i].k,
                shapes[i].ta == CblasTrans ? 'T' : 'N', shapes[i].tb == CblasTrans ? 'T' : 'N', shapes[i].calls,
                shapes[i].seconds);
    if (small_calls) fprintf(stderr, "sgemm_small %ld %.4f %.0f\n", small_calls, small_s, small_flops);
}
