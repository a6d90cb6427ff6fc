// ops/attention_cpu.c — the CPU attention kernels of ops.h: tiled causal
// grouped-query attention with an online softmax (flash style), block by block so
// that context-parallel rings can feed it other ranks' keys and values.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_tiles.h"
#include "ops/bf16.h"
#include "ops/blas_api.h"
#include "ops/fast_exp.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"
#include "util.h"

// -------------------------------------------------------------------- attention
//
// Per (sequence b, head h), keys in chunks of up to ATT_KC, and against each chunk
// the query tiles of ATT_T rows that see any of it. Positions inside a block
// increase (a context-parallel rank's two zigzag chunks are stored in order), so
// the keys a query sees are a prefix of the block, found by binary search: a tile
// multiplies only the keys its last query sees, and a row's visible keys are a
// prefix of each chunk. The only computed-then-masked scores are the triangle
// above the diagonal in a tile's last chunk (at most ATT_T x ATT_T / 2 per tile).
//
// Why the copies. q, k and v are columns of the fused qkv rows, (H + 2 KV) * hd
// floats apart (4 KiB in the small config: every row of a tile falls in the same
// L1 set), and OpenBLAS multiplies products this small without packing them, so
// it reads those strided rows directly: scores Q K^T ran at 66 GFLOP/s per thread
// against 113 on contiguous operands. Each chunk's K^T and V (and, backward, K and
// V^T) are copied into contiguous per-thread scratch once per (sequence, head,
// chunk), each query tile once per chunk: the copies move hd floats per key or
// query against 4 hd (forward) to 10 hd (backward) FLOPs per score, and make every
// product an NN or TN one (the transposed-B kernel is the slowest of the three).
// ATT_KC = 128 keeps the tile products (32 x 128 x hd and the like) on OpenBLAS's
// small-matrix kernels, which on the EPYC here run at 110-115 GFLOP/s per thread
// against 90-95 for the packed path a 256- or 512-key chunk takes; ATT_T = 32
// halves the masked triangle of 64-row tiles (a quarter of the scores computed at
// sequence 256) for products that run as fast. Together with the copies the
// attention of the bench configs runs 1.37x (small) and 1.32x (gpt2) faster than
// with 64 x 64 tiles read in place (bench/tools/attention_alone.c; bench/README.md).
// Threads take whole (b, h) pairs (forward) or (b, kv head) pairs (backward,
// because a kv head's gradient sums over the query heads of its group) and call
// single-threaded BLAS.

// bf16 products (training.precision = bf16, ops_matmul_bf16()): the products read
// the values the CUDA backend's flash kernels read (ops/flash_attention.cuh): Q, K,
// V and dO rounded to bf16 from their fp32 copies into bf16 ones, P and dS rounded
// once formed (dS from the fp32 P), l summing the rounded P. The tile products are
// then oneMKL's bf16 product (cpu_gemm_bf16: exact products, fp32 sums; 2-2.7x
// sgemm's rate on these tiles with AMX), and the softmax, lse, rowdot and
// accumulators stay fp32.

// A thread's bf16 tiles (bf16 products), in its scratch after the fp32 ones.
typedef struct {
    uint16_t *k, *v, *kc;  // (hd, KC) kt or (KC, hd) kc layouts, as their fp32 twins; v: vt (bwd) or vc (fwd)
    uint16_t *q, *dout;    // (T, hd)
    uint16_t *p, *ds;      // (T, KC)
} Tiles16;
static Tiles16 tiles16(float *thread_scratch, int hd) {
    Tiles16 t;
    t.k = (uint16_t *)(thread_scratch + att_fp32_floats(hd));
    t.v = t.k + (size_t)hd * ATT_KC;
    t.kc = t.v + (size_t)hd * ATT_KC;
    t.q = t.kc + (size_t)hd * ATT_KC;
    t.dout = t.q + (size_t)ATT_T * hd;
    t.p = t.dout + (size_t)ATT_T * hd;
    t.ds = t.p + (size_t)ATT_T * ATT_KC;
    return t;
}

size_t attention_scratch_floats(int hd) { return (size_t)omp_get_max_threads() * att_thread_floats(hd); }

