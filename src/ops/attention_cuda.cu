// ops/attention_cuda.cu — the attention kernels of ops.h on the GPU: causal
// grouped-query attention with an online softmax, block by block (a block of keys
// may come from another context-parallel rank), the forward saving only the
// log-sum-exp and the backward recomputing probabilities from it.
//
// Single-block attention (attention_forward/backward) can instead run on cuDNN's
// fused kernels (training.attention = cudnn, ops_set_attention_cudnn; or
// FEMTOTRON_ATTENTION=cudnn): ops/cudnn_attention.h, below.
//
// Three implementations of the forward and backward blocks. With bf16 products
// (training.precision = bf16), the tensor-core kernels: at head dimensions 32, 64
// and 128 those of ops/flash_mma.cuh (mma.sync, the score tiles in registers), at
// 16 those of ops/flash_attention.cuh (WMMA, the scores through shared memory),
// which FEMTOTRON_ATTENTION=wmma also picks at every head dimension they take (to
// time one against the other; =mma is the default). Otherwise (fp32, the precision
// the 1e-5 parity tests run in) the fp32 kernels below.
//
// The fp32 kernels are simple and correct, not fast: one thread per query
// row (b, h, i) walks the visible keys in order, keeping its row of o in registers
// (hd <= ATT_MAX_HD); the backward's key/value gradients take one thread per key
// row (b, g, j), which walks the query heads of its group and the queries in
// order. Every output has one writer and a fixed order of terms: no atomics, the
// same bits every run. Key j is visible to query i iff kpos[j] <= qpos[i].
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda_common.cuh"
#include "ops/cudnn_attention.h"
#include "ops/flash_attention.cuh"
#include "ops/flash_mma.cuh"

extern "C" {
#include "ops/ops.h"
}

#define ATT_MAX_HD 256
#define THREADS 128

// Blocks for one thread per row (the kernels below have no grid-stride loop): fatal
// beyond cuda_blocks' cap (268M rows, far above any B*H*S).
static unsigned row_blocks(size_t rows, const char *what) {
    const size_t most = CUDA_MAX_BLOCKS * THREADS;
    if (rows > most) die("%s: %zu attention rows exceed the grid (at most %zu)", what, rows, most);
    return cuda_blocks(rows, THREADS);
}

extern "C" size_t attention_scratch_floats(int hd) {
    (void)hd;
    return 0;
}  // no per-thread tiles in memory

__global__ void k_att_init(float *o, float *m, float *l, size_t n_o, size_t n_row) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_o; i += (size_t)gridDim.x * blockDim.x) {
        o[i] = 0.0f;
        if (i < n_row) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
    }
}

extern "C" void attention_block_init(float *o, float *m, float *l, int B, int Sq, int H, int hd) {
    size_t n_o = (size_t)B * Sq * H * hd, n_row = (size_t)B * H * Sq;
    if (n_o == 0) return;
    k_att_init<<<cuda_blocks(n_o, 256), 256, 0, cuda_stream()>>>(o, m, l, n_o, n_row);
    cuda_done("attention_block_init");
}

// One thread per query row: fold the visible keys of this block into (o, m, l).
__global__ void k_att_fwd(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff,
                          int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd,
                          float scale) {
    size_t row = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (row >= (size_t)B * H * Sq) return;
    const int i = (int)(row % Sq), h = (int)((row / Sq) % H), b = (int)(row / ((size_t)Sq * H));
    const int g = h / (H / KV), qp = qpos[i];
    const float *qr = q + ((size_t)b * Sq + i) * ldq + (size_t)h * hd;
    float *orow = o + ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
    float acc[ATT_MAX_HD];
    for (int d = 0; d < hd; d++) acc[d] = orow[d];
    float mi = m[row], li = l[row];
    for (int j = 0; j < Sk; j++) {
        if (kpos[j] > qp) continue;
        const float *kr = kv + ((size_t)b * Sk + j) * ldkv + koff + (size_t)g * hd;
        const float *vr = kv + ((size_t)b * Sk + j) * ldkv + voff + (size_t)g * hd;
        float s = 0.0f;
        for (int d = 0; d < hd; d++) s += qr[d] * kr[d];
        s *= scale;
        // Online softmax: rescale what was accumulated under the old maximum.
        float mnew = fmaxf(mi, s), alpha = expf(mi - mnew), p = expf(s - mnew);
        li = li * alpha + p;
        for (int d = 0; d < hd; d++) acc[d] = acc[d] * alpha + p * vr[d];
        mi = mnew;
    }
    for (int d = 0; d < hd; d++) orow[d] = acc[d];
    m[row] = mi;
    l[row] = li;
}

