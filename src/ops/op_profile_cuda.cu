// ops/op_profile_cuda.cu — FEMTOTRON_CUDA_PROFILE=1: the GPU time of the CUDA
// backend's ops, by kind (issue 21's step split: matrix products, attention,
// element-wise kernels, the optimizer, copies) and by op name, printed to stderr
// when the process ends.
//
// Each op is timed on the GPU by two CUDA events on the ops' stream: one recorded
// at its first use of the stream (cuda_stream()), one at its cuda_done. Nothing
// waits for them as the run goes: they are read when the host waits anyway
// (ops_sync, once a step) or when the pool of pending pairs is full, so a profiled
// run runs at nearly its own speed. Ops on one stream run one after another, so
// their times add up to at most the wall time since the first op, and
//   host = wall − the ops' GPU time
// is the time the GPU had none of our ops to run: launches the host was late with,
// its bookkeeping, the data, MPI, collectives on other streams. "waits" is the
// host's time blocked in ops_sync (the GPU busy meanwhile, so it overlaps the
// kinds and is not part of that sum), with the number of waits.
//
// The matrix products are also listed by shape (cuda_profile_product): cuBLASLt's
// column-major m x n x k, operand and output types, with the TFLOP/s each shape
// ran at, 2 m n k a call over its GPU time. That time is the product's kernel
// alone: the bf16 rounding of its operands, queued before it, closes as an op of
// its own ("product operand rounding", element-wise) at cuda_profile_split.
//
// (The first version waited for the stream after every op and timed on the host:
// the waits slowed the run, and on an H200 its kinds added up to more than the wall
// time, host -37%, which nothing here can do: an op's time is its events'.)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda_common.cuh"

typedef enum { K_MATMUL, K_ATTENTION, K_ELEMENTWISE, K_OPTIMIZER, K_COPIES, K_KINDS } OpKind;
static const char *const KIND_NAMES[K_KINDS] = {"matrix products", "attention", "element-wise", "optimizer",
                                                "copies"};

// The kind of the op named `what` (the names cuda_done is given: ops.h's).
static OpKind kind_of(const char *what) {
    if (!strncmp(what, "matmul", 6) || !strncmp(what, "gemm", 4)) return K_MATMUL;
    if (!strncmp(what, "attention", 9)) return K_ATTENTION;
    if (!strcmp(what, "adamw_update") || !strcmp(what, "sum_squares") || !strncmp(what, "scale", 5))
        return K_OPTIMIZER;
    if (!strcmp(what, "copy_f32") || !strcmp(what, "move_f32") || !strcmp(what, "zero_f32") ||
        !strcmp(what, "copy_rows_f32") || !strcmp(what, "gather_rows_f32") || !strcmp(what, "scatter_rows_f32") ||
        !strncmp(what, "ops_upload", 10) || !strncmp(what, "ops_download", 12))
        return K_COPIES;
    return K_ELEMENTWISE;
}

// Per op name: its GPU seconds and calls.
enum { MAX_NAMES = 256, MAX_PENDING = 4096 };
typedef struct {
    const char *name;
    OpKind kind;
    double seconds;
    long calls;
} OpTotal;

// Per matrix-product shape: its name (the op's, then the shape), GPU seconds,
// calls and FLOPs.
enum { MAX_SHAPES = 128, SHAPE_NAME = 112 };
typedef struct {
    char name[SHAPE_NAME];
    double seconds, flop;
    long calls;
} ShapeTotal;

// An op's two events, recorded, not yet read.
typedef struct {
    int op;     // index into g_ops
    int shape;  // index into g_shapes, -1 for an op that is not a product
    cudaEvent_t start, end;
} Pending;

// Only the thread that ran the first op (the training loop's) is timed: another
// thread's ops (the checkpointer's copies) run on the same stream between them, and
// their time shows as host time.
static int g_on = -1;  // FEMTOTRON_CUDA_PROFILE, read once
static pthread_t g_thread;
static OpTotal g_ops[MAX_NAMES];
static int g_nops;
static Pending g_pending[MAX_PENDING];  // events created as needed, reused
static int g_npending, g_created, g_open;
static double g_first = -1.0, g_wait_s;
static long g_waits;
static ShapeTotal g_shapes[MAX_SHAPES];
static int g_nshapes, g_next_shape = -1;  // g_next_shape: the shape the op closing next is of

