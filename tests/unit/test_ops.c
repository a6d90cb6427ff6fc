// tests/unit/test_ops.c — independent tests of every kernel in src/ops/ops.h.
//
// Written from the comments in ops.h alone (the spec), not from ops/cpu.c.
// Method, for every op:
//   * forward: the float kernel against a naive loop in double precision written
//     here (triple loops; attention the textbook way with an explicit causal mask
//     and a max-subtracted softmax), error measured as
//         err = max_i |kernel_i - ref_i| / max_i |ref_i|       (max-abs normalised)
//   * backward: a scalar loss L = sum_i out_i * R_i with a fixed random R, so
//     dL/dout = R. The kernel's backward is fed dout = R and compared with central
//     finite differences (L(x + h e_i) - L(x - h e_i)) / 2h of the SAME naive
//     double forward, for every input and weight element. In double, with
//     h ~ 1e-6, truncation error is O(h^2) ~ 1e-12 and cancellation error
//     O(eps_double * |L| / h) ~ 1e-9, so the only visible error is the kernel's
//     own fp32 rounding (~1e-6): the check is sharp. The forward checks tie the
//     double reference to the float kernel, so both directions test the kernel.
//   * accumulate (+=) semantics: gradient buffers documented as += are pre-filled
//     with random values that are subtracted afterwards; buffers documented as
//     overwritten are pre-filled with large garbage.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/rope.h"
#include "ops/blas_cores.h"
#include "ops/bf16.h"
#include "ops/ops.h"
#include "run_child.h"

#define TOL_FWD 1e-5  // float kernel vs double loop, max-abs normalised
#define TOL_BWD 1e-5  // float kernel backward vs double central differences

// ---------------------------------------------------------------- helpers ----

// Plain RoPE tables of base theta (model/rope.h gives the frequencies).
static void rope_tables_theta(float *cs, float *sn, int S, int hd, double theta, int pos0) {
    double freq[256];  // (hd/2)
    if (hd / 2 > 256) abort();
    rope_plain_frequencies(hd, theta, freq);
    rope_tables(cs, sn, S, hd, freq, pos0);
}

// splitmix64: a tiny seeded generator, so every run sees the same inputs.
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s; }
static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_unif();
}