static void check_hd(int hd, const char *what) {
    if (hd > ATT_MAX_HD) die("%s: head dim %d exceeds the CUDA kernel's %d", what, hd, ATT_MAX_HD);
}

// Which kernels take this block: FLASH_NONE (fp32 products, or a head dimension
// no tensor-core kernel has), FLASH_MMA or FLASH_WMMA (above). The tensor-core
// grids' y is B * H (at most 65535).
enum { FLASH_NONE, FLASH_MMA, FLASH_WMMA };
static int use_flash(int B, int H, int hd, const char *what) {
    if (!ops_matmul_bf16()) return FLASH_NONE;
    const char *pick = getenv("FEMTOTRON_ATTENTION");  // read each time: gpu_ops checks both
    const bool wmma = pick && strcmp(pick, "wmma") == 0;
    if (pick && !wmma && strcmp(pick, "mma") != 0 && strcmp(pick, "cudnn") != 0)
        die("FEMTOTRON_ATTENTION=%s: the attention kernels are mma (the default), wmma or cudnn", pick);
    const int kind = !wmma && flash_mma::head_dim_ok(hd) ? FLASH_MMA : flash::head_dim_ok(hd) ? FLASH_WMMA : FLASH_NONE;
    if (kind != FLASH_NONE && (size_t)B * H > 65535u)
        die("%s: %d sequences x %d heads exceed the attention grid (65535)", what, B, H);
    return kind;
}

extern "C" void attention_block_forward(float *o, float *m, float *l, const float *q, int ldq, const float *kv,
                                        int ldkv, int koff, int voff, const int *qpos, const int *kpos, int B, int Sq,
                                        int Sk, int H, int KV, int hd, float *scratch) {
    (void)scratch;
    check_hd(hd, "attention_block_forward");
    size_t rows = (size_t)B * H * Sq;
    if (rows == 0 || Sk == 0) return;
    const int *qp = cuda_device_ints(qpos, (size_t)Sq, 1), *kp = cuda_device_ints(kpos, (size_t)Sk, 2);
    const int kind = use_flash(B, H, hd, "attention_block_forward");
    if (kind != FLASH_NONE) {
        cuda_profile_open();  // the flash headers launch on cuda_stream() only when not emulated
        if (kind == FLASH_MMA) flash_mma::forward(o, m, l, q, ldq, kv, ldkv, koff, voff, qp, kp, B, Sq, Sk, H, KV, hd);
        else flash::forward(o, m, l, q, ldq, kv, ldkv, koff, voff, qp, kp, B, Sq, Sk, H, KV, hd);
        cuda_done(kind == FLASH_MMA ? "attention_block_forward (mma)" : "attention_block_forward (wmma)");
        return;
    }
    k_att_fwd<<<row_blocks(rows, "attention_block_forward"), THREADS, 0, cuda_stream()>>>(
        o, m, l, q, ldq, kv, ldkv, koff, voff, qp, kp, B, Sq, Sk, H, KV, hd, 1.0f / sqrtf((float)hd));
    cuda_done("attention_block_forward");
}

