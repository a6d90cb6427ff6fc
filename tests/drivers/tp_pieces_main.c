// tests/drivers/tp_pieces_main.c — MPI driver for tests/shell/test_tp_pieces.sh: every
// tensor-parallel piece (parallel_layers/tensor_parallel.c and the decoder stack
// built on it) against its 1-rank equivalent, forward and backward, with and without
// sequence parallel. Run under `mpirun -np TP`: the whole world is one TP group.
//
// Every input is a function of (name, element index) (init_normal), so each rank
// computes the full 1-rank result itself and compares its own slice with the
// matching part of it. Errors are max-abs normalised (max |tp - full| / max |full|
// over the compared tensor), reduced with a max over the ranks, and rank 0 prints
// one PASS/FAIL line per check.
//
// Pieces:
//   column-parallel linear   tp_gather, tp_column_forward (row slice of W);
//                            tp_column_backward: input gradient reduced while dW rows
//                            are computed
//   row-parallel linear      tp_row_forward (column slice of W + reduction);
//                            tp_row_backward: input gradient and dW columns
//   sequence-parallel norm   rmsnorm on token shards + tp_norm_backward's dweight sum
//   vocab-parallel embedding tp_embedding_forward/backward, V not divisible by tp
//                            (padding rows), tokens in every shard, a rank whose
//                            vocab slice is empty
//   vocab-parallel loss      tp_cross_entropy vs cross_entropy_forward(_backward)
//                            on the full logits: loss sum, dlogits slices, padding
//                            columns zero, large logits, want_grads 0 and 1
//   decoder stack            a model_tp_shard model vs model_whole, same weights:
//                            init slices, loss, every gradient slice (tied and
//                            untied head, 2 micro-batches accumulated); and the
//                            split backward of the zero-bubble schedules (input
//                            half, then weight half: the tp pieces' _input and
//                            _weight halves) equal to the fused one bit for bit
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dist/comm.h"
#include "model/activation_plan.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "ops/ops.h"
#include "parallel_layers/tensor_parallel.h"
#include "util.h"

#define SEED 20240611ULL
#define TOL 1e-5

static int g_rank, g_tp, g_pass, g_fail;

