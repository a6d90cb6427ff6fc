// ops/attention_amx_cpu.c — the CPU attention's bf16 tile products on Intel AMX
// (ops/amx_tiles.h), called by attention_block_forward and attention_block_backward
// (ops/attention_cpu.c) when cpu_attention_amx(hd).
//
// The same tiles as ops/attention_cpu.c (ATT_T queries against chunks of ATT_KC
// keys, the causal bookkeeping and the online softmax of ops/attention_tiles.h)
// with the same roundings (Q, K, V, dO, P and dS to bf16; P rounded before l sums
// it; dS from the fp32 P), but the products run as AMX tile instructions on
// operands packed here: keys and values once a chunk, in the VNNI pairs AMX reads,
// for every query tile (and, backward, every head of the group) of it. Everything
// a product reads is zero-padded to multiples of 32 (the query tile's rows past the
// sequence, keys past the chunk or past what the tile sees), so the padding adds
// zeros; the scores computed for padded keys are never read.
//
// Why. On oneMKL's bf16 product each of these small products (32 x 128 x 64 and the
// like) packed both operands and set its kernel up again: half of the attention's
// time on a gpt2-sized layer (bench/tools/attention_alone.c under perf).
// The Makefile compiles this file with 512-bit vectors (its element-wise passes
// between the products are most of its time; the fp32 kernels keep 256-bit ones,
// and with them their sums' order).
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ops/amx_tiles.h"
#include "ops/attention_tiles.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"
#include "util.h"

// cpu_attention_use_amx(0) runs the products on oneMKL's bf16 product as before
// (tests and bench/tools/attention_alone.c compare the two).
static int g_attention_amx = 1;

void cpu_attention_use_amx(int on) { g_attention_amx = on; }

int cpu_attention_amx(int hd) { return ops_matmul_bf16() && g_attention_amx && hd % 32 == 0 && amx_usable(); }

_Static_assert(ATT_T == 32 && ATT_KC % 32 == 0, "AMX products take operands in multiples of 32; dK's and dV's "
                                                "sum over a query tile is one 32-deep step");

static int round_up_32(int n) { return (n + 31) / 32 * 32; }

// The backward's operands, carved from a thread's attention scratch
// (att_thread_floats, which holds them for head dimensions of 32 and more).
typedef struct {
    float *s, *ds;          // (T, KC): Q K^T; dP = dO V^T
    float *dk, *dv;         // (KC, hd): the chunk's key and value gradients
    float *acc;             // (T, hd): a tile's dS K before it is added to dQ
    uint32_t *kt, *vt;      // (hd/2, KC): K^T and V^T in VNNI pairs (along hd)
    uint32_t *kv;           // (KC/2, hd): K in VNNI pairs (along keys)
    uint16_t *q, *dout;     // (T, hd): the query tile and its output gradient, bf16
    uint32_t *qp, *doutp;   // (T/2, hd): both in VNNI pairs (along queries)
    uint16_t *dsr;          // (T, KC): dS rounded
    uint16_t *pt, *dst;     // (KC, T): P and dS rounded, transposed
    uint32_t *zp, *zds;     // (T/2, KC): the same in pairs along queries, on the way there
} AmxTiles;

static AmxTiles amx_tiles(float *thread_scratch, int hd) {
    AmxTiles t;
    float *at = thread_scratch;  // every part a multiple of 16 floats: 64-byte aligned as the scratch
    const size_t TK = (size_t)ATT_T * ATT_KC, KH = (size_t)ATT_KC * hd, TH = (size_t)ATT_T * hd;
    t.s = at, at += TK;
    t.ds = at, at += TK;
    t.dk = at, at += KH;
    t.dv = at, at += KH;
    t.acc = at, at += TH;
    t.kt = (uint32_t *)at, at += KH / 2;
    t.vt = (uint32_t *)at, at += KH / 2;
    t.kv = (uint32_t *)at, at += KH / 2;
    t.q = (uint16_t *)at, at += TH / 2;
    t.dout = (uint16_t *)at, at += TH / 2;
    t.qp = (uint32_t *)at, at += TH / 2;
    t.doutp = (uint32_t *)at, at += TH / 2;
    t.dsr = (uint16_t *)at, at += TK / 2;
    t.pt = (uint16_t *)at, at += TK / 2;
    t.dst = (uint16_t *)at, at += TK / 2;
    t.zp = (uint32_t *)at, at += TK / 2;
    t.zds = (uint32_t *)at, at += TK / 2;
    if ((size_t)(at - thread_scratch) > att_thread_floats(hd))  // 4.5 TK + 3.5 KH + 3 TH against 6.5 KH + 3 TK + 3 TH
        die("attention: the AMX operands need %zu floats a thread, the scratch has %zu",
            (size_t)(at - thread_scratch), att_thread_floats(hd));
    return t;
}