// The per-row passes over o: one warp per row (b, h, i), its lanes on the row's hd
// columns (consecutive lanes, consecutive floats: whole cache lines; one thread per
// row read 32 rows H*hd floats apart per load), at most 65535 * 32 * 4 rows.
static unsigned warp_row_blocks(size_t rows, const char *what) {
    const size_t per_block = THREADS / 32, most = CUDA_MAX_BLOCKS * per_block;
    if (rows > most) die("%s: %zu attention rows exceed the grid (at most %zu)", what, rows, most);
    return cuda_blocks(rows, per_block);
}

// The warp's row: its index ((b H + h) Sq + i), and the offset of its hd columns in
// an (B*Sq, H*hd) matrix. Every lane of a warp gets the same row, so a warp past the
// last row leaves whole.
__device__ static size_t warp_row(int B, int Sq, int H, int hd, size_t *off) {
    const size_t row = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int i = (int)(row % Sq), h = (int)((row / Sq) % H), b = (int)(row / ((size_t)Sq * H));
    *off = ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
    return row < (size_t)B * H * Sq ? row : SIZE_MAX;
}

// o /= l and lse = m + log l per (b, h, i); rows that saw no key: o = 0, lse = -inf.
__global__ void k_att_finish(float *o, float *lse, const float *m, const float *l, int B, int Sq, int H, int hd) {
    size_t off;
    const size_t row = warp_row(B, Sq, H, hd, &off);
    if (row == SIZE_MAX) return;
    const float inv = l[row] > 0.0f ? 1.0f / l[row] : 0.0f;
    for (int d = threadIdx.x % 32; d < hd; d += 32) o[off + d] *= inv;
    if (threadIdx.x % 32 == 0) lse[row] = l[row] > 0.0f ? m[row] + logf(l[row]) : -INFINITY;
}

extern "C" void attention_block_finish(float *o, float *lse, const float *m, const float *l, int B, int Sq, int H,
                                       int hd) {
    size_t rows = (size_t)B * H * Sq;
    if (rows == 0) return;
    k_att_finish<<<warp_row_blocks(rows, "attention_block_finish"), THREADS, 0, cuda_stream()>>>(o, lse, m, l, B, Sq,
                                                                                                  H, hd);
    cuda_done("attention_block_finish");
}

// rowdot(b, h, i) = sum_d dout * out over the head's columns: each lane its columns
// d = lane, lane + 32, ... in order, then a fixed butterfly over the warp.
__global__ void k_rowdot(float *rowdot, const float *dout, const float *out, int B, int Sq, int H, int hd) {
    size_t off;
    const size_t row = warp_row(B, Sq, H, hd, &off);
    if (row == SIZE_MAX) return;
    float s = 0.0f;
    for (int d = threadIdx.x % 32; d < hd; d += 32) s += dout[off + d] * out[off + d];
    for (int lanes = 16; lanes > 0; lanes /= 2) s += __shfl_xor_sync(0xffffffffu, s, lanes);
    if (threadIdx.x % 32 == 0) rowdot[row] = s;
}

extern "C" void attention_rowdot(float *rowdot, const float *dout, const float *out, int B, int Sq, int H, int hd) {
    size_t rows = (size_t)B * H * Sq;
    if (rows == 0) return;
    k_rowdot<<<warp_row_blocks(rows, "attention_rowdot"), THREADS, 0, cuda_stream()>>>(rowdot, dout, out, B, Sq, H,
                                                                                         hd);
    cuda_done("attention_rowdot");
}

// P = exp(s - lse) and dS = P (dO.v - rowdot) / sqrt(hd) for one (query, key) pair.
__device__ static void att_pair(const float *qr, const float *kr, const float *vr, const float *dor, float lse,
                                float rowdot, int hd, float scale, float *p, float *ds) {
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < hd; d++) {
        s += qr[d] * kr[d];
        dp += dor[d] * vr[d];
    }
    *p = expf(s * scale - lse);
    *ds = *p * (dp - rowdot) * scale;
}