// One check: `err` is this rank's error; the max over the ranks decides.
static void report(double err, double tol, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(double err, double tol, const char *fmt, ...) {
    double e = isnan(err) ? INFINITY : err;  // NaN must fail, and max() would drop it
    group_allreduce_max_f64(GROUP_WORLD, &e, 1);
    if (g_rank != 0) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int ok = e <= tol;
    printf("%s tp %d: %s (max error %.3g, tol %.1g)\n", ok ? "PASS" : "FAIL", g_tp, msg, e, tol);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

// Deterministic inputs: buf[i] = offset + scale * N(0,1) keyed by (name, i).
static float *seeded(const char *name, size_t n, double scale, double offset) {
    float *x = xmalloc(sizeof(float) * (n ? n : 1), name);
    for (size_t i = 0; i < n; i++) x[i] = (float)(offset + scale * init_normal(SEED, name, i));
    return x;
}

static double rel_err_scalar(double a, double b) {
    double d = fabs(a - b), s = fmax(fabs(a), fabs(b));
    return isnan(d) ? INFINITY : (s > 0.0 ? d / s : d);
}

static float *zeros(size_t n) { return xcalloc(sizeof(float) * (n ? n : 1), "zeros"); }

// A stage forward's whole loss: what it adds to the accumulator (CPU: a host
// double) plus the part it returns.
static double stage_loss(const LlamaModel *m, const ParamAccess *pa, Activations *a, const int32_t *tok,
                         const int32_t *tgt, float scale, int want_grads) {
    double sum = 0.0;
    const double host = llama_stage_forward(m, pa, a, tok, NULL, tgt, scale, want_grads, &sum);
    return sum + host;
}

// Max-abs normalised difference of a(rows, cols) with stride lda against
// b(rows, cols) with stride ldb.
static double max_err(const float *a, int lda, const float *b, int ldb, int rows, int cols) {
    double d = 0.0, s = 0.0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double x = a[(size_t)i * lda + j], y = b[(size_t)i * ldb + j];
            double diff = fabs(x - y);
            if (isnan(diff)) return INFINITY;
            if (diff > d) d = diff;
            if (fabs(y) > s) s = fabs(y);
        }
    return s > 0.0 ? d / s : d;
}

// Columns [c0, c0 + nc) of m(rows, cols) copied into a contiguous (rows, nc).
static float *cols_of(const float *m, int rows, int cols, int c0, int nc) {
    float *out = xmalloc(sizeof(float) * (size_t)rows * (size_t)(nc ? nc : 1), "columns");
    for (int i = 0; i < rows; i++)
        memcpy(out + (size_t)i * nc, m + (size_t)i * cols + c0, sizeof(float) * (size_t)nc);
    return out;
}

static void small_config(ModelConfig *mc, int vocab, int tied) {
    Config c;
    config_defaults(&c);
    *mc = c.model;
    mc->hidden_size = 32;
    mc->num_attention_heads = 8;  // hd 4
    mc->num_key_value_heads = 4;  // divisible by tp = 4
    mc->intermediate_size = 48;
    mc->num_hidden_layers = 2;
    mc->vocab_size = vocab;
    mc->max_position_embeddings = 16;
    mc->initializer_range = 0.1;
    mc->tie_word_embeddings = tied;
}

// ------------------------------------------------------------ linear layers

// Column-parallel: y(N, O/tp) = gather(x) @ W[rows o0..]^T; din = reduce(dy @ W_slice).
static void test_column_linear(int sp) {
    const int N = 16, D = 24, O = 20, Ol = O / g_tp, o0 = g_rank * Ol;
    const TensorParallel tp = tp_group(g_tp, g_rank, sp);
    const int Nr = tp_rows(&tp, N), n0 = sp ? g_rank * Nr : 0;
    float *X = seeded("col.x", (size_t)N * D, 1.0, 0.0);
    float *W = seeded("col.w", (size_t)O * D, 0.5, 0.0);
    float *dY = seeded("col.dy", (size_t)N * O, 1.0, 0.0);
    float *Y = zeros((size_t)N * O), *dX = zeros((size_t)N * D), *dW = zeros((size_t)O * D);
    matmul_forward(Y, X, W, N, D, O);
    matmul_backward(dX, dW, dY, X, W, N, D, O, 0);

    float *x = zeros((size_t)Nr * D), *full = zeros((size_t)N * D);
    memcpy(x, X + (size_t)n0 * D, sizeof(float) * (size_t)Nr * D);
    const float *xin = tp_gather(&tp, x, full, N, D);
    report(max_err(xin, D, X, D, N, D), 0.0, "column-parallel sp=%d: tp_gather gives the full input", sp);
    const float *Wl = W + (size_t)o0 * D;  // row slice (Ol, D)
    float *y = zeros((size_t)N * Ol);
    memset(full, 0, sizeof(float) * (size_t)N * D);
    tp_column_forward(&tp, y, x, full, Wl, N, D, Ol);
    report(max_err(y, Ol, Y + o0, O, N, Ol), TOL, "column-parallel sp=%d: forward output slice", sp);

    // tp_column_backward: the input gradient's reduction overlapped with the weight gradient.
    float *dy = cols_of(dY, N, O, o0, Ol);
    float *partial = zeros((size_t)N * D), *din = zeros((size_t)(sp ? Nr : N) * D);
    float *dWl = zeros((size_t)Ol * D);
    tp_column_backward(&tp, din, dWl, dy, x, Wl, full, partial, N, D, Ol);
    report(max_err(din, D, dX + (size_t)n0 * D, D, Nr, D), TOL,
           "column-parallel sp=%d: input gradient after tp_reduce (rows %d..%d)", sp, n0, n0 + Nr - 1);
    report(max_err(dWl, D, dW + (size_t)o0 * D, D, Ol, D), TOL,
           "column-parallel sp=%d: weight gradient row slice", sp);
    free(X), free(W), free(dY), free(Y), free(dX), free(dW), free(x), free(full), free(y);
    free(dy), free(partial), free(dWl), free(din);
}

// Row-parallel: out = reduce(y[:, k0..] @ W[:, k0..]^T); backward from gather(dout).
static void test_row_linear(int sp) {
    const int N = 16, D = 24, K = 12, Kl = K / g_tp, k0 = g_rank * Kl;
    const TensorParallel tp = tp_group(g_tp, g_rank, sp);
    const int Nr = tp_rows(&tp, N), n0 = sp ? g_rank * Nr : 0;
    float *Yf = seeded("row.y", (size_t)N * K, 1.0, 0.0);
    float *W = seeded("row.w", (size_t)D * K, 0.5, 0.0);
    float *dO = seeded("row.dout", (size_t)N * D, 1.0, 0.0);
    float *O = zeros((size_t)N * D), *dYf = zeros((size_t)N * K), *dW = zeros((size_t)D * K);
    matmul_forward(O, Yf, W, N, K, D);
    matmul_backward(dYf, dW, dO, Yf, W, N, K, D, 0);

    float *y = cols_of(Yf, N, K, k0, Kl), *Wl = cols_of(W, D, K, k0, Kl);
    float *partial = zeros((size_t)N * D), *out = zeros((size_t)(sp ? Nr : N) * D);
    tp_row_forward(&tp, out, NULL, y, Wl, partial, N, Kl, D);
    report(max_err(out, D, O + (size_t)n0 * D, D, Nr, D), TOL,
           "row-parallel sp=%d: forward output after tp_reduce (rows %d..%d)", sp, n0, n0 + Nr - 1);
    // With the residual stream added (this rank's rows of it): out = R + the sum.
    float *R = seeded("row.res", (size_t)N * D, 1.0, 0.0), *res = R + (size_t)n0 * D;
    float *out_add = zeros((size_t)Nr * D), *want = zeros((size_t)Nr * D);
    for (size_t i = 0; i < (size_t)Nr * D; i++) want[i] = O[(size_t)n0 * D + i] + res[i];
    tp_row_forward(&tp, out_add, res, y, Wl, partial, N, Kl, D);
    report(max_err(out_add, D, want, D, Nr, D), TOL, "row-parallel sp=%d: forward output plus the residual (rows %d..%d)",
           sp, n0, n0 + Nr - 1);
    free(R), free(out_add), free(want);

    float *dout = zeros((size_t)Nr * D), *full = zeros((size_t)N * D);
    memcpy(dout, dO + (size_t)n0 * D, sizeof(float) * (size_t)Nr * D);
    float *dy = zeros((size_t)N * Kl), *dWl = zeros((size_t)D * Kl);
    tp_row_backward(&tp, dy, dWl, dout, y, Wl, full, N, Kl, D);
    report(max_err(dy, Kl, dYf + k0, K, N, Kl), TOL, "row-parallel sp=%d: input gradient column slice", sp);
    report(max_err(dWl, Kl, dW + k0, K, D, Kl), TOL, "row-parallel sp=%d: weight gradient column slice", sp);
    free(Yf), free(W), free(dO), free(O), free(dYf), free(dW), free(y), free(Wl), free(partial);
    free(dout), free(full), free(dy), free(dWl), free(out);
}

// Sequence parallel norm: rmsnorm on token shards; the replicated weight's gradient
// is the sum of the shards' contributions (tp_norm_backward).
static void test_sp_norm(void) {
    const int N = 16, D = 32;
    const TensorParallel tp = tp_group(g_tp, g_rank, 1);
    const int Nr = tp_rows(&tp, N), n0 = g_rank * Nr;
    float *X = seeded("norm.x", (size_t)N * D, 1.0, 0.3);
    float *w = seeded("norm.w", (size_t)D, 0.2, 1.0);
    float *dY = seeded("norm.dy", (size_t)N * D, 1.0, 0.0);
    float *Y = zeros((size_t)N * D), *rstd = zeros((size_t)N), *dX = zeros((size_t)N * D);
    float *dw = zeros((size_t)D), *XH = zeros((size_t)N * D), *xh = zeros((size_t)Nr * D);
    rmsnorm_forward(Y, XH, rstd, X, w, N, D, 1e-5f);
    rmsnorm_backward(dX, dw, dY, XH, w, rstd, N, D);
    float *y = zeros((size_t)Nr * D), *r = zeros((size_t)Nr), *dx = zeros((size_t)Nr * D);
    float *dwl = zeros((size_t)D), *dw_scratch = zeros((size_t)D);
    const float *xs = X + (size_t)n0 * D;
    rmsnorm_forward(y, xh, r, xs, w, Nr, D, 1e-5f);
    tp_norm_backward(&tp, dx, NULL, dwl, dY + (size_t)n0 * D, xh, w, r, dw_scratch, Nr, D);
    double e = max_err(y, D, Y + (size_t)n0 * D, D, Nr, D);
    double e2 = max_err(dx, D, dX + (size_t)n0 * D, D, Nr, D);
    report(fmax(e, e2), TOL, "sequence-parallel rmsnorm: output and input gradient on the token shard");
    report(max_err(dwl, D, dw, D, 1, D), TOL,
           "sequence-parallel rmsnorm: tp_norm_backward weight gradient = full weight gradient");
    free(X), free(w), free(dY), free(Y), free(rstd), free(dX), free(dw), free(y), free(r), free(dx);
    free(dwl), free(dw_scratch), free(XH), free(xh);
}

// ----------------------------------------------------------- vocab parallel

// Tokens that hit the first and last id of every shard, repeats, 0 and V-1.
static void fill_tokens(int32_t *t, int N, int V, int salt) {
    static const int base[16] = {0, 36, 9, 10, 19, 20, 29, 30, 5, 5, 36, 17, 17, 17, 2, 33};
    for (int n = 0; n < N; n++) t[n] = base[(5 * n + salt) % 16] % V;  // a permutation of base
}

// Rows of vocabulary padding over the whole group (tp * Vl - V).
static int vocab_padding(const VocabShard *vs, int V) { return g_tp * vs->rows - V; }

// Does every shard with valid rows hold at least one token?
static int every_shard_hit(const VocabShard *vs, int V, const int32_t *t, int N) {
    for (int r = 0; r < g_tp; r++) {
        int lo = r * vs->rows, hi = lo + vs->rows < V ? lo + vs->rows : V, hit = lo >= hi;
        for (int n = 0; n < N; n++) hit |= t[n] >= lo && t[n] < hi;
        if (!hit) return 0;
    }
    return 1;
}

static void test_embedding(int V, int sp) {
    const int N = 16, D = 32;
    const TensorParallel tp = tp_group(g_tp, g_rank, sp);
    const VocabShard vs = tp_vocab_shard(&tp, V);
    const int Nr = tp_rows(&tp, N), n0 = sp ? g_rank * Nr : 0, Vl = vs.rows;
    int32_t tok[16];
    fill_tokens(tok, N, V, 0);
    float *T = seeded("emb.table", (size_t)V * D, 1.0, 0.0);
    float *dO = seeded("emb.dout", (size_t)N * D, 1.0, 0.0);
    float *O = zeros((size_t)N * D), *dT = zeros((size_t)V * D);
    embedding_forward(O, tok, T, N, D, V);
    embedding_backward(dT, dO, tok, N, D, V);

    // This rank's slice (Vl, D); padding rows hold NaN, which must never be read.
    float *t = xmalloc(sizeof(float) * (size_t)Vl * D, "table slice");
    for (size_t i = 0; i < (size_t)Vl * D; i++) t[i] = NAN;
    if (vs.valid > 0) memcpy(t, T + (size_t)vs.v0 * D, sizeof(float) * (size_t)vs.valid * D);
    float *out = zeros((size_t)Nr * D), *full = zeros((size_t)N * D);
    tp_embedding_forward(&tp, &vs, out, tok, t, full, N, D);
    report(every_shard_hit(&vs, V, tok, N) ? 0.0 : 1.0, 0.0, "embedding V=%d: the tokens hit every shard", V);
    report(max_err(out, D, O + (size_t)n0 * D, D, Nr, D), 0.0,
           "vocab-parallel embedding V=%d (slices of %d rows, %d padding rows) sp=%d: forward = table lookup",
           V, Vl, vocab_padding(&vs, V), sp);

    // Backward accumulates into dtable: start from 0.25 everywhere.
    float *dt = xmalloc(sizeof(float) * (size_t)Vl * D, "dtable slice");
    for (size_t i = 0; i < (size_t)Vl * D; i++) dt[i] = 0.25f;
    float *dout = zeros((size_t)Nr * D);
    memcpy(dout, dO + (size_t)n0 * D, sizeof(float) * (size_t)Nr * D);
    tp_embedding_backward(&tp, &vs, dt, dout, tok, full, N, D);
    for (size_t i = 0; i < (size_t)vs.valid * D; i++) dt[i] -= 0.25f;
    double pad = 0.0;
    for (size_t i = (size_t)vs.valid * D; i < (size_t)Vl * D; i++) pad = fmax(pad, fabs(dt[i] - 0.25f));
    double e = vs.valid > 0 ? max_err(dt, D, dT + (size_t)vs.v0 * D, D, vs.valid, D) : 0.0;
    report(e, TOL, "vocab-parallel embedding V=%d sp=%d: backward += scatter of the rows of this slice", V, sp);
    report(pad, 0.0, "vocab-parallel embedding V=%d sp=%d: padding rows of dtable untouched", V, sp);
    free(T), free(dO), free(O), free(dT), free(t), free(out), free(full), free(dt), free(dout);
}

static void test_cross_entropy(int V) {
    const int N = 16;
    const float scale = 1.0f / 16.0f;
    const TensorParallel tp = tp_group(g_tp, g_rank, 0);
    const VocabShard vs = tp_vocab_shard(&tp, V);
    const int Vl = vs.rows, v0 = vs.v0, valid = vs.valid;
    int32_t tgt[16];
    fill_tokens(tgt, N, V, 3);
    // Large logits: row n is 1000*n + s_n * N(0,1), s_n alternating sharp (40) and
    // flat (1.5), so a naive exp overflows and both regimes of the softmax occur.
    float *L = xmalloc(sizeof(float) * (size_t)N * V, "logits");
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++)
            L[(size_t)n * V + v] =
                (float)(1000.0 * n + (n % 2 ? 40.0 : 1.5) * init_normal(SEED, "ce.logits", (uint64_t)n * V + v));
    float *dL = xmalloc(sizeof(float) * (size_t)N * V, "dlogits");
    memcpy(dL, L, sizeof(float) * (size_t)N * V);
    double ref = 0.0, ref2 = 0.0;  // the ops add their loss sums (CPU: host accumulators)
    cross_entropy_forward(L, tgt, N, V, &ref);
    cross_entropy_forward_backward(dL, tgt, N, V, scale, &ref2);

    float *l = xmalloc(sizeof(float) * (size_t)N * Vl, "logit slice"), *stats = zeros(3 * (size_t)N);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < Vl; j++)
            l[(size_t)n * Vl + j] = j < valid ? L[(size_t)n * V + v0 + j] : NAN;  // padding: NaN
    float *keep = xmalloc(sizeof(float) * (size_t)N * Vl, "copy");
    memcpy(keep, l, sizeof(float) * (size_t)N * Vl);
    report(every_shard_hit(&vs, V, tgt, N) ? 0.0 : 1.0, 0.0, "cross-entropy V=%d: the targets hit every shard", V);
    double loss0 = 0.0, loss1 = 0.0;
    tp_cross_entropy(&tp, &vs, V, l, tgt, N, scale, 0, stats, &loss0);
    report(rel_err_scalar(loss0, ref), 1e-6,
           "vocab-parallel cross-entropy V=%d, want_grads 0: loss sum %.9g = cross_entropy_forward %.9g", V,
           loss0, ref);
    report(memcmp(l, keep, sizeof(float) * (size_t)N * Vl) ? 1.0 : 0.0, 0.0,
           "vocab-parallel cross-entropy V=%d, want_grads 0: logits untouched", V);
    tp_cross_entropy(&tp, &vs, V, l, tgt, N, scale, 1, stats, &loss1);
    report(rel_err_scalar(loss1, ref2), 1e-6,
           "vocab-parallel cross-entropy V=%d, want_grads 1: loss sum = cross_entropy_forward_backward", V);
    double lmax[2] = {loss1, -loss1};
    group_allreduce_max_f64(GROUP_WORLD, lmax, 2);
    report(lmax[0] + lmax[1], 0.0, "vocab-parallel cross-entropy V=%d: the same loss on every rank", V);
    double e = valid > 0 ? max_err(l, Vl, dL + v0, V, N, valid) : 0.0;
    report(e, TOL, "vocab-parallel cross-entropy V=%d: dlogits slices (%d columns each) = full dlogits", V, Vl);
    double pad = 0.0;
    for (int n = 0; n < N; n++)
        for (int j = valid; j < Vl; j++) pad = fmax(pad, l[(size_t)n * Vl + j] == 0.0f ? 0.0 : 1.0);
    report(pad, 0.0, "vocab-parallel cross-entropy V=%d: padding columns of dlogits are 0 (%d of them)", V,
           vocab_padding(&vs, V));
    free(L), free(dL), free(l), free(stats), free(keep);
}

