// bench/tools/sgemm_tool.h — what the sgemm timing tools share (sgemm_alone.c,
// sgemm_rates.c, sgemm_step_shapes.c): a monotonic clock and operands filled as
// femtotron's buffers are aligned. Header-only: each tool is one file built by its
// script with a plain cc line.
#ifndef FEMTOTRON_BENCH_SGEMM_TOOL_H
#define FEMTOTRON_BENCH_SGEMM_TOOL_H

#include <stdlib.h>
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

// n floats on a 64-byte boundary (as buf_alloc aligns) holding values in [-0.5, 0.5);
// exits on no memory (a timing tool has nothing to fall back to).
static inline float *filled(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) exit(1);
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

#endif