// dq(b, i, h) += sum_j dS_ij k_j: one thread per query row, keys in order.
__global__ void k_att_bwd_dq(float *dq, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                             const float *dout, const float *lse, const float *rowdot, const int *qpos,
                             const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd, float scale) {
    size_t row = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (row >= (size_t)B * H * Sq) return;
    const int i = (int)(row % Sq), h = (int)((row / Sq) % H), b = (int)(row / ((size_t)Sq * H));
    const int g = h / (H / KV), qp = qpos[i];
    const float *qr = q + ((size_t)b * Sq + i) * ldq + (size_t)h * hd;
    const float *dor = dout + ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
    float *dqr = dq + ((size_t)b * Sq + i) * ldq + (size_t)h * hd;
    float acc[ATT_MAX_HD];
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int j = 0; j < Sk; j++) {
        if (kpos[j] > qp) continue;
        const float *kr = kv + ((size_t)b * Sk + j) * ldkv + koff + (size_t)g * hd;
        const float *vr = kv + ((size_t)b * Sk + j) * ldkv + voff + (size_t)g * hd;
        float p, ds;
        att_pair(qr, kr, vr, dor, lse[row], rowdot[row], hd, scale, &p, &ds);
        for (int d = 0; d < hd; d++) acc[d] += ds * kr[d];
    }
    for (int d = 0; d < hd; d++) dqr[d] += acc[d];
}

// dk_j += sum dS_ij q_i, dv_j += sum P_ij dO_i over the group's query heads and
// the queries: one thread per key row (b, g, j).
__global__ void k_att_bwd_dkv(float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                              const float *dout, const float *lse, const float *rowdot, const int *qpos,
                              const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd, float scale) {
    size_t row = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (row >= (size_t)B * KV * Sk) return;
    const int j = (int)(row % Sk), g = (int)((row / Sk) % KV), b = (int)(row / ((size_t)Sk * KV));
    const int group = H / KV, kp = kpos[j];
    const float *kr = kv + ((size_t)b * Sk + j) * ldkv + koff + (size_t)g * hd;
    const float *vr = kv + ((size_t)b * Sk + j) * ldkv + voff + (size_t)g * hd;
    float dk[ATT_MAX_HD], dv[ATT_MAX_HD];
    for (int d = 0; d < hd; d++) dk[d] = dv[d] = 0.0f;
    for (int h = g * group; h < (g + 1) * group; h++)
        for (int i = 0; i < Sq; i++) {
            if (kp > qpos[i]) continue;
            size_t st = ((size_t)b * H + h) * Sq + i;
            const float *qr = q + ((size_t)b * Sq + i) * ldq + (size_t)h * hd;
            const float *dor = dout + ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
            float p, ds;
            att_pair(qr, kr, vr, dor, lse[st], rowdot[st], hd, scale, &p, &ds);
            for (int d = 0; d < hd; d++) {
                dk[d] += ds * qr[d];
                dv[d] += p * dor[d];
            }
        }
    float *dkr = dkv + ((size_t)b * Sk + j) * ldkv + koff + (size_t)g * hd;
    float *dvr = dkv + ((size_t)b * Sk + j) * ldkv + voff + (size_t)g * hd;
    for (int d = 0; d < hd; d++) {
        dkr[d] += dk[d];
        dvr[d] += dv[d];
    }
}

