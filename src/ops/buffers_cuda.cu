// ops/buffers_cuda.cu — the CUDA backend's start, its allocator, and the buffer ops
// of ops.h (copies, moves, zeroing, strided copies, host <-> buffer transfers).
//
// Planned buffers (buf_alloc) are CUDA managed memory: one address valid on the
// device and on the host, so that util.c keeps its header in front of each buffer
// and the host code that still reads buffers directly keeps working while the
// kernels run on the GPU (docs/DESIGN.md, invariant 6: the backend boundary, lists
// those readers). Moving them to cudaMalloc memory, with explicit ops_upload /
// ops_download at the listed places, is the next step.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/cuda_common.cuh"

extern "C" {
#include "dist/comm.h"  // comm_set_device_queue, comm_watch_device
#include "ops/ops.h"
}

static cudaStream_t g_stream;     // every op's stream (ops_init)
static int32_t *g_ints[3];        // cuda_device_ints' staging slots
static size_t g_ints_n[3];
// The work buffers (cuda_work_buffer), part by part: the installed workspace's
// parts (ops_set_workspace; g_ws set), else buffers the backend grew itself.
static int g_ws;                  // a workspace is installed
static void *g_part[WS_PARTS];
static size_t g_part_bytes[WS_PARTS];

void cuda_matmul_init(void);  // ops/matmul_cuda.cu
static void drain(void);      // below: wait for the stream, under the collectives' watch

cudaStream_t cuda_stream_raw(void) { return g_stream; }

cudaStream_t cuda_stream(void) {
    cuda_profile_open();
    return g_stream;
}

void cuda_done(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) die("CUDA kernel launch failed in %s: %s", what, cudaGetErrorString(e));
    cuda_profile_close(what);
}

// Fatal: an op needs more of a work buffer than the planned workspace holds.
static void beyond_plan(const char *what, size_t bytes, size_t planned) {
    die("the CUDA backend needs %zu bytes for %s, but the planned workspace holds %zu: the step's "
        "bounds (llama_op_bounds) missed a shape, a bug; nothing is allocated inside a step",
        bytes, what, planned);
}

// Grow a device buffer of the backend's own to at least `bytes` (contents are not
// kept): only while no workspace is installed (tests, generation, bench); within
// an installed one, a request beyond its part is fatal.
static void *grow(void **p, size_t *have, size_t bytes, const char *what) {
    if (bytes <= *have && *p) return *p;
    if (g_ws) beyond_plan(what, bytes, *have);
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    if (*p) CUDA_CHECK(cudaFree(*p));
    size_t want = bytes < 4096 ? 4096 : bytes;
    CUDA_CHECK(cudaMalloc(p, want));
    *have = want;
    return *p;
}

void *cuda_work_buffer(int part, size_t bytes, const char *what) {
    return grow(&g_part[part], &g_part_bytes[part], bytes, what);
}

void *cuda_scratch(size_t bytes) { return cuda_work_buffer(WS_SCRATCH, bytes, "the row losses or partial sums"); }

// Free what the backend grew itself (the caller has waited for the stream).
static void release_own(void **p, size_t *have) {
    if (*p) CUDA_CHECK(cudaFree(*p));
    *p = NULL;
    *have = 0;
}

extern "C" void ops_set_workspace(void *buf, const OpsBounds *b) {
    CUDA_CHECK(cudaStreamSynchronize(g_stream));  // nothing queued still uses the buffers released
    for (int i = 0; i < WS_PARTS; i++) {
        if (g_ws) g_part[i] = NULL, g_part_bytes[i] = 0;  // the planned parts go back to the caller
        else release_own(&g_part[i], &g_part_bytes[i]);
    }
    for (int i = 0; i < 3; i++) release_own((void **)&g_ints[i], &g_ints_n[i]);
    g_ws = buf != NULL;
    if (!buf) return;
    // The parts as ops_cuda_workspace lays them out, the first 256-byte aligned
    // (cuBLASLt's workspace) within the 256 bytes of slack it counts.
    const OpsCudaWorkspace w = ops_cuda_workspace(b);
    const size_t sizes[WS_PARTS] = {w.lt, w.scratch, w.half[0], w.half[1], w.half[2], w.att};
    char *at = (char *)(((uintptr_t)buf + 255) / 256 * 256);
    for (int i = 0; i < WS_PARTS; i++) {
        g_part[i] = at;
        g_part_bytes[i] = sizes[i];
        at += sizes[i];
    }
}

