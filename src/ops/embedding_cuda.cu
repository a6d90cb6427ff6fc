// ops/embedding_cuda.cu — the CUDA kernels of ops.h for the embedding (whole and
// vocab-parallel ranges, forward and backward) and the token id checks that guard
// every table lookup. Same semantics as ops/cpu.c; the embedding's gradient adds in
// the CPU's order (each table entry's tokens in order), never by atomics, so the bits
// are the same every run.
#include <stdint.h>

#include "ops/bf16_cuda.cuh"  // rows_grid, ROWS_LOOP, COLS_LOOP
#include "ops/cuda_common.cuh"
#include "ops/reduce_cuda.cuh"

extern "C" {
#include "ops/ops.h"
}

#define THREADS 256

// -------------------------------------------------------------------- embedding

// Ids in plain host memory are checked at once. Ids in a planned buffer may still
// be on their way (a queued upload, ops.h), so a kernel checks them in stream order
// and records the first bad position, and the host reads the records at its next
// wait (cuda_report_id_checks, from ops_sync): the fatal comes before the step's
// update, whose loss is read back first. Meanwhile every kernel that indexes by id
// skips ids outside its table.
#define ID_CHECKS 1024  // checks queued between two host waits at most (then a wait)

typedef struct {
    const char *what;
    int N, V;
} IdCheck;
static IdCheck g_checks[ID_CHECKS];  // the checks queued since the last host wait
static int g_n_checks;
static int2 *g_check_rec;            // (ID_CHECKS) device: {first bad position or -1, its id}

static void die_bad_id(const char *what, int id, int n, int V) {
    die("%s: id %d at position %d is outside the vocabulary [0, %d): refused before any table "
        "is indexed", what, id, n, V);
}

// rec = {the first n with ids[n] outside [0, V), ids[n]}, or {-1, 0}: each thread
// finds the first bad position of its strided share, then a fixed tree takes the
// least (no atomics: the same record every run).
__global__ void k_check_ids(const int32_t *ids, int N, int V, int2 *rec) {
    __shared__ int sh[ROW_THREADS];
    int first = N;
    for (int n = threadIdx.x; n < N && first == N; n += ROW_THREADS)
        if (ids[n] < 0 || ids[n] >= V) first = n;
    sh[threadIdx.x] = first;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s && sh[threadIdx.x + s] < sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *rec = sh[0] < N ? make_int2(sh[0], ids[sh[0]]) : make_int2(-1, 0);
}

void cuda_id_checks_init(void) { CUDA_CHECK(cudaMalloc(&g_check_rec, sizeof(int2) * ID_CHECKS)); }

void cuda_report_id_checks(void) {
    if (g_n_checks == 0) return;
    int2 rec[ID_CHECKS];  // (g_n_checks)
    const int n = g_n_checks;
    g_n_checks = 0;
    CUDA_CHECK(cudaMemcpy(rec, g_check_rec, sizeof(int2) * (size_t)n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (rec[i].x >= 0) die_bad_id(g_checks[i].what, rec[i].y, rec[i].x, g_checks[i].V);
}

extern "C" void ops_check_ids(const int32_t *ids, int N, int V, const char *what) {
    if (N <= 0) return;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ids) != cudaSuccess ||
        (a.type != cudaMemoryTypeManaged && a.type != cudaMemoryTypeDevice)) {
        cudaGetLastError();  // an unregistered host pointer may leave an error behind
        for (int n = 0; n < N; n++)
            if (ids[n] < 0 || ids[n] >= V) die_bad_id(what, ids[n], n, V);
        return;
    }
    if (g_n_checks == ID_CHECKS) ops_sync();  // reports and empties the list
    g_checks[g_n_checks] = IdCheck{what, N, V};
    k_check_ids<<<1, ROW_THREADS, 0, cuda_stream()>>>(ids, N, V, g_check_rec + g_n_checks);
    g_n_checks++;
    cuda_done("ops_check_ids");
}