// s(mq, ld) *= scale on the first n columns (AMX has no alpha).
static void scale_tile(float *s, int ld, int mq, int n, float scale) {
    for (int r = 0; r < mq; r++)
        for (int c = 0; c < n; c++) s[(size_t)r * ld + c] *= scale;
}

// dst(T, ld) bf16: rows r < mq hold x(T, ld)'s first n columns rounded and zeros up
// to w; the rows after, zeros up to w.
static void round_tile(uint16_t *dst, const float *x, int ld, int mq, int n, int w) {
    bf16_round_rows(dst, ld, x, ld, mq, n);
    for (int r = 0; r < ATT_T; r++) {
        const int k = r < mq ? n : 0;
        memset(dst + (size_t)r * ld + k, 0, sizeof(uint16_t) * (size_t)(w - k));
    }
}

// Backward, one pass over a tile's rows in pairs (r, r + 1), for the first w keys:
// P = exp(s scale - lse) and dS = P (dP - rowdot) scale from the fp32 P, 0 where
// masked, past nkt or past the mq rows of the tile; written as dS rounded
// dsr(T, KC) (dQ's operand) and as both rounded in pairs along queries, zp and
// zds(T/2, KC) (on their way to dK's and dV's transposed operands). s holds Q K^T,
// ds dP = dO V^T.
static void probs_and_gradient(AmxTiles *t, const float *lse, const float *rowdot, const int *qpos, const int *kpos,
                               int mq, int nkt, int w, float scale) {
    float p[2][ATT_KC], d[2][ATT_KC];  // the pair's fp32 P and dS
    for (int r = 0; r < ATT_T; r += 2) {
        for (int i = 0; i < 2; i++) {
            const int row = r + i, nv = row < mq ? count_at_most(kpos, nkt, qpos[row]) : 0;
            const float *srow = t->s + (size_t)row * ATT_KC, *dprow = t->ds + (size_t)row * ATT_KC;
            const float lse_r = nv ? lse[row] : 0.0f, rd = nv ? rowdot[row] : 0.0f;
            uint16_t *dsrow = t->dsr + (size_t)row * ATT_KC;
            for (int c = 0; c < nv; c++) {
                p[i][c] = fast_expf(srow[c] * scale - lse_r);
                d[i][c] = p[i][c] * (dprow[c] - rd) * scale;
                dsrow[c] = bf16_from_f32(d[i][c]);
            }
            for (int c = nv; c < w; c++) p[i][c] = d[i][c] = 0.0f, dsrow[c] = 0;
        }
        uint32_t *zp = t->zp + (size_t)(r / 2) * ATT_KC, *zds = t->zds + (size_t)(r / 2) * ATT_KC;
        for (int c = 0; c < w; c++) zp[c] = amx_pair(p[0][c], p[1][c]), zds[c] = amx_pair(d[0][c], d[1][c]);
    }
}

// The first mq rows of acc(T, hd) into y(mq, hd) (rows ldy apart): written, or added.
static void add_tile(float *y, int ldy, const float *acc, int mq, int hd, int overwrite) {
    for (int r = 0; r < mq; r++) {
        float *yr = y + (size_t)r * ldy;
        const float *ar = acc + (size_t)r * hd;
        if (overwrite)
            memcpy(yr, ar, sizeof(float) * (size_t)hd);
        else
            for (int d = 0; d < hd; d++) yr[d] += ar[d];
    }
}

