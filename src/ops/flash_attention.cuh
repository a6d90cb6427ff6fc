// ops/flash_attention.cuh — causal grouped-query attention on tensor cores, for
// bf16 products (training.precision = bf16): the forward and backward of ops.h's
// attention_block_* ops, flash style (Dao 2023, FlashAttention-2), with bf16
// operands and fp32 everything else.
//
// What is rounded to bf16 and what is not. The four products of the forward
// (S = Q K^T, O += P V) and the backward (dP = dO V^T, dV += P^T dO, dK += dS^T Q,
// dQ += dS K) read bf16 operands: Q, K, V and dO rounded as they are loaded, P and
// dS rounded after they are formed. The tensor core sums their exact products in
// fp32. The softmax (running maximum m, sum l, the rescale exp(m_old - m_new)),
// the log-sum-exp, the rowdot and the accumulators of O, dQ, dK and dV stay fp32.
// l sums the bf16-rounded P, the same numbers the P V product multiplies, so O / l
// is a convex combination of the (rounded) value rows.
//
// Tiles. A block of 128 threads (4 warps) takes 64 query rows of one (batch, head)
// (forward, dQ) or 64 key rows of one (batch, key-value group) (dK, dV); each warp
// owns 16 of those rows. The other side walks in tiles of 64, staged through shared
// memory in bf16. Scores go through shared memory in fp32, so plain lanes run
// the softmax on plain floats: the WMMA fragments' element layout is never relied
// on (m16n16k16 tiles, nvcuda::wmma).
//
// Masks. Key j is visible to query i iff kpos[j] <= qpos[i] (causal, zigzag
// context-parallel blocks, and rows outside the sequence, which get positions no
// key or query can see). A tile where no key is visible to any row of the block is
// skipped whole: causal attention does about half the work.
//
// Determinism. dQ and dK/dV are two kernels, each output row has one block that
// writes it, and every sum runs in a fixed order: no atomics, the same bits every
// run (issue 14's determinism rule). The cost is that the backward forms the
// scores twice.
//
// This header is compiled twice: by nvcc into the CUDA backend (ops/attention_cuda.cu)
// and by the host compiler under tests/emu/cuda_emu.h, which runs the same kernels
// on CPU threads (tests/emu/test_flash_emu.cpp, in CI).
#ifndef FEMTOTRON_FLASH_ATTENTION_CUH
#define FEMTOTRON_FLASH_ATTENTION_CUH

#include <limits.h>
#include <math.h>
#include <stddef.h>

#ifndef CUDA_EMU
#include <cuda_bf16.h>
#include <mma.h>
#endif
#include "ops/flash_launch.cuh"  // FLASH_SMEM, FLASH_LAUNCH

// nvcc's loop unrolling hint (the host compiler of the emulation has none).
#ifdef CUDA_EMU
#define FLASH_UNROLL4
#else
#define FLASH_UNROLL4 _Pragma("unroll 4")
#endif