// Every buffer of a test section is tracked and freed at its end (the test also
// runs under LeakSanitizer).
#define MAX_TRACKED 1024
static void *tracked[MAX_TRACKED];
static int n_tracked = 0;
static void *talloc(size_t bytes) {
    if (n_tracked == MAX_TRACKED) { fprintf(stderr, "test_ops: too many buffers\n"); exit(2); }
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) { fprintf(stderr, "test_ops: out of memory\n"); exit(2); }
    tracked[n_tracked++] = p;
    return p;
}
static void tfree_all(void) {
    while (n_tracked > 0) free(tracked[--n_tracked]);
}
static float *fnew(size_t n) { return talloc(n * sizeof(float)); }
static double *dnew(size_t n) { return talloc(n * sizeof(double)); }
static double *to_d(const float *x, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *fcopy(const float *x, size_t n) {
    float *f = fnew(n);
    memcpy(f, x, n * sizeof(float));
    return f;
}
// kernel result minus the pre-filled value, in double: what a += kernel added.
static double *added(const float *after, const float *before, size_t n) {
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = (double)after[i] - (double)before[i];
    return d;
}

// max_i |a_i - b_i| / max_i |b_i|; infinite when anything is NaN or infinite.
static double nerr(const double *a, const double *b, size_t n) {
    double md = 0.0, mb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!isfinite(d)) return INFINITY;
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / (mb > 1e-300 ? mb : 1e-300);
}
static double nerr_f(const float *a, const double *b, size_t n) {
    double *ad = to_d(a, n);
    return nerr(ad, b, n);
}
static double nerr_ff(const float *a, const float *b, size_t n) {
    double *ad = to_d(a, n), *bd = to_d(b, n);
    return nerr(ad, bd, n);
}
static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Central finite differences of loss(ctx) with respect to each x[i] (x lives
// inside ctx and is perturbed in place, then restored).
typedef double (*loss_fn)(void *ctx);
static void fd_grad(loss_fn loss, void *ctx, double *x, size_t n, double *g) {
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
static void matmul_d(double *out, const double *in, const double *w, int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = 0.0;
            for (int i = 0; i < I; i++) s += in[(size_t)n * I + i] * w[(size_t)o * I + i];
            out[(size_t)n * O + o] = s;
        }
}

// y = w * x / sqrt(mean(x^2) + eps), per row
static void rmsnorm_d(double *out, double *rstd, const double *in, const double *w,
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
static void rope_d(double *qkv, const double *cs, const double *sn, int B, int S, int H,
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
static void attention_d(double *out, double *probs, const double *qkv, int B, int S, int H,
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
static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static void swiglu_d(double *out, const double *gu, int N, int I) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++)
            out[(size_t)n * I + i] =
                silu_d(gu[(size_t)n * 2 * I + i]) * gu[(size_t)n * 2 * I + I + i];
}

// sum_n -log softmax(logits_n)[target_n] = sum_n (logsumexp(logits_n) - logits_n[target])
static double ce_d(const double *logits, const int32_t *tg, int N, int V) {
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

// ------------------------------------------------------------------ matmul ----

typedef struct { double *in, *w, *R, *out; int N, I, O; } mm_ctx;
static double mm_loss(void *p) {
    mm_ctx *c = p;
    matmul_d(c->out, c->in, c->w, c->N, c->I, c->O);
    return dot_d(c->out, c->R, (size_t)c->N * c->O);
}

static void test_matmul(void) {
    static const int shapes[][3] = {{7, 9, 5}, {13, 16, 11}, {1, 8, 3}, {33, 20, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], I = shapes[k][1], O = shapes[k][2];
        rng_seed(100 + k);
        float *in = fnew((size_t)N * I), *w = fnew((size_t)O * I), *out = fnew((size_t)N * O);
        fill(in, (size_t)N * I, -1, 1);
        fill(w, (size_t)O * I, -1, 1);
        fill(out, (size_t)N * O, 50, 60);  // garbage: the forward overwrites
        matmul_forward(out, in, w, N, I, O);
        double *ref = dnew((size_t)N * O);
        matmul_d(ref, to_d(in, (size_t)N * I), to_d(w, (size_t)O * I), N, I, O);
        double e = nerr_f(out, ref, (size_t)N * O);
        CHECK(e < TOL_FWD, "matmul_forward N=%d in=%d out=%d vs double loop (err %.2e)", N, I, O, e);
        tfree_all();
    }

    // backward: N=7, in=9, out=5; FD with respect to every input and weight element
    int N = 7, I = 9, O = 5;
    size_t nin = (size_t)N * I, nw = (size_t)O * I, nout = (size_t)N * O;
    rng_seed(7);
    float *in = fnew(nin), *w = fnew(nw), *R = fnew(nout);
    fill(in, nin, -1, 1);
    fill(w, nw, -1, 1);
    fill(R, nout, -1, 1);
    mm_ctx c = {to_d(in, nin), to_d(w, nw), to_d(R, nout), dnew(nout), N, I, O};
    double *gin = dnew(nin), *gw = dnew(nw);
    fd_grad(mm_loss, &c, c.in, nin, gin);
    fd_grad(mm_loss, &c, c.w, nw, gw);

    // accumulate_din = 0: din overwritten (pre-filled with garbage); dweight +=.
    float *din = fnew(nin), *dw = fnew(nw), *dw0 = fnew(nw);
    fill(din, nin, 100, 200);
    fill(dw0, nw, -1, 1);
    memcpy(dw, dw0, nw * sizeof(float));
    matmul_backward(din, dw, R, in, w, N, I, O, 0);
    double e1 = nerr_f(din, gin, nin);
    CHECK(e1 < TOL_BWD, "matmul_backward din (accumulate_din=0, overwrites garbage) vs FD (err %.2e)", e1);
    double e2 = nerr(added(dw, dw0, nw), gw, nw);
    CHECK(e2 < TOL_BWD, "matmul_backward dweight += dout^T in vs FD, pre-filled buffer (err %.2e)", e2);

    // accumulate_din = 1: din += (pre-filled with random values); dweight += again.
    float *din0 = fnew(nin), *dw1 = fcopy(dw, nw);
    fill(din0, nin, -1, 1);
    memcpy(din, din0, nin * sizeof(float));
    matmul_backward(din, dw, R, in, w, N, I, O, 1);
    double e3 = nerr(added(din, din0, nin), gin, nin);
    CHECK(e3 < TOL_BWD, "matmul_backward din (accumulate_din=1) adds dout@W to pre-filled buffer (err %.2e)", e3);
    double e4 = nerr(added(dw, dw1, nw), gw, nw);
    CHECK(e4 < TOL_BWD, "matmul_backward dweight accumulates over two calls (err %.2e)", e4);

    // din == NULL: only the weight gradient.
    float *dw2 = fcopy(dw, nw);
    matmul_backward(NULL, dw, R, in, w, N, I, O, 0);
    double e5 = nerr(added(dw, dw2, nw), gw, nw);
    CHECK(e5 < TOL_BWD, "matmul_backward din=NULL still accumulates dweight (err %.2e)", e5);
    tfree_all();
}

// --------------------------------------------------------------- embedding ----

typedef struct { double *table, *R, *out; const int32_t *tok; int N, D; } emb_ctx;
static double emb_loss(void *p) {
    emb_ctx *c = p;
    for (int n = 0; n < c->N; n++)
        for (int d = 0; d < c->D; d++)
            c->out[(size_t)n * c->D + d] = c->table[(size_t)c->tok[n] * c->D + d];
    return dot_d(c->out, c->R, (size_t)c->N * c->D);
}

static void test_embedding(void) {
    enum { N = 9, D = 10, V = 11 };
    // token 3 appears three times (the scatter must sum), rows 0, 6, 8, 9 never appear
    static const int32_t tok[N] = {3, 1, 7, 3, 10, 2, 3, 5, 4};
    rng_seed(11);
    float *table = fnew((size_t)V * D), *out = fnew((size_t)N * D), *R = fnew((size_t)N * D);
    fill(table, (size_t)V * D, -1, 1);
    fill(R, (size_t)N * D, -1, 1);
    fill(out, (size_t)N * D, 9, 10);
    embedding_forward(out, tok, table, N, D, V);
    int same = 1;
    for (int n = 0; n < N; n++)
        same &= memcmp(out + (size_t)n * D, table + (size_t)tok[n] * D, D * sizeof(float)) == 0;
    CHECK(same, "embedding_forward copies table rows bit for bit");

    emb_ctx c = {to_d(table, (size_t)V * D), to_d(R, (size_t)N * D), dnew((size_t)N * D), tok, N, D};
    double *g = dnew((size_t)V * D);
    fd_grad(emb_loss, &c, c.table, (size_t)V * D, g);
    float *dt = fnew((size_t)V * D), *dt0 = fnew((size_t)V * D);
    fill(dt0, (size_t)V * D, -1, 1);
    memcpy(dt, dt0, (size_t)V * D * sizeof(float));
    embedding_backward(dt, R, tok, N, D, V);
    double e = nerr(added(dt, dt0, (size_t)V * D), g, (size_t)V * D);
    CHECK(e < TOL_BWD, "embedding_backward += scatter (repeated token summed) vs FD (err %.2e)", e);
    static const int unused[] = {0, 6, 8, 9};
    int untouched = 1;
    for (int k = 0; k < 4; k++)
        untouched &= memcmp(dt + (size_t)unused[k] * D, dt0 + (size_t)unused[k] * D,
                            D * sizeof(float)) == 0;
    CHECK(untouched, "embedding_backward leaves rows of absent tokens bit for bit unchanged");
    tfree_all();
}

// The pieces a row table is handed out in (model/param_access.h): the head's
// products over column blocks of the logits equal the whole product, and a
// piece's embedding rows are copied without touching the other rows.
static void test_pieces(void) {
    enum { N = 7, I = 12, O = 10, A = 4 };  // blocks [0, A) and [A, O) of the output
    rng_seed(13);
    float *in = fnew((size_t)N * I), *w = fnew((size_t)O * I), *whole = fnew((size_t)N * O);
    float *blocks = fnew((size_t)N * O), *dout = fnew((size_t)N * O);
    fill(in, (size_t)N * I, -1, 1);
    fill(w, (size_t)O * I, -1, 1);
    fill(dout, (size_t)N * O, -1, 1);
    matmul_forward(whole, in, w, N, I, O);
    fill(blocks, (size_t)N * O, 50, 60);  // sentinels
    matmul_forward_ld(blocks + A, O, in, w + (size_t)A * I, N, I, O - A);
    int kept = 1;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < A; o++) kept &= blocks[(size_t)n * O + o] >= 50;
    CHECK(kept, "matmul_forward_ld writes only its column block of the wider output");
    matmul_forward_ld(blocks, O, in, w, N, I, A);
    double e = nerr_ff(blocks, whole, (size_t)N * O);
    CHECK(e < 1e-6, "matmul_forward_ld over two column blocks = matmul_forward (err %.1e)", e);

    float *din = fnew((size_t)N * I), *dw = fnew((size_t)O * I), *din_b = fnew((size_t)N * I);
    float *dw_b = fnew((size_t)O * I);
    matmul_backward(din, dw, dout, in, w, N, I, O, 0);
    fill(din_b, (size_t)N * I, 50, 60);  // overwritten by the first block, added to by the second
    matmul_backward_ld(din_b, dw_b + (size_t)A * I, dout + A, O, in, w + (size_t)A * I, N, I, O - A, 0);
    matmul_backward_ld(din_b, dw_b, dout, O, in, w, N, I, A, 1);
    double e1 = nerr_ff(din_b, din, (size_t)N * I);
    double e2 = nerr_ff(dw_b, dw, (size_t)O * I);
    CHECK(e1 < 1e-6, "matmul_backward_ld: din summed over column blocks = the whole (err %.1e)", e1);
    CHECK(e2 < 1e-6, "matmul_backward_ld: dweight rows of each block = the whole's (err %.1e)", e2);

    enum { V = 9, D = 5 };
    static const int32_t tok[6] = {2, 7, 4, 2, 8, 0};
    float *table = fnew((size_t)V * D), *out = fnew((size_t)6 * D);
    fill(table, (size_t)V * D, -1, 1);
    fill(out, (size_t)6 * D, 50, 60);
    embedding_copy_range(out, tok, table + 2 * D, 6, D, 2, 3);  // the piece of ids 2, 3, 4
    int ok = 1;
    for (int n = 0; n < 6; n++) {
        int inside = tok[n] >= 2 && tok[n] < 5;
        for (int d = 0; d < D; d++)
            ok &= inside ? out[(size_t)n * D + d] == table[(size_t)tok[n] * D + d] : out[(size_t)n * D + d] >= 50;
    }
    CHECK(ok, "embedding_copy_range copies the piece's rows and leaves the other tokens' rows as they were");
    tfree_all();
}

// Ids outside the vocabulary never index a table: the kernels refuse them by name
// (before any read or write), in a child, since the refusal ends the process.
typedef struct { int32_t ids[4]; int which; } bad_ids_ctx;
static void child_bad_ids(void *p) {
    bad_ids_ctx *c = p;
    enum { D = 4, V = 257 };
    static float table[V * D], out[4 * D], logits[4 * V];
    double loss = 0.0;
    if (c->which == 0) embedding_forward(out, c->ids, table, 4, D, V);
    if (c->which == 1) embedding_backward(table, out, c->ids, 4, D, V);
    if (c->which == 2) cross_entropy_forward_backward(logits, c->ids, 4, V, 1.0f, &loss);
    if (c->which == 3) cross_entropy_forward(logits, c->ids, 4, V, &loss);
}

static void test_ids_outside_vocab(void) {
    const char *names[] = {"embedding_forward", "embedding_backward", "cross_entropy_forward_backward",
                           "cross_entropy_forward"};
    const int32_t bad[] = {300, 65535, -1, 257};
    for (int k = 0; k < 4; k++) {
        bad_ids_ctx c = {{5, 9, 0, 0}, k};
        c.ids[2] = bad[k];
        char err[1024], want[64];
        int rc = run_child(child_bad_ids, &c, err, sizeof err);
        snprintf(want, sizeof want, "id %d at position 2", bad[k]);
        CHECK(rc == 1 && strstr(err, want) && strstr(err, "[0, 257)"),
              "%s refuses id %d (vocab 257) naming it and its position, exit %d (stderr: %.200s)", names[k],
              bad[k], rc, err);
    }
}

// ----------------------------------------------------------------- rmsnorm ----

typedef struct { double *in, *w, *R, *out; int N, D; double eps; } rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    rmsnorm_d(c->out, NULL, c->in, c->w, c->N, c->D, c->eps);
    return dot_d(c->out, c->R, (size_t)c->N * c->D);
}

static void test_rmsnorm(void) {
    // eps = 1e-5 (Llama) and a large eps = 0.3 so that a kernel ignoring eps fails.
    static const float epss[] = {1e-5f, 0.3f};
    for (int k = 0; k < 2; k++) {
        int N = 6, D = 12;
        size_t nx = (size_t)N * D;
        float eps = epss[k];
        rng_seed(20 + k);
        float *in = fnew(nx), *w = fnew(D), *out = fnew(nx), *rstd = fnew(N), *R = fnew(nx), *xh = fnew(nx);
        float *out2 = fnew(nx), *rstd2 = fnew(N), *again = fnew(nx);
        fill(in, nx, -1, 1);
        for (int d = 0; d < D; d++) in[3 * D + d] *= 30.0f;  // rows of different scale
        for (int d = 0; d < D; d++) in[4 * D + d] *= 0.05f;
        fill(w, D, 0.5f, 1.5f);
        fill(R, nx, -1, 1);
        rmsnorm_forward(out, xh, rstd, in, w, N, D, eps);
        rmsnorm_forward(out2, NULL, rstd2, in, w, N, D, eps);
        CHECK(!memcmp(out, out2, nx * sizeof(float)) && !memcmp(rstd, rstd2, N * sizeof(float)),
              "rmsnorm_forward eps=%g: the same output and rstd with and without xhat kept", eps);
        double exh = 0.0;
        for (size_t q = 0; q < nx; q++) exh = fmax(exh, fabs((double)xh[q] - (double)in[q] * rstd[q / D]));
        CHECK(exh < 1e-6, "rmsnorm_forward eps=%g keeps xhat = x * rstd (max err %.2e)", eps, exh);
        rmsnorm_rebuild(again, xh, w, N, D);
        CHECK(!memcmp(again, out, nx * sizeof(float)), "rmsnorm_rebuild eps=%g: w * xhat is the forward's output bit for bit", eps);
        // The bf16 outputs: the fp32 ones rounded, the same xhat and rstd; the
        // rebuild gives the forward's bits again.
        uint16_t *o16 = talloc(nx * sizeof(uint16_t)), *r16 = talloc(nx * sizeof(uint16_t));
        uint16_t *ref16 = talloc(nx * sizeof(uint16_t));
        float *xh2 = fnew(nx);
        rmsnorm_forward_to_bf16(o16, xh2, rstd2, in, w, N, D, eps);
        rmsnorm_rebuild_to_bf16(r16, xh2, w, N, D);
        round_to_bf16(ref16, out, nx);
        CHECK(!memcmp(o16, ref16, nx * sizeof(uint16_t)) && !memcmp(r16, ref16, nx * sizeof(uint16_t)) &&
                  !memcmp(xh2, xh, nx * sizeof(float)) && !memcmp(rstd2, rstd, N * sizeof(float)),
              "rmsnorm_forward_to_bf16 and rmsnorm_rebuild_to_bf16 eps=%g: the fp32 output rounded, bit for bit "
              "(the same xhat and rstd)", eps);
        rms_ctx c = {to_d(in, nx), to_d(w, D), to_d(R, nx), dnew(nx), N, D, (double)eps};
        double *ref = dnew(nx), *rref = dnew(N);
        rmsnorm_d(ref, rref, c.in, c.w, N, D, c.eps);
        double e = nerr_f(out, ref, nx);
        CHECK(e < TOL_FWD, "rmsnorm_forward eps=%g vs double loop (err %.2e)", eps, e);
        double er = 0.0;
        for (int n = 0; n < N; n++) er = fmax(er, rel_diff(rstd[n], rref[n]));
        CHECK(er < TOL_FWD, "rmsnorm_forward eps=%g saves rstd = 1/sqrt(mean(x^2)+eps) (max rel %.2e)", eps, er);

        double *gin = dnew(nx), *gw = dnew(D);
        fd_grad(rms_loss, &c, c.in, nx, gin);
        fd_grad(rms_loss, &c, c.w, D, gw);
        float *din = fnew(nx), *din0 = fnew(nx), *dw = fnew(D), *dw0 = fnew(D);
        fill(din0, nx, -1, 1);
        fill(dw0, D, -1, 1);
        memcpy(din, din0, nx * sizeof(float));
        memcpy(dw, dw0, D * sizeof(float));
        rmsnorm_backward(din, dw, R, xh, w, rstd, N, D);
        double e1 = nerr(added(din, din0, nx), gin, nx);
        CHECK(e1 < TOL_BWD, "rmsnorm_backward eps=%g din += vs FD, pre-filled buffer (err %.2e)", eps, e1);
        double e2 = nerr(added(dw, dw0, D), gw, D);
        CHECK(e2 < TOL_BWD, "rmsnorm_backward eps=%g dweight += vs FD, pre-filled buffer (err %.2e)", eps, e2);
        // With the bf16 copy: the same din and dweight bits, and din16 = the sums
        // din holds after the op (the pre-filled values plus dx) rounded.
        float *din2 = fnew(nx), *dw2 = fnew(D);
        uint16_t *d16 = talloc(nx * sizeof(uint16_t)), *want16 = talloc(nx * sizeof(uint16_t));
        memcpy(din2, din0, nx * sizeof(float));
        memcpy(dw2, dw0, D * sizeof(float));
        rmsnorm_backward_with_bf16(din2, d16, dw2, R, xh, w, rstd, N, D);
        round_to_bf16(want16, din, nx);
        CHECK(!memcmp(din2, din, nx * sizeof(float)) && !memcmp(dw2, dw, D * sizeof(float)) &&
                  !memcmp(d16, want16, nx * sizeof(uint16_t)),
              "rmsnorm_backward_with_bf16 eps=%g: rmsnorm_backward's din and dweight bit for bit, din16 its din "
              "rounded (pre-filled buffer)", eps);
        tfree_all();
    }
}

// ---------------------------------------------------------------- residual ----

static void test_residual(void) {
    size_t n = 1001;
    rng_seed(30);
    float *a = fnew(n), *b = fnew(n), *out = fnew(n);
    fill(a, n, -1, 1);
    fill(b, n, -1, 1);
    residual_forward(out, a, b, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= out[i] == a[i] + b[i];
    CHECK(ok, "residual_forward out = a + b exactly (n=%zu)", n);
    float *a2 = fcopy(a, n);
    residual_forward(a2, a2, b, n);  // out aliases a
    CHECK(memcmp(a2, out, n * sizeof(float)) == 0, "residual_forward with out aliasing a");
    tfree_all();
}

// -------------------------------------------------------------------- RoPE ----

typedef struct { double *x, *tmp, *cs, *sn, *R; int B, S, H, KV, hd; } rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->S * (c->H + 2 * c->KV) * c->hd;
    memcpy(c->tmp, c->x, n * sizeof(double));
    rope_d(c->tmp, c->cs, c->sn, c->B, c->S, c->H, c->KV, c->hd);
    return dot_d(c->tmp, c->R, n);
}

// max |table - formula| with angle(p, i) = p * theta^(-2i/hd), p = pos0 + s
static void tables_err(const float *cs, const float *sn, int S, int hd, double theta, int pos0,
                       double *ec, double *es) {
    *ec = *es = 0.0;
    for (int s = 0; s < S; s++)
        for (int i = 0; i < hd / 2; i++) {
            double ang = (double)(pos0 + s) * pow(theta, -2.0 * i / hd);
            *ec = fmax(*ec, fabs(cs[s * (hd / 2) + i] - cos(ang)));
            *es = fmax(*es, fabs(sn[s * (hd / 2) + i] - sin(ang)));
        }
}

// Meta's apply_scaling (llama-models, Llama 3.1), transliterated: the reference
// for model/rope.c's llama3 frequencies.
static double meta_apply_scaling(double freq, double scale_factor, double low_freq_factor,
                                 double high_freq_factor, double old_context_len) {
    const double low_freq_wavelen = old_context_len / low_freq_factor;
    const double high_freq_wavelen = old_context_len / high_freq_factor;
    const double wavelen = 2 * 3.14159265358979323846 / freq;
    if (wavelen < high_freq_wavelen) return freq;
    if (wavelen > low_freq_wavelen) return freq / scale_factor;
    const double smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1 - smooth) * freq / scale_factor + smooth * freq;
}

