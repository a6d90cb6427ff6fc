// ops/kernels_cuda.cu — the CUDA kernels of ops.h for the embedding, RMSNorm, the
// residual, RoPE and SwiGLU, in fp32 (SwiGLU also from a gate|up kept in bf16).
// Same semantics as ops/cpu.c. The element-wise ones walk (rows, cols) grids, 4
// values a thread where the rows are aligned for it (ops/bf16_cuda.cuh: rows_grid),
// with no division per value. Sums run in a fixed order, never by atomics, so the
// bits are the same every run: the embedding's gradient in the CPU's order (each
// table entry's tokens in order), RMSNorm's weight gradient over fixed chunks of
// rows whose partials are then added in order.
#include <cuda_bf16.h>
#include <math.h>

#include "ops/bf16_cuda.cuh"
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

// ---------------------------------------------------------------------- RMSNorm

// One block per row: ss = sum x^2 (fixed tree), rstd = 1/sqrt(ss/D + eps),
// xhat = x rstd (kept when xhat is not NULL), y = w xhat. O: float
// (rmsnorm_forward, _rebuild) or __nv_bfloat16 (the _to_bf16 ops; ops/bf16_cuda.cuh).
template <typename O>
__global__ void k_rmsnorm(O *out, float *xhat, float *rstd, const float *in, const float *weight, int D,
                          float eps) {
    __shared__ float sh[ROW_THREADS];
    const float *x = in + (size_t)blockIdx.x * D;
    O *y = out + (size_t)blockIdx.x * D;
    float *xh = xhat ? xhat + (size_t)blockIdx.x * D : NULL;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) ss += x[i] * x[i];
    ss = block_sum(ss, sh);
    float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) {
        float v = x[i] * r;
        if (xh) xh[i] = v;
        store(y + i, weight[i] * v);
    }
}

// out = w xhat, a row at a time, VEC values a thread.
template <typename O, int VEC>
__global__ void k_rmsnorm_rebuild(O *out, const float *xhat, const float *weight, int N, int D) {
    ROWS_LOOP(n, N) {
        const float *x = xhat + n * D;
        O *y = out + n * D;
        COLS_LOOP(i, D, VEC) {
            float xv[VEC], wv[VEC], r[VEC];
            load_vals<VEC>(xv, x + i);
            load_vals<VEC>(wv, weight + i);
            for (int k = 0; k < VEC; k++) r[k] = wv[k] * xv[k];
            store_vals<VEC>(y + i, r);
        }
    }
}

// dx_j += r (w_j dy_j - xh_j sum_i(w_i dy_i xh_i) / D)   (ops/cpu.c derives it)
__global__ void k_rmsnorm_back_dx(float *din, const float *dout, const float *xhat, const float *weight,
                                  const float *rstd, int D) {
    __shared__ float sh[ROW_THREADS];
    const size_t off = (size_t)blockIdx.x * D;
    const float *xh = xhat + off, *dy = dout + off;
    float *dx = din + off;
    float r = rstd[blockIdx.x], dot = 0.0f;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) dot += weight[i] * dy[i] * xh[i];
    dot = block_sum(dot, sh);
    float c = dot / (float)D;
    for (int i = threadIdx.x; i < D; i += ROW_THREADS) dx[i] += r * (weight[i] * dy[i] - c * xh[i]);
}

// dw_i += sum_n dy_i xh_i in two passes with a fixed association, so every SM
// takes part (one thread per column walking all N rows kept 16 blocks busy: about
// 1 ms a call at N = 8192, D = 2048, 49 calls a micro-batch for a 24-layer model)
// and the bits are the same every run (no atomics). Pass 1: chunk k of
// OPS_CUDA_COL_CHUNKS (rows [k c, (k+1) c), c = ceil(N / chunks), in order) into
// partial(chunks, D); pass 2: dw_i += the chunks' partials, k in order.
__global__ void k_rmsnorm_back_dw_part(float *partial, const float *dout, const float *xhat, int N, int D,
                                       int chunk) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (i >= D) return;
    const int n1 = (k + 1) * chunk < N ? (k + 1) * chunk : N;
    float acc = 0.0f;
    for (int n = k * chunk; n < n1; n++) acc += dout[(size_t)n * D + i] * xhat[(size_t)n * D + i];
    partial[(size_t)k * D + i] = acc;
}