// The forward's operands, for chunks of kc keys: s(T, kc) fp32 scores, then P
// (and before them, as many floats as K's rounded rows (kc, hd) take, on their way
// to kt);
// acc(T, hd) P V; kt(hd/2, kc) K^T and kv(kc/2, hd) V in VNNI pairs; q(T, hd) and
// p(T, kc) bf16. kc: the longest chunk (512, 256 or the backward's ATT_KC) whose
// operands fit in the thread's scratch. Longer than the backward's: the forward
// keeps no per-key sums, and every chunk costs each query tile its rounding, its
// rescaled output and its output added (one chunk at sequence 512: the output is
// written once).
typedef struct {
    int kc;
    float *s, *acc;
    uint32_t *kt, *kv;
    uint16_t *q, *p;
} AmxForward;

static AmxForward amx_forward_tiles(float *thread_scratch, int hd) {
    AmxForward f;
    const size_t TH = (size_t)ATT_T * hd;
    for (f.kc = 512; f.kc > ATT_KC; f.kc /= 2) {
        const size_t TK = (size_t)ATT_T * f.kc, KH = (size_t)f.kc * hd, S = TK > KH / 2 ? TK : KH / 2;
        if (S + TH + KH + TH / 2 + TK / 2 <= att_thread_floats(hd)) break;
    }
    const size_t TK = (size_t)ATT_T * f.kc, KH = (size_t)f.kc * hd;
    float *at = thread_scratch;  // every part a multiple of 16 floats
    f.s = at, at += TK > KH / 2 ? TK : KH / 2;
    f.acc = at, at += TH;
    f.kt = (uint32_t *)at, at += KH / 2;
    f.kv = (uint32_t *)at, at += KH / 2;
    f.q = (uint16_t *)at, at += TH / 2;
    f.p = (uint16_t *)at, at += TK / 2;
    if ((size_t)(at - thread_scratch) > att_thread_floats(hd))
        die("attention: the AMX forward's operands need %zu floats a thread, the scratch has %zu",
            (size_t)(at - thread_scratch), att_thread_floats(hd));
    return f;
}

void attention_block_forward_amx(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv,
                                 int koff, int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H,
                                 int KV, int hd, int kend, float *scratch) {
    const int group = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const AmxForward t = amx_forward_tiles(scratch + (size_t)omp_get_thread_num() * att_thread_floats(hd), hd);
            const int kc = t.kc, g = h / group;
            const HeadOut ho = head_out(q, ldq, o, m, l, b, h, Sq, H, hd);
            const size_t kvb = kv_rows(b, g, Sk, ldkv, hd);
            const float *qb = ho.q, *kb = kv + kvb + koff, *vb = kv + kvb + voff;
            float *ob = ho.o, *mb = ho.m, *lb = ho.l;
            for (int j0 = 0; j0 < kend; j0 += kc) {
                const int nk = j0 + kc < kend ? kc : kend - j0, n32 = round_up_32(nk);
                // (s is free until the first tile: the rounded rows of K pass through it)
                amx_pack_columns(t.kt, kc, kb + (size_t)j0 * ldkv, ldkv, nk, n32, hd, (uint16_t *)t.s);  // K^T
                amx_pack_rows(t.kv, vb + (size_t)j0 * ldkv, ldkv, nk, n32, hd);              // V
                for (int i0 = first_tile_seeing(qpos, Sq, kpos[j0]); i0 < Sq; i0 += ATT_T) {
                    const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                    const int nkt = count_at_most(kpos + j0, nk, qpos[i1 - 1]), w = round_up_32(nkt);
                    amx_round_rows(t.q, qb + (size_t)i0 * ldq, ldq, mq, ATT_T, hd);
                    amx_gemm(t.s, kc, t.q, hd, t.kt, kc, ATT_T, w, hd, 0);  // Q K^T
                    scale_tile(t.s, kc, mq, nkt, scale);
                    const int fresh = online_softmax_tile(t.s, kc, ob + (size_t)i0 * ldo, ldo, mb + i0, lb + i0,
                                                          qpos + i0, kpos + j0, mq, nkt, hd, 1);
                    round_tile(t.p, t.s, kc, mq, nkt, w);  // P as rounded by the softmax (exact in bf16)
                    amx_gemm(t.acc, hd, t.p, kc, t.kv, hd, ATT_T, hd, w, 0);  // P V
                    add_tile(ob + (size_t)i0 * ldo, ldo, t.acc, mq, hd, fresh);
                }
            }
            amx_done();
        }
}