// dst(hd, ATT_KC) = transpose of the rows of src(rows, ld), rows <= ATT_KC. Eight
// source rows at a time: with ld a multiple of 1 KiB their lines share an L1 set,
// and eight fit its ways (row by row, or all rows per column, ran 1.4x slower).
static void copy_rows_transposed(float *dst, const float *src, int ld, int rows, int hd) {
    for (int r0 = 0; r0 < rows; r0 += 8) {
        const int r1 = r0 + 8 < rows ? r0 + 8 : rows;
        for (int d = 0; d < hd; d++)
            for (int r = r0; r < r1; r++) dst[(size_t)d * ATT_KC + r] = src[(size_t)r * ld + d];
    }
}

// Backward: the probabilities of a query tile against a chunk, rebuilt from the
// saved log-sum-exp: P(mq, ATT_KC) holds the scaled scores of the first nkt keys on
// entry, exp(s - lse) on exit (0 where masked).
static void probs_from_lse(float *P, const float *lse, const int *qpos, const int *kpos, int mq, int nkt) {
    for (int r = 0; r < mq; r++) {
        float *prow = P + (size_t)r * ATT_KC;
        const int nv = count_at_most(kpos, nkt, qpos[r]);
        const float lse_r = lse[r];
        for (int c = 0; c < nv; c++) prow[c] = fast_expf(prow[c] - lse_r);
        for (int c = nv; c < nkt; c++) prow[c] = 0.0f;
    }
}

// dS = P (dP - rowdot) / sqrt(hd): dS(mq, ATT_KC) holds dP = dO V^T on entry.
static void scores_gradient(float *dS, const float *P, const float *rowdot, int mq, int nkt, float scale) {
    for (int r = 0; r < mq; r++) {
        const float *prow = P + (size_t)r * ATT_KC;
        float *drow = dS + (size_t)r * ATT_KC, dr = rowdot[r];
        for (int c = 0; c < nkt; c++) drow[c] = prow[c] * (drow[c] - dr) * scale;
    }
}

void attention_block_init(float *o, float *m, float *l, int B, int Sq, int H, int hd) {
    zero_f32(o, (size_t)B * Sq * H * hd);  // both threads: a layer's output is megabytes
    for (size_t i = 0; i < (size_t)B * H * Sq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
}

void attention_block_forward(float *o, float *m, float *l, const float *q, int ldq,
                             const float *kv, int ldkv, int koff, int voff, const int *qpos,
                             const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd,
                             float *scratch) {
    const int group = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int r16 = ops_matmul_bf16();
    // keys any query of the block sees (a prefix)
    const int kend = Sq > 0 ? count_at_most(kpos, Sk, qpos[Sq - 1]) : 0;
    if (cpu_attention_amx(hd)) {
        attention_block_forward_amx(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV, hd, kend,
                                    scratch);
        return;
    }
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            float *kt = scratch + (size_t)omp_get_thread_num() * att_thread_floats(hd);  // (hd, KC)
            float *vc = kt + (size_t)hd * ATT_KC;                                          // (KC, hd)
            float *qc = vc + (size_t)ATT_KC * hd;                                          // (T, hd)
            float *sc = qc + (size_t)ATT_T * hd;                                           // (T, KC)
            const Tiles16 t16 = tiles16(kt, hd);  // bf16 products' copies
            const int g = h / group;
            const HeadOut ho = head_out(q, ldq, o, m, l, b, h, Sq, H, hd);
            const size_t kvb = kv_rows(b, g, Sk, ldkv, hd);
            const float *qb = ho.q, *kb = kv + kvb + koff, *vb = kv + kvb + voff;
            float *ob = ho.o, *mb = ho.m, *lb = ho.l;
            for (int j0 = 0; j0 < kend; j0 += ATT_KC) {
                const int nk = j0 + ATT_KC < kend ? ATT_KC : kend - j0;
                copy_rows_transposed(kt, kb + (size_t)j0 * ldkv, ldkv, nk, hd);
                copy_rows_f32(vc, hd, vb + (size_t)j0 * ldkv, ldkv, nk, hd);
                if (r16) {
                    bf16_round_rows(t16.k, ATT_KC, kt, ATT_KC, hd, nk);
                    bf16_round_rows(t16.v, hd, vc, hd, nk, hd);
                }
                for (int i0 = first_tile_seeing(qpos, Sq, kpos[j0]); i0 < Sq; i0 += ATT_T) {
                    const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                    const int nkt = count_at_most(kpos + j0, nk, qpos[i1 - 1]);  // keys the tile sees
                    copy_rows_f32(qc, hd, qb + (size_t)i0 * ldq, ldq, mq, hd);
                    if (r16) {
                        bf16_round_rows(t16.q, hd, qc, hd, mq, hd);
                        cpu_gemm_bf16(0, 0, mq, nkt, hd, scale, t16.q, hd, t16.k, ATT_KC, 0.0f, sc, ATT_KC);
                    } else {
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, nkt, hd, scale, qc, hd, kt,
                                    ATT_KC, 0.0f, sc, ATT_KC);
                    }
                    const int fresh = online_softmax_tile(sc, ATT_KC, ob + (size_t)i0 * ldo, ldo, mb + i0, lb + i0,
                                                          qpos + i0, kpos + j0, mq, nkt, hd, r16);
                    if (r16) {  // P as rounded above (exact in bf16)
                        bf16_round_rows(t16.p, ATT_KC, sc, ATT_KC, mq, nkt);
                        cpu_gemm_bf16(0, 0, mq, hd, nkt, 1.0f, t16.p, ATT_KC, t16.v, hd, fresh ? 0.0f : 1.0f,
                                      ob + (size_t)i0 * ldo, ldo);
                    } else {
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hd, nkt, 1.0f, sc, ATT_KC, vc,
                                    hd, fresh ? 0.0f : 1.0f, ob + (size_t)i0 * ldo, ldo);
                    }
                }
            }
        }
}

