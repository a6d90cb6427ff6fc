// ops/matmul_cuda.cu — the matrix products of ops.h through cuBLASLt, in fp32 with
// fp32 compute (CUBLAS_COMPUTE_32F: no TF32, so the CPU's sgemm is matched to fp32
// rounding, not to TF32's 10-bit mantissa).
//
// bf16 products (ops_set_matmul_bf16, training.precision = bf16): each fp32
// operand is first rounded to bf16 (nearest, ties to even) into a contiguous copy
// owned by this file, and cuBLASLt multiplies the copies on tensor cores, still
// with CUBLAS_COMPUTE_32F and fp32 C and D: the product of two bf16 values is
// exact in fp32 (8 + 8 significant bits), so the result is the fp32 product of the
// rounded operands up to the order of the fp32 sums, which is what the GPU test
// checks (tests/gpu/gpu_ops.c). Outputs, weight-gradient accumulation (beta = 1)
// and everything outside the products stay fp32, but for matmul_forward_bf16,
// whose output cuBLASLt rounds to bf16 from the fp32 sums as it writes it (D type
// bf16; any split-K partial sums in fp32, never in the output type). The copies
// cost a pass over each operand per product, except where no copy is needed: a
// weight read from the kept bf16 copy of the parameters (ops_keep_bf16_weights,
// below), and inputs and output gradients kept as bf16 already (matmul_*_from_bf16,
// matmul_forward_bf16, matmul_backward_bf16, and matmul_backward_ld16 on the loss's
// bf16 gradient), handed over as they are.
// Every other activation operand still takes its pass (issue 21).
//
// Row-major to column-major: a row-major X(r, c) with leading dimension ld is, read
// column-major, X^T (c x r, ld). So row-major C = A op(B) is column-major
// C^T = op(B)^T A^T, and each product below is written in that form.
//
// Determinism (issue 14): one plan per shape — (m, n, k, transposes, leading
// dimensions, pointer alignments, beta) — chosen once by the heuristic and reused,
// so the algorithm never changes between calls or runs; reduction schemes that
// add into the output in place (split-K with atomics, no fixed order) are
// excluded.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ops/bf16_cuda.cuh"
#include "ops/bf16_kept.h"
#include "ops/cuda_common.cuh"

extern "C" {
#include "ops/ops.h"
}

#define CUBLAS_CHECK(call)                                                                        \
    do {                                                                                          \
        cublasStatus_t st_ = (call);                                                              \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
            die("cuBLASLt error %d in %s (%s:%d)", (int)st_, #call, __FILE__, __LINE__);         \
    } while (0)

// 32 MiB on Hopper (llm.c's figure), enough for split-K on every training shape.
#define WORKSPACE_BYTES OPS_CUDA_LT_WORKSPACE
#define MAX_PLANS 256

typedef struct {
    int m, n, k, lda, ldb, ldc, ta, tb, align_a, align_b, align_c, beta_nonzero;
    int bf16;      // A and B are bf16
    int out_bf16;  // C and D are bf16 (matmul_forward_bf16), else fp32
} PlanKey;

typedef struct {
    PlanKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} Plan;

static cublasLtHandle_t g_lt;
static Plan g_plans[MAX_PLANS];
static int g_nplans;      // slots filled
static int g_next_evict;  // once all are: the slot a new shape takes (round robin)
static int g_bf16;  // ops_set_matmul_bf16

// The bf16 copies of the operands: three slots, because matmul_backward reads dout
// in both of its products, `in` in the weight gradient's and the weight in din's.
// slot 0: dout or the forward's weight; 1: in; 2: the backward's weight. They are
// the work buffers WS_HALF0 + slot (cuda_work_buffer), as cuBLASLt's workspace is WS_LT.

extern "C" void ops_set_matmul_bf16(int on) { g_bf16 = on != 0; }
extern "C" int ops_matmul_bf16(void) { return g_bf16; }

void cuda_matmul_init(void) { CUBLAS_CHECK(cublasLtCreate(&g_lt)); }

// The largest power of two (<= 16) dividing the address: cuBLASLt kernels that
// load 16 bytes at once need 16-byte aligned operands, and a column block of the
// logits (matmul_*_ld) may be aligned to 4 only (a bf16 output, to 2).
static int alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 16;
    while (al > 2 && (a % (uintptr_t)al) != 0) al /= 2;
    return al;
}