extern "C" void attention_block_backward(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv,
                                         int koff, int voff, const float *dout, const float *lse, const float *rowdot,
                                         const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd,
                                         float *scratch) {
    (void)scratch;
    check_hd(hd, "attention_block_backward");
    if ((size_t)B * Sq * Sk * H == 0) return;
    const int *qp = cuda_device_ints(qpos, (size_t)Sq, 1), *kp = cuda_device_ints(kpos, (size_t)Sk, 2);
    const int kind = use_flash(B, H, hd, "attention_block_backward");
    if (kind != FLASH_NONE) {
        cuda_profile_open();  // as in the forward
        if (kind == FLASH_MMA)
            flash_mma::backward(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qp, kp, B, Sq, Sk, H, KV, hd,
                                true);
        else flash::backward(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qp, kp, B, Sq, Sk, H, KV, hd);
        cuda_done(kind == FLASH_MMA ? "attention_block_backward (mma)" : "attention_block_backward (wmma)");
        return;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    size_t qrows = (size_t)B * H * Sq, krows = (size_t)B * KV * Sk;
    k_att_bwd_dq<<<row_blocks(qrows, "attention_block_backward"), THREADS, 0, cuda_stream()>>>(
        dq, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qp, kp, B, Sq, Sk, H, KV, hd, scale);
    k_att_bwd_dkv<<<row_blocks(krows, "attention_block_backward"), THREADS, 0, cuda_stream()>>>(
        dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qp, kp, B, Sq, Sk, H, KV, hd, scale);
    cuda_done("attention_block_backward");
}

// ---- cuDNN's fused attention for the single-block ops (ops/cudnn_attention.h) ----

static int g_cudnn;  // ops_set_attention_cudnn

extern "C" void ops_set_attention_cudnn(int on) { g_cudnn = on != 0; }

// cuDNN takes this single-block call of the fp32 ops: bf16 products, and
// FEMTOTRON_ATTENTION=cudnn, or ops_set_attention_cudnn where FEMTOTRON_ATTENTION is
// unset (the variable, a developer's knob, wins: =mma or =wmma times femtotron's
// kernels in bench/tools/attention_gpu.c). A training run with training.attention =
// cudnn calls the bf16 ops below instead, which only cuDNN serves.
static bool use_cudnn(void) {
    if (!ops_matmul_bf16()) return false;
    const char *pick = getenv("FEMTOTRON_ATTENTION");
    return pick ? strcmp(pick, "cudnn") == 0 : g_cudnn != 0;
}

// cuDNN's mask is causal by index (key j visible to query i iff j <= i), which is
// ops.h's kpos[j] <= qpos[i] exactly when the positions increase along the
// sequence, as a rank's single block's do (0 .. S-1). Checked once per positions
// buffer: a host wait at its first call only.
static void check_increasing(const int *pos, int S) {
    static const int *seen;
    static int seen_S;
    if (pos == seen && S == seen_S) return;
    int *h = (int *)xmalloc((size_t)S * sizeof(int), "positions for cuDNN's check");
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream_raw()));  // the positions may still be on their way up
    CUDA_CHECK(cudaMemcpy(h, pos, (size_t)S * sizeof(int), cudaMemcpyDefault));
    for (int i = 1; i < S; i++)
        if (h[i] <= h[i - 1])
            die("cuDNN attention (training.attention = cudnn) masks causally by index, but position %d is %d "
                "after %d: set training.attention = femtotron",
                i, h[i], h[i - 1]);
    free(h);
    seen = pos, seen_S = S;
}

// The work buffer WS_ATT carved as ops_cuda_cudnn_parts lays it out (the bf16
// copies, then cuDNN's workspace; copies 0, the bf16 ops: the workspace alone):
// part[i] points at part i (an empty part at the next one). Checks the call's
// positions (check_increasing) and builds cuDNN's plan for it on first use; fatal
// where the plan wants more workspace than the reserve the memory plan counted.
static void cudnn_parts(char *part[CUDNN_PARTS], int backward, int copies, const int *pos, int B, int S, int H, int KV,
                        int hd) {
    check_increasing(cuda_device_ints(pos, (size_t)S, 1), S);
    const size_t rows = (size_t)B * S;
    size_t bytes[CUDNN_PARTS];
    ops_cuda_cudnn_parts(rows * (H + 2 * KV) * hd, rows * H * hd, ops_cuda_cudnn_scores(B, H, S), copies, bytes);
    const size_t want = cudnn_attention_workspace(backward, B, S, H, KV, hd);
    if (want > bytes[CUDNN_WS])
        die("cuDNN's attention %s (B %d S %d H %d KV %d hd %d) wants %zu bytes of workspace, more than the %zu "
            "the memory plan reserves (ops/cuda_workspace.h: OPS_CUDA_CUDNN_RESERVE)",
            backward ? "backward" : "forward", B, S, H, KV, hd, want, bytes[CUDNN_WS]);
    size_t total = 0;
    for (int i = 0; i < CUDNN_PARTS; i++) total += bytes[i];
    char *at = (char *)cuda_work_buffer(WS_ATT, total, "cuDNN attention's bf16 copies and workspace");
    for (int i = 0; i < CUDNN_PARTS; i++) part[i] = at, at += bytes[i];
}