__global__ void k_rmsnorm_back_dw_sum(float *dweight, const float *partial, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float acc = 0.0f;
    for (int k = 0; k < OPS_CUDA_COL_CHUNKS; k++) acc += partial[(size_t)k * D + i];
    dweight[i] += acc;
}

template <typename O>
static void rmsnorm_fwd(O *out, float *xhat, float *rstd, const float *in, const float *weight, int N, int D, float eps,
                        const char *what) {
    if (N <= 0) return;
    k_rmsnorm<O><<<N, ROW_THREADS, 0, cuda_stream()>>>(out, xhat, rstd, in, weight, D, eps);
    cuda_done(what);
}

template <typename O>
static void rmsnorm_rebuild_to(O *out, const float *xhat, const float *weight, int N, int D, const char *what) {
    if ((size_t)N * D == 0) return;
    const dim3 grid4 = rows_grid((size_t)N, (size_t)D, THREADS, 4), grid1 = rows_grid((size_t)N, (size_t)D, THREADS, 1);
    const bool vec = D % 4 == 0 && aligned_vec4(out, sizeof(O)) && aligned_vec4(xhat, 4) && aligned_vec4(weight, 4);
    if (vec)
        k_rmsnorm_rebuild<O, 4><<<grid4, THREADS, 0, cuda_stream()>>>(out, xhat, weight, N, D);
    else
        k_rmsnorm_rebuild<O, 1><<<grid1, THREADS, 0, cuda_stream()>>>(out, xhat, weight, N, D);
    cuda_done(what);
}

extern "C" void rmsnorm_forward(float *out, float *xhat, float *rstd, const float *in, const float *weight, int N,
                                int D, float eps) {
    rmsnorm_fwd(out, xhat, rstd, in, weight, N, D, eps, "rmsnorm_forward");
}

extern "C" void rmsnorm_rebuild(float *out, const float *xhat, const float *weight, int N, int D) {
    rmsnorm_rebuild_to(out, xhat, weight, N, D, "rmsnorm_rebuild");
}

extern "C" void rmsnorm_forward_to_bf16(uint16_t *out16, float *xhat, float *rstd, const float *in,
                                        const float *weight, int N, int D, float eps) {
    rmsnorm_fwd((__nv_bfloat16 *)out16, xhat, rstd, in, weight, N, D, eps, "rmsnorm_forward_to_bf16");
}

extern "C" void rmsnorm_rebuild_to_bf16(uint16_t *out16, const float *xhat, const float *weight, int N, int D) {
    rmsnorm_rebuild_to((__nv_bfloat16 *)out16, xhat, weight, N, D, "rmsnorm_rebuild_to_bf16");
}

extern "C" void rmsnorm_backward(float *din, float *dweight, const float *dout, const float *xhat,
                                 const float *weight, const float *rstd, int N, int D) {
    if (N <= 0) return;
    // Either half may be skipped (ops.h: din or dweight NULL, the split backward).
    if (din) k_rmsnorm_back_dx<<<N, ROW_THREADS, 0, cuda_stream()>>>(din, dout, xhat, weight, rstd, D);
    if (dweight) {
        float *partial = (float *)cuda_scratch((size_t)OPS_CUDA_COL_CHUNKS * D * sizeof(float));  // (chunks, D)
        const int chunk = (N + OPS_CUDA_COL_CHUNKS - 1) / OPS_CUDA_COL_CHUNKS;
        const dim3 grid(cuda_blocks((size_t)D, THREADS), OPS_CUDA_COL_CHUNKS);
        k_rmsnorm_back_dw_part<<<grid, THREADS, 0, cuda_stream()>>>(partial, dout, xhat, N, D, chunk);
        k_rmsnorm_back_dw_sum<<<cuda_blocks((size_t)D, THREADS), THREADS, 0, cuda_stream()>>>(dweight, partial, D);
    }
    cuda_done("rmsnorm_backward");
}

