// tests/unit/ops_reference.h — what the tests of src/ops/ops.h's kernels share
// (tests/unit/test_ops.c, test_ops_attention.c, test_ops_loss_optim.c; their method
// in test_ops.c's head comment): a seeded generator, tracked buffers, the
// max-abs-normalised error, central finite differences, and the naive double
// loops the kernels are checked against. Written from the comments in ops.h
// alone (the spec), not from the kernels.
#ifndef FEMTOTRON_OPS_REFERENCE_H
#define FEMTOTRON_OPS_REFERENCE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/rope.h"
#include "ops/ops.h"

#define TOL_FWD 1e-5  // float kernel vs double loop, max-abs normalised
#define TOL_BWD 1e-5  // float kernel backward vs double central differences


// ---------------------------------------------------------------- helpers ----

// Plain RoPE tables of base theta (model/rope.h gives the frequencies).
static inline void rope_tables_theta(float *cs, float *sn, int S, int hd, double theta, int pos0) {
    double freq[256];  // (hd/2)
    if (hd / 2 > 256) abort();
    rope_plain_frequencies(hd, theta, freq);
    rope_tables(cs, sn, S, hd, freq, pos0);
}

// splitmix64: a tiny seeded generator, so every run sees the same inputs.
static uint64_t rng_state;
static inline void rng_seed(uint64_t s) { rng_state = s; }
static inline uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
static inline void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_unif();
}

// Every buffer of a test section is tracked and freed at its end (the test also
// runs under LeakSanitizer).
#define MAX_TRACKED 1024
static void *tracked[MAX_TRACKED];
static int n_tracked = 0;
static inline void *talloc(size_t bytes) {
    if (n_tracked == MAX_TRACKED) { fprintf(stderr, "test_ops: too many buffers\n"); exit(2); }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) { fprintf(stderr, "test_ops: out of memory\n"); exit(2); }
    tracked[n_tracked++] = p;
    return p;
}
static inline void tfree_all(void) {
    while (n_tracked > 0) free(tracked[--n_tracked]);
}
// Positions 0 .. S-1 of a sequence's tokens (the attention ops' qpos and kpos).
static inline int *positions(int S) {
    int *p = talloc(sizeof(int) * (size_t)S);
    for (int i = 0; i < S; i++) p[i] = i;
    return p;
}
static inline float *fnew(size_t n) { return talloc(n * sizeof(float)); }
static inline double *dnew(size_t n) { return talloc(n * sizeof(double)); }
static inline double *to_d(const float *x, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static inline float *fcopy(const float *x, size_t n) {
    float *f = fnew(n);
    memcpy(f, x, n * sizeof(float));
    return f;
}
// kernel result minus the pre-filled value, in double: what a += kernel added.
static inline double *added(const float *after, const float *before, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = (double)after[i] - (double)before[i];
    return d;
}

// max_i |a_i - b_i| / max_i |b_i|; infinite when anything is NaN or infinite.
static inline double nerr(const double *a, const double *b, size_t n) {
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!isfinite(d)) return INFINITY;
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 1e-300 ? mb : 1e-300);
}
static inline double nerr_f(const float *a, const double *b, size_t n) {
    double *ad = to_d(a, n);
    return nerr(ad, b, n);
}
static inline double nerr_ff(const float *a, const float *b, size_t n) {
    double *ad = to_d(a, n), *bd = to_d(b, n);
    return nerr(ad, bd, n);
}
static inline double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Central finite differences of loss(ctx) with respect to each x[i] (x lives
// inside ctx and is perturbed in place, then restored).
typedef double (*loss_fn)(void *ctx);
static inline void fd_grad(loss_fn loss, void *ctx, double *x, size_t n, double *g) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], h = 1e-6 * fmax(1.0, fabs(x0));
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

// ------------------------------------------------ naive double references ----

// out(N, O) = in(N, I) @ w(O, I)^T
static inline void matmul_d(double *out, const double *in, const double *w, int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = 0.0;
            for (int i = 0; i < I; i++) s += in[(size_t)n * I + i] * w[(size_t)o * I + i];
            out[(size_t)n * O + o] = s;
        }
}

