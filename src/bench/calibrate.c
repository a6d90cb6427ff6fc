// bench/calibrate.c — `femtotron bench calibrate`: measure this machine's hardware
// profile (plan/hardware.h) with the kernels and collectives femtotron really calls,
// and write it as JSON for the planner.
//
// Every rank measures at the same time, the same sequence of calls with the same
// repeat counts, with a world barrier between measurements: so a run with more
// ranks than cores measures the rates a rank really gets when all ranks compute at
// once, as they do in training. Per kernel each rank keeps its best of 3 batches of
// calls after a warm-up (time_call: batches, not single calls, so that sharing a
// core shows); rank 0 aggregates:
//   - compute rates and memory bandwidth: the MEDIAN over ranks (robust to one
//     rank that was unlucky with the scheduler; with 2 ranks it is the mean);
//   - collective times: each rank's median over repeats, then the MAXIMUM over
//     ranks (a collective is done when its slowest member is).
//
// What it measures (FLOPs counted as in plan/hardware.h):
//   gemm      matmul_forward (2·M·K·N) and matmul_backward (input and weight
//             gradients, 4·M·K·N) on transformer-layer shapes, folded into one curve
//             of rate against FLOPs per call (equal FLOPs averaged);
//   attn_*    attention_forward / attention_backward (causal, B = 1, H = KV in {4,8},
//             hd = 64, S = 128 .. 2048): forward 4·B·H·hd·S(S+1)/2, backward twice
//             that (nominal);
//   mem_bw    one layer's elementwise kernels (rmsnorm, residual, RoPE, SwiGLU) priced
//   peak      the square sgemm peak (bench_gemm_peak), raised to the best curve
//             point if one beat it;
//   collectives  all-reduce, reduce-scatter, all-gather on groups of 2, 4, ...
//             consecutive ranks (powers of two dividing the world, and the world),
//             and p2p (half a ping-pong round trip between ranks 2i and 2i+1), on
//             4 KiB .. 16 MiB; t = alpha + beta·bytes fitted by least squares
//             through the smallest message's time (fit_alpha_beta), alpha, beta >= 0.
// --quick drops the largest shapes (4096 tokens, 2048 x 2048; S = 2048; messages
// above 1 MiB) and shortens the batches: about 4 s on 2 ranks of this 2-core
// machine, against about 15 s for the full run.
// With one rank there is nothing to communicate with: no collective entries, and
// the link classes get placeholders (bandwidth mem_bw/2, latency 1 us) marked as
// unmeasured in the summary. intra_bw/intra_lat come from the largest all-reduce
// fit through the ring formula; inter_* are copies of them (not measured: one
// calibration run does not know which of its groups cross nodes). All fits are
// labelled intra_node when every rank of the world shares one node.
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#include "bench/calibrate.h"

#include <sched.h>

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/peak.h"
#include "dist/comm.h"
#include "ops/ops.h"
#include "plan/hardware.h"
#include "util.h"

typedef struct {
    int quick;
    double target_s;  // seconds of repeats per measurement (after the warm-up)
} Opts;

static void calibrate_usage(void) {
    printf("usage: [mpirun -np N] femtotron bench calibrate [--output FILE] [--threads T] [--quick]\n"
           "  Measures the hardware profile the planner uses, on every rank at once: GEMM and\n"
           "  attention rate curves, memory bandwidth, GEMM peak, and alpha-beta fits of\n"
           "  all-reduce, reduce-scatter, all-gather and p2p on groups of 2, 4, ... ranks.\n"
           "  --output FILE  the JSON profile (default profile.json)\n"
           "  --threads T    threads per rank (default: the cores bound to the rank, else\n"
           "                 the node's cores divided among its ranks)\n"
           "  --quick        smaller shapes and messages (a few seconds)\n");
}