static void test_rope_frequencies(void) {
    // Llama 3.1's values: hd 128, theta 5e5, factor 8, low 1, high 4, L 8192.
    ModelConfig mc;
    memset(&mc, 0, sizeof mc);
    mc.rope_theta = 500000.0;
    mc.rope_type = ROPE_LLAMA3;
    mc.rope_factor = 8.0;
    mc.rope_low_freq_factor = 1.0;
    mc.rope_high_freq_factor = 4.0;
    mc.rope_original_max_position_embeddings = 8192;
    double f[64], plain[64];
    rope_frequencies(&mc, 128, f);
    rope_plain_frequencies(128, 500000.0, plain);
    int kept = 0, scaled = 0, blended = 0;
    double worst = 0;
    for (int i = 0; i < 64; i++) {
        double want = meta_apply_scaling(1.0 / pow(500000.0, 2.0 * i / 128), 8, 1, 4, 8192);
        worst = fmax(worst, fabs(f[i] - want) / want);
        if (f[i] == plain[i]) kept++;
        else if (f[i] == plain[i] / 8) scaled++;
        else if (f[i] < plain[i] && f[i] > plain[i] / 8) blended++;
    }
    CHECK(worst < 1e-14, "llama3 RoPE frequencies = Meta's apply_scaling (worst rel %.1e)", worst);
    // Wavelength 2 pi 5e5^(i/64) < 2048 for i <= 28, > 8192 for i >= 35: 29 kept, 6 blended, 29 scaled.
    CHECK(kept == 29 && blended == 6 && scaled == 29, "llama3 RoPE: %d kept, %d blended, %d divided by 8 (29/6/29)",
          kept, blended, scaled);
    mc.rope_type = ROPE_LINEAR;
    mc.rope_factor = 4.0;
    rope_frequencies(&mc, 128, f);
    int exact = 1;
    for (int i = 0; i < 64; i++) exact &= f[i] == plain[i] / 4;
    CHECK(exact, "linear RoPE frequencies = plain / factor (positions divided by 4)");
    mc.rope_type = ROPE_DEFAULT;
    rope_frequencies(&mc, 128, f);
    exact = 1;
    for (int i = 0; i < 64; i++) exact &= f[i] == plain[i];
    CHECK(exact, "default RoPE frequencies = theta^(-2i/hd)");
}

