// ops/cpu.c — CPU kernels: every matrix product through BLAS (OpenBLAS sgemm),
// every elementwise/row-wise loop through OpenMP. Shapes and semantics are in ops.h.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ops/ops.h"

// OpenBLAS extension (declared in its cblas.h on some builds only).
void openblas_set_num_threads(int num_threads);

void ops_set_threads(int threads) {
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

// ---------------------------------------------------------------- linear layers

void matmul_forward(float *out, const float *in, const float *weight, int N, int in_dim,
                    int out_dim) {
    // out = in @ W^T : (N, in) x (in, out)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out_dim, in_dim, 1.0f, in, in_dim,
                weight, in_dim, 0.0f, out, out_dim);
}

void matmul_backward(float *din, float *dweight, const float *dout, const float *in,
                     const float *weight, int N, int in_dim, int out_dim, int accumulate_din) {
    // dW += dout^T @ in : (out, N) x (N, in)
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, N, 1.0f, dout,
                    out_dim, in, in_dim, 1.0f, dweight, in_dim);
    if (din == NULL) return;
    // din (+)= dout @ W : (N, out) x (out, in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in_dim, out_dim, 1.0f, dout,
                out_dim, weight, in_dim, accumulate_din ? 1.0f : 0.0f, din, in_dim);
}

// -------------------------------------------------------------------- embedding

void embedding_forward(float *out, const int32_t *tokens, const float *table, int N, int D) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * D, table + (size_t)tokens[n] * D, sizeof(float) * (size_t)D);
}

void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int N, int D) {
    // Rows of dtable are shared by repeated tokens, so split the work over columns:
    // each thread owns a column range of every row and never races.
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            float *row = dtable + (size_t)tokens[n] * D;
            const float *g = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) row[c] += g[c];
        }
    }
}

void embedding_forward_range(float *out, const int32_t *tokens, const float *table, int N, int D,
                             int v0, int rows) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int r = tokens[n] - v0;
        if (r >= 0 && r < rows)
            memcpy(out + (size_t)n * D, table + (size_t)r * D, sizeof(float) * (size_t)D);
        else
            memset(out + (size_t)n * D, 0, sizeof(float) * (size_t)D);
    }
}

void embedding_backward_range(float *dtable, const float *dout, const int32_t *tokens, int N, int D,
                              int v0, int rows) {
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            int r = tokens[n] - v0;
            if (r < 0 || r >= rows) continue;
            float *row = dtable + (size_t)r * D;
            const float *g = dout + (size_t)n * D;
            for (int c = c0; c < c1; c++) row[c] += g[c];
        }
    }
}

// ---------------------------------------------------------------------- RMSNorm

void rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight, int N, int D,
                     float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * D;
        float *y = out + (size_t)n * D;
        float ss = 0.0f;
        for (int i = 0; i < D; i++) ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)D + eps);
        rstd[n] = r;
        for (int i = 0; i < D; i++) y[i] = weight[i] * (x[i] * r);
    }
}

void rmsnorm_backward(float *din, float *dweight, const float *dout, const float *in,
                      const float *weight, const float *rstd, int N, int D) {
    // y_i = w_i x_i r,  r = (mean(x^2) + eps)^(-1/2),  dr/dx_j = -r^3 x_j / D
    // dx_j = r w_j dy_j - (r^3 / D) x_j sum_i(w_i dy_i x_i)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * D, *dy = dout + (size_t)n * D;
        float *dx = din + (size_t)n * D;
        float r = rstd[n], dot = 0.0f;
        for (int i = 0; i < D; i++) dot += weight[i] * dy[i] * x[i];
        float c = r * r * r * dot / (float)D;
        for (int i = 0; i < D; i++) dx[i] += r * weight[i] * dy[i] - c * x[i];
    }
    // dw_i = sum_n dy_i x_i r_n: split over columns so threads never share an output.
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int c0 = (int)((long)D * id / nt), c1 = (int)((long)D * (id + 1) / nt);
        for (int n = 0; n < N; n++) {
            const float *x = in + (size_t)n * D, *dy = dout + (size_t)n * D;
            float r = rstd[n];
            for (int i = c0; i < c1; i++) dweight[i] += dy[i] * x[i] * r;
        }
    }
}

// --------------------------------------------------------------------- residual

void residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// ------------------------------------------------------------------------- RoPE

void rope_tables_at(float *cos_t, float *sin_t, const int *pos, int S, int hd, double theta) {
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)pos[p] * pow(theta, -2.0 * i / hd);
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

void rope_tables(float *cos_t, float *sin_t, int S, int hd, double theta, int pos0) {
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos0 + p) * pow(theta, -2.0 * i / hd);
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

