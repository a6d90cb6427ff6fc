// util.c — fatal errors, checked allocation, timing.
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"

static void vreport(const char *kind, const char *fmt, va_list ap, int err) {
    int rank = comm_world_rank();
    if (comm_world_size() > 1)
        fprintf(stderr, "femtotron: rank %d: %s: ", rank, kind);
    else
        fprintf(stderr, "femtotron: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    if (err) fprintf(stderr, ": %s", strerror(err));
    fputc('\n', stderr);
    fflush(stderr);
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap, 0);
    va_end(ap);
    comm_abort(1);
}

void die_errno(const char *fmt, ...) {
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    vreport("error", fmt, ap, err);
    va_end(ap);
    comm_abort(1);
}

void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("warning", fmt, ap, 0);
    va_end(ap);
}

void *xmalloc(size_t bytes, const char *what) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0 || p == NULL)
        die("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *xcalloc(size_t bytes, const char *what) {
    void *p = xmalloc(bytes, what);
    memset(p, 0, bytes);
    return p;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint32_t fnv1a32(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 16777619u;
    }
    return h;
}