static int op_index(const char *what) {
    for (int i = 0; i < g_nops; i++)
        if (g_ops[i].name == what || !strcmp(g_ops[i].name, what)) return i;
    if (g_nops == MAX_NAMES) return MAX_NAMES - 1;  // (ops.h has far fewer names)
    g_ops[g_nops] = (OpTotal){what, kind_of(what), 0.0, 0};
    return g_nops++;
}

// Read every closed pair (the stream has passed them, or is waited for here). At
// exit (fatal 0) a CUDA error ends the report quietly instead of the process again.
static int resolve(int fatal) {
    const int n = g_npending;
    for (int i = 0; i < n; i++) {
        float ms = 0.0f;
        cudaError_t e = cudaEventSynchronize(g_pending[i].end);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, g_pending[i].start, g_pending[i].end);
        if (e != cudaSuccess) {
            if (fatal) CUDA_CHECK(e);
            return 0;
        }
        g_ops[g_pending[i].op].seconds += 1e-3 * ms;
        if (g_pending[i].shape >= 0) g_shapes[g_pending[i].shape].seconds += 1e-3 * ms;
    }
    g_npending = 0;
    if (g_open && n > 0) {  // the open op's start event sits at n: it moves to the first slot
        const Pending open = g_pending[n];
        g_pending[n].start = g_pending[0].start, g_pending[n].end = g_pending[0].end;
        g_pending[0].start = open.start, g_pending[0].end = open.end;
    }
    return 1;
}

static int by_seconds(const void *a, const void *b) {
    const double x = ((const OpTotal *)a)->seconds, y = ((const OpTotal *)b)->seconds;
    return (x < y) - (x > y);
}

static int shape_by_seconds(const void *a, const void *b) {
    const double x = ((const ShapeTotal *)a)->seconds, y = ((const ShapeTotal *)b)->seconds;
    return (x < y) - (x > y);
}

// The products by shape, the most GPU time first (the first 24), each with the
// rate it ran at.
static void report_products(double wall) {
    if (g_nshapes == 0) return;
    char line[4096];
    qsort(g_shapes, (size_t)g_nshapes, sizeof g_shapes[0], shape_by_seconds);
    int at = snprintf(line, sizeof line, "femtotron: cuda profile by product:");
    for (int i = 0; i < g_nshapes && i < 24 && at < (int)sizeof line; i++) {
        const ShapeTotal *t = &g_shapes[i];
        at += snprintf(line + at, sizeof line - at, "%s %s %.3f s (%.1f%%, %ld, %.4g TFLOP/s)", i ? ";" : "", t->name,
                       t->seconds, wall > 0 ? 100.0 * t->seconds / wall : 0.0, t->calls,
                       t->seconds > 0 ? 1e-12 * t->flop / t->seconds : 0.0);
    }
    if (at < (int)sizeof line) snprintf(line + at, sizeof line - at, "\n");
    fputs(line, stderr);
}