const int32_t *cuda_device_ints(const int32_t *p, size_t n, int slot) {
    if (n == 0) return p;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess &&
        (a.type == cudaMemoryTypeManaged || a.type == cudaMemoryTypeDevice))
        return p;
    cudaGetLastError();  // an unregistered host pointer may leave an error behind
    size_t bytes = n * sizeof(int32_t);
    void *d = grow((void **)&g_ints[slot], &g_ints_n[slot], bytes, "token ids or positions in host memory");
    CUDA_CHECK(cudaMemcpyAsync(d, p, bytes, cudaMemcpyHostToDevice, cuda_stream()));
    return (const int32_t *)d;
}

// ---------------------------------------------------------------- the allocator

// Managed, zeroed, 256-byte aligned (cudaMallocManaged's alignment, more than the
// 64 buf_alloc promises); NULL when the device is out of memory.
static void *managed_alloc_zeroed(size_t bytes) {
    void *p = NULL;
    if (cudaMallocManaged(&p, bytes < 1 ? 1 : bytes, cudaMemAttachGlobal) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_stream));
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    return p;
}

static void managed_free(void *p) {
    CUDA_CHECK(cudaStreamSynchronize(g_stream));
    CUDA_CHECK(cudaFree(p));
}

// ------------------------------------------------------------------ the backend

extern "C" void ops_init(int local_rank) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1)
        die("no usable NVIDIA GPU here (cudaGetDeviceCount: %s): ./femtotron-cuda is the CUDA build and "
            "needs one; on this machine build and run the CPU build instead (make, ./femtotron)",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    // One rank per GPU: the rank takes the GPU of its node-local rank. Ranks beyond
    // the GPU count share GPUs (the staged-collective path of issue 14).
    const int dev = local_rank % count;
    CUDA_CHECK(cudaSetDevice(dev));
    // Host code reads managed buffers while kernels may run (the asynchronous
    // checkpoint's snapshot thread): that needs concurrent managed access (Linux on
    // Pascal and newer; not Windows/WSL).
    int concurrent = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, dev));
    if (!concurrent)
        die("GPU %d has no concurrent managed memory access, which the CUDA backend's buffers need "
            "(Linux, Pascal or newer): run the CPU build (./femtotron) here", dev);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    util_set_buf_allocator(managed_alloc_zeroed, managed_free);
    comm_set_device_queue(ops_sync, g_stream);  // ops return before they finish: MPI waits, NCCL follows
    cuda_matmul_init();
    cuda_id_checks_init();
}

extern "C" const char *ops_backend_name(void) { return "cuda"; }

extern "C" int ops_device(char *name, size_t size) {
    int dev = 0, count = 0;
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceCount(&count));
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    if (size) snprintf(name, size, "%s", p.name);
    return count;
}

extern "C" size_t ops_device_memory(void) {
    size_t free_b = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
    return total;
}

// The host's BLAS (OpenBLAS): what host code around the kernels multiplies with.
extern "C" char *openblas_get_config(void);
extern "C" void ops_blas_name(char *out, size_t size) {
    const char *cfg = openblas_get_config();
    snprintf(out, size, "%s", cfg ? cfg : "OpenBLAS (unknown build)");
}

// bf16 matrix products (ops/matmul_cuda.cu); the other ops compute in fp32 either way.
extern "C" int ops_has_bf16(void) { return 1; }

// The kernels ignore it; the host code around them (initialisation, data loading,
// checkpoint integrity, the CPU peak) still uses OpenMP and BLAS threads.
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" void ops_set_threads(int threads) {
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

// A copy between a buffer and plain (pageable) host memory blocks the host until
// the stream reaches it, out of the watch's sight: drained first (not a counted wait).
extern "C" void ops_upload(void *dst_buffer, const void *src_host, size_t bytes) {
    if (bytes == 0) return;
    drain();
    CUDA_CHECK(cudaMemcpyAsync(dst_buffer, src_host, bytes, cudaMemcpyDefault, cuda_stream()));
    cuda_done("ops_upload");
    ops_sync();  // ops.h: done on return
}

