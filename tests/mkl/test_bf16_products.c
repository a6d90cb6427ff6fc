// tests/mkl/test_bf16_products.c — the CPU's bf16 products (training.precision =
// bf16 in the oneMKL build: ops/matmul_bf16_cpu.c, ops/attention_cpu.c), against
// naive double loops on operands rounded to bf16 by bf16_from_f32 (nearest, ties
// to even): every matmul_* of ops.h with bf16 on, the kept copy of the weights and
// its generations, and the attention's forward and backward. Each product must be
// the rounded operands' product up to fp32 summation (relative 1e-5 of the sum of
// |terms|), and each must be farther than that from the unrounded product, so a
// product that skipped the rounding fails. Built and run by
// tests/shell/test_blas_mkl.sh (make BLAS=mkl build-mkl/tests/test_bf16_products).
#define _POSIX_C_SOURCE 200809L  // fork, waitpid
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "ops/bf16.h"
#include "ops/cuda_workspace.h"
#include "ops/matmul_bf16_cpu.h"
#include "ops/ops.h"

static uint64_t rng = 88172645463325252ull;
static float unif(float lo, float hi) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * 0x1.0p-53);
}
static float *fnew(size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = unif(lo, hi);
    return x;
}
static double r16(float x) { return bf16_to_f32(bf16_from_f32(x)); }

// out(N, O) = sum_k a(N, K)[n, k] b(O, K)[o, k] (b as a weight, rows O), on values
// rounded to bf16 (round) or not; mag gets the sums of |terms| for the tolerance.
static void naive_abt(double *out, double *mag, const float *a, const float *b, int N, int K, int O, int round) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double x = round ? r16(a[(size_t)n * K + k]) : a[(size_t)n * K + k];
                double y = round ? r16(b[(size_t)o * K + k]) : b[(size_t)o * K + k];
                s += x * y, m += fabs(x * y);
            }
            out[(size_t)n * O + o] = s, mag[(size_t)n * O + o] = m;
        }
}

// Worst |got - want| / (mag + tiny) over n values, got offset by base (a += target).
static double worst(const float *got, const double *want, const double *mag, const float *base, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - (base ? base[i] : 0) - want[i]) / (mag[i] + 1e-30);
        if (e > w) w = e;
    }
    return w;
}