// ------------------------------------------------------------ aggregation

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {  // sorts v
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// x(k) on every rank -> out(k) = per index the median over the world's ranks.
static void world_median(const double *x, double *out, int k) {
    int ws = comm_world_size(), me = comm_world_rank();
    double *all = xcalloc((size_t)ws * k * sizeof(double), "calibration gather");  // (ws, k)
    memcpy(all + (size_t)me * k, x, (size_t)k * sizeof(double));
    group_allreduce_sum_f64(GROUP_WORLD, all, (size_t)ws * k);
    double *col = xmalloc((size_t)ws * sizeof(double), "calibration column");  // (ws)
    for (int i = 0; i < k; i++) {
        for (int r = 0; r < ws; r++) col[r] = all[(size_t)r * k + i];
        out[i] = median(col, ws);
    }
    free(col);
    free(all);
}

// The same number of repeats on every rank, so that all ranks keep computing for
// the whole measurement: enough to fill target_s after a warm-up that took the
// slowest rank `warm` seconds, between lo and hi.
static int agree_reps(double warm, const Opts *o, int lo, int hi) {
    group_allreduce_max_f64(GROUP_WORLD, &warm, 1);
    double r = o->target_s / (warm > 1e-9 ? warm : 1e-9);
    return r < lo ? lo : r > hi ? hi : (int)r;
}

// A kernel call to time: fn(ctx).
typedef struct {
    void (*fn)(const void *ctx);
    const void *ctx;
} Call;

#define BATCHES 3

// Seconds per call of a kernel on this rank, while every rank times its own at
// once: a warm-up call, then BATCHES batches of the same number of calls on every
// rank, each batch lasting about target_s / BATCHES; the best batch's time per
// call. Batches, not single calls: when ranks outnumber cores, a call shorter than
// a scheduler time slice often runs alone on a core and its best time would be the
// unshared rate; a batch spans several slices and sees the sharing.
static double time_call(Call c, const Opts *o) {
    group_barrier(GROUP_WORLD);
    double t0 = now_seconds();
    c.fn(c.ctx);
    double warm = now_seconds() - t0;
    Opts per_batch = {o->quick, o->target_s / BATCHES};
    int calls = agree_reps(warm, &per_batch, 1, 100000);
    // A call that fills a batch alone is long enough to need no warm-up: the
    // warm-up call is then the first batch (calls is the same on every rank).
    double best = calls == 1 ? warm : 1e30;
    for (int b = calls == 1 ? 1 : 0; b < BATCHES; b++) {
        t0 = now_seconds();
        for (int i = 0; i < calls; i++) c.fn(c.ctx);
        double dt = (now_seconds() - t0) / calls;
        if (dt < best) best = dt;
    }
    return best;
}

typedef struct {
    double work, rate;
} Point;

static int cmp_point(const void *a, const void *b) {
    return cmp_double(&((const Point *)a)->work, &((const Point *)b)->work);
}

// Points (any order) -> curve: sorted by work, equal works averaged, and while
// there are more than HW_CURVE_MAX, the two neighbours closest in log(work) merged
// (geometric mean of work, mean of rate).
static void fold_curve(RateCurve *c, Point *p, int n) {
    qsort(p, (size_t)n, sizeof *p, cmp_point);
    int m = 0;
    for (int i = 0; i < n;) {
        int j = i;
        double sum = 0;
        while (j < n && p[j].work <= p[i].work * (1 + 1e-9)) sum += p[j++].rate;
        p[m].work = p[i].work;
        p[m].rate = sum / (j - i);
        m++;
        i = j;
    }
    while (m > HW_CURVE_MAX) {
        int best = 0;
        for (int i = 1; i + 1 < m; i++)
            if (p[i + 1].work / p[i].work < p[best + 1].work / p[best].work) best = i;
        p[best].work = sqrt(p[best].work * p[best + 1].work);
        p[best].rate = 0.5 * (p[best].rate + p[best + 1].rate);
        memmove(p + best + 1, p + best + 2, (size_t)(m - best - 2) * sizeof *p);
        m--;
    }
    c->n = m;
    for (int i = 0; i < m; i++) {
        c->work[i] = p[i].work;
        c->rate[i] = p[i].rate;
    }
}

static void fill_random(float *x, size_t n, unsigned seed) {
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

// ----------------------------------------------------------------- GEMM

static const int GEMM_TOKENS[] = {64, 256, 1024, 4096};
static const int GEMM_DIMS[][2] = {{256, 256}, {256, 768}, {512, 1536}, {1024, 1024}, {1024, 4096}, {2048, 2048}};
#define N_TOKENS ((int)(sizeof GEMM_TOKENS / sizeof GEMM_TOKENS[0]))
#define N_DIMS ((int)(sizeof GEMM_DIMS / sizeof GEMM_DIMS[0]))
#define MAX_GEMM_POINTS (2 * N_TOKENS * N_DIMS)

// One GEMM of M tokens x (K in, N out) on the buffers in, w, out, dout, din, dw.
typedef struct {
    int M, K, N;
    float *const *buf;
} GemmCall;

static void gemm_forward_call(const void *p) {
    const GemmCall *g = p;
    matmul_forward(g->buf[2], g->buf[0], g->buf[1], g->M, g->K, g->N);
}

static void gemm_backward_call(const void *p) {
    const GemmCall *g = p;
    matmul_backward(g->buf[4], g->buf[5], g->buf[3], g->buf[0], g->buf[1], g->M, g->K, g->N, 0);
}

static void measure_gemm(RateCurve *c, const Opts *o) {
    int nt = o->quick ? N_TOKENS - 1 : N_TOKENS, nd = o->quick ? N_DIMS - 1 : N_DIMS;
    size_t mk = 0, nk = 0, mn = 0;
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nd; j++) {
            size_t M = (size_t)GEMM_TOKENS[i], K = (size_t)GEMM_DIMS[j][0], N = (size_t)GEMM_DIMS[j][1];
            if (M * K > mk) mk = M * K;
            if (N * K > nk) nk = N * K;
            if (M * N > mn) mn = M * N;
        }
    float *buf[6];
    const size_t sizes[6] = {mk, nk, mn, mn, mk, nk};  // in, w, out, dout, din, dw
    for (int b = 0; b < 6; b++) {
        buf[b] = xmalloc(sizes[b] * sizeof(float), "calibration GEMM buffer");
        fill_random(buf[b], sizes[b], (unsigned)b);
    }
    int n = 0;
    double rate[MAX_GEMM_POINTS], work[MAX_GEMM_POINTS];
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nd; j++) {
            int M = GEMM_TOKENS[i], K = GEMM_DIMS[j][0], N = GEMM_DIMS[j][1];
            double f = 2.0 * M * K * N;
            GemmCall g = {M, K, N, buf};
            double fwd_s = time_call((Call){gemm_forward_call, &g}, o);
            double bwd_s = time_call((Call){gemm_backward_call, &g}, o);
            work[n] = f;
            rate[n++] = f / fwd_s;
            work[n] = 2 * f;
            rate[n++] = 2 * f / bwd_s;
        }
    for (int b = 0; b < 6; b++) free(buf[b]);
    double med[MAX_GEMM_POINTS];
    world_median(rate, med, n);
    Point p[MAX_GEMM_POINTS];
    for (int i = 0; i < n; i++) p[i] = (Point){work[i], med[i]};
    fold_curve(c, p, n);
}