// out(N, D): row n = table[tokens[n] - v0] when inside [0, rows); else zeroed
// (zero_others) or left alone.
__global__ void k_embed(float *out, const int32_t *tokens, const float *table, int N, int D, int v0, int rows,
                        int zero_others) {
    ROWS_LOOP(n, N) {
        const int r = tokens[n] - v0;
        const bool inside = r >= 0 && r < rows;
        if (!inside && !zero_others) continue;
        float *o = out + n * D;
        const float *row = table + (size_t)(inside ? r : 0) * D;
        COLS_LOOP(c, D, 1) o[c] = inside ? row[c] : 0.0f;
    }
}

// dtable(rows, D) += dout(N, D) scattered by token. Each table entry (r, c) has
// one writer, which adds its tokens in order (the CPU's order): repeated tokens add
// without atomics. The writers: a thread per column c and bucket r % EMBED_BUCKETS
// (blockIdx.y), walking every token from shared memory and adding the ones of its
// bucket. A thread per column alone (16 blocks at D = 2048) spent N dependent
// read-modify-writes of the table (about 4 ms at N = 8192); a bucket's thread makes
// N / EMBED_BUCKETS of them, and the buckets run side by side.
#define EMBED_BUCKETS 64
#define EMBED_TOKENS 1024  // tokens staged in shared memory at a time
__global__ void k_embed_back(float *dtable, const float *dout, const int32_t *tokens, int N, int D, int v0,
                             int rows) {
    __shared__ int32_t tok[EMBED_TOKENS];
    const int c = blockIdx.x * blockDim.x + threadIdx.x, bucket = blockIdx.y;
    for (int n0 = 0; n0 < N; n0 += EMBED_TOKENS) {
        const int m = N - n0 < EMBED_TOKENS ? N - n0 : EMBED_TOKENS;
        __syncthreads();  // every thread is done with the last chunk
        for (int j = threadIdx.x; j < m; j += blockDim.x) tok[j] = tokens[n0 + j] - v0;
        __syncthreads();
        if (c >= D) continue;
        for (int j = 0; j < m; j++) {
            const int r = tok[j];  // the same for the whole block: no divergence
            if (r >= 0 && r < rows && r % EMBED_BUCKETS == bucket)
                dtable[(size_t)r * D + c] += dout[(size_t)(n0 + j) * D + c];
        }
    }
}

static void embed(float *out, const int32_t *tokens, const float *table, int N, int D, int v0, int rows,
                  int zero_others, const char *what) {
    if (N <= 0 || D <= 0) return;
    const int32_t *t = cuda_device_ints(tokens, (size_t)N, 0);
    k_embed<<<rows_grid((size_t)N, (size_t)D, THREADS, 1), THREADS, 0, cuda_stream()>>>(out, t, table, N, D, v0, rows,
                                                                                 zero_others);
    cuda_done(what);
}

static void embed_back(float *dtable, const float *dout, const int32_t *tokens, int N, int D, int v0, int rows,
                       const char *what) {
    if (N <= 0 || D <= 0) return;
    const int32_t *t = cuda_device_ints(tokens, (size_t)N, 0);
    const dim3 grid(cuda_blocks((size_t)D, THREADS), EMBED_BUCKETS);
    k_embed_back<<<grid, THREADS, 0, cuda_stream()>>>(dtable, dout, t, N, D, v0, rows);
    cuda_done(what);
}

extern "C" void embedding_forward(float *out, const int32_t *tokens, const float *table, int N, int D, int V) {
    ops_check_ids(tokens, N, V, "embedding");
    embed(out, tokens, table, N, D, 0, V, 1, "embedding_forward");
}

extern "C" void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int N, int D, int V) {
    ops_check_ids(tokens, N, V, "embedding backward");
    embed_back(dtable, dout, tokens, N, D, 0, V, "embedding_backward");
}

extern "C" void embedding_forward_range(float *out, const int32_t *tokens, const float *table, int N, int D, int v0,
                                        int rows) {
    embed(out, tokens, table, N, D, v0, rows, 1, "embedding_forward_range");
}

extern "C" void embedding_copy_range(float *out, const int32_t *tokens, const float *table, int N, int D, int v0,
                                     int rows) {
    embed(out, tokens, table, N, D, v0, rows, 0, "embedding_copy_range");
}

extern "C" void embedding_backward_range(float *dtable, const float *dout, const int32_t *tokens, int N, int D,
                                         int v0, int rows) {
    embed_back(dtable, dout, tokens, N, D, v0, rows, "embedding_backward_range");
}
