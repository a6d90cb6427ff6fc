// ops/matmul_bf16_cpu.c — bf16 matrix products on the CPU (training.precision =
// bf16), in the oneMKL build (make BLAS=mkl): cblas_gemm_bf16bf16f32 multiplies
// bf16 operands into fp32 sums and an fp32 output, on AMX tiles where the CPU has
// them (Sapphire Rapids and later: about 4.5x sgemm's rate on the Xeon here,
// 1.5-2.0 TFLOP/s against 0.32-0.43 on two cores), with AVX512-BF16 or converted
// operands elsewhere. OpenBLAS, BLIS and Debian's build of OpenBLAS have no such
// product (OpenBLAS's sbgemm is not in Debian's 0.3.21): their builds keep
// ops_has_bf16() 0 and refuse bf16 by name.
//
// The numerics are the CUDA backend's (ops/matmul_cuda.cu): each fp32 operand is
// rounded to the nearest bf16 (ties to even) into a contiguous copy, the product of
// two bf16 values is exact in fp32, and the sums, the output and the weight
// gradients' accumulation (beta 1) stay fp32. Weights are read from the kept bf16
// copy of the parameters (ops_keep_bf16_weights), which AdamW writes as it updates
// this rank's parameters (cpu_bf16_copy_for_update) and the first product to read a
// weight rounds otherwise (another rank's shard, gathered); operands a run keeps as
// bf16 (the norms' outputs, gate|up, the SwiGLU output, the gate|up and q|k|v
// gradients) are read as they are.
//
// The rounded copies of other operands live in three slots, one per operand of a
// product (0: a backward's output gradient or a forward's weight, 1: an input, 2: a
// backward's weight), as in the CUDA backend: a training rank installs them as one
// planned buffer sized from its step's widest operands (ops_set_workspace, the
// CUDA workspace's slot sizes), and an operand that would not fit is fatal; with
// none installed (tests, bench, generation) each slot grows as needed. Products are
// called from one thread of a rank (the BLAS threads the product itself).
#include <stdio.h>
#include <stdlib.h>

#ifdef FEMTOTRON_MKL
#include <mkl.h>
#endif

#include "ops/bf16.h"
#include "ops/bf16_kept.h"
#include "ops/cuda_workspace.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"
#include "util.h"

#ifdef FEMTOTRON_MKL
int ops_has_bf16(void) { return 1; }
#else
int ops_has_bf16(void) { return 0; }
#endif

static int g_bf16;  // ops_set_matmul_bf16

void ops_set_matmul_bf16(int on) {
    if (on && !ops_has_bf16())
        die("this build's BLAS has no bf16 matrix product (training.precision = bf16 needs the oneMKL build: "
            "bash scripts/install_mkl.sh && make BLAS=mkl build-mkl/femtotron, or ./femtotron-cuda on a GPU)");
    g_bf16 = on != 0;
}

int ops_matmul_bf16(void) { return g_bf16; }

// ---------------------------------------------------------------- rounded copies

typedef struct {
    uint16_t *p;  // (cap) bf16
    size_t cap;
    int planned;  // p lies in the installed workspace (else grown here, freed here)
} Scratch;
static Scratch g_slot[3];

static void release_slots(void) {
    for (int i = 0; i < 3; i++) {
        if (!g_slot[i].planned) free(g_slot[i].p);
        g_slot[i] = (Scratch){NULL, 0, 0};
    }
}

void ops_set_workspace(void *buf, const OpsBounds *b) {
    release_slots();
    if (!buf) return;
    if (!ops_has_bf16() || !b->bf16)
        die("ops_set_workspace: the CPU backend's only work buffers are bf16 products' operand copies "
            "(training.precision = bf16 in the oneMKL build)");
    const OpsCudaWorkspace w = ops_cuda_workspace(b);
    char *at = buf;  // the three slots in order, ops_cpu_workspace_bytes(b) in all
    for (int i = 0; i < 3; i++) {
        g_slot[i] = (Scratch){(uint16_t *)at, w.half[i] / sizeof(uint16_t), 1};
        at += w.half[i];
    }
}

// x(rows, cols), rows ld apart, rounded into slot's buffer (rows, cols) contiguous.
static const uint16_t *rounded_operand(int slot, const float *x, int rows, int cols, int ld) {
    const size_t n = (size_t)rows * cols;
    Scratch *s = &g_slot[slot];
    if (n > s->cap && s->planned)
        die("a bf16 operand copy of %d x %d values exceeds its planned slot %d (%zu values): the step's bounds "
            "(llama_op_bounds) missed a product's shape", rows, cols, slot, s->cap);
    if (n > s->cap) {
        free(s->p);
        s->p = xmalloc(sizeof(uint16_t) * n, "a bf16 operand copy");
        s->cap = n;
    }
    uint16_t *dst = s->p;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) bf16_round_rows(dst + (size_t)r * cols, cols, x + (size_t)r * ld, ld, 1, cols);
    return dst;
}

// ------------------------------------------------------ the kept copy of weights
//
// g_copy mirrors the arena [g_w, g_w + g_n) element for element; which slices hold
// the current generation, and which AdamW wrote: ops/bf16_kept.h.
static const float *g_w;  // (g_n) the arena, NULL when none is kept
static size_t g_n;
static uint16_t *g_copy;  // (g_n) its bf16 copy, a planned buffer
static Bf16Kept g_kept;

uint16_t *cpu_bf16_copy_for_update(const float *p, size_t n) {
    if (!g_bf16 || !g_w || n == 0 || p < g_w || p + n > g_w + g_n) return NULL;
    bf16_kept_written(&g_kept, (size_t)(p - g_w), (size_t)(p - g_w) + n);
    return g_copy + (p - g_w);
}

void ops_keep_bf16_weights(const float *weights, size_t n, void *copy) {
    if ((n || copy) && !ops_has_bf16())
        die("this build has no bf16 products, so no bf16 copy of the weights to keep");
    g_w = n ? weights : NULL;
    g_n = n;
    g_copy = copy;
    bf16_kept_reset(&g_kept);
}

void ops_bf16_weights_changed(void) { bf16_kept_next(&g_kept); }

// The kept copy of the contiguous weight x(n), rounded now unless this generation
// has it already; NULL when x is not in the arena.
static const uint16_t *kept_copy(const float *x, size_t n) {
    if (!g_w || x < g_w || x + n > g_w + g_n) return NULL;
    uint16_t *c = g_copy + (x - g_w);
    if (bf16_kept_stale(&g_kept, (size_t)(x - g_w), n)) round_to_bf16(c, x, n);
    return c;
}

const uint16_t *cpu_bf16_operand(int slot, const float *x, int rows, int cols, int ld) {
    if (slot < 0 || slot > 2) die("cpu_bf16_operand: slot %d (0-2)", slot);
    if (ld == cols) {
        const uint16_t *kept = kept_copy(x, (size_t)rows * cols);
        if (kept) return kept;
    }
    return rounded_operand(slot, x, rows, cols, ld);
}

void cpu_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, const uint16_t *B,
                   int ldb, float beta, float *C, int ldc) {
#ifdef FEMTOTRON_MKL
    cblas_gemm_bf16bf16f32(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                           alpha, (const MKL_BF16 *)A, lda, (const MKL_BF16 *)B, ldb, beta, C, ldc);
#else
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
        (void)C, (void)ldc;
    die("cpu_gemm_bf16: this build has no bf16 product (ops_set_matmul_bf16 refuses bf16 here)");
#endif
}