static void test_rope(void) {
    int B = 2, S = 5, H = 4, KV = 2, hd = 8, half = hd / 2, pos0 = 3;
    double theta = 10000.0;
    float *cs = fnew((size_t)S * half), *sn = fnew((size_t)S * half);
    rope_tables_theta(cs, sn, S, hd, theta, pos0);
    double ec, es;
    tables_err(cs, sn, S, hd, theta, pos0, &ec, &es);
    CHECK(ec < 2e-6, "rope_tables cos = cos(p theta^(-2i/hd)), pos0=%d (max abs err %.2e)", pos0, ec);
    CHECK(es < 2e-6, "rope_tables sin = sin(p theta^(-2i/hd)), pos0=%d (max abs err %.2e)", pos0, es);
    {   // large positions (a context-parallel chunk far into the sequence), Llama-3 theta:
        // theta comes in double and the angle must be formed in double; an fp32 angle
        // p * inv_freq would be off by ~1e-4 rad here and fail this bound
        int S2 = 3, hd2 = 64, p2 = 4000;
        float *c2 = fnew((size_t)S2 * hd2 / 2), *s2 = fnew((size_t)S2 * hd2 / 2);
        rope_tables_theta(c2, s2, S2, hd2, 500000.0, p2);
        tables_err(c2, s2, S2, hd2, 500000.0, p2, &ec, &es);
        CHECK(ec < 1e-5 && es < 1e-5, "rope_tables hd=64 theta=5e5 pos0=%d (max abs err %.2e, %.2e)", p2, ec, es);
    }

    // rope_forward with tables computed here (independent of rope_tables), and
    // theta small so that all angles are large and every pair really turns.
    size_t W = (size_t)(H + 2 * KV) * hd, nq = (size_t)B * S * W;
    rng_seed(40);
    float *tc = fnew((size_t)S * half), *ts = fnew((size_t)S * half);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            double ang = (double)(7 + s) * pow(50.0, -2.0 * i / hd);
            tc[s * half + i] = (float)cos(ang);
            ts[s * half + i] = (float)sin(ang);
        }
    float *x = fnew(nq), *y = fnew(nq), *R = fnew(nq);
    fill(x, nq, -1, 1);
    fill(R, nq, -1, 1);
    memcpy(y, x, nq * sizeof(float));
    rope_forward(y, tc, ts, B, S, H, KV, hd);
    rope_ctx c = {to_d(x, nq), dnew(nq), to_d(tc, (size_t)S * half), to_d(ts, (size_t)S * half),
                  to_d(R, nq), B, S, H, KV, hd};
    double *ref = to_d(x, nq);
    rope_d(ref, c.cs, c.sn, B, S, H, KV, hd);
    double e = nerr_f(y, ref, nq);
    CHECK(e < TOL_FWD, "rope_forward rotate-half on q and k heads, row t uses table row t %% S (err %.2e)", e);
    int v_same = 1;
    for (int n = 0; n < B * S; n++) {
        size_t off = (size_t)n * W + (size_t)(H + KV) * hd;
        v_same &= memcmp(y + off, x + off, (size_t)KV * hd * sizeof(float)) == 0;
    }
    CHECK(v_same, "rope_forward leaves the v heads bit for bit unchanged");

    // backward is the transpose: <rope(x), r> == <x, rope_backward(r)>
    float *g = fcopy(R, nq);
    rope_backward(g, tc, ts, B, S, H, KV, hd);
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < nq; i++) {
        lhs += (double)y[i] * R[i];
        rhs += (double)x[i] * g[i];
    }
    CHECK(rel_diff(lhs, rhs) < 1e-5, "rope_backward is the transpose: <rope(x),r>=%.9f <x,rope^T(r)>=%.9f", lhs, rhs);
    double *gfd = dnew(nq);
    fd_grad(rope_loss, &c, c.x, nq, gfd);
    double e2 = nerr_f(g, gfd, nq);
    CHECK(e2 < TOL_BWD, "rope_backward vs FD on every element of qkv (v passes through) (err %.2e)", e2);
    // rope_backward_to_bf16: rope_backward's values (v's too) rounded to bf16, its
    // input left as it is
    uint16_t *g16 = talloc(nq * sizeof(uint16_t)), *gref16 = talloc(nq * sizeof(uint16_t));
    for (size_t i = 0; i < nq; i++) g16[i] = 0x7fc0;  // garbage (NaN): overwritten
    float *Rkept = fcopy(R, nq);
    rope_backward_to_bf16(g16, R, tc, ts, B, S, H, KV, hd);
    round_to_bf16(gref16, g, nq);
    CHECK(!memcmp(g16, gref16, nq * sizeof(uint16_t)) && !memcmp(R, Rkept, nq * sizeof(float)),
          "rope_backward_to_bf16 = rope_backward rounded to bf16, bit for bit (v heads too), its input kept");
    // a rotation is orthogonal: the transpose undoes the forward
    float *back = fcopy(y, nq);
    rope_backward(back, tc, ts, B, S, H, KV, hd);
    double e3 = nerr_ff(back, x, nq);
    CHECK(e3 < 1e-6, "rope_backward(rope_forward(x)) == x (err %.2e)", e3);
    // the kernel tables drive the kernel rotation as the formula says
    float *y2 = fcopy(x, nq);
    rope_forward(y2, cs, sn, B, S, H, KV, hd);
    double *ref2 = to_d(x, nq), *cd = dnew((size_t)S * half), *sd = dnew((size_t)S * half);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            double ang = (double)(pos0 + s) * pow(theta, -2.0 * i / hd);
            cd[s * half + i] = cos(ang);
            sd[s * half + i] = sin(ang);
        }
    rope_d(ref2, cd, sd, B, S, H, KV, hd);
    double e4 = nerr_f(y2, ref2, nq);
    CHECK(e4 < 1e-5, "rope_tables + rope_forward vs the double formula, pos0=%d (err %.2e)", pos0, e4);
    tfree_all();
}

// --------------------------------------------------------------- attention ----

typedef struct { double *x, *tmp, *out, *R, *cs, *sn; int B, S, H, KV, hd, with_rope; } att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    size_t n = (size_t)c->B * c->S * (c->H + 2 * c->KV) * c->hd;
    const double *in = c->x;
    if (c->with_rope) {
        memcpy(c->tmp, c->x, n * sizeof(double));
        rope_d(c->tmp, c->cs, c->sn, c->B, c->S, c->H, c->KV, c->hd);
        in = c->tmp;
    }
    attention_d(c->out, NULL, in, c->B, c->S, c->H, c->KV, c->hd);
    return dot_d(c->out, c->R, (size_t)c->B * c->S * c->H * c->hd);
}

// Positions 0..S-1 for the single-block kernels.
static int *positions(int S) {
    int *p = talloc(sizeof(int) * (size_t)S);
    for (int i = 0; i < S; i++) p[i] = i;
    return p;
}

// log sum_j<=t exp(score_j) for every (b, h, t), in double: the saved log-sum-exp.
static void lse_d(double *lse, const double *qkv, int B, int S, int H, int KV, int hd) {
    int W = (H + 2 * KV) * hd, group = H / KV;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < S; t++) {
                const double *q = qkv + (size_t)(b * S + t) * W + (size_t)h * hd;
                double mx = -INFINITY, z = 0.0, sc[512];
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + (size_t)(b * S + j) * W + (size_t)(H + h / group) * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++) s += q[d] * k[d];
                    sc[j] = s / sqrt((double)hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= t; j++) z += exp(sc[j] - mx);
                lse[((size_t)b * H + h) * S + t] = mx + log(z);
            }
}