static Plan *plan_for(const PlanKey *key) {
    for (int i = 0; i < g_nplans; i++)
        if (!memcmp(&g_plans[i].key, key, sizeof *key)) return &g_plans[i];
    // A new shape. Mixture-of-experts runs make new ones every step (an expert's row
    // count and its rows' alignment follow the routing), so when every slot is taken
    // the oldest plan is dropped (round robin). Dropping one changes no result: the
    // heuristic is a fixed function of the key, so the shape gets the same
    // algorithm back the next time it is seen.
    Plan *p;
    if (g_nplans < MAX_PLANS) {
        p = &g_plans[g_nplans++];
    } else {
        p = &g_plans[g_next_evict];
        g_next_evict = (g_next_evict + 1) % MAX_PLANS;
        cublasLtMatrixLayoutDestroy(p->a);
        cublasLtMatrixLayoutDestroy(p->b);
        cublasLtMatrixLayoutDestroy(p->c);
        cublasLtMatmulDescDestroy(p->desc);
    }
    memset(p, 0, sizeof *p);
    p->key = *key;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    // Stored shapes (before the transposes): A is m x k or k x m, B is k x n or n x k.
    const cudaDataType_t ab = key->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, ab, key->ta ? key->k : key->m,
                                            key->ta ? key->m : key->k, key->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, ab, key->tb ? key->n : key->k,
                                            key->tb ? key->k : key->n, key->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, key->out_bf16 ? CUDA_R_16BF : CUDA_R_32F, key->m, key->n, key->ldc));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = WORKSPACE_BYTES;
    // Split-K partial sums in a workspace, summed in a fixed order: in fp32 (compute
    // type), or in the output type when that is fp32 too; never bf16 partial sums.
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (!key->out_bf16) schemes |= CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    uint32_t al[3] = {(uint32_t)key->align_a, (uint32_t)key->align_b, (uint32_t)key->align_c};
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof schemes));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof al[2]));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1)
        die("cuBLASLt has no %s%s algorithm for the product m=%d n=%d k=%d (transposes %d %d, alignments %d %d %d; "
            "status %d)", key->bf16 ? "bf16-operand" : "fp32", key->out_bf16 ? ", bf16-output" : "", key->m, key->n,
            key->k, key->ta, key->tb, key->align_a,
            key->align_b, key->align_c, (int)st);
    p->algo = res.algo;
    return p;
}

// An operand as the product reads it: the fp32 matrix itself, or (bf16 products)
// its bf16 copy in `slot`. A column-major operand of `len` rows and `lines`
// columns with leading dimension ld (a row-major one: `lines` rows of `len`); the
// copy's leading dimension is len rounded up to a multiple of 8, so every column
// starts 16-byte aligned (an odd width, such as a 257-token vocabulary, would
// otherwise leave only 2-byte aligned columns to cuBLASLt's kernels).
typedef struct {
    const void *p;
    int ld;
} Operand;

// The bf16 copy of the weights (ops_keep_bf16_weights): g_w_copy mirrors the
// arena [g_w, g_w + g_w_n) element for element; a weight operand's slice of it is
// rounded once per generation (ops_bf16_weights_changed starts one) and then read
// by every product until the next, unless the optimizer wrote it
// (cuda_bf16_copy_for_update): the bookkeeping of ops/bf16_kept.h.
static const float *g_w;         // (g_w_n) the arena, NULL when none is kept
static size_t g_w_n;
static __nv_bfloat16 *g_w_copy;  // (g_w_n) its bf16 copy, a planned buffer
static Bf16Kept g_kept;

void *cuda_bf16_copy_for_update(const float *p, size_t n) {
    if (!g_w || n == 0 || p < g_w || p + n > g_w + g_w_n) return NULL;
    bf16_kept_written(&g_kept, (size_t)(p - g_w), (size_t)(p - g_w) + n);
    return g_w_copy + (p - g_w);
}