// Rotate the q and k heads of every token by +angle (dir = 1) or -angle (dir = -1).
// The transpose of a rotation is the rotation by the opposite angle, so the
// backward is the same loop with sin negated.
static void rope_rotate(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H,
                        int KV, int hd, float dir) {
    int half = hd / 2, row = (H + 2 * KV) * hd, heads = H + KV;  // q and k heads
#pragma omp parallel for schedule(static)
    for (int t = 0; t < B * S; t++) {
        const float *c = cos_t + (size_t)(t % S) * half, *s = sin_t + (size_t)(t % S) * half;
        for (int h = 0; h < heads; h++) {
            float *x1 = qkv + (size_t)t * row + (size_t)h * hd, *x2 = x1 + half;
            for (int i = 0; i < half; i++) {
                float a = x1[i], b = x2[i], sn = dir * s[i];
                x1[i] = a * c[i] - b * sn;
                x2[i] = b * c[i] + a * sn;
            }
        }
    }
}

void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                  int hd) {
    rope_rotate(qkv, cos_t, sin_t, B, S, H, KV, hd, 1.0f);
}

void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int S, int H,
                   int KV, int hd) {
    rope_rotate(dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f);
}

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
                        float alpha = expf(mb[i0 + r] - mnew), sum = 0.0f;
                        for (int c = 0; c < nk; c++) {
                            srow[c] = expf(srow[c] - mnew);
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
                                prow[c] = (masked && kpos[j0 + c] > qp) ? 0.0f : expf(prow[c] - lse_r);
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

// ----------------------------------------------------------------------- SwiGLU

void swiglu_forward(float *out, const float *gu, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        float *o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F) {
    // silu(g) = g s(g);  silu'(g) = s(g) (1 + g (1 - s(g)))
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            float s = 1.0f / (1.0f + expf(-g[i]));
            du[i] = d[i] * g[i] * s;
            dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        }
    }
}

// ---------------------------------------------------------------- cross-entropy

double cross_entropy_forward_backward(float *logits, const int32_t *targets, int N, int V,
                                      float grad_scale) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        float mx = x[0];
        for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        float target_logit = x[targets[n]], sum = 0.0f;
        for (int j = 0; j < V; j++) {
            x[j] = expf(x[j] - mx);
            sum += x[j];
        }
        // -log softmax[target] = log(sum) + max - x_target
        loss += (double)logf(sum) + (double)mx - (double)target_logit;
        float inv = grad_scale / sum;
        for (int j = 0; j < V; j++) x[j] *= inv;
        x[targets[n]] -= grad_scale;
    }
    return loss;
}

double cross_entropy_forward(const float *logits, const int32_t *targets, int N, int V) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float mx = x[0], sum = 0.0f;
        for (int j = 1; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < V; j++) sum += expf(x[j] - mx);
        loss += (double)logf(sum) + (double)mx - (double)x[targets[n]];
    }
    return loss;
}

void ce_shard_max(const float *logits, int N, int Vl, int valid, float *rowmax) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float mx = -INFINITY;
        for (int j = 0; j < valid; j++) mx = x[j] > mx ? x[j] : mx;
        rowmax[n] = mx;
    }
}

void ce_shard_sums(const float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                   const float *rowmax, float *sumexp, float *tlogit) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vl;
        float sum = 0.0f;
        for (int j = 0; j < valid; j++) sum += expf(x[j] - rowmax[n]);
        sumexp[n] = sum;
        int t = targets[n] - v0;
        tlogit[n] = t >= 0 && t < valid ? x[t] : 0.0f;
    }
}

double ce_shard_finish(float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                       const float *rowmax, const float *sumexp, const float *tlogit,
                       float grad_scale, int want_grads) {
    double loss = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        loss += (double)logf(sumexp[n]) + (double)rowmax[n] - (double)tlogit[n];
        if (!want_grads) continue;
        float *x = logits + (size_t)n * Vl, inv = grad_scale / sumexp[n];
        for (int j = 0; j < valid; j++) x[j] = expf(x[j] - rowmax[n]) * inv;
        for (int j = valid; j < Vl; j++) x[j] = 0.0f;
        int t = targets[n] - v0;
        if (t >= 0 && t < valid) x[t] -= grad_scale;
    }
    return loss;
}

// -------------------------------------------------------------------- optimizer

double sum_squares(const float *x, size_t n) {
    double s = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

void scale_inplace(float *x, size_t n, float s) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t) {
    // Bias corrections in double, as PyTorch computes them in Python floats.
    const float bc1 = (float)(1.0 - pow(beta1, t));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
    const float step_size = lr / bc1;
    const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        param[i] = param[i] * decay - step_size * mi / denom;
    }
}