// ------------------------------------------------------------ attention

static const int ATT_HEADS[] = {4, 8};
static const int ATT_SEQ[] = {128, 256, 512, 1024, 2048};
#define ATT_HD 64
#define N_SEQ ((int)(sizeof ATT_SEQ / sizeof ATT_SEQ[0]))
#define MAX_ATT_POINTS (2 * N_SEQ)

// Causal attention of one sequence (B = 1) of S tokens, H = KV heads of ATT_HD.
typedef struct {
    int S, H;
    float *qkv, *dqkv, *out, *dout, *lse, *m, *l, *scratch;
    const int *pos;
} AttnCall;

static void attn_forward_call(const void *p) {
    const AttnCall *a = p;
    attention_forward(a->out, a->lse, a->m, a->l, a->qkv, a->pos, 1, a->S, a->H, a->H, ATT_HD, a->scratch);
}

static void attn_backward_call(const void *p) {  // m serves as the rowdot scratch
    const AttnCall *a = p;
    attention_backward(a->dqkv, a->m, a->dout, a->qkv, a->out, a->lse, a->pos, 1, a->S, a->H, a->H, ATT_HD,
                       a->scratch);
}

static void measure_attention(RateCurve *fwd, RateCurve *bwd, const Opts *o) {
    const int B = 1, hd = ATT_HD, ns = o->quick ? N_SEQ - 1 : N_SEQ;
    const int Smax = ATT_SEQ[ns - 1], Hmax = ATT_HEADS[1];
    size_t ld = (size_t)3 * Hmax * hd;
    float *qkv = xmalloc((size_t)Smax * ld * sizeof(float), "calibration qkv");   // (S, 3*H*hd)
    float *dqkv = xmalloc((size_t)Smax * ld * sizeof(float), "calibration dqkv"); // (S, 3*H*hd)
    float *out = xmalloc((size_t)Smax * Hmax * hd * sizeof(float), "calibration attention out");  // (S, H*hd)
    float *dout = xmalloc((size_t)Smax * Hmax * hd * sizeof(float), "calibration attention dout"); // (S, H*hd)
    float *lse = xmalloc((size_t)Hmax * Smax * sizeof(float), "calibration lse");  // (B, H, S)
    float *m = xmalloc((size_t)Hmax * Smax * sizeof(float), "calibration m");      // (B, H, S)
    float *l = xmalloc((size_t)Hmax * Smax * sizeof(float), "calibration l");      // (B, H, S)
    float *scratch = xmalloc(attention_scratch_floats() * sizeof(float), "calibration attention scratch");
    int *pos = xmalloc((size_t)Smax * sizeof(int), "calibration positions");  // (S)
    for (int i = 0; i < Smax; i++) pos[i] = i;
    fill_random(qkv, (size_t)Smax * ld, 7);
    fill_random(dout, (size_t)Smax * Hmax * hd, 8);
    int n = 0;
    double work[MAX_ATT_POINTS], rf[MAX_ATT_POINTS], rb[MAX_ATT_POINTS];
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < ns; s++) {
            int H = ATT_HEADS[h], S = ATT_SEQ[s];
            double f = 4.0 * B * H * hd * (double)S * (S + 1) / 2;
            AttnCall a = {S, H, qkv, dqkv, out, dout, lse, m, l, scratch, pos};
            double fwd_s = time_call((Call){attn_forward_call, &a}, o);
            double bwd_s = time_call((Call){attn_backward_call, &a}, o);
            work[n] = f;
            rf[n] = f / fwd_s;
            rb[n++] = 2 * f / bwd_s;
        }
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(m), free(l), free(scratch), free(pos);
    double med[MAX_ATT_POINTS];
    Point p[MAX_ATT_POINTS];
    world_median(rf, med, n);
    for (int i = 0; i < n; i++) p[i] = (Point){work[i], med[i]};
    fold_curve(fwd, p, n);
    world_median(rb, med, n);
    for (int i = 0; i < n; i++) p[i] = (Point){2 * work[i], med[i]};
    fold_curve(bwd, p, n);
}