extern "C" void ops_download(void *dst_host, const void *src_buffer, size_t bytes) {
    if (bytes == 0) return;
    drain();
    CUDA_CHECK(cudaMemcpyAsync(dst_host, src_buffer, bytes, cudaMemcpyDefault, cuda_stream()));
    cuda_done("ops_download");
    ops_sync();  // ops.h: done on return
}

// Wait until the stream has run everything queued on it. Polled rather than blocked
// on (cudaStreamSynchronize): the stream may wait for an NCCL collective that never
// finishes (a dead peer), which the host sees only here; the watch ends the job
// after parallel.timeout_s, naming it (dist/comm.h).
static void drain(void) {
    const struct timespec nap = {0, 10000};  // 10 us between polls once the wait is long
    for (long polls = 0;; polls++) {
        const cudaError_t e = cudaStreamQuery(g_stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        if ((polls & 1023) == 1023) comm_watch_device();
        if (polls > 2000) nanosleep(&nap, NULL);
    }
}

extern "C" void ops_sync(void) {
    const double t0 = now_seconds();
    drain();
    cuda_profile_wait(now_seconds() - t0);
    cuda_report_id_checks();
}

// Pinned host memory: a copy out of it is a DMA the host need not wait for.
extern "C" void *ops_host_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess)
        die("out of pinned host memory: %zu bytes for %s", bytes, what);
    memset(p, 0, bytes);
    return p;
}

extern "C" void ops_host_free(void *p) { CUDA_CHECK(cudaFreeHost(p)); }

extern "C" void ops_upload_queued(void *dst_buffer, const void *src_host, size_t bytes) {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst_buffer, src_host, bytes, cudaMemcpyDefault, cuda_stream()));
    cuda_done("ops_upload_queued");
}

// ------------------------------------------------------------------- buffer ops

extern "C" void copy_f32(float *dst, const float *src, size_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, cuda_stream()));
    cuda_done("copy_f32");
}

// cudaMemcpy does not allow overlapping ranges: go through the scratch buffer.
// Overlapping ranges without a temporary: copies of `gap` = |dst - src| elements at
// a time, in the direction that reads each element before it is overwritten (each
// copy's source and destination are disjoint; the stream runs them in order). One
// copy when the ranges do not overlap, as for ZeRO-1's reduced part (moved by at
// least its own length).
extern "C" void move_f32(float *dst, const float *src, size_t n) {
    if (n == 0 || dst == src) return;
    const size_t gap = dst < src ? (size_t)(src - dst) : (size_t)(dst - src);
    for (size_t done = 0; done < n;) {
        const size_t len = n - done < gap ? n - done : gap;
        const size_t at = dst < src ? done : n - done - len;  // forward when moving down, else backward
        CUDA_CHECK(cudaMemcpyAsync(dst + at, src + at, len * sizeof(float), cudaMemcpyDefault, cuda_stream()));
        done += len;
    }
    cuda_done("move_f32");
}

extern "C" void zero_f32(float *x, size_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), cuda_stream()));
    cuda_done("zero_f32");
}

extern "C" void zero_f64(double *x, size_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(double), cuda_stream()));
    cuda_done("zero_f64");
}

extern "C" void copy_rows_f32(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                              size_t cols) {
    if (rows == 0 || cols == 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(float), src, ld_src * sizeof(float),
                                 cols * sizeof(float), rows, cudaMemcpyDefault, cuda_stream()));
    cuda_done("copy_rows_f32");
}

// Row permutations (ops.h): one thread per element of the (n, cols) block; idx is
// a permutation, so no two threads write the same element.
__global__ static void k_gather_rows(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * cols) dst[i] = src[(size_t)idx[i / cols] * cols + i % cols];
}

__global__ static void k_scatter_rows(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * cols) dst[(size_t)idx[i / cols] * cols + i % cols] = src[i];
}

extern "C" void gather_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    if (n == 0 || cols == 0) return;
    const int32_t *d = cuda_device_ints(idx, n, 0);
    k_gather_rows<<<(unsigned)((n * cols + 255) / 256), 256, 0, cuda_stream()>>>(dst, src, d, n, cols);
    cuda_done("gather_rows_f32");
}

extern "C" void scatter_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols) {
    if (n == 0 || cols == 0) return;
    const int32_t *d = cuda_device_ints(idx, n, 0);
    k_scatter_rows<<<(unsigned)((n * cols + 255) / 256), 256, 0, cuda_stream()>>>(dst, src, d, n, cols);
    cuda_done("scatter_rows_f32");
}