// attention_forward on cuDNN: q|k|v rounded to bf16, cuDNN's bf16 output widened
// (exactly) into out, its stats straight into lse (both (B, H, S), natural log).
static void cudnn_forward(float *out, float *lse, const float *qkv, const int *pos, int B, int S, int H, int KV,
                          int hd) {
    char *p[CUDNN_PARTS];
    cudnn_parts(p, 0, 1, pos, B, S, H, KV, hd);
    const size_t rows = (size_t)B * S;
    uint16_t *qkv16 = (uint16_t *)p[CUDNN_QKV16], *o16 = (uint16_t *)p[CUDNN_O16];  // (rows, ld), (rows, H*hd)
    round_to_bf16(qkv16, qkv, rows * (H + 2 * KV) * hd);
    cuda_profile_open();
    cudnn_attention_forward(o16, lse, qkv16, B, S, H, KV, hd, p[CUDNN_WS], (void *)cuda_stream());
    cuda_done("attention_forward (cudnn)");
    widen_from_bf16(out, o16, rows * H * hd);
}

// attention_backward on cuDNN: q|k|v, out and dout rounded to bf16 (out's values
// are bf16 already: the forward's, widened), cuDNN's bf16 q|k|v gradient widened
// into dqkv. rowdot is left alone (cuDNN forms its own).
static void cudnn_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                           const int *pos, int B, int S, int H, int KV, int hd) {
    char *p[CUDNN_PARTS];
    cudnn_parts(p, 1, 1, pos, B, S, H, KV, hd);
    const size_t rows = (size_t)B * S, nqkv = rows * (H + 2 * KV) * hd, nout = rows * H * hd;
    uint16_t *qkv16 = (uint16_t *)p[CUDNN_QKV16], *dqkv16 = (uint16_t *)p[CUDNN_DQKV16];  // (rows, ld) each
    uint16_t *o16 = (uint16_t *)p[CUDNN_O16], *do16 = (uint16_t *)p[CUDNN_DO16];          // (rows, H*hd) each
    round_to_bf16(qkv16, qkv, nqkv);
    round_to_bf16(o16, out, nout);
    round_to_bf16(do16, dout, nout);
    cuda_profile_open();
    cudnn_attention_backward(dqkv16, qkv16, o16, do16, lse, B, S, H, KV, hd, p[CUDNN_WS], (void *)cuda_stream());
    cuda_done("attention_backward (cudnn)");
    widen_from_bf16(dqkv, dqkv16, nqkv);
}

// The bf16 ops (LlamaModel.att_bf16): q|k|v, the output and the q|k|v gradient
// are the model's own bf16 buffers, handed to cuDNN as they are; only dout is
// rounded (into the part's dO copy). Always cuDNN: these ops exist for it, so
// FEMTOTRON_ATTENTION naming femtotron's kernels is refused rather than ignored.
static void refuse_other_kernels(void) {
    const char *pick = getenv("FEMTOTRON_ATTENTION");
    if (pick && strcmp(pick, "cudnn") != 0)
        die("FEMTOTRON_ATTENTION=%s, but this run keeps q|k|v in bf16 for cuDNN (training.attention = cudnn): set "
            "training.attention = femtotron to run femtotron's kernels, or unset FEMTOTRON_ATTENTION",
            pick);
}

