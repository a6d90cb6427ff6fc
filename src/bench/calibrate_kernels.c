// bench/calibrate_kernels.c — rates of the kernels a training step runs: GEMM
// and attention throughput curves and the elementwise kernels' bandwidth, each
// timed on every rank at once (calib_time_call) and aggregated as the median over
// the ranks. FLOPs are counted as in plan/hardware.h.
#define _DEFAULT_SOURCE  // _SC_LEVEL3_CACHE_SIZE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/calibrate_util.h"
#include "dist/comm.h"
#include "model/rope.h"
#include "ops/ops.h"
#include "util.h"

// ----------------------------------------------------------------- GEMM

// The last token count and the last two shapes only on a GPU (o->gpu), where a
// 4096 x 2048 x 2048 product takes about 50 us and a 1-2B model's (2048 wide,
// MLP 8192, 8k+ tokens per micro-batch) are larger still; on a CPU they would
// take seconds each.
static const int GEMM_TOKENS[] = {64, 256, 1024, 4096, 16384};
static const int GEMM_DIMS[][2] = {{256, 256},   {256, 768},   {512, 1536}, {1024, 1024},
                                   {1024, 4096}, {2048, 2048}, {2048, 8192}, {4096, 4096}};
#define N_TOKENS ((int)(sizeof GEMM_TOKENS / sizeof GEMM_TOKENS[0]))
#define N_DIMS ((int)(sizeof GEMM_DIMS / sizeof GEMM_DIMS[0]))
#define N_GPU_ONLY_TOKENS 1
#define N_GPU_ONLY_DIMS 2
#define MAX_GEMM_POINTS (2 * N_TOKENS * N_DIMS)

// Operands come from memory, not cache, as in a training step, where a layer's
// saved activations and weights have been evicted by the rest of the model by
// the time its backward (or the next micro-batch) uses them: each call takes its
// operands at the next offset of a pool larger than this rank's share of the
// last-level cache, wrapping around. Inputs come from `src` (never written, so
// the values stay bounded), outputs go to `dst`.
typedef struct {
    float *src, *dst;  // (pool) floats each
    size_t pool;
    size_t at_src, at_dst;  // next offsets
} GemmPool;

static float *take(float *base, size_t pool, size_t *at, size_t n) {
    n = (n + 15) / 16 * 16;  // 64-byte aligned pieces
    if (*at + n > pool) *at = 0;
    float *p = base + *at;
    *at += n;
    return p;
}

// One GEMM of M tokens x (K in, N out).
typedef struct {
    int M, K, N;
    GemmPool *pool;
} GemmCall;

static void gemm_forward_call(const void *p) {
    const GemmCall *g = p;
    GemmPool *q = g->pool;
    const size_t M = (size_t)g->M, K = (size_t)g->K, N = (size_t)g->N;
    const float *in = take(q->src, q->pool, &q->at_src, M * K);  // (M, K)
    const float *w = take(q->src, q->pool, &q->at_src, N * K);   // (N, K)
    float *out = take(q->dst, q->pool, &q->at_dst, M * N);       // (M, N)
    matmul_forward(out, in, w, g->M, g->K, g->N);
}

static void gemm_backward_call(const void *p) {
    const GemmCall *g = p;
    GemmPool *q = g->pool;
    const size_t M = (size_t)g->M, K = (size_t)g->K, N = (size_t)g->N;
    const float *dout = take(q->src, q->pool, &q->at_src, M * N);  // (M, N)
    const float *in = take(q->src, q->pool, &q->at_src, M * K);    // (M, K)
    const float *w = take(q->src, q->pool, &q->at_src, N * K);     // (N, K)
    float *din = take(q->dst, q->pool, &q->at_dst, M * K);         // (M, K)
    float *dw = take(q->dst, q->pool, &q->at_dst, N * K);          // (N, K)
    matmul_backward(din, dw, dout, in, w, g->M, g->K, g->N, 0);
}

// Floats per pool side: twice this rank's share of the last-level cache (64 MiB
// when the size is unknown), at least the largest call's operands; --quick keeps
// only the latter (it is for tests, not for a profile to plan with).
static size_t pool_floats(size_t largest, int quick) {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = 64L << 20;
    int local = comm_local_size();
    size_t share = quick ? 0 : (size_t)(2.0 * (double)llc / (local > 0 ? local : 1) / sizeof(float));
    return share > largest ? share : largest;
}