extern "C" void ops_keep_bf16_weights(const float *weights, size_t n, void *copy) {
    g_w = n ? weights : NULL;
    g_w_n = n;
    g_w_copy = (__nv_bfloat16 *)copy;
    bf16_kept_reset(&g_kept);
}
extern "C" void ops_bf16_weights_changed(void) { bf16_kept_next(&g_kept); }

// The kept copy of the contiguous weight x (n values), rounded now unless this
// generation has it already; NULL when x is not in the arena.
static const __nv_bfloat16 *kept_copy(const float *x, size_t n) {
    if (!g_w || x < g_w || x + n > g_w + g_w_n) return NULL;
    __nv_bfloat16 *c = g_w_copy + (x - g_w);
    if (bf16_kept_stale(&g_kept, (size_t)(x - g_w), n)) round_rows(c, x, 1, n, n, n);
    return c;
}

// x's bf16 copy in `slot`, rows padded to ld16 (x: fp32 or bf16 values).
template <typename S>
static Operand padded_copy(int slot, const S *x, int lines, int len, int ld) {
    const size_t n = ops_cuda_operand_elements((size_t)lines, (size_t)len), ld16 = ops_cuda_operand_elements(1, (size_t)len);
    __nv_bfloat16 *copy = (__nv_bfloat16 *)cuda_work_buffer(WS_HALF0 + slot, n * sizeof(__nv_bfloat16),
                                                           "a bf16 operand copy");  // (lines, ld16)
    round_rows(copy, x, (size_t)lines, (size_t)len, (size_t)ld, ld16);
    return Operand{copy, (int)ld16};
}

static Operand operand(int slot, const float *x, int lines, int len, int ld) {
    if (!g_bf16) return Operand{x, ld};
    if (ld == len) {  // a contiguous weight in the arena: its kept copy
        const __nv_bfloat16 *kept = kept_copy(x, (size_t)lines * len);
        if (kept) return Operand{kept, ld};
    }
    return padded_copy(slot, x, lines, len, ld);
}

// A contiguous operand kept as bf16, x16(lines, len), as the product reads it:
// with bf16 products x16 itself when its rows are a multiple of 8 values (16-byte
// aligned, as the padded copies' are), else its padded copy in `slot` (the same
// values); with fp32 products x16 widened into scratch(lines, len), through a
// copy in `slot` when scratch is x16's own buffer (ops.h: in place; a kernel's
// threads would overwrite values others have yet to read).
static Operand bf16_operand(int slot, const uint16_t *x16, float *scratch, int lines, int len) {
    if (g_bf16)
        return len % 8 == 0 ? Operand{x16, len} : padded_copy(slot, (const __nv_bfloat16 *)x16, lines, len, len);
    const size_t n = (size_t)lines * len;
    if ((const void *)scratch == (const void *)x16) {
        uint16_t *copy = (uint16_t *)cuda_work_buffer(WS_HALF0 + slot, n * sizeof(uint16_t), "a bf16 operand copy");
        CUDA_CHECK(cudaMemcpyAsync(copy, x16, n * sizeof(uint16_t), cudaMemcpyDeviceToDevice, cuda_stream()));
        x16 = copy;
    }
    widen_from_bf16(scratch, x16, n);
    return Operand{scratch, len};
}