// y = w * x / sqrt(mean(x^2) + eps), per row
static inline void rmsnorm_d(double *out, double *rstd, const double *in, const double *w,
                      int N, int D, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = in + (size_t)n * D;
        double ms = 0.0;
        for (int d = 0; d < D; d++) ms += x[d] * x[d];
        double r = 1.0 / sqrt(ms / D + eps);
        if (rstd) rstd[n] = r;
        for (int d = 0; d < D; d++) out[(size_t)n * D + d] = w[d] * x[d] * r;
    }
}

// RoPE in place on the q and k heads of qkv(B*S, (H+2KV)*hd); row n uses table row n % S.
// Rotate-half: pair (x1[i], x2[i]) = (x[i], x[i + hd/2]) turns by the angle of (s, i).
static inline void rope_d(double *qkv, const double *cs, const double *sn, int B, int S, int H,
                   int KV, int hd) {
    int W = (H + 2 * KV) * hd, half = hd / 2;
    for (int n = 0; n < B * S; n++) {
        int s = n % S;
        for (int head = 0; head < H + KV; head++) {  // q heads then k heads, contiguous
            double *x = qkv + (size_t)n * W + (size_t)head * hd;
            for (int i = 0; i < half; i++) {
                double c = cs[s * half + i], si = sn[s * half + i];
                double x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * si;
                x[i + half] = x2 * c + x1 * si;
            }
        }
    }
}

// Textbook causal GQA attention. For token t of sequence b and query head h
// (kv head g = h / (H/KV)): scores_j = q_t . k_j / sqrt(hd) for j <= t (j > t masked),
// p = softmax(scores - max), out_t = sum_j p_j v_j. probs(B, H, S, S) may be NULL.
static inline void attention_d(double *out, double *probs, const double *qkv, int B, int S, int H,
                        int KV, int hd) {
    int W = (H + 2 * KV) * hd, group = H / KV;
    double scale = 1.0 / sqrt((double)hd);
    double *sc = malloc(sizeof(double) * (size_t)S);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / group;
            for (int t = 0; t < S; t++) {
                const double *q = qkv + (size_t)(b * S + t) * W + (size_t)h * hd;
                double mx = -INFINITY;
                for (int j = 0; j < S; j++) {
                    if (j > t) { sc[j] = -INFINITY; continue; }  // the causal mask
                    const double *k = qkv + (size_t)(b * S + j) * W + (size_t)(H + g) * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    sc[j] = s * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double z = 0.0;
                for (int j = 0; j < S; j++) {
                    sc[j] = (j > t) ? 0.0 : exp(sc[j] - mx);
                    z += sc[j];
                }
                double *o = out + (size_t)(b * S + t) * H * hd + (size_t)h * hd;
                for (int d = 0; d < hd; d++) o[d] = 0.0;
                for (int j = 0; j < S; j++) {
                    double p = sc[j] / z;
                    if (probs) probs[(((size_t)b * H + h) * S + t) * S + j] = p;
                    const double *v = qkv + (size_t)(b * S + j) * W + (size_t)(H + KV + g) * hd;
                    for (int d = 0; d < hd; d++) o[d] += p * v[d];
                }
            }
        }
    free(sc);
}

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up
static inline double silu_d(double x) { return x / (1.0 + exp(-x)); }
static inline void swiglu_d(double *out, const double *gu, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++)
            out[(size_t)n * I + i] =
                silu_d(gu[(size_t)n * 2 * I + i]) * gu[(size_t)n * 2 * I + I + i];
}

// sum_n -log softmax(logits_n)[target_n] = sum_n (logsumexp(logits_n) - logits_n[target])
static inline double ce_d(const double *logits, const int32_t *tg, int N, int V) {
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * V;
        double mx = l[0];
        for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
        double z = 0.0;
        for (int v = 0; v < V; v++) z += exp(l[v] - mx);
        total += mx + log(z) - l[tg[n]];
    }
    return total;
}

#endif