static void test_attention(void) {
    // Small S: everything against the textbook and central differences. Large S:
    // several 64-row query tiles and two 128-key chunks (and skipped masked tiles); the backward is checked on a
    // sample of elements, central differences being O(n) forwards each.
    static const int cfg[][5] = {  // B, S, H, KV, hd
        {2, 6, 4, 2, 4}, {2, 5, 4, 4, 8}, {2, 7, 4, 1, 4}, {1, 150, 4, 2, 8}};
    for (int k = 0; k < 4; k++) {
        int B = cfg[k][0], S = cfg[k][1], H = cfg[k][2], KV = cfg[k][3], hd = cfg[k][4];
        size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd;
        size_t nr = (size_t)B * H * S;
        rng_seed(50 + k);
        int *pos = positions(S);
        float *qkv = fnew(nq), *out = fnew(no), *lse = fnew(nr), *mrun = fnew(nr), *lrun = fnew(nr);
        float *R = fnew(no), *scratch = fnew(attention_scratch_floats(hd));
        fill(qkv, nq, -2, 2);  // scores of a few units: peaked, non-trivial softmax
        fill(R, no, -1, 1);
        fill(out, no, 7, 8);  // garbage: the forward writes every entry
        attention_forward(out, lse, mrun, lrun, qkv, pos, B, S, H, KV, hd, scratch);
        double *ref = dnew(no), *lref = dnew(nr);
        att_ctx c = {to_d(qkv, nq), NULL, dnew(no), to_d(R, no), NULL, NULL, B, S, H, KV, hd, 0};
        attention_d(ref, NULL, c.x, B, S, H, KV, hd);
        lse_d(lref, c.x, B, S, H, KV, hd);
        double e = nerr_f(out, ref, no);
        CHECK(e < TOL_FWD, "attention_forward H=%d KV=%d hd=%d S=%d vs textbook masked softmax (err %.2e)", H, KV, hd, S, e);
        double el = nerr_f(lse, lref, nr);
        CHECK(el < TOL_FWD, "attention_forward S=%d saves lse = log sum exp(visible scores) (err %.2e)", S, el);

        float *dqkv = fnew(nq), *rowdot = fnew(nr);
        fill(dqkv, nq, 300, 400);  // garbage: dqkv is overwritten
        fill(scratch, attention_scratch_floats(hd), -500, 500);  // garbage: scratch is workspace
        attention_backward(dqkv, rowdot, R, qkv, out, lse, pos, B, S, H, KV, hd, scratch);
        if (S < 64) {
            double *g = dnew(nq);
            fd_grad(att_loss, &c, c.x, nq, g);
            double eb = nerr_f(dqkv, g, nq);
            CHECK(eb < TOL_BWD, "attention_backward H=%d KV=%d dq,dk,dv vs FD, overwrites garbage dqkv (err %.2e)", H, KV, eb);
        } else {
            // Central differences on 120 sampled elements of q, k and v.
            double worst = 0.0, scale = 0.0;
            for (size_t i = 0; i < nq; i++) scale = fmax(scale, fabs(dqkv[i]));
            for (int t = 0; t < 120; t++) {
                size_t i = (size_t)(rng_unif() * (double)nq) % nq;
                double x0 = c.x[i], hstep = 1e-6;
                c.x[i] = x0 + hstep;
                double lp = att_loss(&c);
                c.x[i] = x0 - hstep;
                double lm = att_loss(&c);
                c.x[i] = x0;
                worst = fmax(worst, fabs((lp - lm) / (2 * hstep) - dqkv[i]) / scale);
            }
            CHECK(worst < TOL_BWD, "attention_backward S=%d (3 tiles, masked tiles skipped) vs FD on 120 elements (err %.2e)", S, worst);
        }
        tfree_all();
    }

    // Blocks: a two-rank zigzag split (context parallelism) simulated in one process.
    // Rank r holds chunks r and 3-r of a sequence of 4C tokens; its queries fold in
    // its own key/value block and the other rank's, in either order. Output, lse and
    // gradients must equal the full-sequence attention at those positions. C = 72:
    // a rank's block (144 keys) spans two key chunks (128), the second one across
    // the zigzag jump, and three query tiles (64).
    {
        int B = 2, C = 72, S = 4 * C, Sl = 2 * C, H = 4, KV = 2, hd = 8, W = (H + 2 * KV) * hd;
        size_t nq = (size_t)B * S * W, no = (size_t)B * S * H * hd;
        rng_seed(77);
        int *pos = positions(S);
        float *qkv = fnew(nq), *R = fnew(no), *scratch = fnew(attention_scratch_floats(hd));
        fill(qkv, nq, -2, 2);
        fill(R, no, -1, 1);
        float *full = fnew(no), *flse = fnew((size_t)B * H * S), *fm = fnew((size_t)B * H * S), *fl = fnew((size_t)B * H * S);
        float *fdq = fnew(nq), *frd = fnew((size_t)B * H * S);
        attention_forward(full, flse, fm, fl, qkv, pos, B, S, H, KV, hd, scratch);
        attention_backward(fdq, frd, R, qkv, full, flse, pos, B, S, H, KV, hd, scratch);
        int lpos[2][144];  // (2, Sl)
        float *lq[2], *lR[2];  // per rank: (B*Sl, W) and (B*Sl, H*hd)
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < C; i++) {
                lpos[r][i] = r * C + i;
                lpos[r][C + i] = (3 - r) * C + i;
            }
            lq[r] = fnew((size_t)B * Sl * W);
            lR[r] = fnew((size_t)B * Sl * H * hd);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    memcpy(lq[r] + ((size_t)b * Sl + i) * W, qkv + ((size_t)b * S + lpos[r][i]) * W, sizeof(float) * W);
                    memcpy(lR[r] + ((size_t)b * Sl + i) * H * hd, R + ((size_t)b * S + lpos[r][i]) * H * hd, sizeof(float) * H * hd);
                }
        }
        double ef = 0, eg = 0, fscale = 0, gscale = 0;
        float *dkv[2] = {fnew((size_t)B * Sl * W), fnew((size_t)B * Sl * W)};  // each rank's k/v gradient
        for (int r = 0; r < 2; r++) {
            size_t nr = (size_t)B * H * Sl;
            float *o = fnew((size_t)B * Sl * H * hd), *lse = fnew(nr), *m = fnew(nr), *l = fnew(nr);
            attention_block_init(o, m, l, B, Sl, H, hd);
            for (int j = 0; j < 2; j++) {  // own block first, then the other rank's (ring order)
                int src = (r + j) % 2;
                attention_block_forward(o, m, l, lq[r], W, lq[src], W, H * hd, (H + KV) * hd,
                                        lpos[r], lpos[src], B, Sl, Sl, H, KV, hd, scratch);
            }
            attention_block_finish(o, lse, m, l, B, Sl, H, hd);
            float *rd = fnew(nr), *dq = fnew((size_t)B * Sl * W);
            attention_rowdot(rd, lR[r], o, B, Sl, H, hd);
            for (int j = 0; j < 2; j++) {
                int src = (r + j) % 2;
                attention_block_backward(dq, dkv[src], lq[r], W, lq[src], W, H * hd, (H + KV) * hd,
                                         lR[r], lse, rd, lpos[r], lpos[src], B, Sl, Sl, H, KV, hd, scratch);
            }
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    const float *want = full + ((size_t)b * S + lpos[r][i]) * H * hd;
                    const float *got = o + ((size_t)b * Sl + i) * H * hd;
                    for (int d = 0; d < H * hd; d++) {
                        ef = fmax(ef, fabs(want[d] - got[d]));
                        fscale = fmax(fscale, fabs(want[d]));
                    }
                    const float *wq = fdq + ((size_t)b * S + lpos[r][i]) * W, *gq = dq + ((size_t)b * Sl + i) * W;
                    for (int d = 0; d < H * hd; d++) {
                        eg = fmax(eg, fabs(wq[d] - gq[d]));
                        gscale = fmax(gscale, fabs(wq[d]));
                    }
                }
        }
        for (int r = 0; r < 2; r++)  // key/value gradients gathered from both ranks' queries
            for (int b = 0; b < B; b++)
                for (int i = 0; i < Sl; i++) {
                    const float *wk = fdq + ((size_t)b * S + lpos[r][i]) * W, *gk = dkv[r] + ((size_t)b * Sl + i) * W;
                    for (int d = H * hd; d < W; d++) eg = fmax(eg, fabs(wk[d] - gk[d]));
                }
        CHECK(ef / fscale < TOL_FWD, "ring blocks (zigzag, 2 ranks) merge to the full attention output (err %.2e)", ef / fscale);
        CHECK(eg / gscale < TOL_FWD, "ring blocks: dq and the accumulated dk, dv equal the full gradient (err %.2e)", eg / gscale);
        tfree_all();
    }

    // composite: rope -> attention, chained kernel backward (attention then rope)
    // vs FD through the double rope + attention, with respect to the pre-RoPE qkv.
    int B = 2, S = 6, H = 4, KV = 2, hd = 8, half = hd / 2;
    size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd, nr = (size_t)B * H * S;
    rng_seed(60);
    int *pos = positions(S);
    float *x = fnew(nq), *R = fnew(no), *cs = fnew((size_t)S * half), *sn = fnew((size_t)S * half);
    fill(x, nq, -2, 2);
    fill(R, no, -1, 1);
    rope_tables_theta(cs, sn, S, hd, 100.0, 2);
    float *q = fcopy(x, nq), *out = fnew(no), *lse = fnew(nr), *m = fnew(nr), *l = fnew(nr), *dq = fnew(nq);
    float *scr = fnew(attention_scratch_floats(hd));
    rope_forward(q, cs, sn, B, S, H, KV, hd);
    attention_forward(out, lse, m, l, q, pos, B, S, H, KV, hd, scr);
    attention_backward(dq, m, R, q, out, lse, pos, B, S, H, KV, hd, scr);
    rope_backward(dq, cs, sn, B, S, H, KV, hd);
    att_ctx c = {to_d(x, nq), dnew(nq), dnew(no), to_d(R, no), to_d(cs, (size_t)S * half),
                 to_d(sn, (size_t)S * half), B, S, H, KV, hd, 1};
    double *ref = dnew(no);
    memcpy(c.tmp, c.x, nq * sizeof(double));
    rope_d(c.tmp, c.cs, c.sn, B, S, H, KV, hd);
    attention_d(ref, NULL, c.tmp, B, S, H, KV, hd);
    double e = nerr_f(out, ref, no);
    CHECK(e < TOL_FWD, "rope + attention forward vs double composite (err %.2e)", e);
    double *g = dnew(nq);
    fd_grad(att_loss, &c, c.x, nq, g);
    double eb = nerr_f(dq, g, nq);
    CHECK(eb < TOL_BWD, "attention_backward then rope_backward vs FD of rope+attention (err %.2e)", eb);
    tfree_all();
}

// ------------------------------------------------------------------ SwiGLU ----

typedef struct { double *gu, *R, *out; int N, I; } swi_ctx;
static double swi_loss(void *p) {
    swi_ctx *c = p;
    swiglu_d(c->out, c->gu, c->N, c->I);
    return dot_d(c->out, c->R, (size_t)c->N * c->I);
}

static void test_swiglu(void) {
    for (int k = 0; k < 2; k++) {
        int N = 7, I = 10;
        size_t ngu = (size_t)N * 2 * I, no = (size_t)N * I;
        rng_seed(70 + k);
        float *gu = fnew(ngu), *out = fnew(no), *R = fnew(no), *dgu = fnew(ngu);
        fill(gu, ngu, -4, 4);
        if (k == 1)  // saturated gates: exp(-gate) overflows fp32 for gate < -88
            for (int n = 0; n < N; n++)
                for (int i = 0; i < I; i += 2) gu[(size_t)n * 2 * I + i] = (i % 4 ? 100.0f : -100.0f) + (float)n;
        fill(R, no, -1, 1);
        fill(out, no, 5, 6);
        swiglu_forward(out, gu, N, I);
        swi_ctx c = {to_d(gu, ngu), to_d(R, no), dnew(no), N, I};
        double *ref = dnew(no);
        swiglu_d(ref, c.gu, N, I);
        double e = nerr_f(out, ref, no);
        const char *what = k ? "with gates +-100" : "";
        CHECK(e < TOL_FWD, "swiglu_forward silu(gate)*up %s vs double loop (err %.2e)", what, e);
        double *g = dnew(ngu);
        fd_grad(swi_loss, &c, c.gu, ngu, g);
        fill(dgu, ngu, 200, 300);  // garbage: dgu is overwritten
        swiglu_backward(dgu, R, gu, N, I);
        double eb = nerr_f(dgu, g, ngu);
        CHECK(eb < TOL_BWD, "swiglu_backward %s vs FD, overwrites garbage dgu (err %.2e)", what, eb);
        tfree_all();
    }
}

