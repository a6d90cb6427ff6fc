// ops/op_profile_cuda.cu — FEMTOTRON_CUDA_PROFILE=1: the time of the CUDA backend's
// ops by kind (issue 21's step split: matrix products, attention, element-wise
// kernels, the optimizer, copies; host overhead as the rest), printed to stderr
// when the process ends.
//
// An op opens at its first use of the stream (cuda_stream()) and closes at its
// cuda_done, which then waits for the stream: its time is from its first launch
// to the end of its last kernel, launches included; the host's work between ops
// (the model's bookkeeping, MPI, the data) is not in any op, so
//   host and waits = wall since the first op − the ops' sum.
// The wait after every op makes the run slower than an unprofiled one (it was the
// backend's behaviour before ops were queued): the split is for fractions, not
// for throughput. Off (the default), the hooks cost one branch each.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda_common.cuh"

typedef enum { K_MATMUL, K_ATTENTION, K_ELEMENTWISE, K_OPTIMIZER, K_COPIES, K_WAITS, K_KINDS } OpKind;
static const char *const KIND_NAMES[K_KINDS] = {"matrix products", "attention", "element-wise", "optimizer",
                                                "copies", "waits"};
static int g_on = -1;         // FEMTOTRON_CUDA_PROFILE, read once
static int g_open;            // an op has used the stream and not closed
static double g_start, g_first = -1.0, g_last_close = -1.0;
static double g_seconds[K_KINDS];
static long g_calls[K_KINDS];

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
    if (!strcmp(what, "sync")) return K_WAITS;
    return K_ELEMENTWISE;
}

static void report(void) {
    if (g_first < 0) return;
    const double wall = now_seconds() - g_first;
    double ops = 0.0;
    for (int k = 0; k < K_KINDS; k++) ops += g_seconds[k];
    char line[1024];
    int at = snprintf(line, sizeof line, "femtotron: cuda profile: wall %.3f s since the first op", wall);
    for (int k = 0; k < K_KINDS && at < (int)sizeof line; k++)
        at += snprintf(line + at, sizeof line - at, "; %s %.3f s (%.1f%%, %ld)", KIND_NAMES[k], g_seconds[k],
                       wall > 0 ? 100.0 * g_seconds[k] / wall : 0.0, g_calls[k]);
    if (at < (int)sizeof line)
        snprintf(line + at, sizeof line - at, "; host %.3f s (%.1f%%)\n", wall - ops,
                 wall > 0 ? 100.0 * (wall - ops) / wall : 0.0);
    fputs(line, stderr);
}

static int on(void) {
    if (g_on < 0) {
        const char *e = getenv("FEMTOTRON_CUDA_PROFILE");
        g_on = e && e[0] && strcmp(e, "0") != 0;
        if (g_on) atexit(report);
    }
    return g_on;
}

void cuda_profile_open(void) {
    if (!on() || g_open) return;
    g_open = 1;
    g_start = now_seconds();
    if (g_first < 0) g_first = g_start;
}

void cuda_profile_close(const char *what) {
    if (!on()) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream_raw()));
    const double t = now_seconds();
    const OpKind k = kind_of(what);
    // An op that launched without cuda_stream() (none should): its time from the
    // previous op's end, host work included, rather than lost to the next op.
    const double from = g_open ? g_start : g_last_close;
    if (from >= 0) {
        g_seconds[k] += t - from;
        g_calls[k]++;
    }
    g_open = 0;
    g_last_close = t;
}