// ------------------------------------------------------ memory bandwidth

// The elementwise kernels of one decoder layer's forward, on N tokens of a layer
// of width D, H/KV heads of 64 and MLP width F: two RMSNorms, two residual adds,
// RoPE on q and k, SwiGLU. The planner (plan/step_time.c) prices them as
//   10*N*D + 2*N*(H+KV)*hd + 3*N*F  values of 4 bytes
// (each norm reads and writes N*D, each add reads two and writes one, RoPE reads
// and writes q and k, SwiGLU reads gate and up and writes their product); mem_bw
// is that byte count over the measured time, so the kernels' real costs (the
// norm's two passes, the exp of SiLU, the RoPE tables) are in the rate.
typedef struct {
    int N, D, H, KV, hd, F;
    float *x, *y, *rstd, *w, *qkv, *cos_t, *sin_t, *gu, *h;
} LayerElems;

static void layer_elems_call(const void *p) {
    const LayerElems *e = p;
    const size_t nd = (size_t)e->N * e->D;
    rmsnorm_forward(e->y, e->rstd, e->x, e->w, e->N, e->D, 1e-5f);
    residual_forward(e->y, e->y, e->x, nd);
    rope_forward(e->qkv, e->cos_t, e->sin_t, 1, e->N, e->H, e->KV, e->hd);
    rmsnorm_forward(e->y, e->rstd, e->x, e->w, e->N, e->D, 1e-5f);
    swiglu_forward(e->h, e->gu, e->N, e->F);
    residual_forward(e->y, e->y, e->x, nd);
}

