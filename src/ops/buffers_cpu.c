// ops/buffers_cpu.c — the backend and buffer ops of ops.h on the CPU: plain libc
// copies, nothing to start or wait for. The
// layers above call these instead of memcpy/memset on planned buffers, so that a
// device backend can put the same buffers in device memory (docs/DESIGN.md,
// invariant 6: the backend boundary).
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

void copy_f32(float *dst, const float *src, size_t n) { memcpy(dst, src, sizeof(float) * n); }

void move_f32(float *dst, const float *src, size_t n) { memmove(dst, src, sizeof(float) * n); }

void zero_f32(float *x, size_t n) { memset(x, 0, sizeof(float) * n); }

void zero_f64(double *x, size_t n) { memset(x, 0, sizeof(double) * n); }

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