// --------------------------------------------------------------------- residual

// out = a + b, VEC values a thread (one row of n).
template <int VEC>
__global__ void k_add(float *out, const float *a, const float *b, size_t n) {
    COLS_LOOP(i, n, VEC) {
        float av[VEC], bv[VEC], r[VEC];
        load_vals<VEC>(av, a + i);
        load_vals<VEC>(bv, b + i);
        for (int k = 0; k < VEC; k++) r[k] = av[k] + bv[k];
        store_vals<VEC>(out + i, r);
    }
}

extern "C" void residual_forward(float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    if (n % 4 == 0 && aligned_vec4(out, 4) && aligned_vec4(a, 4) && aligned_vec4(b, 4))
        k_add<4><<<rows_grid(1, n, THREADS, 4), THREADS, 0, cuda_stream()>>>(out, a, b, n);
    else
        k_add<1><<<rows_grid(1, n, THREADS, 1), THREADS, 0, cuda_stream()>>>(out, a, b, n);
    cuda_done("residual_forward");
}

// ------------------------------------------------------------------------- RoPE

// The tables are computed on the host, in double as on the CPU, straight into the
// (managed) table buffers: they are made once at start-up or per context chunk.
static void tables_host(float *cos_t, float *sin_t, const int *pos, int pos0, int S, int hd, const double *freq) {
    ops_sync();
    int half = hd / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos ? pos[p] : pos0 + p) * freq[i];
            cos_t[(size_t)p * half + i] = (float)cos(angle);
            sin_t[(size_t)p * half + i] = (float)sin(angle);
        }
}

extern "C" void rope_tables_at(float *cos_t, float *sin_t, const int *pos, int S, int hd, const double *freq) {
    tables_host(cos_t, sin_t, pos, 0, S, hd, freq);
}

extern "C" void rope_tables(float *cos_t, float *sin_t, int S, int hd, const double *freq, int pos0) {
    tables_host(cos_t, sin_t, NULL, pos0, S, hd, freq);
}

// One thread per (token, q-or-k head, pair i): x1' = x1 c - x2 s, x2' = x2 c + x1 s,
// with s negated for the backward (the transpose of a rotation). O: float (in
// place, out = in) or __nv_bfloat16 (rope_backward_to_bf16: out apart from in).
template <typename O>
__global__ void k_rope(O *out, const float *in, const float *cos_t, const float *sin_t, int BS, int S, int heads,
                       int row, int hd, float dir) {
    const unsigned half = (unsigned)hd / 2, pairs = (unsigned)heads * half;
    ROWS_LOOP(t, BS) {  // a token a row: its table rows, then (head, pair) by a 32-bit division
        const float *ct = cos_t + (t % (size_t)S) * half, *st = sin_t + (t % (size_t)S) * half;
        const size_t base = t * (size_t)row;
        COLS_LOOP(e, pairs, 1) {
            const unsigned h = (unsigned)e / half, i = (unsigned)e - h * half;
            const size_t j1 = base + (size_t)h * hd + i, j2 = j1 + half;
            const float c = ct[i], s = dir * st[i];
            const float a = in[j1], b = in[j2];
            store(out + j1, a * c - b * s);
            store(out + j2, b * c + a * s);
        }
    }
}

template <typename O>
static void rope(O *out, const float *in, const float *cos_t, const float *sin_t, int B, int S, int H, int KV, int hd,
                 float dir, const char *what) {
    if ((size_t)B * S * (H + KV) * (hd / 2) == 0) return;
    const dim3 grid = rows_grid((size_t)B * S, (size_t)(H + KV) * (hd / 2), THREADS, 1);
    k_rope<O><<<grid, THREADS, 0, cuda_stream()>>>(out, in, cos_t, sin_t, B * S, S, H + KV,
                                                                          (H + 2 * KV) * hd, hd, dir);
    cuda_done(what);
}

extern "C" void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV, int hd) {
    rope(qkv, qkv, cos_t, sin_t, B, S, H, KV, hd, 1.0f, "rope_forward");
}

extern "C" void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int S, int H, int KV,
                              int hd) {
    rope(dqkv, dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f, "rope_backward");
}