static double measure_mem_bw(const Opts *o) {
    LayerElems e = {4096, 512, 8, 4, 64, 1536, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t N = (size_t)e.N, qkvw = (size_t)(e.H + 2 * e.KV) * e.hd;
    e.x = xmalloc(N * e.D * sizeof(float), "calibration x");                     // (N, D)
    e.y = xmalloc(N * e.D * sizeof(float), "calibration y");                     // (N, D)
    e.rstd = xmalloc(N * sizeof(float), "calibration rstd");                     // (N)
    e.w = xmalloc((size_t)e.D * sizeof(float), "calibration norm weight");       // (D)
    e.qkv = xmalloc(N * qkvw * sizeof(float), "calibration qkv");                // (N, (H+2KV)*hd)
    e.cos_t = xmalloc(N * e.hd / 2 * sizeof(float), "calibration rope");         // (N, hd/2)
    e.sin_t = xmalloc(N * e.hd / 2 * sizeof(float), "calibration rope");         // (N, hd/2)
    e.gu = xmalloc(N * 2 * e.F * sizeof(float), "calibration gate|up");          // (N, 2F)
    e.h = xmalloc(N * e.F * sizeof(float), "calibration swiglu");                // (N, F)
    fill_random(e.x, N * e.D, 1);
    fill_random(e.w, (size_t)e.D, 2);
    fill_random(e.qkv, N * qkvw, 3);
    fill_random(e.gu, N * 2 * e.F, 4);
    rope_tables(e.cos_t, e.sin_t, e.N, e.hd, 10000.0, 0);
    double values = 10.0 * N * e.D + 2.0 * N * (e.H + e.KV) * e.hd + 3.0 * N * e.F;
    double bw = values * sizeof(float) / time_call((Call){layer_elems_call, &e}, o), med;
    free(e.x), free(e.y), free(e.rstd), free(e.w), free(e.qkv), free(e.cos_t), free(e.sin_t), free(e.gu), free(e.h);
    world_median(&bw, &med, 1);
    return med;
}

// ---------------------------------------------------------- collectives

#define MAX_SIZES 8

// t = alpha + beta*x by least squares constrained through the smallest message
// (x[0], t[0]): that point, pure latency in practice, sets alpha; the slope
// minimises the squared time errors, so the large messages, which dominate the
// time of a training step, set beta. Plain least squares would let them decide
// alpha too (often negative, clamped to 0: no latency at all); weighting by 1/t^2
// (relative error) fits the latency but misses the large messages by a factor of
// 2-3 where they fall out of cache. alpha, beta >= 0. x(n) ascending, n <= MAX_SIZES.
static void fit_alpha_beta(const double *x, const double *t_measured, int n, double *alpha, double *beta) {
    // A larger message never takes less time: a time above a later one is noise
    // (a rank descheduled during that measurement), lowered to the later one.
    double t[MAX_SIZES] = {0}, later = INFINITY;
    for (int i = n - 1; i >= 0; i--) later = t[i] = t_measured[i] < later ? t_measured[i] : later;
    double sxy = 0, sxx = 0;
    for (int i = 1; i < n; i++) {
        sxy += (x[i] - x[0]) * (t[i] - t[0]);
        sxx += (x[i] - x[0]) * (x[i] - x[0]);
    }
    double b = sxx > 0 && sxy > 0 ? sxy / sxx : 0, a = t[0] - b * x[0];
    if (a < 0) {  // the line through the origin instead
        double sxt = 0, sx2 = 0;
        for (int i = 0; i < n; i++) sxt += x[i] * t[i], sx2 += x[i] * x[i];
        a = 0, b = sxt / sx2;
    }
    *alpha = a;
    *beta = b;
}

// Seconds of one call of `kind` on GROUP_BENCH (size g) on a message of `bytes`:
// this rank's median over repeats. Ranks outside any full group (g does not divide
// the world, only for p2p) keep the repeat count and barriers but do not time.
static double time_collective(CollKind kind, int g, size_t bytes, float *x, float *y, const Opts *o) {
    size_t n = bytes / sizeof(float);
    int me = group_rank(GROUP_BENCH), active = group_size(GROUP_BENCH) == g;
    double samples[64];
    int reps = 0;
    for (int r = -1; r < reps; r++) {  // r = -1: the warm-up, which sets reps
        group_barrier(GROUP_WORLD);
        double t0 = now_seconds();
        if (active) switch (kind) {
            case COLL_ALLREDUCE: group_allreduce_sum_f32(GROUP_BENCH, x, n); break;
            case COLL_REDUCE_SCATTER: group_reduce_scatter_f32(GROUP_BENCH, x, y, n / g); break;
            case COLL_ALLGATHER: group_allgather_f32(GROUP_BENCH, x, n / g); break;
            case COLL_P2P: {
                CommRequest q;
                for (int leg = 0; leg < 2; leg++) {  // ping then pong
                    if (me == leg) q = group_isend_f32(GROUP_BENCH, x, n, 1 - me, 77);
                    else q = group_irecv_f32(GROUP_BENCH, y, n, 1 - me, 77);
                    comm_wait(&q, leg == 0 ? "calibration ping" : "calibration pong");
                }
                break;
            }
            default: break;
        }
        double dt = now_seconds() - t0;
        if (kind == COLL_P2P) dt *= 0.5;  // one way
        if (r < 0) reps = agree_reps(dt, o, 5, 40);
        else samples[r] = dt;
    }
    return active ? median(samples, reps) : 0.0;
}

static void measure_collectives(Hardware *hw, const Opts *o) {
    int ws = comm_world_size(), intra = comm_local_size() == ws;
    size_t max_bytes = o->quick ? (size_t)1 << 20 : (size_t)16 << 20;
    size_t sizes[MAX_SIZES];
    int ns = 0;
    for (size_t b = 4096; b <= max_bytes && ns < MAX_SIZES; b *= 4) sizes[ns++] = b;
    float *x = xmalloc(max_bytes, "calibration message"), *y = xmalloc(max_bytes, "calibration message");
    // Zeros: repeated sums in place stay finite (the values do not change the speed).
    memset(x, 0, max_bytes);
    memset(y, 0, max_bytes);
    int groups[32], ng = 0;
    for (int g = 2; g < ws; g *= 2)
        if (ws % g == 0) groups[ng++] = g;
    groups[ng++] = ws;
    hw->n_coll = 0;
    for (int gi = 0; gi < ng; gi++) {
        int g = groups[gi];
        comm_bench_group(g);
        for (int k = 0; k < COLL_KINDS; k++) {
            if (k == COLL_P2P) continue;
            double bytes[MAX_SIZES], t[MAX_SIZES];
            for (int s = 0; s < ns; s++) {
                // Whole-buffer bytes (hardware.h): a multiple of g floats.
                size_t chunk = sizes[s] / sizeof(float) / (size_t)g;
                bytes[s] = (double)(chunk * g * sizeof(float));
                t[s] = time_collective((CollKind)k, g, (size_t)bytes[s], x, y, o);
            }
            group_allreduce_max_f64(GROUP_WORLD, t, (size_t)ns);
            CollFit *f = &hw->coll[hw->n_coll++];
            *f = (CollFit){(CollKind)k, g, intra, 0, 0};
            fit_alpha_beta(bytes, t, ns, &f->alpha, &f->beta);
        }
    }
    comm_bench_group(2);  // pairs 2i, 2i+1
    double bytes[MAX_SIZES], t[MAX_SIZES];
    for (int s = 0; s < ns; s++) {
        bytes[s] = (double)sizes[s];
        t[s] = time_collective(COLL_P2P, 2, sizes[s], x, y, o);
    }
    group_allreduce_max_f64(GROUP_WORLD, t, (size_t)ns);
    CollFit *f = &hw->coll[hw->n_coll++];
    *f = (CollFit){COLL_P2P, 2, intra, 0, 0};
    fit_alpha_beta(bytes, t, ns, &f->alpha, &f->beta);
    free(x);
    free(y);
    // The ring fallback from the largest all-reduce: t = 2(n-1) lat + 2(n-1)/n B/bw.
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *a = &hw->coll[i];
        if (a->kind != COLL_ALLREDUCE || a->ranks != ws) continue;
        hw->intra_lat = a->alpha / (2.0 * (ws - 1));
        hw->intra_bw = a->beta > 0 ? 2.0 * (ws - 1) / ws / a->beta : hw->mem_bw;
    }
    hw->inter_lat = hw->intra_lat;
    hw->inter_bw = hw->intra_bw;
}

