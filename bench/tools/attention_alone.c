// bench/tools/attention_alone.c — the CPU attention kernels (ops/attention_cpu.c)
// alone: causal GQA forward + backward of B sequences of S tokens, H query heads,
// KV key/value heads of hd, on seeded random q, k, v, best of R runs, in ms and in
// GFLOP/s of the causal FLOPs (forward 4 hd S(S+1)/2 per head and sequence: scores
// and values; backward 10 hd S(S+1)/2: scores recomputed, dP, dQ, dK, dV).
// Threads: OMP_NUM_THREADS. Built by bench/gemm_in_situ.sh against build/ops
// (attention_cpu.o and buffers_cpu.o, whose copy_rows_f32 it uses). A 7th argument
// "bf16" switches bf16 products on (link the oneMKL build's ops/matmul_bf16_cpu.o):
// their tiles on AMX where the CPU has it (ops/amx_tiles.h); "bf16-mkl" on oneMKL's
// bf16 product instead.
//   attention_alone B S H KV hd R [bf16|bf16-mkl]  ->  "attention fwd F ms bwd G ms total T GFLOP/s"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"

static float *random_floats(size_t n, unsigned *seed) {  // (n) uniform in [-1, 1)
    float *p = malloc(n * sizeof(float));
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) p[i] = (float)rand_r(seed) / RAND_MAX * 2.0f - 1.0f;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: %s B S H KV hd runs [bf16|bf16-mkl]\n", argv[0]);
        return 2;
    }
    if (argc == 8) ops_set_matmul_bf16(1);  // dies where this build has no bf16 product
    if (argc == 8 && strcmp(argv[7], "bf16-mkl") == 0) cpu_attention_use_amx(0);
    const int B = atoi(argv[1]), S = atoi(argv[2]), H = atoi(argv[3]), KV = atoi(argv[4]),
              hd = atoi(argv[5]), runs = atoi(argv[6]);
    const size_t ld = (size_t)(H + 2 * KV) * hd, nq = (size_t)B * S * ld;
    const size_t no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    unsigned seed = 1;
    float *qkv = random_floats(nq, &seed), *dout = random_floats(no, &seed);  // (B*S, ld), (B*S, H*hd)
    float *out = random_floats(no, &seed), *dqkv = random_floats(nq, &seed);  // (B*S, H*hd), (B*S, ld)
    float *lse = random_floats(nr, &seed), *m = random_floats(nr, &seed);     // (B, H, S) each
    float *l = random_floats(nr, &seed), *rowdot = random_floats(nr, &seed);
    float *scratch = random_floats(attention_scratch_floats(hd), &seed);
    int *pos = malloc(sizeof(int) * S);  // (S)
    for (int i = 0; i < S; i++) pos[i] = i;
    const double causal = (double)B * H * hd * S * (S + 1) / 2.0;
    double best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < runs; r++) {
        double t0 = omp_get_wtime();
        attention_forward(out, lse, m, l, qkv, pos, B, S, H, KV, hd, scratch);
        double t1 = omp_get_wtime();
        attention_backward(dqkv, rowdot, dout, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
        double t2 = omp_get_wtime();
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_b) best_b = t2 - t1;
    }
    printf("attention fwd %.2f ms bwd %.2f ms total %.1f GFLOP/s\n", best_f * 1e3, best_b * 1e3,
           14.0 * causal / (best_f + best_b) / 1e9);
    return 0;
}