extern "C" void rope_backward_to_bf16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t,
                                      int B, int S, int H, int KV, int hd) {
    __nv_bfloat16 *out = (__nv_bfloat16 *)dqkv16;
    rope(out, dqkv, cos_t, sin_t, B, S, H, KV, hd, -1.0f, "rope_backward_to_bf16");
    const int row = (H + 2 * KV) * hd, v0 = (H + KV) * hd;
    if ((size_t)B * S * (row - v0) == 0) return;
    const size_t tokens = (size_t)B * S, vw = (size_t)(row - v0);  // v: each token's last vw values, rounded
    round_rows(out + v0, dqkv + v0, tokens, vw, (size_t)row, (size_t)row);
    cuda_done("rope_backward_to_bf16 (v)");
}

// ----------------------------------------------------------------------- SwiGLU

// gu(N, 2F) per token [gate | up]; out(N, F) = silu(gate) * up.

// silu(g) u, and the two halves of its gradient from dout d: dgate = d u silu'(g),
// dup = d silu(g), with silu(g) = g s(g), silu'(g) = s(g) (1 + g (1 - s(g))).
__device__ static inline float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ static inline void swiglu_grads(float g, float u, float d, float *dgate, float *dup) {
    const float s = 1.0f / (1.0f + expf(-g));
    *dup = d * g * s;
    *dgate = d * u * s * (1.0f + g * (1.0f - s));
}

// T, O: float (swiglu_forward) or __nv_bfloat16 (swiglu_forward_bf16: a kept gu, a
// bf16 output for the down product). A token a row, VEC columns a thread at a time.
template <typename T, typename O, int VEC>
__global__ void k_swiglu(O *out, const T *gu, int N, int F) {
    ROWS_LOOP(n, N) {
        const T *g = gu + n * 2 * F, *u = g + F;
        O *o = out + n * F;
        COLS_LOOP(i, F, VEC) {
            float gv[VEC], uv[VEC], r[VEC];
            load_vals<VEC>(gv, g + i);
            load_vals<VEC>(uv, u + i);
            for (int k = 0; k < VEC; k++) r[k] = swiglu_value(gv[k], uv[k]);
            store_vals<VEC>(o + i, r);
        }
    }
}

// T as above; O: float (swiglu_backward) or __nv_bfloat16 (swiglu_backward_to_bf16:
// the gate|up backward's operand).
template <typename T, typename O, int VEC>
__global__ void k_swiglu_back(O *dgu, const float *dout, const T *gu, int N, int F) {
    ROWS_LOOP(n, N) {
        const T *g = gu + n * 2 * F, *u = g + F;
        const float *d = dout + n * F;
        O *dg = dgu + n * 2 * F, *du = dg + F;
        COLS_LOOP(i, F, VEC) {
            float gv[VEC], uv[VEC], dv[VEC], rg[VEC], ru[VEC];
            load_vals<VEC>(gv, g + i);
            load_vals<VEC>(uv, u + i);
            load_vals<VEC>(dv, d + i);
            for (int k = 0; k < VEC; k++) swiglu_grads(gv[k], uv[k], dv[k], &rg[k], &ru[k]);
            store_vals<VEC>(du + i, ru);
            store_vals<VEC>(dg + i, rg);
        }
    }
}

// Rows of F values (and 2F) allow 4 a thread when F is a multiple of 4 and every
// base pointer is aligned for it.
static bool swiglu_vec4(int F, const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    return F % 4 == 0 && aligned_vec4(a, a_bytes) && aligned_vec4(b, b_bytes);
}

template <typename T, typename O>
static void swiglu_fwd(O *out, const T *gu, int N, int F, const char *what) {
    if ((size_t)N * F == 0) return;
    if (swiglu_vec4(F, out, sizeof(O), gu, sizeof(T)))
        k_swiglu<T, O, 4><<<rows_grid((size_t)N, (size_t)F, THREADS, 4), THREADS, 0, cuda_stream()>>>(out, gu, N, F);
    else
        k_swiglu<T, O, 1><<<rows_grid((size_t)N, (size_t)F, THREADS, 1), THREADS, 0, cuda_stream()>>>(out, gu, N, F);
    cuda_done(what);
}

