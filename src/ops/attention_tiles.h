// ops/attention_tiles.h — what the CPU attention's two tile engines share: the
// tile sizes and per-thread scratch, the causal bookkeeping of positions, and the
// online softmax of a tile (ops/attention_cpu.c: fp32 products, or bf16 ones on
// oneMKL; ops/attention_amx_cpu.c: bf16 products on AMX). Static functions: each
// of the two files compiles its own copy, with its own flags (the AMX file with
// 512-bit vectors, the Makefile; the fp32 kernels' sums keep their vector width).
#ifndef FEMTOTRON_ATTENTION_TILES_H
#define FEMTOTRON_ATTENTION_TILES_H

#include <math.h>
#include <stddef.h>

#include "ops/bf16.h"
#include "ops/fast_exp.h"

#define ATT_T 32    // query rows per tile
#define ATT_KC 128  // keys per chunk (the online softmax rescales once per chunk)

// Per thread, forward: kt (hd, KC), vc (KC, hd), qc (T, hd), sc (T, KC);
// backward: kt, vt (hd, KC), kc, dkc, dvc (KC, hd), qc, doc (T, hd), p, ds (T, KC);
// then, after att_fp32_floats, the bf16 copies of bf16 products (Tiles16).
static inline size_t att_fp32_floats(int hd) {
    return 5 * (size_t)hd * ATT_KC + 2 * (size_t)ATT_T * hd + 2 * (size_t)ATT_T * ATT_KC;
}
// bf16 values: k, v (as kt and vt or vc), kc (hd x KC each), q, dO (T x hd), P, dS
// (T x KC), in floats (two a float), rounded up to 16 floats
static inline size_t att_bf16_floats(int hd) {
    const size_t halves = 3 * (size_t)hd * ATT_KC + 2 * (size_t)ATT_T * hd + 2 * (size_t)ATT_T * ATT_KC;
    return (halves / 2 + 15) / 16 * 16;
}
static inline size_t att_thread_floats(int hd) { return att_fp32_floats(hd) + att_bf16_floats(hd); }