// ------------------------------------------------------------------ main

static void check_writable(const char *path) {
    if (access(path, F_OK) == 0) {
        if (access(path, W_OK) != 0) die_errno("bench calibrate: cannot write %s", path);
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    if (access(d, W_OK) != 0) die_errno("bench calibrate: cannot write %s (directory %s)", path, d);
}

static void print_curve(const char *name, const RateCurve *c) {
    double lo = c->rate[0], hi = c->rate[0];
    for (int i = 1; i < c->n; i++) {
        if (c->rate[i] < lo) lo = c->rate[i];
        if (c->rate[i] > hi) hi = c->rate[i];
    }
    printf("%-9s %2d points, %.3g .. %.3g FLOPs/call: %.1f .. %.1f GFLOP/s (%.1f at the largest)\n", name,
           c->n, c->work[0], c->work[c->n - 1], lo / 1e9, hi / 1e9, c->rate[c->n - 1] / 1e9);
}

static void print_summary(const Hardware *hw, const char *path, double seconds) {
    printf("calibrated %d rank%s x %d thread%s (%d on this node) in %.1f s\n", hw->calib_ranks,
           hw->calib_ranks == 1 ? "" : "s", hw->calib_threads, hw->calib_threads == 1 ? "" : "s",
           hw->gpus_per_node, seconds);
    printf("peak      %.1f GFLOP/s per rank\n", hw->peak_flops / 1e9);
    print_curve("gemm", &hw->gemm);
    print_curve("attn_fwd", &hw->attn_fwd);
    print_curve("attn_bwd", &hw->attn_bwd);
    printf("mem_bw    %.2f GB/s per rank | memory %.2f GB per rank\n", hw->mem_bw / 1e9, hw->mem_bytes / 1e9);
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *f = &hw->coll[i];
        printf("%-15s %3d ranks %s: alpha %8.2f us  beta %.4f ns/B (%.2f GB/s)\n", hardware_coll_name(f->kind),
               f->ranks, f->intra_node ? "intra" : "inter", f->alpha * 1e6, f->beta * 1e9,
               f->beta > 0 ? 1e-9 / f->beta : INFINITY);
    }
    if (hw->n_coll == 0)
        printf("links     not measured (1 rank): placeholders %.2f GB/s, %.1f us\n", hw->intra_bw / 1e9,
               hw->intra_lat * 1e6);
    else
        printf("links     ring fallback %.2f GB/s, %.2f us per step (inter_* = intra_*, not measured)\n",
               hw->intra_bw / 1e9, hw->intra_lat * 1e6);
    printf("wrote %s\n", path);
}