void calib_measure_gemm(RateCurve *c, const CalibOpts *o) {
    int nt = N_TOKENS - (o->gpu ? 0 : N_GPU_ONLY_TOKENS), nd = N_DIMS - (o->gpu ? 0 : N_GPU_ONLY_DIMS);
    if (o->quick) nt = N_TOKENS - N_GPU_ONLY_TOKENS - 1, nd = N_DIMS - N_GPU_ONLY_DIMS - 1;
    size_t largest = 0;  // floats one side of a backward call takes, rounded up
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nd; j++) {
            size_t M = (size_t)GEMM_TOKENS[i], K = (size_t)GEMM_DIMS[j][0], N = (size_t)GEMM_DIMS[j][1];
            size_t need = M * N + M * K + N * K + 48;
            if (need > largest) largest = need;
        }
    GemmPool pool = {NULL, NULL, pool_floats(largest, o->quick), 0, 0};
    pool.src = calib_alloc(pool.pool * sizeof(float), "calibration GEMM operands");  // (pool)
    pool.dst = calib_alloc(pool.pool * sizeof(float), "calibration GEMM results");   // (pool)
    calib_fill_random(pool.src, pool.pool, 1);
    memset(pool.dst, 0, pool.pool * sizeof(float));  // touch every page before timing
    // bf16 products: the operand pool is kept as bf16 like the parameters of a
    // training run (ops_keep_bf16_weights), so every operand is read from its bf16
    // copy, rounded the first time a slice is used (warm-up) and not again: the
    // curve is the products' alone. A run's weights are read so too; its fp32
    // activation operands pay their rounding passes, which the planner prices as
    // elementwise work (plan/step_time.c), and its bf16 ones none. Kept afresh for
    // every shape: the slices rounded so far are searched on each call, and a
    // training run has a few hundred (one per weight), not the thousands that
    // every shape's slices of the pool would add up to.
    void *copy = o->bf16 ? calib_alloc(pool.pool * sizeof(uint16_t), "calibration bf16 operands") : NULL;  // (pool)
    int n = 0;
    double rate[MAX_GEMM_POINTS], work[MAX_GEMM_POINTS];
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < nd; j++) {
            int M = GEMM_TOKENS[i], K = GEMM_DIMS[j][0], N = GEMM_DIMS[j][1];
            double f = 2.0 * M * K * N;
            GemmCall g = {M, K, N, &pool};
            if (copy) {
                ops_keep_bf16_weights(pool.src, pool.pool, copy);
                ops_bf16_weights_changed();
            }
            double fwd_s = calib_time_call((CalibCall){gemm_forward_call, &g}, o);
            double bwd_s = calib_time_call((CalibCall){gemm_backward_call, &g}, o);
            work[n] = f;
            rate[n++] = f / fwd_s;
            work[n] = 2 * f;
            rate[n++] = 2 * f / bwd_s;
        }
    if (copy) {
        ops_keep_bf16_weights(NULL, 0, NULL);
        buf_free(copy);
    }
    buf_free(pool.src);
    buf_free(pool.dst);
    double med[MAX_GEMM_POINTS];
    calib_world_median(rate, med, n);
    CalibPoint p[MAX_GEMM_POINTS];
    for (int i = 0; i < n; i++) p[i] = (CalibPoint){work[i], med[i]};
    calib_fold_curve(c, p, n);
}

// ------------------------------------------------------------ attention

// The kernel's speed depends on the sequence length (its tiles) and head dim, not
// on how many (sequence, head) pairs a call holds once they fill the threads, so
// the curves are keyed by the FLOPs of ONE (sequence, head): forward
// 4*hd*S(S+1)/2, backward twice that (plan/hardware.h).
static const int ATT_SEQ[] = {128, 256, 512, 1024, 2048};
// Query = key/value heads per call (one sequence): enough (sequence, head) pairs to
// fill the machine, as a training step's B x H do: 8 for CPU cores; on a GPU 64,
// whose kernels take a block per 64 or 128 query rows and head (8 heads at S = 2048
// were 128 blocks: fewer than an H100's 132 SMs, a rate below a step's); --quick keeps 8.
#define ATT_HEADS_CPU 8
#define ATT_HEADS_GPU 64
#define N_SEQ ((int)(sizeof ATT_SEQ / sizeof ATT_SEQ[0]))