// How many of the positions pos[0..n) are <= p: pos increases, so they are the
// first ones. With key positions, the keys a query at position p sees.
static inline int count_at_most(const int *pos, int n, int p) {
    int lo = 0, hi = n;  // pos[0..lo) <= p < pos[hi..n)
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (pos[mid] <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// The first query tile (a multiple of ATT_T) with a query that sees key position kp:
// the tile of the first query not before kp.
static inline int first_tile_seeing(const int *qpos, int Sq, int kp) {
    return count_at_most(qpos, Sq, kp - 1) / ATT_T * ATT_T;
}

// dst(rows, ld) += src(rows, hd)
static inline void add_rows(float *dst, int ld, const float *src, int rows, int hd) {
    for (int r = 0; r < rows; r++) {
        float *drow = dst + (size_t)r * ld;
        const float *srow = src + (size_t)r * hd;
        for (int d = 0; d < hd; d++) drow[d] += srow[d];
    }
}

// Where (sequence b, kv head g)'s first key and value sit in a block's k|v rows
// (ldkv apart; its keys at koff, its values at voff past that).
static inline size_t kv_rows(int b, int g, int Sk, int ldkv, int hd) { return (size_t)b * Sk * ldkv + (size_t)g * hd; }

// What one (sequence b, query head h) of a block's forward reads and writes: its
// queries (rows ldq apart), output rows (H hd apart), running maxima and sums (Sq
// each).
typedef struct {
    const float *q;
    float *o, *m, *l;
} HeadOut;
static inline HeadOut head_out(const float *q, int ldq, float *o, float *m, float *l, int b, int h, int Sq, int H,
                               int hd) {
    HeadOut r;
    r.q = q + (size_t)b * Sq * ldq + (size_t)h * hd;
    r.o = o + (size_t)b * Sq * H * hd + (size_t)h * hd;
    r.m = m + ((size_t)b * H + h) * Sq;
    r.l = l + ((size_t)b * H + h) * Sq;
    return r;
}

// What one (sequence b, query head h) of a block's backward reads and writes: its
// queries and their gradient (rows ldq apart), its output gradient (rows H hd
// apart), its log-sum-exps and rowdots (Sq each).
typedef struct {
    const float *q, *dout, *lse, *rowdot;
    float *dq;
} HeadRows;
static inline HeadRows head_rows(const float *q, float *dq, int ldq, const float *dout, const float *lse,
                                 const float *rowdot, int b, int h, int Sq, int H, int hd) {
    HeadRows r;
    r.q = q + (size_t)b * Sq * ldq + (size_t)h * hd;
    r.dq = dq + (size_t)b * Sq * ldq + (size_t)h * hd;
    r.dout = dout + (size_t)b * Sq * H * hd + (size_t)h * hd;
    r.lse = lse + ((size_t)b * H + h) * Sq;
    r.rowdot = rowdot + ((size_t)b * H + h) * Sq;
    return r;
}

static inline float bf16_rounded(float x) { return bf16_to_f32(bf16_from_f32(x)); }

// The online softmax of one query tile against one chunk of keys (forward). On
// entry sc(mq, ld) holds the scaled scores of the tile's first nkt keys; on
// exit their weights exp(s - m), 0 where masked (rounded to bf16 under bf16
// products: P V and l read the rounded P), with the rows' running max m(mq) and sum
// l(mq) updated and the output rows o(mq, hd) (ldo apart) rescaled to the new max.
// Returns 1 when every row had accumulated nothing before (their output rows are
// still attention_block_init's zeros: the product after may overwrite them).
//
// A row whose running max is still -inf has accumulated nothing: its output row is
// the zero of attention_block_init, so it needs no rescaling, and a tile of such
// rows (the first chunk a tile sees) lets the product after overwrite instead of
// add. The rescale read and wrote a strided output row per query and chunk, and was
// a third of the forward's time outside its products.
static inline int online_softmax_tile(float *sc, int ld, float *o, int ldo, float *m, float *l, const int *qpos,
                                      const int *kpos, int mq, int nkt, int hd, int r16) {
    int fresh = 1;  // every row of the tile has accumulated nothing yet
    for (int r = 0; r < mq; r++) {
        float *srow = sc + (size_t)r * ld, rmax = -INFINITY;
        const int empty = m[r] == -INFINITY;
        fresh &= empty;
        const int nv = count_at_most(kpos, nkt, qpos[r]);
        for (int c = nv; c < nkt; c++) srow[c] = 0.0f;  // masked: no weight
        if (nv == 0) continue;  // nothing visible in this chunk for this row
        // (simd reductions: a plain loop would take the max, and add the
        // sum below, one element at a time, in order)
#pragma omp simd reduction(max : rmax)
        for (int c = 0; c < nv; c++) rmax = srow[c] > rmax ? srow[c] : rmax;
        // Online softmax: rescale what was accumulated under the old max.
        float *orow = o + (size_t)r * ldo;
        float mnew = m[r] > rmax ? m[r] : rmax;
        float alpha = fast_expf(m[r] - mnew), sum = 0.0f;
        if (r16) {  // bf16: P V and l read the rounded P
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < nv; c++) {
                srow[c] = bf16_rounded(fast_expf(srow[c] - mnew));
                sum += srow[c];
            }
        } else {  // (a loop of its own: its vector width, so its sums' order, as without bf16)
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < nv; c++) {
                srow[c] = fast_expf(srow[c] - mnew);
                sum += srow[c];
            }
        }
        l[r] = l[r] * alpha + sum;
        m[r] = mnew;
        if (!empty && alpha != 1.0f)
            for (int d = 0; d < hd; d++) orow[d] *= alpha;
    }
    return fresh;
}

// The bf16 attention on AMX (ops/attention_amx_cpu.c), block by block as
// attention_block_forward and attention_block_backward (ops.h), for the keys up to
// kend (those any query of the block sees); called by them when
// cpu_attention_amx(hd) (ops/matmul_bf16_cpu.h).
void attention_block_forward_amx(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv,
                                 int koff, int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H,
                                 int KV, int hd, int kend, float *scratch);
void attention_block_backward_amx(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff,
                                  int voff, const float *dout, const float *lse, const float *rowdot, const int *qpos,
                                  const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd, int kend,
                                  float *scratch);

#endif