static int parse_int(const char *s, const char *opt) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 1 || v > 4096)
        die("bench calibrate: %s needs a positive integer (got \"%s\")", opt, s);
    return (int)v;
}

int bench_calibrate_main(int argc, char **argv) {
    const char *output = "profile.json";
    int threads = 0;
    Opts o = {0, 0.06};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (comm_world_rank() == 0) calibrate_usage();
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(argv[i], "--output") == 0 || strcmp(argv[i], "--threads") == 0) {
            if (i + 1 >= argc) die("bench calibrate: %s needs a value", argv[i]);
            if (strcmp(argv[i], "--output") == 0) output = argv[i + 1];
            else threads = parse_int(argv[i + 1], argv[i]);
            i++;
        } else {
            die("bench calibrate: unknown option \"%s\" (options: --output FILE, --threads T, --quick)", argv[i]);
        }
    }
    if (o.quick) o.target_s = 0.03;
    if (comm_world_rank() == 0) check_writable(output);
    double t0 = now_seconds();
    int ws = comm_world_size(), local = comm_local_size();
    if (threads == 0) threads = comm_default_threads();  // the rule `femtotron train` uses
    ops_set_threads(threads);

    Hardware hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "this");
    hw.bytes_per_value = 4;  // femtotron trains in fp32
    hw.gpus_per_node = local;
    hw.calib_ranks = ws;
    hw.calib_threads = threads;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    hw.mem_bytes = (double)pages * (double)page / local;

    group_barrier(GROUP_WORLD);
    double peak = bench_gemm_peak(o.quick ? 1024 : 2048, o.quick ? 0.3 : 1.0);
    world_median(&peak, &hw.peak_flops, 1);
    measure_gemm(&hw.gemm, &o);
    for (int i = 0; i < hw.gemm.n; i++)
        if (hw.gemm.rate[i] > hw.peak_flops) hw.peak_flops = hw.gemm.rate[i];
    measure_attention(&hw.attn_fwd, &hw.attn_bwd, &o);
    hw.mem_bw = measure_mem_bw(&o);
    if (ws > 1) {
        measure_collectives(&hw, &o);
    } else {  // placeholders (see the top of the file)
        hw.intra_bw = hw.inter_bw = hw.mem_bw / 2;
        hw.intra_lat = hw.inter_lat = 1e-6;
    }
    if (comm_world_rank() == 0) {
        hardware_save(&hw, output);
        print_summary(&hw, output, now_seconds() - t0);
        fflush(stdout);
    }
    group_barrier(GROUP_WORLD);
    return 0;
}