// x^T as a new (cols, rows) array
static float *transposed(const float *x, int rows, int cols) {
    float *t = malloc(sizeof(float) * (size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
    return t;
}

static const double TOL = 1e-5;

static void test_products(void) {
    const int N = 37, K = 70, O = 45;  // odd sizes: no kernel's blocking divides them
    float *in = fnew((size_t)N * K, -1, 1), *w = fnew((size_t)O * K, -1, 1), *out = fnew((size_t)N * O, 0, 0);
    double *want = malloc(sizeof(double) * N * O), *mag = malloc(sizeof(double) * N * O);
    double *raw = malloc(sizeof(double) * N * O), *rawmag = malloc(sizeof(double) * N * O);
    naive_abt(want, mag, in, w, N, K, O, 1);
    naive_abt(raw, rawmag, in, w, N, K, O, 0);
    matmul_forward(out, in, w, N, K, O);
    const double e = worst(out, want, mag, NULL, (size_t)N * O), eraw = worst(out, raw, rawmag, NULL, (size_t)N * O);
    CHECK(e < TOL && eraw > 10 * TOL,
          "matmul_forward (bf16): the rounded operands' product (err %.1e), not the unrounded one (%.1e away)", e,
          eraw);

    // from bf16, bf16 output
    uint16_t *in16 = malloc(sizeof(uint16_t) * N * K), *out16 = malloc(sizeof(uint16_t) * N * O);
    round_to_bf16(in16, in, (size_t)N * K);
    float *scratch = fnew((size_t)N * (K > O ? K : O), 0, 0);
    matmul_forward_from_bf16(out, in16, scratch, w, N, K, O);
    CHECK(worst(out, want, mag, NULL, (size_t)N * O) < TOL, "matmul_forward_from_bf16 (bf16): the same product");
    matmul_forward_bf16(out16, out, in16, scratch, w, N, K, O);  // out: the fp32 product, then rounded
    int ok = worst(out, want, mag, NULL, (size_t)N * O) < TOL;
    for (int i = 0; i < N * O; i++) ok &= out16[i] == bf16_from_f32(out[i]);
    CHECK(ok, "matmul_forward_bf16 (bf16): the product rounded to bf16 as written");
    float *add = fnew((size_t)N * O, -1, 1), *out2 = fnew((size_t)N * O, 0, 0);
    matmul_forward_add(out2, add, in, w, N, K, O);
    CHECK(worst(out2, want, mag, add, (size_t)N * O) < TOL, "matmul_forward_add (bf16): the product + the residual");

    // backward: dW += dout^T in ; din = dout W
    float *dout = fnew((size_t)N * O, -1, 1), *dw0 = fnew((size_t)O * K, -1, 1), *dw = malloc(sizeof(float) * O * K);
    float *din = fnew((size_t)N * K, 0, 0);
    memcpy(dw, dw0, sizeof(float) * O * K);
    matmul_backward(din, dw, dout, in, w, N, K, O, 0);
    double *wdw = malloc(sizeof(double) * O * K), *mdw = malloc(sizeof(double) * O * K);
    double *wdi = malloc(sizeof(double) * N * K), *mdi = malloc(sizeof(double) * N * K);
    float *doutT = transposed(dout, N, O), *inT = transposed(in, N, K), *wT = transposed(w, O, K);
    naive_abt(wdw, mdw, doutT, inT, O, N, K, 1);  // dW[o, k] = sum_n dout[n, o] in[n, k]
    naive_abt(wdi, mdi, dout, wT, N, O, K, 1);    // din[n, k] = sum_o dout[n, o] w[o, k]
    const double ew = worst(dw, wdw, mdw, dw0, (size_t)O * K), ei = worst(din, wdi, mdi, NULL, (size_t)N * K);
    double *rdw = malloc(sizeof(double) * O * K), *rmdw = malloc(sizeof(double) * O * K);
    naive_abt(rdw, rmdw, doutT, inT, O, N, K, 0);
    CHECK(ew < TOL && ei < TOL && worst(dw, rdw, rmdw, dw0, (size_t)O * K) > 10 * TOL,
          "matmul_backward (bf16): dW += rounded dout^T in (err %.1e, accumulated), din = rounded dout W (%.1e)", ew,
          ei);
    // the same with dout and in kept as bf16, and din accumulated
    uint16_t *dout16 = malloc(sizeof(uint16_t) * N * O);
    round_to_bf16(dout16, dout, (size_t)N * O);
    memcpy(dw, dw0, sizeof(float) * O * K);
    float *din0 = fnew((size_t)N * K, -1, 1);
    memcpy(din, din0, sizeof(float) * N * K);
    matmul_backward_bf16(din, dw, dout16, scratch, in16, scratch, w, N, K, O, 1);
    CHECK(worst(dw, wdw, mdw, dw0, (size_t)O * K) < TOL && worst(din, wdi, mdi, din0, (size_t)N * K) < TOL,
          "matmul_backward_bf16 (bf16): dW and din (+)= from the kept bf16 operands");
    memcpy(dw, dw0, sizeof(float) * O * K);
    matmul_backward_from_bf16(din, dw, dout, in16, scratch, w, N, K, O, 0);
    CHECK(worst(dw, wdw, mdw, dw0, (size_t)O * K) < TOL && worst(din, wdi, mdi, NULL, (size_t)N * K) < TOL,
          "matmul_backward_from_bf16 (bf16): dW and din");
    // a strided output gradient (matmul_backward_ld): dout's rows 2 O apart
    float *wide = fnew((size_t)N * 2 * O, -9, 9);
    for (int n = 0; n < N; n++) memcpy(wide + (size_t)n * 2 * O, dout + (size_t)n * O, sizeof(float) * O);
    memcpy(dw, dw0, sizeof(float) * O * K);
    matmul_backward_ld(din, dw, wide, 2 * O, in, w, N, K, O, 0);
    CHECK(worst(dw, wdw, mdw, dw0, (size_t)O * K) < TOL && worst(din, wdi, mdi, NULL, (size_t)N * K) < TOL,
          "matmul_backward_ld (bf16): dout read ld apart, rounded into a contiguous copy");

    // The kept copy: read until the generation changes, then rounded afresh.
    uint16_t *copy = malloc(sizeof(uint16_t) * O * K);
    ops_keep_bf16_weights(w, (size_t)O * K, copy);
    ops_bf16_weights_changed();
    matmul_forward(out, in, w, N, K, O);
    int same = 1;
    for (int i = 0; i < O * K; i++) same &= copy[i] == bf16_from_f32(w[i]);
    CHECK(same && worst(out, want, mag, NULL, (size_t)N * O) < TOL,
          "a weight in the kept arena: its bf16 copy rounded on first use, the same product");
    const float w0 = w[0];
    for (int i = 0; i < O * K; i++) w[i] = -w[i];  // an update the copy has not seen
    matmul_forward(out, in, w, N, K, O);
    CHECK(worst(out, want, mag, NULL, (size_t)N * O) < TOL, "within a generation the product reads the copy");
    ops_bf16_weights_changed();
    matmul_forward(out, in, w, N, K, O);
    double *neg = malloc(sizeof(double) * N * O);
    for (int i = 0; i < N * O; i++) neg[i] = -want[i];
    CHECK(worst(out, neg, mag, NULL, (size_t)N * O) < TOL && copy[0] == bf16_from_f32(-w0),
          "after ops_bf16_weights_changed the weight is rounded again");
    // AdamW writes the copy of what it updates: the next generation reads it as
    // written, without rounding the weight again (so values changed after the update,
    // which never happens in training, are not seen: that is how the test sees it).
    float *g = fnew((size_t)O * K, -1, 1), *mom = fnew((size_t)O * K, 0, 0), *var = fnew((size_t)O * K, 0, 0);
    adamw_update(w, g, mom, var, (size_t)O * K, 1.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f, 1);
    int written = 1;
    for (int i = 0; i < O * K; i++) written &= copy[i] == bf16_from_f32(w[i]);
    ops_bf16_weights_changed();
    naive_abt(want, mag, in, w, N, K, O, 1);  // the updated weight's product
    for (int i = 0; i < O * K; i++) w[i] = 3 * w[i];
    matmul_forward(out, in, w, N, K, O);
    CHECK(written && worst(out, want, mag, NULL, (size_t)N * O) < TOL,
          "adamw_update writes the kept copy (the updated weights rounded), and the next step reads it unrounded");
    ops_bf16_weights_changed();  // a generation AdamW did not write: rounded when read
    matmul_forward(out, in, w, N, K, O);
    naive_abt(want, mag, in, w, N, K, O, 1);
    CHECK(worst(out, want, mag, NULL, (size_t)N * O) < TOL, "a generation without AdamW's copy rounds the weight");
    free(g), free(mom), free(var);
    ops_keep_bf16_weights(NULL, 0, NULL);
    free(in), free(w), free(out), free(want), free(mag), free(raw), free(rawmag), free(in16), free(out16);
    free(scratch), free(add), free(out2), free(dout), free(dw0), free(dw), free(din), free(wdw), free(mdw);
    free(wdi), free(mdi), free(doutT), free(inT), free(wT), free(rdw), free(rmdw), free(dout16), free(din0);
    free(wide), free(copy), free(neg);
}

// Causal GQA attention on bf16-rounded q, k, v with P rounded (l sums the rounded
// P): out and lse; one chunk of keys (S <= 128), so the kernel's running max is
// the row's max. Backward: P from lse, dP = dO16 V16, dS = P (dP - rowdot) scale,
// dV += r(P)^T dO16, dK += r(dS)^T Q16, dQ += r(dS) K16.
static void naive_attention(double *out, double *lse, double *dqkv, const float *qkv, const float *dout,
                            const double *rowdot, int B, int S, int H, int KV, int hd) {
    const int W = (H + 2 * KV) * hd, group = H / KV;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = malloc(sizeof(double) * S);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < S; t++) {
                const int g = h / group;
                const float *q = qkv + (size_t)(b * S + t) * W + (size_t)h * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + (size_t)(b * S + j) * W + (size_t)(H + g) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += r16(q[d]) * r16(k[d]);
                    p[j] = s * scale, mx = fmax(mx, p[j]);
                }
                double l = 0, sc[512];
                for (int j = 0; j <= t; j++) sc[j] = p[j], p[j] = r16((float)exp(p[j] - mx)), l += p[j];
                double *o = out + (size_t)(b * S + t) * H * hd + (size_t)h * hd;
                for (int d = 0; d < hd; d++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += p[j] * r16(qkv[(size_t)(b * S + j) * W + (size_t)(H + KV + g) * hd + d]);
                    o[d] = s / l;
                }
                lse[((size_t)b * H + h) * S + t] = mx + log(l);
                if (!dout) continue;
                const float *dob = dout + (size_t)(b * S + t) * H * hd + (size_t)h * hd;
                const double rd = rowdot[((size_t)b * H + h) * S + t];
                for (int j = 0; j <= t; j++) {
                    const size_t kr = (size_t)(b * S + j) * W;
                    const double P = exp(sc[j] - (mx + log(l)));
                    double dp = 0;
                    for (int d = 0; d < hd; d++) dp += r16(dob[d]) * r16(qkv[kr + (size_t)(H + KV + g) * hd + d]);
                    const double dS = r16((float)(P * (dp - rd) * scale)), Pr = r16((float)P);
                    for (int d = 0; d < hd; d++) {
                        dqkv[(size_t)(b * S + t) * W + (size_t)h * hd + d] += dS * r16(qkv[kr + (size_t)(H + g) * hd + d]);
                        dqkv[kr + (size_t)(H + g) * hd + d] += dS * r16(q[d]);
                        dqkv[kr + (size_t)(H + KV + g) * hd + d] += Pr * r16(dob[d]);
                    }
                }
            }
    free(p);
}