namespace flash {

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

constexpr int BQ = 64;             // query rows per tile
constexpr int BK = 64;             // key rows per tile
constexpr int THREADS = FLASH_THREADS;  // 4 warps of 16 rows each
constexpr int LDS = 64 + 4;        // row stride of an fp32 score tile (64 columns)
constexpr int LDP = 64 + 8;        // row stride of a bf16 P or dS tile (64 columns)
static_assert(BQ == BK, "score tiles are square (one stride serves S and S^T)");
static_assert(BQ == 16 * (THREADS / 32), "each warp owns 16 rows");

// Head dimensions with kernels: multiples of 16 (the WMMA tile), at most 128 (the
// shared memory of a block at 64-row tiles).
static inline bool head_dim_ok(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

__host__ __device__ constexpr size_t al(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Shared memory, by kernel. LDH and LDF pad the bf16 and fp32 rows by 16 bytes:
// every 16x16 tile a fragment reads starts 32-byte aligned (WMMA's rule) at any
// head dimension that is a multiple of 16.
template <int HD>
struct Smem {
    static constexpr int LDH = HD + 8, LDF = HD + 4;
    static constexpr size_t half_tile = al((size_t)BQ * LDH * 2);  // (64, HD) bf16
    static constexpr size_t f32_tile = al((size_t)BQ * LDF * 4);   // (64, HD) fp32
    static constexpr size_t score = al((size_t)BQ * LDS * 4);      // (64, 64) fp32
    static constexpr size_t prob = al((size_t)BQ * LDP * 2);       // (64, 64) bf16
    static constexpr size_t stats = al((size_t)(3 * BQ + BK) * 4); // 2 fp32 and 1 int per row, 1 int per key
    static constexpr size_t softmax = al((size_t)4 * BQ * 4);      // forward: 2 partial maxima, alpha, m per row
    // forward: q, k, v, scores, p, o, stats, the softmax's per-row values
    static constexpr size_t fwd = 3 * half_tile + score + prob + f32_tile + stats + softmax;
    // dQ: q, dout, k, v, scores, dP (dQ's staging at the end), dS, stats
    static constexpr size_t dq = 4 * half_tile + 2 * score + prob + stats;
    // dK/dV: k, v, q, dout, S^T, dP^T (dK's and dV's staging at the end, over q to
    // dP^T), P^T, dS^T, stats; 121 KiB at HD = 128, within an sm_80 block's 163 KiB
    static constexpr size_t dkv = 4 * half_tile + 2 * score + 2 * prob + stats;
    static_assert(f32_tile <= 2 * score, "dQ's staging fits over the two score tiles");
    static_assert(2 * f32_tile <= 2 * half_tile + 2 * score, "dK's and dV's staging fit over q, dout, S^T, dP^T");
};

// Carves consecutive 128-byte-aligned regions out of the block's shared memory.
struct Carve {
    unsigned char *p;
    template <class T>
    __device__ T *take(size_t bytes) {
        T *r = (T *)p;
        p += al(bytes);
        return r;
    }
};

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ float rounded(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// One warp: c(16, N) = a(16, K) b(N, K)^T, a and b row-major bf16, c fp32 row-major.
template <int N, int K>
__device__ __forceinline__ void warp_abt(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int n = 0; n < N / 16; n++) {
        Acc acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < K / 16; k++) {
            FragA fa;
            FragBt fb;  // b^T's (16k.., 16n..) tile: column-major view of b's rows 16n..
            wmma::load_matrix_sync(fa, a + 16 * k, lda);
            wmma::load_matrix_sync(fb, b + (size_t)16 * n * ldb + 16 * k, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + 16 * n, acc, ldc, wmma::mem_row_major);
    }
}

// One warp: acc[n] += a(16, K) b(K, 16 n..16 n + 15), a and b row-major bf16; the
// k terms are added in order.
template <int N, int K>
__device__ __forceinline__ void warp_ab(Acc *acc, const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int k = 0; k < K / 16; k++) {
        FragA fa;
        wmma::load_matrix_sync(fa, a + 16 * k, lda);
        for (int n = 0; n < N / 16; n++) {
            FragB fb;
            wmma::load_matrix_sync(fb, b + (size_t)16 * k * ldb + 16 * n, ldb);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

// The block's threads copy rows [r0, r0 + 64) of an fp32 matrix (row r at
// src + r * ld, HD values) into a bf16 tile (ld LDH), rounding; rows at or past
// `rows` are zero.
template <int HD>
__device__ void load_rows_bf16(bf16 *dst, const float *src, size_t ld, int r0, int rows) {
    for (int e = threadIdx.x; e < 64 * HD; e += THREADS) {
        const int r = e / HD, d = e % HD;
        dst[r * Smem<HD>::LDH + d] = to_bf16(r0 + r < rows ? src[(size_t)(r0 + r) * ld + d] : 0.0f);
    }
}

// Positions of rows [r0, r0 + 64): pos[r] where r < rows, else `outside`.
__device__ __forceinline__ void load_pos(int *dst, const int *pos, int r0, int rows, int outside) {
    for (int r = threadIdx.x; r < 64; r += THREADS) dst[r] = r0 + r < rows ? pos[r0 + r] : outside;
}
__device__ __forceinline__ int min_of(const int *p) {
    int v = INT_MAX;
    for (int r = 0; r < 64; r++) v = imin(v, p[r]);
    return v;
}
__device__ __forceinline__ int max_of(const int *p) {
    int v = INT_MIN;
    for (int r = 0; r < 64; r++) v = imax(v, p[r]);
    return v;
}

// ---- forward: fold one block of keys into (o, m, l) ----
// grid (ceil(Sq / 64), B * H). o (B*Sq, H*HD) is the unnormalised output, m and l
// (B*H*Sq) the running maximum and sum of each row, as ops.h's
// attention_block_forward defines them.
template <int HD>
__global__ void __launch_bounds__(THREADS)
    k_forward(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
              const int *qpos, const int *kpos, int Sq, int Sk, int H, int KV, float scale) {
    typedef Smem<HD> L;
    FLASH_SMEM(smem);
    Carve cv = {smem};
    bf16 *qs = cv.take<bf16>(L::half_tile), *ks = cv.take<bf16>(L::half_tile), *vs = cv.take<bf16>(L::half_tile);
    float *ss = cv.take<float>(L::score);  // (64, 64) scores of the tile
    bf16 *ps = cv.take<bf16>(L::prob);     // (64, 64) P rounded
    float *os = cv.take<float>(L::f32_tile);  // (64, HD) the output rows
    float *mrow = cv.take<float>(L::stats), *lrow = mrow + BQ;
    int *qp = (int *)(lrow + BQ), *kp = qp + BQ;
    // (64, 2) each row's two partial maxima, (64) its rescale alpha and new maximum
    float *part = cv.take<float>(L::softmax), *alpha_s = part + 2 * BQ, *mnew_s = alpha_s + BQ;

    const int tid = threadIdx.x, lane = tid % 32, r0 = 16 * (tid / 32);
    const int i0 = blockIdx.x * BQ, b = blockIdx.y / H, h = blockIdx.y % H, g = h / (H / KV);
    const size_t orow0 = (size_t)b * Sq * H * HD + (size_t)h * HD, srow0 = ((size_t)b * H + h) * Sq;

    load_rows_bf16<HD>(qs, q + (size_t)b * Sq * ldq + (size_t)h * HD, ldq, i0, Sq);
    for (int e = tid; e < BQ * HD; e += THREADS) {
        const int r = e / HD, d = e % HD;
        os[r * L::LDF + d] = i0 + r < Sq ? o[orow0 + (size_t)(i0 + r) * H * HD + d] : 0.0f;
    }
    for (int r = tid; r < BQ; r += THREADS) {
        mrow[r] = i0 + r < Sq ? m[srow0 + i0 + r] : -INFINITY;
        lrow[r] = i0 + r < Sq ? l[srow0 + i0 + r] : 0.0f;
    }
    load_pos(qp, qpos, i0, Sq, INT_MIN);
    __syncthreads();
    const int qmax = max_of(qp);

    for (int j0 = 0; j0 < Sk; j0 += BK) {
        __syncthreads();  // the previous tile's readers are done with kp, ks and vs
        load_pos(kp, kpos, j0, Sk, INT_MAX);
        __syncthreads();
        if (min_of(kp) > qmax) continue;  // no key of the tile is visible to any row (same for every thread)
        const float *kbase = kv + (size_t)b * Sk * ldkv;
        load_rows_bf16<HD>(ks, kbase + koff + (size_t)g * HD, ldkv, j0, Sk);
        load_rows_bf16<HD>(vs, kbase + voff + (size_t)g * HD, ldkv, j0, Sk);
        __syncthreads();

        warp_abt<BK, HD>(ss + r0 * LDS, LDS, qs + r0 * L::LDH, L::LDH, ks, L::LDH);
        __syncwarp();
        // The online softmax of the warp's 16 rows, its element-wise parts spread
        // over all 32 lanes (consecutive lanes on consecutive columns), its row
        // sums one lane per row in column order, so that the result does not
        // depend on the spreading. 1. Each row's maximum of its visible scores,
        // two lanes per row over half the columns each (a maximum is exact in any
        // order).
        {
            const int r = r0 + lane % 16, c0 = (lane / 16) * (BK / 2), qpr = qp[r];
            float mx = -INFINITY;
            for (int c = c0; c < c0 + BK / 2; c++)
                if (kp[c] <= qpr) mx = fmaxf(mx, ss[r * LDS + c] * scale);
            part[2 * r + lane / 16] = mx;
        }
        __syncwarp();
        if (lane < 16) {  // 2. the row's new maximum and the rescale of its old (o, l)
            const int r = r0 + lane;
            const float mx = fmaxf(part[2 * r], part[2 * r + 1]);
            // nothing visible in this tile: P = 0, (o, m, l) unchanged (alpha 1)
            mnew_s[r] = mx == -INFINITY ? mrow[r] : fmaxf(mrow[r], mx);
            alpha_s[r] = mx == -INFINITY ? 1.0f : expf(mrow[r] - mnew_s[r]);
        }
        __syncwarp();
        for (int e = lane; e < 16 * BK; e += 32) {  // 3. P, rounded to bf16; 0 where not visible
            const int r = r0 + e / BK, c = e % BK;
            ps[r * LDP + c] = to_bf16(kp[c] <= qp[r] ? expf(ss[r * LDS + c] * scale - mnew_s[r]) : 0.0f);
        }
        for (int e = lane; e < 16 * HD; e += 32) {  // 4. o's rows rescaled
            const int r = r0 + e / HD, d = e % HD;
            os[r * L::LDF + d] *= alpha_s[r];
        }
        __syncwarp();
        if (lane < 16) {  // 5. l from the rounded P, in column order (O / l is then a convex combination)
            const int r = r0 + lane;
            float sum = 0.0f;
            for (int c = 0; c < BK; c++) sum += __bfloat162float(ps[r * LDP + c]);
            lrow[r] = lrow[r] * alpha_s[r] + sum;
            mrow[r] = mnew_s[r];
        }
        __syncwarp();
        Acc acc[HD / 16];
        for (int n = 0; n < HD / 16; n++)
            wmma::load_matrix_sync(acc[n], os + r0 * L::LDF + 16 * n, L::LDF, wmma::mem_row_major);
        warp_ab<HD, BK>(acc, ps + r0 * LDP, LDP, vs, L::LDH);
        __syncwarp();  // every lane has read its o tiles before lane 0 overwrites them
        for (int n = 0; n < HD / 16; n++)
            wmma::store_matrix_sync(os + r0 * L::LDF + 16 * n, acc[n], L::LDF, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = tid; e < BQ * HD; e += THREADS) {
        const int r = e / HD, d = e % HD;
        if (i0 + r < Sq) o[orow0 + (size_t)(i0 + r) * H * HD + d] = os[r * L::LDF + d];
    }
    for (int r = tid; r < BQ; r += THREADS)
        if (i0 + r < Sq) {
            m[srow0 + i0 + r] = mrow[r];
            l[srow0 + i0 + r] = lrow[r];
        }
}

// dS for one (query, key) pair from its score s and dP = dO . v:
// P = exp(s scale - lse), dS = P (dP - rowdot) scale (the softmax's backward,
// ops.h); zero where the key is not visible.
__device__ __forceinline__ void pair_grad(bool visible, float s, float dp, float lse, float rowdot, float scale,
                                          float *p, float *ds) {
    *p = visible ? expf(s * scale - lse) : 0.0f;
    *ds = *p * (dp - rowdot) * scale;
}

// The backward's view of query rows [i0, i0 + 64) of head h: Q and dO rounded to
// bf16, and the rows' lse and rowdot (0 past Sq; those rows see no key).
template <int HD>
__device__ void load_query_tile(bf16 *qs, bf16 *dos, float *lse_s, float *rd_s, const float *q, int ldq,
                                const float *dout, const float *lse, const float *rowdot, int b, int h, int i0,
                                int Sq, int H) {
    const size_t srow0 = ((size_t)b * H + h) * Sq;
    load_rows_bf16<HD>(qs, q + (size_t)b * Sq * ldq + (size_t)h * HD, ldq, i0, Sq);
    load_rows_bf16<HD>(dos, dout + (size_t)b * Sq * H * HD + (size_t)h * HD, (size_t)H * HD, i0, Sq);
    for (int r = threadIdx.x; r < BQ; r += THREADS) {
        lse_s[r] = i0 + r < Sq ? lse[srow0 + i0 + r] : 0.0f;
        rd_s[r] = i0 + r < Sq ? rowdot[srow0 + i0 + r] : 0.0f;
    }
}

// ---- backward, dQ += dS K over one block of keys ----
// grid (ceil(Sq / 64), B * H); dq (B*Sq, ldq) at column h*HD.
template <int HD>
__global__ void __launch_bounds__(THREADS)
    k_backward_dq(float *dq, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff, const float *dout,
                  const float *lse, const float *rowdot, const int *qpos, const int *kpos, int Sq, int Sk, int H,
                  int KV, float scale) {
    typedef Smem<HD> L;
    FLASH_SMEM(smem);
    Carve cv = {smem};
    bf16 *qs = cv.take<bf16>(L::half_tile), *dos = cv.take<bf16>(L::half_tile);
    bf16 *ks = cv.take<bf16>(L::half_tile), *vs = cv.take<bf16>(L::half_tile);
    float *ss = cv.take<float>(L::score), *dps = cv.take<float>(L::score);  // (64, 64) S and dP
    bf16 *dss = cv.take<bf16>(L::prob);                                     // (64, 64) dS rounded
    float *stage = ss;  // (64, HD) dQ, over S and dP once the tiles are done
    float *lse_s = cv.take<float>(L::stats), *rd_s = lse_s + BQ;
    int *qp = (int *)(rd_s + BQ), *kp = qp + BQ;

    const int tid = threadIdx.x, lane = tid % 32, r0 = 16 * (tid / 32);
    const int i0 = blockIdx.x * BQ, b = blockIdx.y / H, h = blockIdx.y % H, g = h / (H / KV);

    load_query_tile<HD>(qs, dos, lse_s, rd_s, q, ldq, dout, lse, rowdot, b, h, i0, Sq, H);
    load_pos(qp, qpos, i0, Sq, INT_MIN);
    __syncthreads();
    const int qmax = max_of(qp);
    Acc acc[HD / 16];
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(acc[n], 0.0f);

    for (int j0 = 0; j0 < Sk; j0 += BK) {
        __syncthreads();
        load_pos(kp, kpos, j0, Sk, INT_MAX);
        __syncthreads();
        if (min_of(kp) > qmax) continue;
        const float *kbase = kv + (size_t)b * Sk * ldkv;
        load_rows_bf16<HD>(ks, kbase + koff + (size_t)g * HD, ldkv, j0, Sk);
        load_rows_bf16<HD>(vs, kbase + voff + (size_t)g * HD, ldkv, j0, Sk);
        __syncthreads();

        warp_abt<BK, HD>(ss + r0 * LDS, LDS, qs + r0 * L::LDH, L::LDH, ks, L::LDH);
        warp_abt<BK, HD>(dps + r0 * LDS, LDS, dos + r0 * L::LDH, L::LDH, vs, L::LDH);
        __syncwarp();
        for (int e = lane; e < 16 * BK; e += 32) {  // dS of the warp's rows, consecutive lanes on consecutive columns
            const int r = r0 + e / BK, c = e % BK;
            float p, ds;
            pair_grad(kp[c] <= qp[r], ss[r * LDS + c], dps[r * LDS + c], lse_s[r], rd_s[r], scale, &p, &ds);
            dss[r * LDP + c] = to_bf16(ds);
        }
        __syncwarp();
        warp_ab<HD, BK>(acc, dss + r0 * LDP, LDP, ks, L::LDH);
    }
    __syncthreads();  // every warp is done with S and dP: the staging overwrites them
    for (int n = 0; n < HD / 16; n++)
        wmma::store_matrix_sync(stage + r0 * L::LDF + 16 * n, acc[n], L::LDF, wmma::mem_row_major);
    __syncthreads();
    float *dqb = dq + (size_t)b * Sq * ldq + (size_t)h * HD;
    for (int e = tid; e < BQ * HD; e += THREADS) {
        const int r = e / HD, d = e % HD;
        if (i0 + r < Sq) dqb[(size_t)(i0 + r) * ldq + d] += stage[r * L::LDF + d];
    }
}

// ---- backward, dK += dS^T Q and dV += P^T dO over every query head of the group ----
// grid (ceil(Sk / 64), B * KV); dkv (B*Sk, ldkv) at columns koff + g*HD and voff + g*HD.
template <int HD>
__global__ void __launch_bounds__(THREADS)
    k_backward_dkv(float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                   const float *dout, const float *lse, const float *rowdot, const int *qpos, const int *kpos, int Sq,
                   int Sk, int H, int KV, float scale) {
    typedef Smem<HD> L;
    FLASH_SMEM(smem);
    Carve cv = {smem};
    bf16 *ks = cv.take<bf16>(L::half_tile), *vs = cv.take<bf16>(L::half_tile);
    bf16 *qs = cv.take<bf16>(L::half_tile), *dos = cv.take<bf16>(L::half_tile);
    float *st = cv.take<float>(L::score), *dpt = cv.take<float>(L::score);  // (64 keys, 64 queries) S^T, dP^T
    bf16 *pt = cv.take<bf16>(L::prob), *dst = cv.take<bf16>(L::prob);       // P^T, dS^T rounded
    // (64, HD) each: dK and dV, over q, dout, S^T and dP^T once the tiles are done
    float *stage_k = (float *)qs, *stage_v = (float *)((unsigned char *)qs + L::f32_tile);
    float *lse_s = cv.take<float>(L::stats), *rd_s = lse_s + BQ;
    int *qp = (int *)(rd_s + BQ), *kp = qp + BQ;

    const int tid = threadIdx.x, lane = tid % 32, r0 = 16 * (tid / 32);
    const int j0 = blockIdx.x * BK, b = blockIdx.y / KV, g = blockIdx.y % KV, group = H / KV;
    const float *kbase = kv + (size_t)b * Sk * ldkv;

    load_rows_bf16<HD>(ks, kbase + koff + (size_t)g * HD, ldkv, j0, Sk);
    load_rows_bf16<HD>(vs, kbase + voff + (size_t)g * HD, ldkv, j0, Sk);
    load_pos(kp, kpos, j0, Sk, INT_MAX);
    __syncthreads();
    const int kmin = min_of(kp);
    Acc dk[HD / 16], dv[HD / 16];
    for (int n = 0; n < HD / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }

    for (int h = g * group; h < (g + 1) * group; h++)
        for (int i0 = 0; i0 < Sq; i0 += BQ) {
            __syncthreads();  // the previous tile's readers are done with qp, qs, dos and the stats
            load_pos(qp, qpos, i0, Sq, INT_MIN);
            __syncthreads();
            if (max_of(qp) < kmin) continue;  // no query of the tile sees any key of the block
            load_query_tile<HD>(qs, dos, lse_s, rd_s, q, ldq, dout, lse, rowdot, b, h, i0, Sq, H);
            __syncthreads();

            warp_abt<BQ, HD>(st + r0 * LDS, LDS, ks + r0 * L::LDH, L::LDH, qs, L::LDH);
            warp_abt<BQ, HD>(dpt + r0 * LDS, LDS, vs + r0 * L::LDH, L::LDH, dos, L::LDH);
            __syncwarp();
            FLASH_UNROLL4
            for (int e = lane; e < 16 * BQ; e += 32) {  // P^T and dS^T of the warp's keys, lanes along the queries
                const int r = r0 + e / BQ, c = e % BQ;
                float p, ds;
                pair_grad(kp[r] <= qp[c], st[r * LDS + c], dpt[r * LDS + c], lse_s[c], rd_s[c], scale, &p, &ds);
                pt[r * LDP + c] = to_bf16(p);
                dst[r * LDP + c] = to_bf16(ds);
            }
            __syncwarp();
            warp_ab<HD, BQ>(dv, pt + r0 * LDP, LDP, dos, L::LDH);
            warp_ab<HD, BQ>(dk, dst + r0 * LDP, LDP, qs, L::LDH);
        }
    __syncthreads();  // every warp is done with the tiles: the staging overwrites them
    for (int n = 0; n < HD / 16; n++) {
        wmma::store_matrix_sync(stage_k + r0 * L::LDF + 16 * n, dk[n], L::LDF, wmma::mem_row_major);
        wmma::store_matrix_sync(stage_v + r0 * L::LDF + 16 * n, dv[n], L::LDF, wmma::mem_row_major);
    }
    __syncthreads();
    float *dkb = dkv + (size_t)b * Sk * ldkv + koff + (size_t)g * HD, *dvb = dkv + (size_t)b * Sk * ldkv + voff + (size_t)g * HD;
    for (int e = tid; e < BK * HD; e += THREADS) {
        const int r = e / HD, d = e % HD;
        if (j0 + r < Sk) {
            dkb[(size_t)(j0 + r) * ldkv + d] += stage_k[r * L::LDF + d];
            dvb[(size_t)(j0 + r) * ldkv + d] += stage_v[r * L::LDF + d];
        }
    }
}

// ---- launchers: the arguments of ops.h's attention_block_forward/backward ----
// The caller checks head_dim_ok(hd) and that B * H fits a grid's y (65535).
template <int HD>
void forward_hd(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV) {
    const dim3 grid((unsigned)((Sq + BQ - 1) / BQ), (unsigned)(B * H));
    FLASH_LAUNCH(k_forward<HD>, grid, Smem<HD>::fwd, o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, Sq, Sk, H,
                 KV, 1.0f / sqrtf((float)HD));
}

template <int HD>
void backward_hd(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                 const float *dout, const float *lse, const float *rowdot, const int *qpos, const int *kpos, int B,
                 int Sq, int Sk, int H, int KV) {
    const float scale = 1.0f / sqrtf((float)HD);
    const dim3 gq((unsigned)((Sq + BQ - 1) / BQ), (unsigned)(B * H)), gk((unsigned)((Sk + BK - 1) / BK), (unsigned)(B * KV));
    FLASH_LAUNCH(k_backward_dq<HD>, gq, Smem<HD>::dq, dq, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos,
                 Sq, Sk, H, KV, scale);
    FLASH_LAUNCH(k_backward_dkv<HD>, gk, Smem<HD>::dkv, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos,
                 kpos, Sq, Sk, H, KV, scale);
}

// The same, with the head dimension at run time (head_dim_ok(hd) must hold).
static inline void forward(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff,
                           int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd) {
    switch (hd) {
    case 16: forward_hd<16>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV); break;
    case 32: forward_hd<32>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV); break;
    case 64: forward_hd<64>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV); break;
    default: forward_hd<128>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV); break;
    }
}
static inline void backward(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff,
                            int voff, const float *dout, const float *lse, const float *rowdot, const int *qpos,
                            const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd) {
#define FLASH_BWD(HD) \
    backward_hd<HD>(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq, Sk, H, KV)
    switch (hd) {
    case 16: FLASH_BWD(16); break;
    case 32: FLASH_BWD(32); break;
    case 64: FLASH_BWD(64); break;
    default: FLASH_BWD(128); break;
    }
#undef FLASH_BWD
}

}  // namespace flash

#endif