void attention_block_finish(float *o, float *lse, const float *m, const float *l, int B, int Sq,
                            int H, int hd) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Sq; i++)
            for (int h = 0; h < H; h++) {
                size_t st = ((size_t)b * H + h) * Sq + i;
                float *orow = o + ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
                float inv = l[st] > 0.0f ? 1.0f / l[st] : 0.0f;
                for (int d = 0; d < hd; d++) orow[d] *= inv;
                lse[st] = l[st] > 0.0f ? m[st] + logf(l[st]) : -INFINITY;
            }
}

void attention_rowdot(float *rowdot, const float *dout, const float *out, int B, int Sq, int H,
                      int hd) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int i = 0; i < Sq; i++)
            for (int h = 0; h < H; h++) {
                size_t off = ((size_t)b * Sq + i) * H * hd + (size_t)h * hd;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < hd; d++) s += dout[off + d] * out[off + d];
                rowdot[((size_t)b * H + h) * Sq + i] = s;
            }
}

void attention_block_backward(float *dq, float *dkv, const float *q, int ldq, const float *kv,
                              int ldkv, int koff, int voff, const float *dout, const float *lse,
                              const float *rowdot, const int *qpos, const int *kpos, int B,
                              int Sq, int Sk, int H, int KV, int hd, float *scratch) {
    const int group = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const int r16 = ops_matmul_bf16();
    const int kend = Sq > 0 ? count_at_most(kpos, Sk, qpos[Sq - 1]) : 0;
    if (cpu_attention_amx(hd)) {
        attention_block_backward_amx(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq, Sk,
                                     H, KV, hd, kend, scratch);
        return;
    }
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            float *kt = scratch + (size_t)omp_get_thread_num() * att_thread_floats(hd);  // (hd, KC)
            float *vt = kt + (size_t)hd * ATT_KC;                                          // (hd, KC)
            float *kc = vt + (size_t)hd * ATT_KC;                                          // (KC, hd)
            float *dkc = kc + (size_t)ATT_KC * hd;                                         // (KC, hd)
            float *dvc = dkc + (size_t)ATT_KC * hd;                                        // (KC, hd)
            float *qc = dvc + (size_t)ATT_KC * hd;                                         // (T, hd)
            float *doc = qc + (size_t)ATT_T * hd;                                          // (T, hd)
            float *P = doc + (size_t)ATT_T * hd;                                           // (T, KC)
            float *dS = P + (size_t)ATT_T * ATT_KC;                                        // (T, KC)
            const Tiles16 t16 = tiles16(kt, hd);  // bf16 products' copies
            const size_t kvb = kv_rows(b, g, Sk, ldkv, hd);
            const float *kb = kv + kvb + koff, *vb = kv + kvb + voff;
            float *dkb = dkv + kvb + koff, *dvb = dkv + kvb + voff;
            for (int j0 = 0; j0 < kend; j0 += ATT_KC) {
                const int nk = j0 + ATT_KC < kend ? ATT_KC : kend - j0;
                copy_rows_transposed(kt, kb + (size_t)j0 * ldkv, ldkv, nk, hd);
                copy_rows_transposed(vt, vb + (size_t)j0 * ldkv, ldkv, nk, hd);
                copy_rows_f32(kc, hd, kb + (size_t)j0 * ldkv, ldkv, nk, hd);
                if (r16) {
                    bf16_round_rows(t16.k, ATT_KC, kt, ATT_KC, hd, nk);
                    bf16_round_rows(t16.v, ATT_KC, vt, ATT_KC, hd, nk);
                    bf16_round_rows(t16.kc, hd, kc, hd, nk, hd);
                }
                memset(dkc, 0, sizeof(float) * (size_t)nk * hd);
                memset(dvc, 0, sizeof(float) * (size_t)nk * hd);
                for (int h = g * group; h < (g + 1) * group; h++) {
                    const HeadRows hr = head_rows(q, dq, ldq, dout, lse, rowdot, b, h, Sq, H, hd);
                    const float *qb = hr.q, *dob = hr.dout, *lb = hr.lse, *rb = hr.rowdot;
                    float *dqb = hr.dq;
                    for (int i0 = first_tile_seeing(qpos, Sq, kpos[j0]); i0 < Sq; i0 += ATT_T) {
                        const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                        const int nkt = count_at_most(kpos + j0, nk, qpos[i1 - 1]);
                        copy_rows_f32(qc, hd, qb + (size_t)i0 * ldq, ldq, mq, hd);
                        copy_rows_f32(doc, hd, dob + (size_t)i0 * ldo, ldo, mq, hd);
                        // Recompute the chunk's probabilities from the saved log-sum-exp.
                        if (r16) {
                            bf16_round_rows(t16.q, hd, qc, hd, mq, hd);
                            bf16_round_rows(t16.dout, hd, doc, hd, mq, hd);
                            cpu_gemm_bf16(0, 0, mq, nkt, hd, scale, t16.q, hd, t16.k, ATT_KC, 0.0f, P, ATT_KC);
                        } else {
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, nkt, hd, scale, qc, hd, kt,
                                        ATT_KC, 0.0f, P, ATT_KC);
                        }
                        probs_from_lse(P, lb + i0, qpos + i0, kpos + j0, mq, nkt);
                        // dP = dO V^T, then dS = P (dP - rowdot) / sqrt(hd)
                        if (r16)
                            cpu_gemm_bf16(0, 0, mq, nkt, hd, 1.0f, t16.dout, hd, t16.v, ATT_KC, 0.0f, dS, ATT_KC);
                        else
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, nkt, hd, 1.0f, doc, hd, vt,
                                        ATT_KC, 0.0f, dS, ATT_KC);
                        scores_gradient(dS, P, rb + i0, mq, nkt, scale);
                        if (r16) {  // the products read P and dS rounded (dS from the fp32 P)
                            bf16_round_rows(t16.p, ATT_KC, P, ATT_KC, mq, nkt);
                            bf16_round_rows(t16.ds, ATT_KC, dS, ATT_KC, mq, nkt);
                            cpu_gemm_bf16(0, 0, mq, hd, nkt, 1.0f, t16.ds, ATT_KC, t16.kc, hd, 1.0f,
                                          dqb + (size_t)i0 * ldq, ldq);
                            cpu_gemm_bf16(1, 0, nkt, hd, mq, 1.0f, t16.ds, ATT_KC, t16.q, hd, 1.0f, dkc, hd);
                            cpu_gemm_bf16(1, 0, nkt, hd, mq, 1.0f, t16.p, ATT_KC, t16.dout, hd, 1.0f, dvc, hd);
                            continue;
                        }
                        // dQ += dS K ; dK += dS^T Q ; dV += P^T dO (the last two into the
                        // chunk's contiguous sums, added to dkv once per chunk)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hd, nkt, 1.0f, dS,
                                    ATT_KC, kc, hd, 1.0f, dqb + (size_t)i0 * ldq, ldq);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkt, hd, mq, 1.0f, dS,
                                    ATT_KC, qc, hd, 1.0f, dkc, hd);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkt, hd, mq, 1.0f, P,
                                    ATT_KC, doc, hd, 1.0f, dvc, hd);
                    }
                }
                add_rows(dkb + (size_t)j0 * ldkv, ldkv, dkc, nk, hd);
                add_rows(dvb + (size_t)j0 * ldkv, ldkv, dvc, nk, hd);
            }
        }
}

