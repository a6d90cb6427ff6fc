// ops/buffers_cpu.c — the backend and buffer ops of ops.h on the CPU: plain libc
// copies, nothing to start or wait for. The
// layers above call these instead of memcpy/memset on planned buffers, so that a
// device backend can put the same buffers in device memory (docs/DESIGN.md,
// invariant 6: the backend boundary).
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "util.h"

void ops_init(int local_rank) { (void)local_rank; }

const char *ops_backend_name(void) { return "cpu"; }

int ops_device(char *name, size_t size) {
    if (size) name[0] = '\0';
    return 0;
}
size_t ops_device_memory(void) { return 0; }

void ops_set_attention_cudnn(int on) {
    if (on) die("the CPU build has no cuDNN (training.attention = cudnn needs ./femtotron-cuda)");
}

void ops_upload(void *dst_buffer, const void *src_host, size_t bytes) { memcpy(dst_buffer, src_host, bytes); }

void ops_download(void *dst_host, const void *src_buffer, size_t bytes) { memcpy(dst_host, src_buffer, bytes); }

void *ops_host_alloc(size_t bytes, const char *what) { return xcalloc(bytes ? bytes : 1, what); }

void ops_host_free(void *p) { free(p); }

void ops_upload_queued(void *dst_buffer, const void *src_host, size_t bytes) { memcpy(dst_buffer, src_host, bytes); }

void ops_sync(void) {}

// Large fills and copies in pieces, one a thread: one core's memset or memcpy does
// not reach the memory bandwidth both cores have (the gradients' zeroing at the
// start of a step, 116 MB in the small config and 400 MB in gpt2, was about 1% of
// the step on one thread while the other waited). Below PAR_BYTES, or inside a
// parallel region (a nested team would be one thread anyway), one call.
#define PAR_BYTES ((size_t)1 << 21)
#define PIECE_ALIGN 64  // piece boundaries sit a multiple of 64 bytes from dst (cache lines, where dst is on one)

// The bytes [0, bytes) of dst written: copied from src, or zeroed where src is NULL;
// thread t of nt takes [lo, hi), cut on PIECE_ALIGN. Only the last piece's end can
// pass `bytes` (lines * PIECE_ALIGN rounds it up by less than a line; no piece
// starts that late while bytes >= PAR_BYTES), so only hi is clamped.
static void fill_or_copy(void *dst, const void *src, size_t bytes) {
    if (bytes < PAR_BYTES || omp_in_parallel()) {
        if (src) memcpy(dst, src, bytes);
        else memset(dst, 0, bytes);
        return;
    }
    const size_t lines = (bytes + PIECE_ALIGN - 1) / PIECE_ALIGN;
#pragma omp parallel
    {
        const size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        const size_t lo = lines * t / nt * PIECE_ALIGN;
        size_t hi = lines * (t + 1) / nt * PIECE_ALIGN;
        if (hi > bytes) hi = bytes;
        if (src) memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
        else memset((char *)dst + lo, 0, hi - lo);
    }
}

void copy_f32(float *dst, const float *src, size_t n) { fill_or_copy(dst, src, sizeof(float) * n); }

void move_f32(float *dst, const float *src, size_t n) { memmove(dst, src, sizeof(float) * n); }

void zero_f32(float *x, size_t n) { fill_or_copy(x, NULL, sizeof(float) * n); }

void zero_f64(double *x, size_t n) { fill_or_copy(x, NULL, sizeof(double) * n); }

void copy_rows_f32(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                   size_t cols) {
    for (size_t r = 0; r < rows; r++) memcpy(dst + r * ld_dst, src + r * ld_src, sizeof(float) * cols);
}

void gather_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    for (size_t r = 0; r < n; r++) memcpy(dst + r * cols, src + (size_t)idx[r] * cols, sizeof(float) * cols);
}

void scatter_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    for (size_t r = 0; r < n; r++) memcpy(dst + (size_t)idx[r] * cols, src + r * cols, sizeof(float) * cols);
}