// Causal attention of one sequence (B = 1) of S tokens, H heads of hd. kept: the
// bf16 ops on bf16 q|k|v, output and dout (--attention cudnn: what a cudnn run
// calls, LlamaModel.att_bf16), over the same buffers' first halves.
typedef struct {
    int S, hd, H, kept;
    float *qkv, *dqkv, *out, *dout, *lse, *m, *l, *scratch;
    const int *pos;
} AttnCall;

static void attn_forward_call(const void *p) {
    const AttnCall *a = p;
    if (a->kept)
        attention_forward_bf16((uint16_t *)a->out, a->lse, (const uint16_t *)a->qkv, a->pos, 1, a->S, a->H, a->H,
                               a->hd);
    else
        attention_forward(a->out, a->lse, a->m, a->l, a->qkv, a->pos, 1, a->S, a->H, a->H, a->hd, a->scratch);
}

static void attn_backward_call(const void *p) {  // m serves as the rowdot scratch
    const AttnCall *a = p;
    if (a->kept)
        attention_backward_bf16((uint16_t *)a->dqkv, (const uint16_t *)a->dout, (const uint16_t *)a->qkv,
                                (const uint16_t *)a->out, a->lse, a->pos, 1, a->S, a->H, a->H, a->hd);
    else
        attention_backward(a->dqkv, a->m, a->dout, a->qkv, a->out, a->lse, a->pos, 1, a->S, a->H, a->H, a->hd,
                           a->scratch);
}

void calib_measure_attention(RateCurve *fwd, RateCurve *bwd, const CalibOpts *o) {
    // --quick: S up to 512 (3 points), 8 heads
    const int H = o->gpu && !o->quick ? ATT_HEADS_GPU : ATT_HEADS_CPU, hd = o->head_dim, ns = o->quick ? N_SEQ - 2 : N_SEQ;
    const int Smax = ATT_SEQ[ns - 1];
    const size_t ld = (size_t)3 * H * hd, S = (size_t)Smax;
    float *qkv = calib_alloc(S * ld * sizeof(float), "calibration qkv");                  // (S, 3*H*hd)
    float *dqkv = calib_alloc(S * ld * sizeof(float), "calibration dqkv");                // (S, 3*H*hd)
    float *out = calib_alloc(S * H * hd * sizeof(float), "calibration attention out");    // (S, H*hd)
    float *dout = calib_alloc(S * H * hd * sizeof(float), "calibration attention dout");  // (S, H*hd)
    float *lse = calib_alloc(S * H * sizeof(float), "calibration lse");                    // (1, H, S)
    float *m = calib_alloc(S * H * sizeof(float), "calibration m");                        // (1, H, S)
    float *l = calib_alloc(S * H * sizeof(float), "calibration l");                        // (1, H, S)
    float *scratch = calib_alloc(attention_scratch_floats(hd) * sizeof(float), "calibration attention scratch");
    int *pos = calib_alloc(S * sizeof(int), "calibration positions");  // (S)
    for (int i = 0; i < Smax; i++) pos[i] = i;
    calib_fill_random(qkv, S * ld, 7);
    calib_fill_random(dout, S * H * hd, 8);
    if (o->cudnn) {  // bf16 q|k|v and dout: random values rounded into their first halves (dqkv: free until
                     // the backward)
        calib_fill_random(dqkv, S * ld, 7);
        round_to_bf16((uint16_t *)qkv, dqkv, S * ld);
        calib_fill_random(dqkv, S * H * hd, 8);
        round_to_bf16((uint16_t *)dout, dqkv, S * H * hd);
    }
    double work[N_SEQ], rf[N_SEQ], rb[N_SEQ];
    for (int s = 0; s < ns; s++) {
        int Sq = ATT_SEQ[s];
        work[s] = 4.0 * hd * (double)Sq * (Sq + 1) / 2;  // one (sequence, head)
        AttnCall a = {Sq, hd, H, o->cudnn, qkv, dqkv, out, dout, lse, m, l, scratch, pos};
        double fwd_s = calib_time_call((CalibCall){attn_forward_call, &a}, o);
        double bwd_s = calib_time_call((CalibCall){attn_backward_call, &a}, o);
        rf[s] = H * work[s] / fwd_s;
        rb[s] = 2 * H * work[s] / bwd_s;
    }
    buf_free(qkv), buf_free(dqkv), buf_free(out), buf_free(dout), buf_free(lse), buf_free(m), buf_free(l);
    buf_free(scratch), buf_free(pos);
    double med[N_SEQ];
    CalibPoint p[N_SEQ];
    calib_world_median(rf, med, ns);
    for (int i = 0; i < ns; i++) p[i] = (CalibPoint){work[i], med[i]};
    calib_fold_curve(fwd, p, ns);
    calib_world_median(rb, med, ns);
    for (int i = 0; i < ns; i++) p[i] = (CalibPoint){2 * work[i], med[i]};
    calib_fold_curve(bwd, p, ns);
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
    rmsnorm_forward(e->y, NULL, e->rstd, e->x, e->w, e->N, e->D, 1e-5f);
    residual_forward(e->y, e->y, e->x, nd);
    rope_forward(e->qkv, e->cos_t, e->sin_t, 1, e->N, e->H, e->KV, e->hd);
    rmsnorm_forward(e->y, NULL, e->rstd, e->x, e->w, e->N, e->D, 1e-5f);
    swiglu_forward(e->h, e->gu, e->N, e->F);
    residual_forward(e->y, e->y, e->x, nd);
}

