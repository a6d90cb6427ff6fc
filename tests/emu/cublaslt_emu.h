// tests/emu/cublaslt_emu.h — the cuBLASLt calls of src/ops/matmul_cuda.cu on the
// host (tests/emu/cuda_emu.h has the rest of CUDA): descriptors and layouts
// record what they are told, the heuristic returns one algorithm that remembers
// the preference's minimum alignments, and cublasLtMatmul multiplies in fp32 with
// the host's BLAS (cblas_sgemm):
//   D(m, n) = alpha op(A) op(B) + beta C, column-major, C not read when beta = 0
// (C may be D, or apart from it in the same layout: an epilogue's residual add),
// A and B fp32 or both bf16 (widened to fp32 first: their products are exact in
// fp32, as on tensor cores), C and D fp32. It
// refuses what cuBLASLt refuses: a layout whose shape does not match the product,
// ld smaller than the rows, an operand less aligned than the algorithm was chosen
// for, and D in place of C with a different layout.
#ifndef FEMTOTRON_CUBLASLT_EMU_H
#define FEMTOTRON_CUBLASLT_EMU_H

#include <cblas.h>

#include "cuda_emu.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4 } cublasLtMatmulDescAttributes_t;
typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;
enum { CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4 };

struct EmuLt {};
struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
struct EmuLtPref {
    uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt assumes 256 unless told
};
typedef EmuLt *cublasLtHandle_t;
typedef EmuLtDesc *cublasLtMatmulDesc_t;
typedef EmuLtLayout *cublasLtMatrixLayout_t;
typedef EmuLtPref *cublasLtMatmulPreference_t;
typedef struct {
    uint64_t data[8];  // [0..3]: the minimum alignments it was chosen for
} cublasLtMatmulAlgo_t;
typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    static EmuLt lt;
    *h = &lt;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s) {
    *d = new EmuLtDesc{c, s};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void *v, size_t bytes) {
    if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
    (a == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = *(const cublasOperation_t *)v;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;  // column-major: ld >= rows
    *l = new EmuLtLayout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new EmuLtPref;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a, const void *v,
                                                           size_t bytes) {
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
        if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *(const uint32_t *)v;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// The product's shape from the descriptor and the layouts; 0 when they disagree.
inline bool emu_lt_shape(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                         cublasLtMatrixLayout_t c, uint64_t *m, uint64_t *n, uint64_t *k) {
    *m = c->rows;
    *n = c->cols;
    *k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols;
    const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    // C and D fp32, or bf16 with bf16 operands (cuBLASLt has no fp32-operand kernel
    // writing bf16).
    const bool c_ok = c->type == CUDA_R_32F || (c->type == CUDA_R_16BF && a->type == CUDA_R_16BF);
    return am == *m && bk == *k && bn == *n && a->type == b->type && c_ok && d->compute == CUBLAS_COMPUTE_32F;
}

inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                     cublasLtMatmulPreference_t p, int requested,
                                                     cublasLtMatmulHeuristicResult_t *res, int *found) {
    uint64_t m, n, k;
    *found = 0;
    if (requested < 1 || !emu_lt_shape(d, a, b, c, &m, &n, &k) || dl->rows != c->rows || dl->cols != c->cols ||
        dl->type != c->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(res, 0, sizeof *res);
    for (int i = 0; i < 4; i++) res->algo.data[i] = p->align[i];
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// An operand as fp32 for sgemm: itself, or its bf16 values widened into `tmp`
// (same layout: cols columns of ld values).
inline const float *emu_lt_f32(const void *p, const EmuLtLayout *l, std::vector<float> &tmp) {
    if (l->type == CUDA_R_32F) return (const float *)p;
    tmp.resize((size_t)l->ld * l->cols);
    for (size_t c = 0; c < l->cols; c++)
        for (size_t r = 0; r < l->rows; r++)
            tmp[c * l->ld + r] = __bfloat162float(((const __nv_bfloat16 *)p)[c * l->ld + r]);
    return tmp.data();
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb,
                                     const void *beta, const void *C, cublasLtMatrixLayout_t lc, void *D,
                                     cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *algo, void *, size_t,
                                     cudaStream_t stream) {
    uint64_t m, n, k;
    if (!emu_lt_shape(desc, la, lb, lc, &m, &n, &k) || ld->rows != lc->rows || ld->cols != lc->cols ||
        ld->type != lc->type)
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (algo && (uintptr_t)ptrs[i] % algo->data[i]) return CUBLAS_STATUS_INVALID_VALUE;
    // Queued on the stream (tests/emu/cuda_emu.h): alpha, beta, the descriptor and
    // the layouts as they are now (the caller may change or destroy them after).
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const EmuLtDesc dd = *desc;
    const EmuLtLayout a_l = *la, b_l = *lb, c_l = *lc, d_l = *ld;
    emu::enqueue([=]() {
        // As the GPU's epilogue: the fp32 sums of the product first (alpha applied),
        // then D = fma(beta, C, that) a value at a time, one rounding (sgemm with
        // beta would add C into its partial sums block by block), C read only when
        // beta is not 0 and may be D itself; a bf16 D rounded as it is written.
        const bool half = d_l.type == CUDA_R_16BF, wide_out = half || be != 0.0f;
        std::vector<float> wide;
        if (wide_out) wide.assign(m * n, 0.0f);
        float *d = wide_out ? wide.data() : (float *)D;
        const uint64_t ldd = wide_out ? m : d_l.ld;
        std::vector<float> ta, tb;
        const float *a = emu_lt_f32(A, &a_l, ta), *b = emu_lt_f32(B, &b_l, tb);
        // sgemm with beta = 0 writes D without reading it (NaN there does not spread).
        cblas_sgemm(CblasColMajor, dd.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    dd.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, al, a, (int)a_l.ld, b,
                    (int)b_l.ld, 0.0f, d, (int)ldd);
        if (!wide_out) return;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float v = d[i + j * ldd];
                if (be != 0.0f)
                    v = fmaf(be, half ? __bfloat162float(((const __nv_bfloat16 *)C)[i + j * c_l.ld])
                                      : ((const float *)C)[i + j * c_l.ld], v);
                if (half) ((__nv_bfloat16 *)D)[i + j * d_l.ld] = __float2bfloat16_rn(v);
                else ((float *)D)[i + j * d_l.ld] = v;
            }
    }, stream);
    return CUBLAS_STATUS_SUCCESS;
}

#endif
