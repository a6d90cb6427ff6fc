// ops/attention_cpu.c — the CPU attention kernels of ops.h: tiled causal
// grouped-query attention with an online softmax (flash style), block by block so
// that context-parallel rings can feed it other ranks' keys and values.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ops/fast_exp.h"
#include "ops/ops.h"

// -------------------------------------------------------------------- attention
//
// Per (sequence b, head h), queries in tiles of ATT_T rows against keys in tiles of
// ATT_T columns. Positions inside a block increase (a context-parallel rank's two
// zigzag chunks are stored in order), so once a key tile starts after the last
// query of the query tile, every later key tile is masked too. Threads take whole
// (b, h) pairs (forward) or (b, kv head) pairs (backward, because a kv head's
// gradient sums over the query heads of its group) and call single-threaded BLAS.

#define ATT_T 64

size_t attention_scratch_floats(void) { return (size_t)omp_get_max_threads() * 2 * ATT_T * ATT_T; }

void attention_block_init(float *o, float *m, float *l, int B, int Sq, int H, int hd) {
    memset(o, 0, sizeof(float) * (size_t)B * Sq * H * hd);
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
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            float *sc = scratch + (size_t)omp_get_thread_num() * 2 * ATT_T * ATT_T;  // (T, T)
            const int g = h / group;
            const float *qb = q + (size_t)b * Sq * ldq + (size_t)h * hd;
            const float *kb = kv + (size_t)b * Sk * ldkv + koff + (size_t)g * hd;
            const float *vb = kv + (size_t)b * Sk * ldkv + voff + (size_t)g * hd;
            float *ob = o + (size_t)b * Sq * ldo + (size_t)h * hd;
            float *mb = m + ((size_t)b * H + h) * Sq, *lb = l + ((size_t)b * H + h) * Sq;
            for (int i0 = 0; i0 < Sq; i0 += ATT_T) {
                const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                for (int j0 = 0; j0 < Sk; j0 += ATT_T) {
                    const int j1 = j0 + ATT_T < Sk ? j0 + ATT_T : Sk, nk = j1 - j0;
                    if (kpos[j0] > qpos[i1 - 1]) break;  // this and later key tiles are masked
                    const int masked = kpos[j1 - 1] > qpos[i0];
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hd, scale,
                                qb + (size_t)i0 * ldq, ldq, kb + (size_t)j0 * ldkv, ldkv, 0.0f, sc,
                                ATT_T);
                    for (int r = 0; r < mq; r++) {
                        float *srow = sc + (size_t)r * ATT_T, rmax = -INFINITY;
                        const int qp = qpos[i0 + r];
                        for (int c = 0; c < nk; c++) {
                            if (masked && kpos[j0 + c] > qp) srow[c] = -INFINITY;
                            rmax = srow[c] > rmax ? srow[c] : rmax;
                        }
                        float *orow = ob + (size_t)(i0 + r) * ldo;
                        if (rmax == -INFINITY) {  // nothing visible in this tile for this row
                            for (int c = 0; c < nk; c++) srow[c] = 0.0f;
                            continue;
                        }
                        // Online softmax: rescale what was accumulated under the old max.
                        float mnew = mb[i0 + r] > rmax ? mb[i0 + r] : rmax;
                        float alpha = fast_expf(mb[i0 + r] - mnew), sum = 0.0f;
                        for (int c = 0; c < nk; c++) {
                            srow[c] = fast_expf(srow[c] - mnew);
                            sum += srow[c];
                        }
                        lb[i0 + r] = lb[i0 + r] * alpha + sum;
                        mb[i0 + r] = mnew;
                        for (int d = 0; d < hd; d++) orow[d] *= alpha;
                    }
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hd, nk, 1.0f, sc,
                                ATT_T, vb + (size_t)j0 * ldkv, ldkv, 1.0f, ob + (size_t)i0 * ldo, ldo);
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
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            float *P = scratch + (size_t)omp_get_thread_num() * 2 * ATT_T * ATT_T;  // (T, T)
            float *dS = P + ATT_T * ATT_T;                                           // (T, T)
            const float *kb = kv + (size_t)b * Sk * ldkv + koff + (size_t)g * hd;
            const float *vb = kv + (size_t)b * Sk * ldkv + voff + (size_t)g * hd;
            float *dkb = dkv + (size_t)b * Sk * ldkv + koff + (size_t)g * hd;
            float *dvb = dkv + (size_t)b * Sk * ldkv + voff + (size_t)g * hd;
            for (int h = g * group; h < (g + 1) * group; h++) {
                const float *qb = q + (size_t)b * Sq * ldq + (size_t)h * hd;
                float *dqb = dq + (size_t)b * Sq * ldq + (size_t)h * hd;
                const float *dob = dout + (size_t)b * Sq * ldo + (size_t)h * hd;
                const float *lb = lse + ((size_t)b * H + h) * Sq, *rb = rowdot + ((size_t)b * H + h) * Sq;
                for (int i0 = 0; i0 < Sq; i0 += ATT_T) {
                    const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                    for (int j0 = 0; j0 < Sk; j0 += ATT_T) {
                        const int j1 = j0 + ATT_T < Sk ? j0 + ATT_T : Sk, nk = j1 - j0;
                        if (kpos[j0] > qpos[i1 - 1]) break;
                        const int masked = kpos[j1 - 1] > qpos[i0];
                        // Recompute the tile's probabilities from the saved log-sum-exp.
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hd, scale,
                                    qb + (size_t)i0 * ldq, ldq, kb + (size_t)j0 * ldkv, ldkv, 0.0f,
                                    P, ATT_T);
                        for (int r = 0; r < mq; r++) {
                            float *prow = P + (size_t)r * ATT_T;
                            const int qp = qpos[i0 + r];
                            const float lse_r = lb[i0 + r];
                            for (int c = 0; c < nk; c++)
                                prow[c] = (masked && kpos[j0 + c] > qp) ? 0.0f : fast_expf(prow[c] - lse_r);
                        }
                        // dP = dO V^T, then dS = P (dP - rowdot) / sqrt(hd)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hd, 1.0f,
                                    dob + (size_t)i0 * ldo, ldo, vb + (size_t)j0 * ldkv, ldkv, 0.0f,
                                    dS, ATT_T);
                        for (int r = 0; r < mq; r++) {
                            const float *prow = P + (size_t)r * ATT_T;
                            float *drow = dS + (size_t)r * ATT_T, dr = rb[i0 + r];
                            for (int c = 0; c < nk; c++) drow[c] = prow[c] * (drow[c] - dr) * scale;
                        }
                        // dQ += dS K ; dK += dS^T Q ; dV += P^T dO
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hd, nk, 1.0f, dS,
                                    ATT_T, kb + (size_t)j0 * ldkv, ldkv, 1.0f, dqb + (size_t)i0 * ldq, ldq);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, mq, 1.0f, dS,
                                    ATT_T, qb + (size_t)i0 * ldq, ldq, 1.0f, dkb + (size_t)j0 * ldkv, ldkv);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, mq, 1.0f, P,
                                    ATT_T, dob + (size_t)i0 * ldo, ldo, 1.0f, dvb + (size_t)j0 * ldkv, ldkv);
                    }
                }
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
    memset(dqkv, 0, sizeof(float) * (size_t)B * S * ld);
    attention_rowdot(rowdot, dout, out, B, S, H, hd);
    attention_block_backward(dqkv, dqkv, qkv, ld, qkv, ld, H * hd, (H + KV) * hd, dout, lse, rowdot,
                             pos, pos, B, S, S, H, KV, hd, scratch);
}