// bf16 activations: round_to_bf16 rounds each value to a nearest bf16 (the
// shared bit trick, and within half a bf16 ulp: 8 significant bits, so 2^-8 of |x|); the SwiGLU ops on a
// gu kept as bf16 equal the fp32 ops on the widened values bit for bit, the
// forward's output rounded to bf16 (a row of 300 values: wider than the 256-value
// spans the CPU widens at a time), and differ from the fp32 ops on the unrounded
// gu (the rounding is not lost); the products with a bf16 output, input or
// output gradient equal the fp32 product rounded, or of the widened operand, bit
// for bit.
static void test_swiglu_bf16(void) {
    const int N = 5, F = 300;
    const size_t ngu = (size_t)N * 2 * F, no = (size_t)N * F;
    rng_seed(77);
    float *gu = fnew(ngu), *wide = fnew(ngu), *dout = fnew(no), *a = fnew(no), *b = fnew(no);
    float *da = fnew(ngu);
    uint16_t *gu16 = talloc(ngu * sizeof(uint16_t)), *a16 = talloc(no * sizeof(uint16_t));
    uint16_t *b16 = talloc(no * sizeof(uint16_t));
    fill(gu, ngu, -4, 4);
    fill(dout, no, -1, 1);
    round_to_bf16(gu16, gu, ngu);
    size_t same = 0, near = 0, changed = 0;
    for (size_t i = 0; i < ngu; i++) {
        wide[i] = bf16_to_f32(gu16[i]);
        same += gu16[i] == bf16_from_f32(gu[i]);
        near += fabsf(wide[i] - gu[i]) <= ldexpf(fabsf(gu[i]), -8);
        changed += wide[i] != gu[i];
    }
    CHECK(same == ngu && near == ngu && changed > ngu / 2,
          "round_to_bf16: %zu of %zu the nearest bf16 (%zu within 2^-8 relative, %zu changed)", same, ngu, near,
          changed);
    for (size_t i = 0; i < no; i++) b16[i] = 0x7fc0;  // garbage (NaN): out is overwritten
    swiglu_forward(a, wide, N, F);
    swiglu_forward_bf16(b16, gu16, N, F);
    round_to_bf16(a16, a, no);
    CHECK(!memcmp(a16, b16, no * sizeof(uint16_t)),
          "swiglu_forward_bf16 = swiglu_forward of the widened gu rounded to bf16, bit for bit");
    widen_from_bf16(b, b16, no);
    size_t exact = 0;
    for (size_t i = 0; i < no; i++) exact += b[i] == bf16_to_f32(b16[i]);
    CHECK(exact == no, "widen_from_bf16: %zu of %zu values exact", exact, no);
    uint16_t *dgu16 = talloc(ngu * sizeof(uint16_t)), *dref16 = talloc(ngu * sizeof(uint16_t));
    for (size_t i = 0; i < ngu; i++) dgu16[i] = 0x7fc0;  // garbage (NaN): dgu16 is overwritten
    swiglu_backward(da, dout, wide, N, F);
    swiglu_backward_to_bf16(dgu16, dout, gu16, N, F);
    round_to_bf16(dref16, da, ngu);
    CHECK(!memcmp(dgu16, dref16, ngu * sizeof(uint16_t)),
          "swiglu_backward_to_bf16 = swiglu_backward of the widened gu rounded to bf16, bit for bit");
    swiglu_forward(a, gu, N, F);
    double e = 0.0, top = 0.0;
    for (size_t i = 0; i < no; i++) e = fmax(e, fabs((double)a[i] - b[i])), top = fmax(top, fabs((double)a[i]));
    CHECK(e / top > 1e-4 && e / top < 2e-2,
          "swiglu_forward_bf16 differs from the fp32 op on the unrounded gu by %.2e relative (max-norm)", e / top);
    // matmul_forward_bf16 on the CPU: the bf16 input x16 (N, I) widened into its
    // scratch, the fp32 product into the other, rounded; the input's scratch may be
    // x16's own buffer (widened in place), with the same result.
    const int I = 24;
    float *x = fnew((size_t)N * I), *w = fnew((size_t)2 * F * I), *y = fnew(ngu), *scr = fnew(ngu);
    float *xs = fnew((size_t)N * I), *room = fnew((size_t)N * I);
    uint16_t *y16 = talloc(ngu * sizeof(uint16_t)), *x16 = talloc((size_t)N * I * sizeof(uint16_t));
    fill(x, (size_t)N * I, -1, 1);
    fill(w, (size_t)2 * F * I, -1, 1);
    round_to_bf16(x16, x, (size_t)N * I);
    widen_from_bf16(x, x16, (size_t)N * I);  // x: the widened input from here on
    fill(scr, ngu, 7, 8);
    matmul_forward(y, x, w, N, I, 2 * F);
    matmul_forward_bf16(y16, scr, x16, xs, w, N, I, 2 * F);
    round_to_bf16(gu16, y, ngu);
    int ok = !memcmp(scr, y, ngu * sizeof(float)) && !memcmp(y16, gu16, ngu * sizeof(uint16_t));
    memcpy(room, x16, (size_t)N * I * sizeof(uint16_t));
    matmul_forward_bf16(y16, scr, (uint16_t *)room, room, w, N, I, 2 * F);
    ok &= !memcmp(y16, gu16, ngu * sizeof(uint16_t)) && !memcmp(room, x, (size_t)N * I * sizeof(float));
    CHECK(ok, "matmul_forward_bf16 = round_to_bf16 of matmul_forward of the widened input, bit for bit (its "
              "scratch: the fp32 product), the input widened in place too");
    // matmul_*_from_bf16 on the CPU: the input widened into the scratch, then sgemm.
    // in16 = gu16 (N, 2F) as the input of a product 2F -> I (a down projection).
    float *dw1 = fnew((size_t)I * 2 * F), *dw2 = fnew((size_t)I * 2 * F), *o1 = fnew((size_t)N * I);
    float *o2 = fnew((size_t)N * I), *dx1 = fnew(ngu), *dx2 = fnew(ngu), *dy = fnew((size_t)N * I);
    fill(dy, (size_t)N * I, -1, 1);
    widen_from_bf16(y, gu16, ngu);  // the widened input, by hand
    matmul_forward(o1, y, w, N, 2 * F, I);
    fill(scr, ngu, 7, 8);
    matmul_forward_from_bf16(o2, gu16, scr, w, N, 2 * F, I);
    ok = !memcmp(o1, o2, (size_t)N * I * sizeof(float));
    memcpy(scr, gu16, ngu * sizeof(uint16_t));
    matmul_forward_from_bf16(o2, (uint16_t *)scr, scr, w, N, 2 * F, I);
    CHECK(ok && !memcmp(o1, o2, (size_t)N * I * sizeof(float)),
          "matmul_forward_from_bf16 = matmul_forward of the widened input, bit for bit (in place too)");
    // The residual add after the product (matmul_*_add): the product, then + add.
    float *res = fnew((size_t)N * I), *o3 = fnew((size_t)N * I);
    fill(res, (size_t)N * I, -3, 3);
    fill(scr, ngu, 7, 8);
    matmul_forward_from_bf16_add(o2, res, gu16, scr, w, N, 2 * F, I);
    matmul_forward_add(o3, res, y, w, N, 2 * F, I);
    ok = 1;
    for (size_t i = 0; i < (size_t)N * I; i++) {
        const float want = o1[i] + res[i];
        ok &= !memcmp(&o2[i], &want, sizeof want) && !memcmp(&o3[i], &want, sizeof want);
    }
    CHECK(ok, "matmul_forward_add and matmul_forward_from_bf16_add = the product + the residual, bit for bit");
    matmul_backward(dx1, dw1, dy, y, w, N, 2 * F, I, 0);
    fill(scr, ngu, 7, 8);
    matmul_backward_from_bf16(dx2, dw2, dy, gu16, scr, w, N, 2 * F, I, 0);
    CHECK(!memcmp(dx1, dx2, ngu * sizeof(float)) && !memcmp(dw1, dw2, (size_t)I * 2 * F * sizeof(float)),
          "matmul_backward_from_bf16 = matmul_backward of the widened input (din, dweight), bit for bit");
    // matmul_backward_bf16 on the CPU: the output gradient and the input widened
    // into their scratches, then sgemm. dout16 = dgu16 (N, 2F) as a gate|up
    // product's (I -> 2F) gradient, in16 = x16; din and dweight in one call and in
    // two, and the input widened in place: the same bits.
    float *din1 = fnew((size_t)N * I), *din2 = fnew((size_t)N * I), *gw1 = fnew((size_t)2 * F * I);
    float *gw2 = fnew((size_t)2 * F * I);
    widen_from_bf16(y, dgu16, ngu);  // the widened gradient, by hand
    matmul_backward(din1, gw1, y, x, w, N, I, 2 * F, 0);
    fill(scr, ngu, 7, 8);
    matmul_backward_bf16(din2, gw2, dgu16, scr, x16, xs, w, N, I, 2 * F, 0);
    CHECK(!memcmp(din1, din2, (size_t)N * I * sizeof(float)) && !memcmp(gw1, gw2, (size_t)2 * F * I * sizeof(float)),
          "matmul_backward_bf16 = matmul_backward of the widened output gradient and input (din, dweight), bit for "
          "bit");
    fill(din2, (size_t)N * I, 7, 8), fill(gw2, (size_t)2 * F * I, 0, 0);
    memcpy(room, x16, (size_t)N * I * sizeof(uint16_t));
    matmul_backward_bf16(din2, NULL, dgu16, scr, NULL, NULL, w, N, I, 2 * F, 0);
    matmul_backward_bf16(NULL, gw2, dgu16, scr, (uint16_t *)room, room, NULL, N, I, 2 * F, 0);
    CHECK(!memcmp(din1, din2, (size_t)N * I * sizeof(float)) && !memcmp(gw1, gw2, (size_t)2 * F * I * sizeof(float)),
          "matmul_backward_bf16 asked for din and dweight apart, the input widened in place: the same bits");
    tfree_all();
}

// ----------------------------------------------------------- cross-entropy ----

typedef struct { double *logits; const int32_t *tg; int N, V; double scale; } ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    return c->scale * ce_d(c->logits, c->tg, c->N, c->V);
}

static void test_cross_entropy(void) {
    static const int cfg[][2] = {{6, 11}, {5, 50}, {6, 23}};  // N, V; the last: huge logits
    for (int k = 0; k < 3; k++) {
        int N = cfg[k][0], V = cfg[k][1];
        size_t nl = (size_t)N * V;
        rng_seed(80 + k);
        float *logits = fnew(nl);
        int32_t *tg = talloc(N * sizeof(int32_t));
        fill(logits, nl, -3, 3);
        for (int n = 0; n < N; n++) tg[n] = (int32_t)(rng_u64() % (uint64_t)V);
        tg[0] = 0;
        tg[N - 1] = V - 1;  // both ends of the vocabulary
        const char *what = "";
        if (k == 2) {
            // exp(100) overflows fp32: only a max-subtracted softmax survives
            what = " (logits up to +100)";
            for (size_t i = 0; i < (size_t)V; i++) logits[i] += 100.0f;       // row 0: all ~100
            logits[1 * V + 5] = 100.0f;                                      // row 1: one peak
            logits[2 * V + tg[2]] = -100.0f;                                 // row 2: target far below
            for (size_t i = 0; i < (size_t)V; i++) logits[3 * V + i] = 80.0f + 0.01f * (float)i;
        }
        float grad_scale = 0.37f;
        ce_ctx c = {to_d(logits, nl), tg, N, V, (double)grad_scale};
        double ref = ce_d(c.logits, tg, N, V);
        float *keep = fcopy(logits, nl);
        double l1 = 0.0;
        cross_entropy_forward(logits, tg, N, V, &l1);
        CHECK(rel_diff(l1, ref) < 1e-6, "cross_entropy_forward N=%d V=%d%s sum=%.9g vs double %.9g", N, V, what, l1, ref);
        CHECK(memcmp(keep, logits, nl * sizeof(float)) == 0, "cross_entropy_forward N=%d V=%d leaves logits untouched", N, V);
        double *g = dnew(nl);
        fd_grad(ce_loss, &c, c.logits, nl, g);
        double l2 = 1.5;  // the ops add their sum to the accumulator
        cross_entropy_forward_backward(logits, tg, N, V, grad_scale, &l2);
        CHECK(rel_diff(l2, 1.5 + ref) < 1e-6, "cross_entropy_forward_backward N=%d V=%d%s adds sum=%.9g vs 1.5 + double %.9g", N, V, what, l2, ref);
        double e = nerr_f(logits, g, nl);
        CHECK(e < TOL_BWD, "cross_entropy_forward_backward N=%d V=%d%s dlogits vs FD * grad_scale (err %.2e)", N, V, what, e);
        tfree_all();
    }
}

