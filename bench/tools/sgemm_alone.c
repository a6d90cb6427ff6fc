// bench/tools/sgemm_alone.c — the rate of one sgemm shape run alone, best of `reps`
// after one untimed call (bench/gemm_in_situ.sh): usage sgemm_alone M N K TA TB [reps]
// [cold], row-major, TA/TB 'N' or 'T' as the model calls them (ops/cpu.c:
// matmul_forward / _backward). Warm by default: the operands stay in the caches from
// one call to the next. cold = 1 writes COLD_BYTES of other memory before each call,
// so the operands come from DRAM, as they do in a training step, where other layers'
// tensors went through the caches between a tensor's write and its product.
// rows = 1 calls it as femtotron's default build does (ops/matmul_cpu.c, sgemm_rows):
// C's rows cut into one block a thread of the OpenMP team, each block one
// single-threaded sgemm (block starts at multiples of 16 rows); rows = 0 (the
// default) makes one call, threaded by the BLAS.
// Usage: sgemm_alone M N K TA TB [reps] [cold] [rows]
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sgemm_tool.h"

#define COLD_BYTES ((size_t)512 << 20)  // more than the caches a VM of this kind sees

// C(M, N) = op(A) op(B), rows [m0, m1) of it (op(A)'s rows m0..m1)
static void product_rows(int ta, int tb, int M, int N, int K, const float *A, const float *B, float *C, int m0,
                         int m1) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m1 - m0, N, K, 1.0f,
                ta ? A + m0 : A + (size_t)m0 * K, ta ? M : K, B, tb ? K : N, 0.0f, C + (size_t)m0 * N, N);
}

int main(int argc, char **argv) {
    if (argc < 6) return 2;
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), reps = argc > 6 ? atoi(argv[6]) : 10;
    const int ta = argv[4][0] == 'T', tb = argv[5][0] == 'T', cold = argc > 7 && atoi(argv[7]) == 1;
    const int rows = argc > 8 && atoi(argv[8]) == 1;
    float *A = filled((size_t)M * K), *B = filled((size_t)K * N), *C = filled((size_t)M * N);  // (M,K) (K,N) (M,N)
    unsigned char *evict = cold ? malloc(COLD_BYTES) : NULL;  // (COLD_BYTES)
    if (cold && !evict) return 1;
    double best = 1e30;
    for (int r = -1; r < reps; r++) {  // r = -1: the BLAS's threads and buffers start
        // (a loop of ordinary stores: memset of this size uses non-temporal stores,
        // which go around the caches and would evict nothing)
        if (cold)
            for (size_t i = 0; i < COLD_BYTES; i++) evict[i] = (unsigned char)(i * 31 + (size_t)r);
        double t = now();
        if (!rows) product_rows(ta, tb, M, N, K, A, B, C, 0, M);
        else {
#pragma omp parallel
            {
                int team = omp_get_num_threads(), i = omp_get_thread_num();
                int m0 = (int)((long long)M * i / team) / 16 * 16;
                int m1 = i + 1 == team ? M : (int)((long long)M * (i + 1) / team) / 16 * 16;
                if (m1 > m0) product_rows(ta, tb, M, N, K, A, B, C, m0, m1);
            }
        }
        t = now() - t;
        if (r >= 0 && t < best) best = t;
    }
    printf("%.1f\n", 2.0 * M * N * K / best / 1e9);
    free(A), free(B), free(C), free(evict);
    return 0;
}