void attention_forward(float *out, float *lse, float *m, float *l, const float *qkv,
                       const int *pos, int B, int S, int H, int KV, int hd, float *scratch) {
    const int ld = (H + 2 * KV) * hd;
    attention_block_init(out, m, l, B, S, H, hd);
    attention_block_forward(out, m, l, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, pos, pos, B, S, S,
                            H, KV, hd, scratch);
    attention_block_finish(out, lse, m, l, B, S, H, hd);
}

void attention_backward(float *dqkv, float *rowdot, const float *dout, const float *qkv,
                        const float *out, const float *lse, const int *pos, int B, int S, int H,
                        int KV, int hd, float *scratch) {
    const int ld = (H + 2 * KV) * hd;
    zero_f32(dqkv, (size_t)B * S * ld);
    attention_rowdot(rowdot, dout, out, B, S, H, hd);
    attention_block_backward(dqkv, dqkv, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, dout, lse, rowdot,
                             pos, pos, B, S, S, H, KV, hd, scratch);
}

// ---- bf16 q|k|v (LlamaModel.att_bf16; ops.h) ----
// The reference for cuDNN's bf16 attention: the fp32 attention above on the
// widened values (dout rounded to bf16 first, as cuDNN reads it), its output and
// gradients rounded. Temporaries are allocated per call: the CPU trains with fp32
// q|k|v (training.attention = cudnn is refused there), so only tests come here.
static float *widened_copy(const uint16_t *x16, size_t n) {
    float *x = xmalloc(sizeof(float) * n, "attention_bf16 operand");
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(x16[i]);
    return x;
}

