// bench/tools/sgemm_alone.c — the rate of one product shape run alone through
// femtotron's own CPU products (ops/matmul_cpu.c, linked from the build's objects),
// best of `reps` after one untimed call (bench/gemm_in_situ.sh): usage sgemm_alone
// M N K TA TB [reps] [cold], row-major, TA/TB 'N' or 'T' as the model calls them:
// NT the forward (matmul_forward), TN the weight gradient (matmul_backward_ld's dW +=),
// NN the input gradient (its din). So each shape is multiplied as in a step, cut among
// the threads by rows or not as the build decides (matmul_cpu_row_blocks). Warm by
// default: the operands stay in the caches from one call to the next. cold = 1
// writes COLD_BYTES of other memory before each call, so the operands come from
// DRAM, as they do in a training step, where other layers' tensors went through the
// caches between a tensor's write and its product.
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ops/ops.h"
#include "sgemm_tool.h"

#define COLD_BYTES ((size_t)512 << 20)  // more than the caches a VM of this kind sees

// C(M, N) (+)= op(A) op(B) as the model's layer makes it (see the header).
static void product(int ta, int tb, int M, int N, int K, const float *A, const float *B, float *C) {
    if (!ta && tb) matmul_forward(C, A, B, M, K, N);                           // A (M,K) tokens, B (N,K) W
    else if (ta && !tb) matmul_backward_ld(NULL, C, A, M, B, NULL, K, N, M, 0);  // A (K,M) dout, B (K,N) in
    else matmul_backward_ld(C, NULL, A, K, NULL, B, M, N, K, 0);               // A (M,K) dout, B (K,N) W
}

int main(int argc, char **argv) {
    if (argc < 6) return 2;
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), reps = argc > 6 ? atoi(argv[6]) : 10;
    const int ta = argv[4][0] == 'T', tb = argv[5][0] == 'T', cold = argc > 7 && atoi(argv[7]) == 1;
    if (ta && tb) return 2;  // no layer makes A^T B^T
    ops_set_threads(omp_get_max_threads());
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
        product(ta, tb, M, N, K, A, B, C);
        t = now() - t;
        if (r >= 0 && t < best) best = t;
    }
    printf("%.1f\n", 2.0 * M * N * K / best / 1e9);
    free(A), free(B), free(C), free(evict);
    return 0;
}