// The layer's size. On CPUs (and in --quick runs) a small layer: 185 MB a call,
// tens of milliseconds. A GPU runs that in about 0.1 ms, where each kernel's
// launch and its tail weigh: an H200 measured 1.89 TB/s there (2026-11-28,
// bench/results/gpu_vs_pytorch_runs.tar.gz), which made the planner's GPU steps
// 17-19% too slow; with 3.5-4.0 TB/s in the same profile its predictions of the
// three measured runs fall within 3.4% (the elementwise kernels and AdamW are
// priced by mem_bw). So a GPU measures a SmolLM-1.7B-sized layer at 16384 tokens
// (3.3 GB of traffic a call, 2.1 GB of buffers), as a training step runs them.
static LayerElems mem_bw_layer(const CalibOpts *o) {
    LayerElems e = {0};
    const int gpu = o->gpu && !o->quick;
    e.N = gpu ? 16384 : 4096, e.D = gpu ? 2048 : 512, e.F = gpu ? 8192 : 1536;
    e.H = gpu ? 32 : 8, e.KV = gpu ? 8 : 4, e.hd = 64;
    return e;
}

double calib_measure_mem_bw(const CalibOpts *o) {
    LayerElems e = mem_bw_layer(o);
    const size_t N = (size_t)e.N, qkvw = (size_t)(e.H + 2 * e.KV) * e.hd;
    e.x = calib_alloc(N * e.D * sizeof(float), "calibration x");                     // (N, D)
    e.y = calib_alloc(N * e.D * sizeof(float), "calibration y");                     // (N, D)
    e.rstd = calib_alloc(N * sizeof(float), "calibration rstd");                     // (N)
    e.w = calib_alloc((size_t)e.D * sizeof(float), "calibration norm weight");       // (D)
    e.qkv = calib_alloc(N * qkvw * sizeof(float), "calibration qkv");                // (N, (H+2KV)*hd)
    e.cos_t = calib_alloc(N * e.hd / 2 * sizeof(float), "calibration rope");         // (N, hd/2)
    e.sin_t = calib_alloc(N * e.hd / 2 * sizeof(float), "calibration rope");         // (N, hd/2)
    e.gu = calib_alloc(N * 2 * e.F * sizeof(float), "calibration gate|up");          // (N, 2F)
    e.h = calib_alloc(N * e.F * sizeof(float), "calibration swiglu");                // (N, F)
    calib_fill_random(e.x, N * e.D, 1);
    calib_fill_random(e.w, (size_t)e.D, 2);
    calib_fill_random(e.qkv, N * qkvw, 3);
    calib_fill_random(e.gu, N * 2 * e.F, 4);
    double *freq = xmalloc(sizeof(double) * (size_t)e.hd / 2, "calibration rope");  // (hd/2)
    rope_plain_frequencies(e.hd, 10000.0, freq);
    rope_tables(e.cos_t, e.sin_t, e.N, e.hd, freq, 0);
    free(freq);
    double values = 10.0 * N * e.D + 2.0 * N * (e.H + e.KV) * e.hd + 3.0 * N * e.F;
    double bw = values * sizeof(float) / calib_time_call((CalibCall){layer_elems_call, &e}, o), med;
    buf_free(e.x), buf_free(e.y), buf_free(e.rstd), buf_free(e.w), buf_free(e.qkv), buf_free(e.cos_t);
    buf_free(e.sin_t), buf_free(e.gu), buf_free(e.h);
    calib_world_median(&bw, &med, 1);
    return med;
}