// Column-major D(m, n) = alpha op(A) op(B) + beta Cin, D = C (Cin NULL: C, in
// place); A and B fp32, or both bf16 copies (g_bf16); C fp32, or bf16 (out_bf16:
// bf16 operands only). A separate Cin (same layout as C, not aliasing it) is the
// residual add done in the product's epilogue: D = (the fp32 sums) + Cin, one
// fp32 rounding, as the product followed by residual_forward.
static void gemm_to(int ta, int tb, int m, int n, int k, Operand A, Operand B, float beta, void *C, int ldc,
                    int out_bf16, const char *what, const void *Cin = NULL) {
    if (m <= 0 || n <= 0) return;
    const size_t esize = out_bf16 ? 2 : 4;
    if (!Cin) Cin = C;
    if (k <= 0) {  // an empty sum: D = beta Cin
        if (beta == 0.0f)
            CUDA_CHECK(cudaMemset2DAsync(C, (size_t)ldc * esize, 0, (size_t)m * esize, (size_t)n, cuda_stream()));
        else if (Cin != C)  // (beta 1: the residual alone)
            CUDA_CHECK(cudaMemcpy2DAsync(C, (size_t)ldc * esize, Cin, (size_t)ldc * esize, (size_t)m * esize,
                                         (size_t)n, cudaMemcpyDeviceToDevice, cuda_stream()));
        cuda_done(what);
        return;
    }
    const int align_c = alignment(C) < alignment(Cin) ? alignment(C) : alignment(Cin);
    PlanKey key = {m, n, k, A.ld, B.ld, ldc, ta, tb, alignment(A.p), alignment(B.p), align_c, beta != 0.0f, g_bf16,
                   out_bf16};
    Plan *p = plan_for(&key);
    const float alpha = 1.0f;
    if (cuda_profile_on()) {  // the operands' rounding apart; the product by its shape
        cuda_profile_split("product operand rounding");
        char types[48];
        snprintf(types, sizeof types, "%c%c %s%s%s", ta ? 'T' : 'N', tb ? 'T' : 'N', g_bf16 ? "bf16" : "fp32",
                 out_bf16 ? "->bf16" : "->fp32", beta != 0.0f ? " +C" : "");
        cuda_profile_product(what, m, n, k, types);
    }
    CUBLAS_CHECK(cublasLtMatmul(g_lt, p->desc, &alpha, A.p, p->a, B.p, p->b, &beta, Cin, p->c, C, p->c, &p->algo,
                                cuda_work_buffer(WS_LT, WORKSPACE_BYTES, "cuBLASLt's workspace"), WORKSPACE_BYTES,
                                cuda_stream()));
    cuda_done(what);
}

static void gemm(int ta, int tb, int m, int n, int k, Operand A, Operand B, float beta, float *C, int ldc,
                 const char *what) {
    gemm_to(ta, tb, m, n, k, A, B, beta, C, ldc, 0, what);
}

extern "C" void matmul_forward_ld(float *out, int ld_out, const float *in, const float *weight, int N, int in_dim,
                                  int out_dim) {
    // out^T (out_dim x N) = W (out_dim x in_dim) in^T: W is stored column-major as
    // W^T (in_dim x out_dim, ld in_dim), so A = W^T transposed; in^T is in as stored.
    gemm(1, 0, out_dim, N, in_dim, operand(0, weight, out_dim, in_dim, in_dim), operand(1, in, N, in_dim, in_dim), 0.0f,
         out, ld_out, "matmul_forward");
}

extern "C" void matmul_forward(float *out, const float *in, const float *weight, int N, int in_dim, int out_dim) {
    matmul_forward_ld(out, out_dim, in, weight, N, in_dim, out_dim);
}

// The residual add in the epilogue: C = add, beta 1, D = out.
extern "C" void matmul_forward_add(float *out, const float *add, const float *in, const float *weight, int N,
                                   int in_dim, int out_dim) {
    if (out == add) die("matmul_forward_add: out must not alias the residual it adds");
    gemm_to(1, 0, out_dim, N, in_dim, operand(0, weight, out_dim, in_dim, in_dim), operand(1, in, N, in_dim, in_dim),
            1.0f, out, out_dim, 0, "matmul_forward_add", add);
}


extern "C" void matmul_forward_from_bf16(float *out, const uint16_t *in16, float *scratch, const float *weight, int N,
                                         int in_dim, int out_dim) {
    const Operand w = operand(0, weight, out_dim, in_dim, in_dim);
    gemm(1, 0, out_dim, N, in_dim, w, bf16_operand(1, in16, scratch, N, in_dim), 0.0f, out, out_dim,
         "matmul_forward_from_bf16");
}

extern "C" void matmul_forward_from_bf16_add(float *out, const float *add, const uint16_t *in16, float *scratch,
                                             const float *weight, int N, int in_dim, int out_dim) {
    if (out == add) die("matmul_forward_from_bf16_add: out must not alias the residual it adds");
    const Operand w = operand(0, weight, out_dim, in_dim, in_dim);
    gemm_to(1, 0, out_dim, N, in_dim, w, bf16_operand(1, in16, scratch, N, in_dim), 1.0f, out, out_dim, 0,
            "matmul_forward_from_bf16_add", add);
}