// The bf16 gradient forms (ops.h: cross_entropy_forward_backward_bf16, ce_shard_finish
// with CE_GRADS_BF16) against the fp32 ones on the same logits: the same loss, and
// each row's values, narrowed in place into the first half of its bytes, the fp32
// gradient rounded to nearest even, bit for bit. Widths with a partial last chunk of
// the in-place narrowing (64 values) and a vocabulary slice with padding columns.
static void test_cross_entropy_bf16(void) {
    static const int widths[] = {11, 64, 130, 257, 1000};
    for (int k = 0; k < 5; k++) {
        const int N = 5, V = widths[k], Vl = V + 3, v0 = 7;  // the shard: ids v0 .. v0+V-1, 3 padding columns
        const size_t nl = (size_t)N * Vl;
        rng_seed(170 + k);
        float *logits = fnew(nl), *f32 = fnew(nl), *b16 = fnew(nl);
        int32_t *tg = talloc(N * sizeof(int32_t));
        fill(logits, nl, -4, 4);
        for (int n = 0; n < N; n++) tg[n] = (int32_t)(rng_u64() % (uint64_t)V);
        // whole vocabulary: rows V apart
        memcpy(f32, logits, (size_t)N * V * sizeof(float));
        memcpy(b16, logits, (size_t)N * V * sizeof(float));
        double l32 = 0.0, l16 = 0.0;
        cross_entropy_forward_backward(f32, tg, N, V, 0.29f, &l32);
        cross_entropy_forward_backward_bf16(b16, tg, N, V, 0.29f, &l16);
        int bad = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < V; j++)
                bad += ((const uint16_t *)b16)[(size_t)n * CE_LD16(V) + j] != bf16_from_f32(f32[(size_t)n * V + j]);
        CHECK(l16 == l32 && bad == 0,
              "cross_entropy_forward_backward_bf16 V=%d: loss %.17g vs fp32's %.17g, %d of %d values not the fp32 "
              "gradient rounded",
              V, l16, l32, bad, N * V);
        // a vocabulary slice: targets v0 .. v0+V-1 land in it, the statistics over it alone
        for (int n = 0; n < N; n++) tg[n] += n == 1 ? 9999 : v0;  // row 1's target lies in another slice
        float *st = fnew(3 * (size_t)N);  // rowmax, sumexp, tlogit
        ce_shard_max(logits, N, Vl, V, st);
        ce_shard_sums(logits, tg, N, Vl, V, v0, st, st + N, st + 2 * N);
        memcpy(f32, logits, nl * sizeof(float));
        memcpy(b16, logits, nl * sizeof(float));
        l32 = l16 = 0.0;
        ce_shard_finish(f32, tg, N, Vl, V, v0, st, st + N, st + 2 * N, 0.29f, CE_GRADS_F32, &l32);
        ce_shard_finish(b16, tg, N, Vl, V, v0, st, st + N, st + 2 * N, 0.29f, CE_GRADS_BF16, &l16);
        bad = 0;
        int pad = 0;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vl; j++) {
                const uint16_t h = ((const uint16_t *)b16)[(size_t)n * CE_LD16(Vl) + j];
                bad += h != bf16_from_f32(f32[(size_t)n * Vl + j]);
                pad += j >= V && h != 0;
            }
        CHECK(l16 == l32 && bad == 0 && pad == 0,
              "ce_shard_finish CE_GRADS_BF16 Vl=%d: loss %.17g vs fp32's %.17g, %d of %d values not the fp32 "
              "gradient rounded, %d padding values not 0",
              Vl, l16, l32, bad, N * Vl, pad);
        tfree_all();
    }
}

// --------------------------------------------------------------- optimizer ----

// sum_squares into a fresh accumulator.
static double sumsq(const float *x, size_t n) {
    double s = 0.0;
    sum_squares(x, n, &s);
    return s;
}

static void test_sum_squares_scale(void) {
    // One value 1e3 then 2M values ~1e-3: total ~1e6 + 2. In fp32, adding a 1e-6
    // square to 1e6 rounds away (ulp(1e6) = 0.0625), so fp32 accumulation loses
    // ~2e-6 relative; double accumulation keeps ~1e-16.
    size_t n = (size_t)1 << 21;
    rng_seed(90);
    float *x = fnew(n);
    for (size_t i = 0; i < n; i++) {
        float m = 5e-4f + 1e-3f * (float)rng_unif();
        x[i] = (rng_u64() & 1) ? m : -m;
    }
    x[0] = 1000.0f;
    long double ref = 0.0L;
    float fsum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        ref += (long double)x[i] * x[i];
        fsum += x[i] * x[i];
    }
    double s = sumsq(x, n);
    CHECK(rel_diff(s, (double)ref) < 1e-7,
          "sum_squares 1e3 then 2M values ~1e-3 = %.12g vs %.12Lg (rel %.1e; fp32 accumulation would be %.1e)",
          s, ref, rel_diff(s, (double)ref), rel_diff(fsum, (double)ref));
    // random mix of magnitudes 1e-3 and 1e3
    size_t n2 = 1000003;
    ref = 0.0L;
    for (size_t i = 0; i < n2; i++) {
        x[i] = (float)((rng_unif() - 0.5) * ((rng_u64() & 1) ? 2e-3 : 2e3));
        ref += (long double)x[i] * x[i];
    }
    s = sumsq(x, n2);
    CHECK(rel_diff(s, (double)ref) < 1e-7, "sum_squares mixed 1e-3/1e3, n=%zu (rel %.1e)", n2, rel_diff(s, (double)ref));
    CHECK(sumsq(x, 0) == 0.0 && sumsq(x, 1) == (double)x[0] * x[0], "sum_squares n=0 and n=1");
    double acc = 2.0;
    sum_squares(x, 1, &acc);
    sum_squares(x + 1, 1, &acc);
    CHECK(acc == (2.0 + (double)x[0] * x[0]) + (double)x[1] * x[1], "sum_squares adds to its accumulator");
    tfree_all();
}

// PyTorch AdamW in double, the formula of ops.h.
static void adamw_d(double *p, const double *g, double *m, double *v, size_t n, double lr,
                    double b1, double b2, double eps, double wd, int t) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        p[i] -= lr * wd * p[i];
        p[i] -= lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + eps);
    }
}

static double max_elem_rel(const float *a, const double *b, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = rel_diff(a[i], b[i]);
        if (!isfinite(r)) return INFINITY;
        e = fmax(e, r);
    }
    return e;
}

static void test_adamw(void) {
    size_t n = 1003;
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    rng_seed(100);
    float *p = fnew(n), *m = fnew(n), *v = fnew(n), *g = fnew(n), *pprev = fnew(n);
    fill(p, n, -1, 1);
    double *pd = to_d(p, n), *md = dnew(n), *vd = dnew(n), *gd = dnew(n), *pdprev = dnew(n);
    for (int t = 1; t <= 2; t++) {
        fill(g, n, -1, 1);
        for (size_t i = 0; i < n; i += 3) g[i] *= 1e-3f;  // a spread of magnitudes
        for (size_t i = 1; i < n; i += 7) g[i] *= 30.0f;
        g[5] = 0.0f;  // weight decay only
        g[8] = 2e-9f;  // |g| ~ eps: eps matters here
        g[11] = -5e-9f;
        for (size_t i = 0; i < n; i++) gd[i] = g[i];
        memcpy(pprev, p, n * sizeof(float));
        memcpy(pdprev, pd, n * sizeof(double));
        adamw_update(p, g, m, v, n, 1.0f, lr, b1, b2, eps, wd, t);
        adamw_d(pd, gd, md, vd, n, lr, b1, b2, eps, wd, t);
        // m can cancel (b1 m + (1-b1) g), so it is compared max-abs normalised;
        // v is a sum of positive terms, compared element by element
        double em = nerr_f(m, md, n), ev = max_elem_rel(v, vd, n);
        CHECK(em < 1e-6, "adamw_update t=%d first moment m (err %.2e)", t, em);
        CHECK(ev < 1e-5, "adamw_update t=%d second moment v (max rel %.2e)", t, ev);
        // the step itself, p_t - p_{t-1}, against the double step (weight decay, bias
        // corrections 1-b^t and eps all change it by far more than the tolerance)
        double *step = added(p, pprev, n), *stepd = dnew(n);
        for (size_t i = 0; i < n; i++) stepd[i] = pd[i] - pdprev[i];
        double es = nerr(step, stepd, n);
        CHECK(es < 5e-5, "adamw_update t=%d parameter step vs double PyTorch formula (err %.2e)", t, es);
        double ep = nerr_f(p, pd, n);
        CHECK(ep < 1e-6, "adamw_update t=%d parameters (err %.2e)", t, ep);
        // elements where eps and weight decay dominate, checked one by one
        double e5 = rel_diff(step[5], stepd[5]), e8 = rel_diff(step[8], stepd[8]);
        CHECK(e5 < 1e-3 && e8 < 1e-3, "adamw_update t=%d g=0 (decay only, %.3e vs %.3e) and g~eps (%.4e vs %.4e)",
              t, step[5], stepd[5], step[8], stepd[8]);
    }
    // Clipping folded in: grad_scale s on g is the update on the gradients s*g (what
    // scaling them in place first gave), bit for bit, and g is left as it was.
    {
        const float s = 0.3141f;
        float *p1 = fnew(n), *m1 = fnew(n), *v1 = fnew(n), *g1 = fnew(n), *gs = fnew(n);
        memcpy(p1, p, n * sizeof(float));
        memcpy(m1, m, n * sizeof(float));
        memcpy(v1, v, n * sizeof(float));
        memcpy(g1, g, n * sizeof(float));
        for (size_t i = 0; i < n; i++) gs[i] = g[i] * s;
        memcpy(pprev, p, n * sizeof(float));
        adamw_update(p, gs, m, v, n, 1.0f, lr, b1, b2, eps, wd, 3);
        adamw_update(p1, g1, m1, v1, n, s, lr, b1, b2, eps, wd, 3);
        int same = memcmp(p, p1, n * sizeof(float)) == 0 && memcmp(m, m1, n * sizeof(float)) == 0 &&
                   memcmp(v, v1, n * sizeof(float)) == 0 && memcmp(g, g1, n * sizeof(float)) == 0;
        double moved = nerr_ff(p, pprev, n);
        CHECK(same && moved > 0, "adamw_update grad_scale %.4f == gradients scaled first, bitwise (p, m, v; grad untouched; step moved p by %.1e)",
              s, moved);
    }
    tfree_all();
}