// ------------------------------------------------------------ decoder stack

static void test_stack(int sp, int tied) {
    const int B = 2, S = 8, N = B * S, micro = 2;
    const float scale = 1.0f / (float)(micro * N);
    ModelConfig mc;
    small_config(&mc, 37, tied);
    LlamaModel m1, mt;
    llama_build(&m1, &mc, model_whole());
    llama_build(&mt, &mc, model_tp_shard(g_tp, g_rank, sp));
    float *p1 = zeros(m1.num_elements), *g1 = zeros(m1.num_elements);
    float *pt = zeros(mt.num_elements), *gt = zeros(mt.num_elements);
    llama_init_params(&m1, p1, SEED);
    llama_init_params(&mt, pt, SEED);
    const char *tag = tied ? "tied" : "untied";

    // Every local element is the 1-rank element of the same global index; padding 0.
    double init_err = 0.0;
    for (int i = 0; i < mt.n_params; i++) {
        const ParamInfo *p = &mt.params[i], *q = llama_find(&m1, p->name);
        if (!q) die("%s: not in the 1-rank table", p->name);
        for (size_t e = 0; e < p->numel; e++) {
            int64_t gi = param_global_index(p, e);
            float want = gi < 0 ? 0.0f : p1[q->offset + (size_t)gi];
            if (pt[p->offset + e] != want) init_err = 1.0;
        }
    }
    report(init_err, 0.0, "decoder stack sp=%d %s: llama_init_params on the tp table = 1-rank slices", sp, tag);

    StageUnits su1 = llama_all_units(&m1), sut = llama_all_units(&mt);
    Activations a1, at;
    activations_alloc(&a1, &m1, su1, B, S, NULL);
    activations_alloc(&at, &mt, sut, B, S, NULL);
    WholeBuffers w1 = {p1, g1, &m1}, wt = {pt, gt, &mt};
    ParamAccess pa1 = param_access_whole(&w1), pat = param_access_whole(&wt);
    double loss_err = 0.0, loss_spread = 0.0;
    for (int k = 0; k < micro; k++) {
        int32_t tok[16], tgt[16];
        fill_tokens(tok, N, mc.vocab_size, 5 * k);
        fill_tokens(tgt, N, mc.vocab_size, 5 * k + 1);
        // validation-mode forward first (logits untouched), then the training one
        double v1 = stage_loss(&m1, &pa1, &a1, tok, tgt, scale, 0);
        double vt = stage_loss(&mt, &pat, &at, tok, tgt, scale, 0);
        double l1 = stage_loss(&m1, &pa1, &a1, tok, tgt, scale, 1);
        double lt = stage_loss(&mt, &pat, &at, tok, tgt, scale, 1);
        loss_err = fmax(loss_err, fmax(rel_err_scalar(lt, l1), rel_err_scalar(vt, v1)));
        double mm[2] = {lt, -lt};
        group_allreduce_max_f64(GROUP_WORLD, mm, 2);
        loss_spread = fmax(loss_spread, mm[0] + mm[1]);
        if (llama_stage_backward(&m1, &pa1, &a1, tok, NULL) != NULL ||
            llama_stage_backward(&mt, &pat, &at, tok, NULL) != NULL)
            loss_err = INFINITY;  // a first stage returns no input gradient
    }
    report(loss_err, TOL, "decoder stack sp=%d %s: loss sum (2 micro-batches, eval and train) = 1 rank", sp, tag);
    report(loss_spread, 0.0, "decoder stack sp=%d %s: the same loss on every tp rank", sp, tag);

    // Gradients: every local element against the full gradient at its global index.
    double worst = 0.0, pad = 0.0, empty = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < mt.n_params; i++) {
        const ParamInfo *p = &mt.params[i], *q = llama_find(&m1, p->name);
        double d = 0.0, s = 0.0;
        for (size_t e = 0; e < q->numel; e++) s = fmax(s, fabs(g1[q->offset + e]));
        if (s == 0.0) empty = 1.0;  // a comparison against zeros would prove nothing
        for (size_t e = 0; e < p->numel; e++) {
            int64_t gi = param_global_index(p, e);
            float got = gt[p->offset + e];
            if (gi < 0) {
                pad = fmax(pad, fabs(got));
                continue;
            }
            double diff = fabs((double)got - g1[q->offset + (size_t)gi]);
            d = isnan(diff) ? INFINITY : fmax(d, diff);
        }
        double e = s > 0.0 ? d / s : d;
        if (e > worst) worst = e, worst_name = p->name;
    }
    if (worst > TOL)
        fprintf(stderr, "rank %d: worst gradient %s, error %.3g\n", g_rank, worst_name, worst);
    report(empty, 0.0, "decoder stack sp=%d %s: every full gradient tensor is non-zero", sp, tag);
    report(worst, TOL, "decoder stack sp=%d %s: every gradient slice = full gradient (worst tensor per rank)",
           sp, tag);
    report(pad, 0.0, "decoder stack sp=%d %s: vocab padding rows get zero gradient", sp, tag);

    // The split backward on the tp shard: the same 2 micro-batches, I then W, must
    // give the fused gradients gt bit for bit (every rank, every element).
    float *gs = zeros(mt.num_elements);
    WholeBuffers ws = {pt, gs, &mt};
    ParamAccess pas = param_access_whole(&ws);
    WeightGradStash st;
    wstash_alloc(&st, &mt, sut, B, S);
    for (int k = 0; k < micro; k++) {
        int32_t tok[16], tgt[16];
        fill_tokens(tok, N, mc.vocab_size, 5 * k);
        fill_tokens(tgt, N, mc.vocab_size, 5 * k + 1);
        stage_loss(&mt, &pas, &at, tok, tgt, scale, 1);
        llama_stage_backward_input(&mt, &pas, &at, NULL, &st);
        llama_stage_backward_weight(&mt, &pas, &at, tok, &st);
    }
    double differ = memcmp(gs, gt, sizeof(float) * mt.num_elements) ? 1.0 : 0.0;
    report(differ, 0.0, "decoder stack sp=%d %s: split backward (input, then weight half) = fused, bit for bit", sp, tag);
    wstash_free(&st);
    free(gs);
    activations_free(&a1);
    activations_free(&at);
    free(p1), free(g1), free(pt), free(gt);
    llama_free(&m1);
    llama_free(&mt);
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    Config c;
    config_defaults(&c);
    ParallelConfig *pc = &c.parallel;
    pc->dp = pc->pp = pc->cp = 1;
    pc->tp = comm_world_size();
    pc->order = ORDER_DP_PP_CP_TP;
    pc->bucket_mb = 25;
    pc->timeout_s = 60;
    pc->pp_schedule = PP_1F1B;
    pc->pp_virtual = 1;
    comm_grid_init(pc);
    ops_set_threads(1);
    g_rank = group_rank(GROUP_TP);
    g_tp = group_size(GROUP_TP);
    if (g_tp < 2 || 16 % g_tp != 0) die("tp_pieces_main: run on 2, 4, 8 or 16 ranks (got %d)", g_tp);

    for (int sp = 0; sp <= 1; sp++) {
        test_column_linear(sp);
        test_row_linear(sp);
    }
    test_sp_norm();
    for (int sp = 0; sp <= 1; sp++) {
        test_embedding(37, sp);  // 37 = 2*19 - 1 = 4*10 - 3: padding rows on the last rank
        test_embedding(5, sp);   // tp 4: slices of 2, 2, 1 (+1 padding) and 0 (+2 padding) rows
    }
    test_cross_entropy(37);
    test_cross_entropy(5);
    for (int sp = 0; sp <= 1; sp++)
        for (int tied = 0; tied <= 1; tied++) test_stack(sp, tied);

    if (g_rank == 0) printf("%d passed, %d failed\n", g_pass, g_fail);
    comm_finalize();
    return g_fail ? 1 : 0;
}