void attention_block_backward_amx(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv,
                                         int koff, int voff, const float *dout, const float *lse,
                                         const float *rowdot, const int *qpos, const int *kpos, int B, int Sq,
                                         int Sk, int H, int KV, int hd, int kend, float *scratch) {
    const int group = H / KV, ldo = H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            AmxTiles t = amx_tiles(scratch + (size_t)omp_get_thread_num() * att_thread_floats(hd), hd);
            const size_t kvb = kv_rows(b, g, Sk, ldkv, hd);
            const float *kb = kv + kvb + koff, *vb = kv + kvb + voff;
            float *dkb = dkv + kvb + koff, *dvb = dkv + kvb + voff;
            for (int j0 = 0; j0 < kend; j0 += ATT_KC) {
                const int nk = j0 + ATT_KC < kend ? ATT_KC : kend - j0, n32 = round_up_32(nk);
                // (dk is free until zeroed below: the packs' rounded rows pass through it)
                amx_pack_columns(t.kt, ATT_KC, kb + (size_t)j0 * ldkv, ldkv, nk, n32, hd, (uint16_t *)t.dk);  // K^T
                amx_pack_columns(t.vt, ATT_KC, vb + (size_t)j0 * ldkv, ldkv, nk, n32, hd, (uint16_t *)t.dk);  // V^T
                amx_pack_rows(t.kv, kb + (size_t)j0 * ldkv, ldkv, nk, n32, hd);                               // K
                memset(t.dk, 0, sizeof(float) * (size_t)n32 * hd);
                memset(t.dv, 0, sizeof(float) * (size_t)n32 * hd);
                for (int h = g * group; h < (g + 1) * group; h++) {
                    const HeadRows hr = head_rows(q, dq, ldq, dout, lse, rowdot, b, h, Sq, H, hd);
                    const float *qb = hr.q, *dob = hr.dout, *lb = hr.lse, *rb = hr.rowdot;
                    float *dqb = hr.dq;
                    for (int i0 = first_tile_seeing(qpos, Sq, kpos[j0]); i0 < Sq; i0 += ATT_T) {
                        const int i1 = i0 + ATT_T < Sq ? i0 + ATT_T : Sq, mq = i1 - i0;
                        const int nkt = count_at_most(kpos + j0, nk, qpos[i1 - 1]), w = round_up_32(nkt);
                        amx_round_rows(t.q, qb + (size_t)i0 * ldq, ldq, mq, ATT_T, hd);
                        amx_round_rows(t.dout, dob + (size_t)i0 * ldo, ldo, mq, ATT_T, hd);
                        amx_gemm(t.s, ATT_KC, t.q, hd, t.kt, ATT_KC, ATT_T, w, hd, 0);      // Q K^T
                        amx_gemm(t.ds, ATT_KC, t.dout, hd, t.vt, ATT_KC, ATT_T, w, hd, 0);  // dP = dO V^T
                        probs_and_gradient(&t, lb + i0, rb + i0, qpos + i0, kpos + j0, mq, nkt, w, scale);
                        amx_gemm(t.acc, hd, t.dsr, ATT_KC, t.kv, hd, ATT_T, hd, w, 0);  // dQ = dS K
                        add_tile(dqb + (size_t)i0 * ldq, ldq, t.acc, mq, hd, 0);
                        // dK += dS^T Q, dV += P^T dO: the query tile's 32 rows are the
                        // sum, so Q and dO pair along queries and dS, P are transposed
                        // (their query pairs, as 32-bit words).
                        amx_transpose_words((uint32_t *)t.pt, ATT_T / 2, t.zp, ATT_KC, ATT_T / 2, w);
                        amx_transpose_words((uint32_t *)t.dst, ATT_T / 2, t.zds, ATT_KC, ATT_T / 2, w);
                        amx_pair_rows16(t.qp, t.q, hd, ATT_T, hd);
                        amx_pair_rows16(t.doutp, t.dout, hd, ATT_T, hd);
                        amx_gemm(t.dk, hd, t.dst, ATT_T, t.qp, hd, w, hd, ATT_T, 1);
                        amx_gemm(t.dv, hd, t.pt, ATT_T, t.doutp, hd, w, hd, ATT_T, 1);
                    }
                }
                add_rows(dkb + (size_t)j0 * ldkv, ldkv, t.dk, nk, hd);
                add_rows(dvb + (size_t)j0 * ldkv, ldkv, t.dv, nk, hd);
            }
            amx_done();
        }
}