extern "C" void attention_forward_bf16(uint16_t *out16, float *lse, const uint16_t *qkv16, const int *pos, int B,
                                       int S, int H, int KV, int hd) {
    refuse_other_kernels();
    if ((size_t)B * H * S == 0) return;
    char *p[CUDNN_PARTS];
    cudnn_parts(p, 0, 0, pos, B, S, H, KV, hd);
    cuda_profile_open();
    cudnn_attention_forward(out16, lse, qkv16, B, S, H, KV, hd, p[CUDNN_WS], (void *)cuda_stream());
    cuda_done("attention_forward_bf16 (cudnn)");
}

// dout16 as the o product wrote it, handed to cuDNN as it is (no rounding pass).
extern "C" void attention_backward_bf16(uint16_t *dqkv16, const uint16_t *dout16, const uint16_t *qkv16,
                                        const uint16_t *out16, const float *lse, const int *pos, int B, int S, int H,
                                        int KV, int hd) {
    refuse_other_kernels();
    if ((size_t)B * H * S == 0) return;
    char *p[CUDNN_PARTS];
    cudnn_parts(p, 1, 0, pos, B, S, H, KV, hd);
    cuda_profile_open();
    cudnn_attention_backward(dqkv16, qkv16, out16, dout16, lse, B, S, H, KV, hd, p[CUDNN_WS], (void *)cuda_stream());
    cuda_done("attention_backward_bf16 (cudnn)");
}

extern "C" void attention_forward(float *out, float *lse, float *m, float *l, const float *qkv, const int *pos, int B,
                                  int S, int H, int KV, int hd, float *scratch) {
    const int ld = (H + 2 * KV) * hd;
    if ((size_t)B * H * S > 0 && use_cudnn()) {
        cudnn_forward(out, lse, qkv, pos, B, S, H, KV, hd);
        return;
    }
    if ((size_t)B * H * S > 0 && use_flash(B, H, hd, "attention_forward") == FLASH_MMA) {
        // One kernel: the block's init and finish folded in (flash_mma::forward_whole), m and l unused.
        const int *p = cuda_device_ints(pos, (size_t)S, 1);
        cuda_profile_open();
        flash_mma::forward_whole(out, lse, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, p, p, B, S, S, H, KV, hd);
        cuda_done("attention_forward (mma, whole)");
        return;
    }
    attention_block_init(out, m, l, B, S, H, hd);
    attention_block_forward(out, m, l, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, pos, pos, B, S, S, H, KV, hd, scratch);
    attention_block_finish(out, lse, m, l, B, S, H, hd);
}

extern "C" void attention_backward(float *dqkv, float *rowdot, const float *dout, const float *qkv, const float *out,
                                   const float *lse, const int *pos, int B, int S, int H, int KV, int hd,
                                   float *scratch) {
    const int ld = (H + 2 * KV) * hd;
    if ((size_t)B * H * S > 0 && use_cudnn()) {
        cudnn_backward(dqkv, dout, qkv, out, lse, pos, B, S, H, KV, hd);
        return;
    }
    attention_rowdot(rowdot, dout, out, B, S, H, hd);
    if ((size_t)B * H * S > 0 && use_flash(B, H, hd, "attention_backward") == FLASH_MMA) {
        // The kernels write every value of dqkv (flash_mma::backward, add = false):
        // no zeroing pass over it first.
        const int *p = cuda_device_ints(pos, (size_t)S, 1);
        cuda_profile_open();
        flash_mma::backward(dqkv, dqkv, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, dout, lse, rowdot, p, p, B, S, S, H,
                            KV, hd, false);
        cuda_done("attention_backward (mma, whole)");
        return;
    }
    zero_f32(dqkv, (size_t)B * S * ld);
    attention_block_backward(dqkv, dqkv, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, dout, lse, rowdot, pos, pos, B, S, S,
                             H, KV, hd, scratch);
}