// ----------------------------------------------------------------- threads ----

// The buffer ops of the backend boundary against plain loops: a strided block
// copy, an overlapping move in both directions, a copy and zeroing that leave the
// neighbours untouched.
static void test_buffers(void) {
    float a[64], b[64], want[64];
    for (int i = 0; i < 64; i++) a[i] = (float)i + 0.5f, b[i] = -1.0f;
    copy_f32(b + 3, a + 10, 20);
    int ok = b[2] == -1.0f && b[23] == -1.0f;
    for (int i = 0; i < 20; i++) ok &= b[3 + i] == a[10 + i];
    CHECK(ok, "copy_f32: 20 elements copied, neighbours untouched");
    zero_f32(b + 5, 7);
    ok = b[4] == a[11] && b[12] == a[19];
    for (int i = 5; i < 12; i++) ok &= b[i] == 0.0f;
    CHECK(ok, "zero_f32: 7 elements zeroed, neighbours untouched");
    for (int dir = 0; dir < 2; dir++) {  // forward and backward overlap
        for (int i = 0; i < 64; i++) a[i] = want[i] = (float)i;
        int from = dir ? 4 : 10, to = dir ? 10 : 4, n = 30;
        for (int i = 0; i < n; i++) want[to + i] = (float)(from + i);
        move_f32(a + to, a + from, (size_t)n);
        CHECK(!memcmp(a, want, sizeof a), "move_f32: overlapping move of %d elements from %d to %d", n, from, to);
    }
    // copy_rows_f32: the columns 3..7 of a (6 x 10) block into a (6 x 5) block.
    float src[60], dst[30];
    for (int i = 0; i < 60; i++) src[i] = (float)i;
    for (int i = 0; i < 30; i++) dst[i] = -1.0f;
    copy_rows_f32(dst, 5, src + 3, 10, 6, 5);
    ok = 1;
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 5; c++) ok &= dst[r * 5 + c] == src[r * 10 + 3 + c];
    CHECK(ok, "copy_rows_f32: a 6 x 5 block out of rows of 10 at column 3");

    // Above 2 MB zero_f32, zero_f64 and copy_f32 cut the buffer into one piece a
    // thread (ops/buffers_cpu.c): an odd length at an address off the cache lines,
    // every value written and the neighbours on both sides untouched, from outside
    // and from inside a parallel region (there one call).
    const size_t big = ((size_t)1 << 20) + 13;  // (big) floats: 4 MB and 52 bytes
    float *x = malloc(sizeof(float) * (big + 8)), *y = malloc(sizeof(float) * (big + 8));  // (big + 8) each
    double *z = malloc(sizeof(double) * (big + 8));                                           // (big + 8)
    for (int inside = 0; inside < 2; inside++) {
        for (size_t i = 0; i < big + 8; i++) x[i] = (float)(i % 1000) + 0.25f, y[i] = -1.0f, z[i] = 2.0;
#pragma omp parallel if (inside)
        {
#pragma omp single
            {
                copy_f32(y + 3, x + 5, big);
                zero_f32(x + 3, big);
                zero_f64(z + 3, big);
            }
        }
        int copied = y[2] == -1.0f && y[big + 3] == -1.0f, zeroed = x[2] != 0.0f && x[big + 3] != 0.0f;
        int zeroed64 = z[2] == 2.0 && z[big + 3] == 2.0;
        for (size_t i = 0; i < big; i++) {
            copied &= y[3 + i] == (float)((i + 5) % 1000) + 0.25f;
            zeroed &= x[3 + i] == 0.0f;
            zeroed64 &= z[3 + i] == 0.0;
        }
        CHECK(copied && zeroed && zeroed64,
              "copy_f32, zero_f32, zero_f64 of %zu values off the cache lines, %s a parallel region: every value "
              "written, the neighbours untouched (copied %d, zeroed %d, zeroed f64 %d)",
              big, inside ? "inside" : "outside", copied, zeroed, zeroed64);
    }
    free(x), free(y), free(z);
}

static void test_threads(void) {
    int N = 200, I = 256, O = 320;  // large enough for BLAS to split the work
    rng_seed(110);
    float *in = fnew((size_t)N * I), *w = fnew((size_t)O * I), *dout = fnew((size_t)N * O);
    fill(in, (size_t)N * I, -1, 1);
    fill(w, (size_t)O * I, -1, 1);
    fill(dout, (size_t)N * O, -1, 1);
    float *o[2], *di[2], *dw[2];
    int B = 2, S = 16, H = 4, KV = 2, hd = 8;
    size_t nq = (size_t)B * S * (H + 2 * KV) * hd, no = (size_t)B * S * H * hd;
    size_t np = (size_t)B * H * S;  // lse rows
    int *pos = positions(S);
    float *qkv = fnew(nq), *R = fnew(no), *ao[2], *pr[2], *dq[2];
    fill(qkv, nq, -2, 2);
    fill(R, no, -1, 1);
    for (int k = 0; k < 2; k++) {
        ops_set_threads(k + 1);
        o[k] = fnew((size_t)N * O);
        di[k] = fnew((size_t)N * I);
        dw[k] = fnew((size_t)O * I);
        matmul_forward(o[k], in, w, N, I, O);
        matmul_backward(di[k], dw[k], dout, in, w, N, I, O, 0);
        ao[k] = fnew(no);
        pr[k] = fnew(np);
        dq[k] = fnew(nq);
        float *scr = fnew(attention_scratch_floats(hd));
        attention_forward(ao[k], pr[k], fnew(np), fnew(np), qkv, pos, B, S, H, KV, hd, scr);
        attention_backward(dq[k], fnew(np), R, qkv, ao[k], pr[k], pos, B, S, H, KV, hd, scr);
    }
    ops_set_threads(2);
    double e1 = nerr_ff(o[1], o[0], (size_t)N * O);
    CHECK(e1 <= 1e-6, "matmul_forward 1 vs 2 threads (err %.1e%s)", e1, e1 == 0 ? ", bitwise" : "");
    double e2 = fmax(nerr_ff(di[1], di[0], (size_t)N * I), nerr_ff(dw[1], dw[0], (size_t)O * I));
    CHECK(e2 <= 1e-6, "matmul_backward 1 vs 2 threads (err %.1e%s)", e2, e2 == 0 ? ", bitwise" : "");
    double e3 = fmax(nerr_ff(ao[1], ao[0], no), nerr_ff(pr[1], pr[0], np));
    CHECK(e3 <= 1e-6, "attention_forward 1 vs 2 threads (err %.1e%s)", e3, e3 == 0 ? ", bitwise" : "");
    double e4 = nerr_ff(dq[1], dq[0], nq);
    CHECK(e4 <= 1e-6, "attention_backward 1 vs 2 threads (err %.1e%s)", e4, e4 == 0 ? ", bitwise" : "");
    tfree_all();
}

// OpenBLAS's fallback corrected (ops/blas_cores.c): an SSE core OpenBLAS fell back
// to is replaced by the widest family the CPU's features allow; a core it
// recognised, a CPU without AVX and an unknown choice are left alone.
static void test_blas_cores(void) {
    const unsigned avx = BLAS_CPU_AVX, avx2 = avx | BLAS_CPU_AVX2_FMA, avx512 = avx2 | BLAS_CPU_AVX512,
                   bf16 = avx512 | BLAS_CPU_AVX512_BF16;
    struct {
        const char *chosen;
        unsigned features;
        const char *want;  // NULL: keep OpenBLAS's choice
    } cases[] = {
        {"Prescott", bf16, "Cooperlake"},  // Emerald Rapids under OpenBLAS 0.3.21
        {"Prescott", avx512, "SkylakeX"},  {"Nehalem", avx2, "Haswell"},
        {"Core2", avx, "Sandybridge"},     {"Prescott", 0, NULL},
        {"Haswell", bf16, NULL},           {"Zen", avx512, NULL},
        {"SkylakeX", bf16, NULL},          {"Sandybridge", avx512, NULL},
        {NULL, bf16, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = blas_core_upgrade(cases[i].chosen, cases[i].features);
        CHECK(got == cases[i].want || (got && cases[i].want && strcmp(got, cases[i].want) == 0),
              "blas_core_upgrade(%s, features 0x%x) = %s", cases[i].chosen ? cases[i].chosen : "NULL",
              cases[i].features, cases[i].want ? cases[i].want : "keep");
    }
    // The feature bits nest as the families do: AVX-512 implies AVX2 and FMA, which imply AVX.
    unsigned f = blas_cpu_features();
    CHECK((!(f & BLAS_CPU_AVX512_BF16) || (f & BLAS_CPU_AVX512)) && (!(f & BLAS_CPU_AVX512) || (f & BLAS_CPU_AVX2_FMA)) &&
              (!(f & BLAS_CPU_AVX2_FMA) || (f & BLAS_CPU_AVX)),
          "blas_cpu_features on this CPU (0x%x) nest: bf16 => AVX-512 => AVX2+FMA => AVX", f);
}

int main(void) {
    test_ids_outside_vocab();  // forks: before any OpenMP team exists
    test_buffers();
    ops_set_threads(2);
    test_matmul();
    test_embedding();
    test_pieces();
    test_rmsnorm();
    test_residual();
    test_rope();
    test_rope_frequencies();
    test_attention();
    test_swiglu();
    test_swiglu_bf16();
    test_cross_entropy();
    test_cross_entropy_bf16();
    test_sum_squares_scale();
    test_adamw();
    test_threads();
    test_blas_cores();
    return check_summary();
}