static void report(void) {
    if (g_first < 0) return;
    if (cudaDeviceSynchronize() != cudaSuccess || !resolve(0)) return;  // (a run ending on a CUDA error)
    const double wall = now_seconds() - g_first;
    double kind_s[K_KINDS] = {0}, ops = 0.0;
    long kind_calls[K_KINDS] = {0};
    for (int i = 0; i < g_nops; i++) {
        kind_s[g_ops[i].kind] += g_ops[i].seconds;
        kind_calls[g_ops[i].kind] += g_ops[i].calls;
        ops += g_ops[i].seconds;
    }
    char line[2048];
    int at = snprintf(line, sizeof line, "femtotron: cuda profile: wall %.3f s since the first op", wall);
    for (int k = 0; k < K_KINDS && at < (int)sizeof line; k++)
        at += snprintf(line + at, sizeof line - at, "; %s %.3f s (%.1f%%, %ld)", KIND_NAMES[k], kind_s[k],
                       wall > 0 ? 100.0 * kind_s[k] / wall : 0.0, kind_calls[k]);
    if (at < (int)sizeof line)
        at += snprintf(line + at, sizeof line - at, "; waits %.3f s (%.1f%%, %ld)", g_wait_s,
                       wall > 0 ? 100.0 * g_wait_s / wall : 0.0, g_waits);
    if (at < (int)sizeof line)
        snprintf(line + at, sizeof line - at, "; host %.3f s (%.1f%%)\n", wall - ops,
                 wall > 0 ? 100.0 * (wall - ops) / wall : 0.0);
    fputs(line, stderr);
    // The ops by name, the most GPU time first (the first 24).
    qsort(g_ops, (size_t)g_nops, sizeof g_ops[0], by_seconds);
    at = snprintf(line, sizeof line, "femtotron: cuda profile by op:");
    for (int i = 0; i < g_nops && i < 24 && at < (int)sizeof line; i++)
        at += snprintf(line + at, sizeof line - at, "%s %s %.3f s (%.1f%%, %ld)", i ? ";" : "", g_ops[i].name,
                       g_ops[i].seconds, wall > 0 ? 100.0 * g_ops[i].seconds / wall : 0.0, g_ops[i].calls);
    if (at < (int)sizeof line) snprintf(line + at, sizeof line - at, "\n");
    fputs(line, stderr);
    report_products(wall);
}

static int on(void) {
    if (g_on < 0) {
        const char *e = getenv("FEMTOTRON_CUDA_PROFILE");
        g_on = e && e[0] && strcmp(e, "0") != 0;
        if (g_on) atexit(report);
    }
    return g_on;
}

static int timed_thread(void) { return g_first >= 0 && pthread_equal(pthread_self(), g_thread); }

int cuda_profile_on(void) { return on(); }

void cuda_profile_open(void) {
    if (!on() || g_open) return;
    if (g_first < 0) {
        g_first = now_seconds();
        g_thread = pthread_self();
    } else if (!timed_thread()) {
        return;
    }
    if (g_npending == MAX_PENDING) resolve(1);
    Pending *p = &g_pending[g_npending];
    if (g_npending == g_created) {  // a pair not made yet
        CUDA_CHECK(cudaEventCreate(&p->start));
        CUDA_CHECK(cudaEventCreate(&p->end));
        g_created++;
    }
    CUDA_CHECK(cudaEventRecord(p->start, cuda_stream_raw()));
    g_open = 1;
}

void cuda_profile_close(const char *what) {
    if (!on() || !timed_thread()) return;
    const int op = op_index(what), shape = g_next_shape;
    g_ops[op].calls++;
    g_next_shape = -1;
    if (!g_open) return;  // an op that launched nothing on the stream: no GPU time
    g_open = 0;
    Pending *p = &g_pending[g_npending++];
    CUDA_CHECK(cudaEventRecord(p->end, cuda_stream_raw()));
    p->op = op;
    p->shape = shape;
}

void cuda_profile_split(const char *what) {
    if (on() && timed_thread() && g_open) cuda_profile_close(what);
}

void cuda_profile_product(const char *what, int m, int n, int k, const char *types) {
    if (!on() || !timed_thread()) return;
    char name[SHAPE_NAME];
    snprintf(name, sizeof name, "%s %dx%dx%d %s", what, m, n, k, types);
    int i = 0;
    while (i < g_nshapes && strcmp(g_shapes[i].name, name)) i++;
    if (i == g_nshapes) {
        if (g_nshapes == MAX_SHAPES) return;  // (a mixture of experts' many row counts: the first 128 are listed)
        memcpy(g_shapes[g_nshapes++].name, name, sizeof name);
    }
    g_shapes[i].calls++;
    g_shapes[i].flop += 2.0 * m * n * k;
    g_next_shape = i;
}

void cuda_profile_wait(double seconds) {
    if (!on() || !timed_thread()) return;
    g_wait_s += seconds;
    g_waits++;
    resolve(1);  // the stream is drained: every pending pair can be read without waiting
}