// With bf16 operands cuBLASLt writes the bf16 output itself; with fp32 ones (no
// fp32-operand kernel writes bf16) the fp32 product goes to out_scratch and is rounded.
extern "C" void matmul_forward_bf16(uint16_t *out16, float *out_scratch, const uint16_t *in16, float *in_scratch,
                                    const float *weight, int N, int in_dim, int out_dim) {
    if (!g_bf16) {
        matmul_forward_from_bf16(out_scratch, in16, in_scratch, weight, N, in_dim, out_dim);
        round_to_bf16(out16, out_scratch, (size_t)N * out_dim);
        return;
    }
    const Operand w = operand(0, weight, out_dim, in_dim, in_dim);
    gemm_to(1, 0, out_dim, N, in_dim, w, bf16_operand(1, in16, in_scratch, N, in_dim), 0.0f, out16, out_dim, 1,
            "matmul_forward_bf16");
}

// matmul_backward_ld with its operands made by the caller: the output gradient d
// (dout^T, out_dim x N, read by both products) and the weight gradient's input x
// (only when dweight is wanted).
static void backward(float *din, float *dweight, Operand d, Operand x, const float *weight, int N, int in_dim,
                     int out_dim, int accumulate_din) {
    // dW (out, in) += dout^T in  <=>  dW^T (in x out) += in^T dout: in^T is in as
    // stored (in_dim x N), dout as stored is dout^T (out_dim x N), transposed.
    if (dweight) gemm(0, 1, in_dim, out_dim, N, x, d, 1.0f, dweight, in_dim, "matmul_backward dW");
    // din (N, in) (+)= dout W  <=>  din^T (in x N) = W^T dout^T, both as stored.
    if (din)
        gemm(0, 0, in_dim, N, out_dim, operand(2, weight, out_dim, in_dim, in_dim), d, accumulate_din ? 1.0f : 0.0f,
             din, in_dim, "matmul_backward din");
}

// The same with din16(N, in_dim) written as bf16 by cuBLASLt (D type bf16) from
// the fp32 sums, overwritten; din16 or dweight may be NULL (not wanted).
static void backward_to_bf16(uint16_t *din16, float *dweight, Operand d, Operand x, const float *weight, int N,
                             int in_dim, int out_dim) {
    if (dweight) gemm(0, 1, in_dim, out_dim, N, x, d, 1.0f, dweight, in_dim, "matmul_backward dW");
    if (din16)
        gemm_to(0, 0, in_dim, N, out_dim, operand(2, weight, out_dim, in_dim, in_dim), d, 0.0f, din16, in_dim, 1,
                "matmul_backward din16");
}

extern "C" void matmul_backward_ld(float *din, float *dweight, const float *dout, int ld_dout, const float *in,
                                   const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (!din && !dweight) return;
    const Operand x = dweight ? operand(1, in, N, in_dim, in_dim) : Operand{NULL, in_dim};
    backward(din, dweight, operand(0, dout, N, out_dim, ld_dout), x, weight, N, in_dim, out_dim, accumulate_din);
}

extern "C" void matmul_backward_from_bf16(float *din, float *dweight, const float *dout, const uint16_t *in16,
                                          float *scratch, const float *weight, int N, int in_dim, int out_dim,
                                          int accumulate_din) {
    if (!din && !dweight) return;
    const Operand x = dweight ? bf16_operand(1, in16, scratch, N, in_dim) : Operand{NULL, in_dim};
    backward(din, dweight, operand(0, dout, N, out_dim, out_dim), x, weight, N, in_dim, out_dim, accumulate_din);
}

extern "C" void matmul_backward_bf16(float *din, float *dweight, const uint16_t *dout16, float *dscratch,
                                     const uint16_t *in16, float *in_scratch, const float *weight, int N, int in_dim,
                                     int out_dim, int accumulate_din) {
    if (!din && !dweight) return;
    const Operand x = dweight ? bf16_operand(1, in16, in_scratch, N, in_dim) : Operand{NULL, in_dim};
    backward(din, dweight, bf16_operand(0, dout16, dscratch, N, out_dim), x, weight, N, in_dim, out_dim,
             accumulate_din);
}