// The sequence length test_attention runs at head dim hd: S_amx on AMX, whose
// forward chunks (256-512 keys) span it; 120 on oneMKL's tiles (a CPU without
// AMX-BF16, as AMD's Zen 4), whose forward chunks are 128 keys, so that the keys
// are one chunk there too and the running max is the row's, as the reference's (at
// 300 keys a row's P is rounded against a chunk's max: errors of 1-2e-3).
static int attention_rows(int S_amx, int hd) { return cpu_attention_amx(hd) ? S_amx : 120; }

// The attention against naive_attention, where the forward takes the keys in one
// chunk (its running max is then the row's max, as the reference's): with hd 16 on
// oneMKL's bf16 product (chunks of 128 keys), with hd 64 and 128 on AMX where the
// CPU has it (cpu_attention_amx; its forward's chunks are 512 keys, 256 at hd 32:
// S 300 and 200 take the backward's 128-key chunks through several, a last query tile of 12 or 8
// rows and chunks that no product width divides).
static void test_attention(int S, int hd) {
    const int B = 2, H = 4, KV = 2, W = (H + 2 * KV) * hd;
    const size_t nq = (size_t)B * S * W, no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    float *qkv = fnew(nq, -2, 2), *out = fnew(no, 0, 0), *lse = fnew(nr, 0, 0), *ml = fnew(2 * nr, 0, 0);
    float *dout = fnew(no, -1, 1), *dqkv = fnew(nq, 0, 0), *rowdot = fnew(nr, 0, 0);
    float *scratch = fnew(attention_scratch_floats(hd), 0, 0);
    int *pos = malloc(sizeof(int) * S);
    for (int i = 0; i < S; i++) pos[i] = i;
    attention_forward(out, lse, ml, ml + nr, qkv, pos, B, S, H, KV, hd, scratch);
    attention_backward(dqkv, rowdot, dout, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
    double *want = malloc(sizeof(double) * no), *wlse = malloc(sizeof(double) * nr), *rd = malloc(sizeof(double) * nr);
    double *wdq = calloc(nq, sizeof(double));
    for (size_t i = 0; i < nr; i++) rd[i] = rowdot[i];  // dout . out, fp32 (ops.h: attention_rowdot)
    naive_attention(want, wlse, wdq, qkv, dout, rd, B, S, H, KV, hd);
    double eo = 0, el = 0, eg = 0, gmax = 0;
    for (size_t i = 0; i < no; i++) eo = fmax(eo, fabs(out[i] - want[i]));
    for (size_t i = 0; i < nr; i++) el = fmax(el, fabs(lse[i] - wlse[i]));
    for (size_t i = 0; i < nq; i++) eg = fmax(eg, fabs(dqkv[i] - wdq[i])), gmax = fmax(gmax, fabs(wdq[i]));
    // The fp32 attention (bf16 products off) on the same inputs, as far from the
    // reference as skipping the rounding would be. The kernel and the reference
    // differ where a P or dS lies within its fp32 error (fast_expf's, the sums'
    // order) of a bf16 rounding boundary: a few values one bf16 step (2^-8) apart.
    double dplain = 0, gplain = 0;
    ops_set_matmul_bf16(0);
    attention_forward(out, lse, ml, ml + nr, qkv, pos, B, S, H, KV, hd, scratch);
    attention_backward(dqkv, rowdot, dout, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
    ops_set_matmul_bf16(1);
    for (size_t i = 0; i < no; i++) dplain = fmax(dplain, fabs(out[i] - want[i]));
    for (size_t i = 0; i < nq; i++) gplain = fmax(gplain, fabs(dqkv[i] - wdq[i]));
    const char *engine = cpu_attention_amx(hd) ? "AMX" : "oneMKL";
    CHECK(eo < 1e-3 && el < 1e-3 && 10 * eo < dplain,
          "attention_forward (bf16, hd %d, tiles on %s): q, k, v and P rounded, l over the rounded P (out err %.1e, "
          "lse %.1e; the fp32 attention is %.1e away)", hd, engine, eo, el, dplain);
    CHECK(eg < 1e-3 * gmax && 10 * eg < gplain,
          "attention_backward (bf16, hd %d, tiles on %s): q, k, v, dO, P and dS rounded for the products (err %.1e "
          "of %.2f; the fp32 backward is %.1e away)", hd, engine, eg, gmax, gplain);
    free(qkv), free(out), free(lse), free(ml), free(dout), free(dqkv), free(rowdot), free(scratch), free(pos);
    free(want), free(wlse), free(rd), free(wdq);
}

// The AMX tiles (ops/attention_amx_cpu.c) against oneMKL's where both take the
// same chunks, so that they round the same values and differ only in their fp32
// sums' order (which can move a P or a dS across a bf16 rounding boundary): the
// backward of S tokens (chunks of 128 keys) on the same out and lse, and a block of
// a context-parallel ring in both directions (the last third of the queries
// against 128 keys of which they see some, at offsets into a shared q|k|v). Within
// 1e-5 of the largest value forward and 1e-3 backward, where the fp32 attention is
// 1e-3 and more away.
static void test_attention_amx(int S, int hd) {
    if (!cpu_attention_amx(hd)) {
        printf("SKIP attention on AMX (hd %d): this CPU has no AMX-BF16, or the kernel refused its tiles\n", hd);
        return;
    }
    const int B = 2, H = 6, KV = 2, W = (H + 2 * KV) * hd, ldo = H * hd;
    const size_t nq = (size_t)B * S * W, no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    float *qkv = fnew(nq, -2, 2), *dout = fnew(no, -1, 1), *scratch = fnew(attention_scratch_floats(hd), 0, 0);
    float *out = fnew(no, 0, 0), *lse = fnew(nr, 0, 0), *ml = fnew(2 * nr, 0, 0), *rowdot = fnew(nr, 0, 0);
    int *pos = malloc(sizeof(int) * S);
    for (int i = 0; i < S; i++) pos[i] = i;
    cpu_attention_use_amx(0);
    attention_forward(out, lse, ml, ml + nr, qkv, pos, B, S, H, KV, hd, scratch);
    float *dqkv[3];  // AMX, oneMKL, fp32
    for (int e = 0; e < 3; e++) {
        dqkv[e] = fnew(nq, 0, 0);
        cpu_attention_use_amx(e == 0);
        ops_set_matmul_bf16(e < 2);
        attention_backward(dqkv[e], rowdot, dout, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
    }
    ops_set_matmul_bf16(1);
    double d = 0, f = 0, gmax = 0;
    for (size_t i = 0; i < nq; i++)
        d = fmax(d, fabs(dqkv[0][i] - dqkv[1][i])), f = fmax(f, fabs(dqkv[0][i] - dqkv[2][i])),
        gmax = fmax(gmax, fabs(dqkv[1][i]));
    CHECK(d < 1e-3 * gmax && 10 * d < f,
          "attention_backward on AMX tiles = on oneMKL's (S %d, hd %d: within %.1e of %.2f; the fp32 backward %.1e "
          "away)", S, hd, d, gmax, f);
    // The ring block: queries q0.. against keys k0..k0+128 (one chunk either way).
    const int Sq = S / 3, q0 = S - Sq, Sk = 128, k0 = q0 - 64;
    const size_t nob = (size_t)B * Sq * ldo, nrb = (size_t)B * H * Sq;
    float *o2[2], *m2[2], *l2[2], *dq2[2];
    for (int e = 0; e < 2; e++) {
        cpu_attention_use_amx(e == 0);
        o2[e] = fnew(nob, 0, 0), m2[e] = fnew(nrb, 0, 0), l2[e] = fnew(nrb, 0, 0), dq2[e] = fnew(nq, 0, 0);
        attention_block_init(o2[e], m2[e], l2[e], B, Sq, H, hd);
        attention_block_forward(o2[e], m2[e], l2[e], qkv + (size_t)q0 * W, W, qkv + (size_t)k0 * W, W, H * hd,
                                (H + KV) * hd, pos + q0, pos + k0, B, Sq, Sk, H, KV, hd, scratch);
        attention_block_backward(dq2[e], dq2[e] + (size_t)(k0 - q0) * W + (size_t)q0 * W, qkv + (size_t)q0 * W, W,
                                 qkv + (size_t)k0 * W, W, H * hd, (H + KV) * hd, dout + (size_t)q0 * ldo, lse, rowdot,
                                 pos + q0, pos + k0, B, Sq, Sk, H, KV, hd, scratch);
    }
    cpu_attention_use_amx(1);
    double dc = 0, cmax = 0, dl = 0, gc = 0, gcmax = 0;
    for (size_t i = 0; i < nob; i++) dc = fmax(dc, fabs(o2[0][i] - o2[1][i])), cmax = fmax(cmax, fabs(o2[1][i]));
    for (size_t i = 0; i < nrb; i++) dl = fmax(dl, fabs(l2[0][i] - l2[1][i]) / l2[1][i]);
    for (size_t i = 0; i < nq; i++) gc = fmax(gc, fabs(dq2[0][i] - dq2[1][i])), gcmax = fmax(gcmax, fabs(dq2[1][i]));
    CHECK(cmax > 0 && gcmax > 0 && dc < 1e-5 * cmax && dl < 1e-5 && gc < 1e-3 * gcmax,
          "a context-parallel block (queries %d.. against keys %d..%d) on AMX tiles = on oneMKL's (out %.1e of %.2f, "
          "l %.1e relative, gradients %.1e of %.2f)", q0, k0, k0 + Sk, dc, cmax, dl, gc, gcmax);
    for (int e = 0; e < 3; e++) free(dqkv[e]);
    for (int e = 0; e < 2; e++) free(o2[e]), free(m2[e]), free(l2[e]), free(dq2[e]);
    free(qkv), free(dout), free(scratch), free(out), free(lse), free(ml), free(rowdot), free(pos);
}

// A training rank's planned operand copies (ops_set_workspace): products within the
// step's bounds run in them, the same results; a product wider than the bounds is
// fatal, naming the slot (a child process, as die() exits).
static void test_workspace(void) {
    const int N = 16, K = 24, O = 40;
    OpsBounds b = {0};
    b.bf16 = 1, b.rows = N, b.in_cols = K, b.out_cols = O, b.weight = (size_t)O * K;
    const size_t bytes = ops_cpu_workspace_bytes(&b);
    void *ws = malloc(bytes);
    float *in = fnew((size_t)2 * N * K, -1, 1), *w = fnew((size_t)O * K, -1, 1), *out = fnew((size_t)2 * N * O, 0, 0);
    double *want = malloc(sizeof(double) * 2 * N * O), *mag = malloc(sizeof(double) * 2 * N * O);
    naive_abt(want, mag, in, w, N, K, O, 1);
    ops_set_workspace(ws, &b);
    matmul_forward(out, in, w, N, K, O);
    CHECK(worst(out, want, mag, NULL, (size_t)N * O) < TOL,
          "an installed workspace (%zu bytes: the bounds' three slots) holds the operand copies of a product within "
          "the bounds", bytes);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        matmul_forward(out, in, w, 2 * N, K, O);  // twice the rows the bounds allow
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "a product with more rows than the bounds is fatal (exit %d)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    ops_set_workspace(NULL, NULL);  // back to slots that grow
    matmul_forward(out, in, w, 2 * N, K, O);
    naive_abt(want, mag, in, w, 2 * N, K, O, 1);
    CHECK(worst(out, want, mag, NULL, (size_t)2 * N * O) < TOL, "uninstalled, the slots grow again");
    free(ws), free(in), free(w), free(out), free(want), free(mag);
}

// matmul_backward_ld16 on a column block of a bf16 dlogits (rows CE_LD16(V) apart, as
// the loss leaves them) = matmul_backward_ld on the fp32 values those bf16 came from,
// bit for bit: the bf16 product rounds its fp32 operand to the very same values.
// Both gradients, din accumulated into and overwritten; fatal with fp32 products.
static void test_backward_ld16(void) {
    const int N = 12, D = 24, V = 40, r0 = 8, cols = 24;  // columns [r0, r0 + cols) of the vocabulary
    float *d32 = fnew((size_t)N * V, -1, 1), *x = fnew((size_t)N * D, -1, 1), *w = fnew((size_t)cols * D, -1, 1);
    uint16_t *d16 = malloc(sizeof(uint16_t) * (size_t)N * CE_LD16(V));  // (N, 2V): the first V of each row used
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) d16[(size_t)n * CE_LD16(V) + j] = bf16_from_f32(d32[(size_t)n * V + j]);
    int same = 1;
    for (int acc = 0; acc < 2; acc++) {
        float *din[2] = {fnew((size_t)N * D, -1, 1), fnew((size_t)N * D, 0, 0)};   // (N, D) each, alike
        float *dw[2] = {fnew((size_t)cols * D, -1, 1), fnew((size_t)cols * D, 0, 0)};  // (cols, D) each, alike
        memcpy(din[1], din[0], sizeof(float) * (size_t)N * D), memcpy(dw[1], dw[0], sizeof(float) * cols * D);
        matmul_backward_ld(din[0], dw[0], d32 + r0, V, x, w, N, D, cols, acc);
        matmul_backward_ld16(din[1], dw[1], d16 + r0, CE_LD16(V), x, w, N, D, cols, acc);
        same &= !memcmp(din[0], din[1], sizeof(float) * (size_t)N * D) &&
                !memcmp(dw[0], dw[1], sizeof(float) * (size_t)cols * D);
        for (int e = 0; e < 2; e++) free(din[e]), free(dw[e]);
    }
    CHECK(same, "matmul_backward_ld16 on bf16 rows CE_LD16(V) apart = matmul_backward_ld on the fp32 values, din "
                "(overwritten and accumulated) and dweight bit for bit");
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        ops_set_matmul_bf16(0);
        matmul_backward_ld16(x, NULL, d16, CE_LD16(V), NULL, w, N, D, cols, 0);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "matmul_backward_ld16 with fp32 products is fatal (exit %d)",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    free(d32), free(x), free(w), free(d16);
}

// matmul_backward_bf16_to_bf16 on a bf16 output gradient (the residual stream's, as
// a norm's backward wrote it beside the fp32 values) = matmul_backward_from_bf16_to_bf16
// on those fp32 values, bit for bit (the same operand once rounded): din16 with its
// room apart and in its own buffer, the weight gradient alone (din16 NULL) and the
// input gradient alone (dweight NULL); fatal with fp32 products.
static void test_backward_bf16_to_bf16(void) {
    const int N = 12, K = 24, O = 40;  // in (N, K), weight (O, K), dout (N, O)
    const size_t nd = (size_t)N * O, nx = (size_t)N * K, nw = (size_t)O * K;
    float *d32 = fnew(nd, -1, 1), *x = fnew(nx, -1, 1), *w = fnew(nw, -1, 1), *dw0 = fnew(nw, -1, 1);
    uint16_t *d16 = malloc(sizeof(uint16_t) * nd), *x16 = malloc(sizeof(uint16_t) * nx);
    round_to_bf16(d16, d32, nd);
    round_to_bf16(x16, x, nx);
    float *dw[2] = {fnew(nw, 0, 0), fnew(nw, 0, 0)}, *room[2] = {fnew(nx, 0, 0), fnew(nx, 0, 0)};  // (O, K), (N, K)
    uint16_t *din16[2] = {malloc(sizeof(uint16_t) * nx), malloc(sizeof(uint16_t) * nx)};            // (N, K) each
    float *xs = fnew(nx, 0, 0);  // the fp32 path's room to widen x16 (unused with bf16 products)
    int same[3] = {1, 1, 1};
    for (int own = 0; own < 2; own++) {  // din's fp32 room apart, then din16's own buffer
        for (int e = 0; e < 2; e++) memcpy(dw[e], dw0, sizeof(float) * nw);
        uint16_t *out16[2] = {own ? (uint16_t *)room[0] : din16[0], own ? (uint16_t *)room[1] : din16[1]};
        matmul_backward_from_bf16_to_bf16(out16[0], room[0], dw[0], d32, x16, xs, w, N, K, O);
        matmul_backward_bf16_to_bf16(out16[1], room[1], dw[1], d16, x16, w, N, K, O);
        same[0] &= !memcmp(out16[0], out16[1], sizeof(uint16_t) * nx) && !memcmp(dw[0], dw[1], sizeof(float) * nw);
    }
    for (int e = 0; e < 2; e++) memcpy(dw[e], dw0, sizeof(float) * nw);
    matmul_backward_from_bf16(NULL, dw[0], d32, x16, xs, NULL, N, K, O, 0);
    matmul_backward_bf16_to_bf16(NULL, NULL, dw[1], d16, x16, NULL, N, K, O);
    same[1] = !memcmp(dw[0], dw[1], sizeof(float) * nw);
    matmul_backward_input_to_bf16(din16[0], room[0], d32, w, N, K, O);
    matmul_backward_bf16_to_bf16(din16[1], room[1], NULL, d16, NULL, w, N, K, O);
    same[2] = !memcmp(din16[0], din16[1], sizeof(uint16_t) * nx);
    CHECK(same[0] && same[1] && same[2],
          "matmul_backward_bf16_to_bf16 on the bf16 output gradient = the fp32-gradient ops on the values it was "
          "rounded from, bit for bit: both gradients (din16's room apart %d, in its own buffer), the weight "
          "gradient alone %d, the input gradient alone %d", same[0], same[1], same[2]);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        ops_set_matmul_bf16(0);
        matmul_backward_bf16_to_bf16(din16[0], room[0], NULL, d16, NULL, w, N, K, O);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0,
          "matmul_backward_bf16_to_bf16 with fp32 products is fatal (exit %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    for (int e = 0; e < 2; e++) free(dw[e]), free(room[e]), free(din16[e]);
    free(d32), free(x), free(w), free(dw0), free(d16), free(x16), free(xs);
}

int main(void) {
    CHECK(ops_has_bf16(), "this build has bf16 products (oneMKL's cblas_gemm_bf16bf16f32)");
    ops_set_threads(2);
    ops_set_matmul_bf16(1);
    test_products();
    test_attention(70, 16);
    test_attention(attention_rows(300, 64), 64);
    test_attention(attention_rows(200, 128), 128);
    test_attention(attention_rows(200, 32), 32);  // AMX forward chunks of 256 keys (512 do not fit hd 32's scratch)
    test_attention_amx(300, 64);
    test_attention_amx(200, 128);
    test_workspace();
    test_backward_ld16();
    test_backward_bf16_to_bf16();
    return check_summary();
}