template <typename T, typename O>
static void swiglu_bwd(O *dgu, const float *dout, const T *gu, int N, int F, const char *what) {
    if ((size_t)N * F == 0) return;
    if (swiglu_vec4(F, dgu, sizeof(O), gu, sizeof(T)) && aligned_vec4(dout, sizeof(float)))
        k_swiglu_back<T, O, 4><<<rows_grid((size_t)N, (size_t)F, THREADS, 4), THREADS, 0, cuda_stream()>>>(dgu, dout, gu,
                                                                                                      N, F);
    else
        k_swiglu_back<T, O, 1><<<rows_grid((size_t)N, (size_t)F, THREADS, 1), THREADS, 0, cuda_stream()>>>(dgu, dout, gu,
                                                                                                      N, F);
    cuda_done(what);
}

extern "C" void swiglu_forward(float *out, const float *gu, int N, int F) {
    swiglu_fwd(out, gu, N, F, "swiglu_forward");
}

extern "C" void swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F) {
    swiglu_bwd(dgu, dout, gu, N, F, "swiglu_backward");
}

// ------------------------------------------------------------ bf16 activations

// dst(r, c) = src(r, c) rounded to bf16, row by row (ops/bf16_cuda.cuh: round_rows).
template <typename S, int VEC>
__global__ static void k_round_rows(__nv_bfloat16 *dst, const S *src, size_t lines, size_t len, size_t ld,
                                    size_t ld_dst) {
    ROWS_LOOP(r, lines) {
        const S *s = src + r * ld;
        __nv_bfloat16 *d = dst + r * ld_dst;
        COLS_LOOP(c, len, VEC) {
            float v[VEC];
            load_vals<VEC>(v, s + c);
            store_vals<VEC>(d + c, v);
        }
    }
}

template <typename S>
static void round_rows_any(__nv_bfloat16 *dst, const S *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    if (lines == 0 || len == 0) return;
    if (len % 4 == 0 && ld % 4 == 0 && ld_dst % 4 == 0 && aligned_vec4(src, sizeof(S)) &&
        aligned_vec4(dst, sizeof(__nv_bfloat16)))
        k_round_rows<S, 4><<<rows_grid(lines, len, THREADS, 4), THREADS, 0, cuda_stream()>>>(dst, src, lines, len, ld,
                                                                                          ld_dst);
    else
        k_round_rows<S, 1><<<rows_grid(lines, len, THREADS, 1), THREADS, 0, cuda_stream()>>>(dst, src, lines, len, ld,
                                                                                          ld_dst);
}
void round_rows(__nv_bfloat16 *dst, const float *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    round_rows_any(dst, src, lines, len, ld, ld_dst);
}
void round_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t lines, size_t len, size_t ld, size_t ld_dst) {
    round_rows_any(dst, src, lines, len, ld, ld_dst);
}

extern "C" void round_to_bf16(uint16_t *dst, const float *src, size_t n) {
    if (n == 0) return;
    round_rows((__nv_bfloat16 *)dst, src, 1, n, n, n);
    cuda_done("round_to_bf16");
}

__global__ static void k_widen_from_bf16(float *dst, const __nv_bfloat16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

extern "C" void widen_from_bf16(float *dst, const uint16_t *src, size_t n) {
    if (n == 0) return;
    k_widen_from_bf16<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_stream()>>>(dst, (const __nv_bfloat16 *)src, n);
    cuda_done("widen_from_bf16");
}

extern "C" void swiglu_forward_bf16(uint16_t *out16, const uint16_t *gu, int N, int F) {
    swiglu_fwd((__nv_bfloat16 *)out16, (const __nv_bfloat16 *)gu, N, F, "swiglu_forward_bf16");
}

extern "C" void swiglu_backward_to_bf16(uint16_t *dgu16, const float *dout, const uint16_t *gu, int N, int F) {
    swiglu_bwd((__nv_bfloat16 *)dgu16, dout, (const __nv_bfloat16 *)gu, N, F, "swiglu_backward_to_bf16");
}
