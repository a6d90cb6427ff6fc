// bench/tools/sgemm_step_shapes.c — one BLAS's fp32 products on the shapes of one
// training step of a Llama config (bench/blas_products.sh): each shape's rate, best of
// `reps` rounds, and the step's product time (each shape's time x its calls a step).
// Usage: sgemm_step_shapes T D QKV F V L reps [sgemm|matmul]
//   T tokens a micro-batch (B x S), D hidden, QKV the q|k|v product's width
//   ((H + 2 KV) hd), F intermediate, V vocabulary, L layers; the last argument picks
//   oneDNN's BLAS-like dnnl_sgemm or its matmul primitive (brgemm kernels) in the
//   oneDNN build.
// Built once per library (the script passes one of):
//   -DLIB_CBLAS   cblas_sgemm of Debian's OpenBLAS
//   -DLIB_MKL     oneMKL's cblas_sgemm
//   -DLIB_SCIPY   PyPI's scipy-openblas32 (a recent OpenBLAS, symbols prefixed scipy_)
//   -DLIB_ONEDNN  oneDNN (PyPI's onednn-cpu-gomp)
// The shapes are the model's (ops/cpu.c: matmul_forward / _backward), row-major
// C(M, N) = op(A) op(B), per layer: the forward's four products X W^T (NT: q|k|v, o,
// gate|up, down), their input gradients dY W (NN) and weight gradients dY^T X (TN);
// the output head's three once a step. Each call takes the next of NSET operand
// sets, so a product's operands were last touched NSET - 1 calls earlier (in a
// training step, other layers' tensors pass through the caches between uses).
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(LIB_SCIPY)
#include <cblas.h>  // scipy-openblas32's own header (its include/), prefixed names
#define SGEMM scipy_cblas_sgemm
#elif defined(LIB_ONEDNN)
#include <dnnl.h>
#elif defined(LIB_MKL)
#include <mkl_cblas.h>
#define SGEMM cblas_sgemm
#else
#include <cblas.h>
#define SGEMM cblas_sgemm
#endif

#include "sgemm_tool.h"

#define NSET 6

typedef struct {
    int m, n, k, ta, tb, calls;
} Shape;

#ifdef LIB_ONEDNN
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static void check(dnnl_status_t st, const char *what) {
    if (st != dnnl_success) fprintf(stderr, "sgemm_step_shapes: oneDNN %s failed (%d)\n", what, (int)st), exit(1);
}
// The matmul primitive for C(M, N) = op(A) op(B): transposes as memory formats (ba).
static dnnl_primitive_t matmul_for(const Shape *s, dnnl_memory_desc_t md[3]) {
    dnnl_dims_t a = {s->m, s->k}, b = {s->k, s->n}, c = {s->m, s->n};
    check(dnnl_memory_desc_create_with_tag(&md[0], 2, a, dnnl_f32, s->ta ? dnnl_ba : dnnl_ab), "A desc");
    check(dnnl_memory_desc_create_with_tag(&md[1], 2, b, dnnl_f32, s->tb ? dnnl_ba : dnnl_ab), "B desc");
    check(dnnl_memory_desc_create_with_tag(&md[2], 2, c, dnnl_f32, dnnl_ab), "C desc");
    dnnl_primitive_desc_t pd;
    check(dnnl_matmul_primitive_desc_create(&pd, g_engine, md[0], md[1], NULL, md[2], NULL), "matmul desc");
    dnnl_primitive_t p;
    check(dnnl_primitive_create(&p, pd), "matmul");
    dnnl_primitive_desc_destroy(pd);
    return p;
}
#endif

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: sgemm_step_shapes T D QKV F V L reps [sgemm|matmul]\n");
        return 2;
    }
    const int T = atoi(argv[1]), D = atoi(argv[2]), QKV = atoi(argv[3]), F = atoi(argv[4]), V = atoi(argv[5]),
              L = atoi(argv[6]), reps = atoi(argv[7]);
    const int use_matmul = argc > 8 && !strcmp(argv[8], "matmul");
    (void)use_matmul;  // oneDNN's build only
    // forward NT, input gradients NN, weight gradients TN: q|k|v, o, gate|up, down; head
    const int out[5] = {QKV, D, 2 * F, D, V}, in[5] = {D, D, D, F, D};
    Shape shapes[15];
    for (int p = 0; p < 5; p++) {
        const int calls = p < 4 ? L : 1;
        shapes[p] = (Shape){T, out[p], in[p], 0, 1, calls};        // Y = X W^T
        shapes[5 + p] = (Shape){T, in[p], out[p], 0, 0, calls};   // dX = dY W
        shapes[10 + p] = (Shape){out[p], in[p], T, 1, 0, calls};  // dW = dY^T X
    }
#ifdef LIB_ONEDNN
    check(dnnl_engine_create(&g_engine, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags), "stream");
#endif
    double step_s = 0.0, step_flops = 0.0;
    for (int i = 0; i < 15; i++) {
        const Shape *s = &shapes[i];
        float *A[NSET], *B[NSET], *C[NSET];  // (M,K) or (K,M); (K,N) or (N,K); (M,N)
        for (int j = 0; j < NSET; j++)
            A[j] = filled((size_t)s->m * s->k), B[j] = filled((size_t)s->k * s->n), C[j] = filled((size_t)s->m * s->n);
#ifdef LIB_ONEDNN
        dnnl_memory_desc_t md[3];
        dnnl_primitive_t mm = use_matmul ? matmul_for(s, md) : NULL;
#endif
        double best = 1e30;
        for (int r = -1; r < reps; r++) {  // r = -1: threads and buffers start, untimed
            const double t0 = now();
            for (int j = 0; j < NSET; j++) {
#ifdef LIB_ONEDNN
                if (use_matmul) {
                    dnnl_memory_t mem[3];
                    float *ptr[3] = {A[j], B[j], C[j]};
                    for (int q = 0; q < 3; q++) check(dnnl_memory_create(&mem[q], md[q], g_engine, ptr[q]), "memory");
                    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
                    check(dnnl_primitive_execute(mm, g_stream, 3, args), "execute");
                    check(dnnl_stream_wait(g_stream), "wait");
                    for (int q = 0; q < 3; q++) dnnl_memory_destroy(mem[q]);
                } else {
                    check(dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.0f, A[j],
                                     s->ta ? s->m : s->k, B[j], s->tb ? s->k : s->n, 0.0f, C[j], s->n),
                          "sgemm");
                }
#else
                SGEMM(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m, s->n,
                      s->k, 1.0f, A[j], s->ta ? s->m : s->k, B[j], s->tb ? s->k : s->n, 0.0f, C[j], s->n);
#endif
            }
            const double t = (now() - t0) / NSET;
            if (r >= 0 && t < best) best = t;
        }
        const double flops = 2.0 * s->m * s->n * s->k;
        printf("shape %d %d %d %c%c %d %.1f\n", s->m, s->n, s->k, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->calls,
               flops / best / 1e9);
        step_s += best * s->calls, step_flops += flops * s->calls;
#ifdef LIB_ONEDNN
        if (mm) dnnl_primitive_destroy(mm);
        for (int q = 0; q < 3 && use_matmul; q++) dnnl_memory_desc_destroy(md[q]);
#endif
        for (int j = 0; j < NSET; j++) free(A[j]), free(B[j]), free(C[j]);
    }
    printf("step %.2f ms %.1f GFLOP/s\n", step_s * 1e3, step_flops / step_s / 1e9);
    return 0;
}
