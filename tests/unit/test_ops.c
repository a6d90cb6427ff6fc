// tests/unit/test_ops.c — independent tests of the kernels in src/ops/ops.h: the
// matrix products, the embedding and its pieces, RMSNorm, the residual add and the
// buffer ops (RoPE and attention: test_ops_attention.c; SwiGLU, the loss, the
// gradient norm and AdamW: test_ops_loss_optim.c; threads and the BLAS:
// test_ops_threads.c; what the four share: ops_reference.h).
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
#include "ops/ops.h"
#include "ops_reference.h"
#include "run_child.h"

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

// ----------------------------------------------------------------- buffers ----

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

int main(void) {
    test_ids_outside_vocab();  // forks: before any OpenMP team exists
    test_buffers();
    ops_set_threads(2);
    test_matmul();
    test_embedding();
    test_pieces();
    test_rmsnorm();
    test_residual();
    return check_summary();
}