// dout16 read as it is where its columns start 16-byte aligned (rows a multiple of 8
// values apart, as the loss's are at a vocabulary slice of a multiple of 4: CE_LD16;
// ops_cuda_bf16_in_place, which the planner asks of every head piece), else through
// its padded copy in slot 0.
extern "C" void matmul_backward_ld16(float *din, float *dweight, const uint16_t *dout16, size_t ld16, const float *in,
                                     const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    if (!g_bf16) die("matmul_backward_ld16: a bf16 output gradient needs bf16 products (a bug)");
    if (!din && !dweight) return;
    if (ld16 > INT_MAX) die("matmul_backward_ld16: rows %zu values apart, more than cuBLASLt's index holds", ld16);
    const Operand d = ops_cuda_bf16_in_place(ld16, 0) && alignment(dout16) == 16
                          ? Operand{dout16, (int)ld16}
                          : padded_copy(0, (const __nv_bfloat16 *)dout16, N, out_dim, (int)ld16);
    const Operand x = dweight ? operand(1, in, N, in_dim, in_dim) : Operand{NULL, in_dim};
    backward(din, dweight, d, x, weight, N, in_dim, out_dim, accumulate_din);
}

// With bf16 operands cuBLASLt writes din16 itself, both products reading dout's one
// copy in slot 0 (backward's order: dW, then din); with fp32 ones the fp32 product
// goes to din_scratch and is rounded (as matmul_forward_bf16).
extern "C" void matmul_backward_from_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight,
                                                  const float *dout, const uint16_t *in16, float *in_scratch,
                                                  const float *weight, int N, int in_dim, int out_dim) {
    if (!g_bf16) {
        if (!din_scratch || (const void *)din_scratch == (const void *)din16)
            die("matmul_backward_from_bf16_to_bf16: with fp32 products the input gradient needs room of its own, "
                "apart from din16 (a bug: cuDNN's runs have bf16 products)");
        matmul_backward_from_bf16(din_scratch, dweight, dout, in16, in_scratch, weight, N, in_dim, out_dim, 0);
        round_to_bf16(din16, din_scratch, (size_t)N * in_dim);
        return;
    }
    const Operand x = dweight ? bf16_operand(1, in16, in_scratch, N, in_dim) : Operand{NULL, in_dim};
    backward_to_bf16(din16, dweight, operand(0, dout, N, out_dim, out_dim), x, weight, N, in_dim, out_dim);
}

// Both operands as they are (padded copies in slots 0 and 1 where their rows are
// not a multiple of 8 values), din16 written by cuBLASLt.
extern "C" void matmul_backward_bf16_to_bf16(uint16_t *din16, float *din_scratch, float *dweight,
                                             const uint16_t *dout16, const uint16_t *in16, const float *weight, int N,
                                             int in_dim, int out_dim) {
    (void)din_scratch;  // the CPU's room: cuBLASLt writes bf16 itself
    if (!g_bf16) die("matmul_backward_bf16_to_bf16: a bf16 output gradient read as it is needs bf16 products (a bug)");
    if (!din16 && !dweight) return;
    const Operand x = dweight ? bf16_operand(1, in16, NULL, N, in_dim) : Operand{NULL, in_dim};
    backward_to_bf16(din16, dweight, bf16_operand(0, dout16, NULL, N, out_dim), x, weight, N, in_dim, out_dim);
}

extern "C" void matmul_backward_input_to_bf16(uint16_t *din16, float *din_scratch, const float *dout,
                                              const float *weight, int N, int in_dim, int out_dim) {
    matmul_backward_from_bf16_to_bf16(din16, din_scratch, NULL, dout, NULL, NULL, weight, N, in_dim, out_dim);
}

extern "C" void matmul_backward(float *din, float *dweight, const float *dout, const float *in, const float *weight,
                                int N, int in_dim, int out_dim, int accumulate_din) {
    matmul_backward_ld(din, dweight, dout, out_dim, in, weight, N, in_dim, out_dim, accumulate_din);
}