static void round_into(uint16_t *x16, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x16[i] = bf16_from_f32(x[i]);
}

void attention_forward_bf16(uint16_t *out16, float *lse, const uint16_t *qkv16, const int *pos, int B, int S, int H,
                            int KV, int hd) {
    const size_t nqkv = (size_t)B * S * (H + 2 * KV) * hd, nout = (size_t)B * S * H * hd, nrow = (size_t)B * H * S;
    float *qkv = widened_copy(qkv16, nqkv), *out = xmalloc(sizeof(float) * nout, "attention_bf16 out");
    float *ml = xmalloc(sizeof(float) * 2 * nrow, "attention_bf16 m, l");  // (2, B, H, S)
    float *scratch = xmalloc(sizeof(float) * attention_scratch_floats(hd), "attention_bf16 scratch");
    attention_forward(out, lse, ml, ml + nrow, qkv, pos, B, S, H, KV, hd, scratch);
    round_into(out16, out, nout);
    free(qkv), free(out), free(ml), free(scratch);
}

void attention_backward_bf16(uint16_t *dqkv16, const uint16_t *dout16, const uint16_t *qkv16, const uint16_t *out16,
                             const float *lse, const int *pos, int B, int S, int H, int KV, int hd) {
    const size_t nqkv = (size_t)B * S * (H + 2 * KV) * hd, nout = (size_t)B * S * H * hd, nrow = (size_t)B * H * S;
    float *qkv = widened_copy(qkv16, nqkv), *out = widened_copy(out16, nout);
    float *dq = xmalloc(sizeof(float) * (nqkv + nout + nrow), "attention_bf16 gradients");  // dqkv | dout | rowdot
    float *d16 = dq + nqkv, *rowdot = d16 + nout;
    for (size_t i = 0; i < nout; i++) d16[i] = bf16_to_f32(dout16[i]);
    float *scratch = xmalloc(sizeof(float) * attention_scratch_floats(hd), "attention_bf16 scratch");
    attention_backward(dq, rowdot, d16, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
    round_into(dqkv16, dq, nqkv);
    free(qkv), free(out), free(dq), free(scratch);
}
