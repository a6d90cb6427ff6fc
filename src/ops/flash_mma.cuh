// ops/flash_mma.cuh — causal grouped-query attention on tensor cores with the score
// tiles in registers (FlashAttention-2's structure, Dao 2023): the forward and
// backward of ops.h's attention_block_* ops for bf16 products at head dimensions
// 32, 64 and 128. Same contract as ops/flash_attention.cuh (the WMMA kernels,
// which remain for head dimension 16 and as FEMTOTRON_ATTENTION=wmma): the same
// operands rounded to bf16 (Q, K, V and dO as they are staged, P and dS as they are
// formed), fp32 softmax, log-sum-exp, rowdot and accumulators, l summing the
// rounded P, no atomics.
//
// Why another kernel. The WMMA kernels cannot see which lane holds which element
// of a fragment, so each score tile goes to shared memory, one lane per row runs
// its softmax there, and P comes back through shared memory: per 64x64 tile that
// is thousands of serial shared-memory operations against a few hundred
// tensor-core instructions. Here every product is mma.sync m16n8k16
// (ops/mma_bf16.cuh), whose documented layout puts a row's scores in the four
// lanes of a quad: the row maximum is two shuffles, the row sum an mma of P against
// ones, the rescale a register multiply, and the accumulators of P, rounded and
// packed, are directly the A operand of P V (and dS of dS K). Shared memory holds only the staged bf16
// tiles, read by ldmatrix (transposed where the product wants the other layout),
// its rows padded by 16 bytes so that ldmatrix's 8 rows fall in distinct banks.
//
// Tiles. A block is 4 warps. Forward: 64 x MT query rows of one (batch, head), MT
// = 2 at head dimension <= 64 (each K/V fragment read from shared memory serves
// two 16-row tiles: half the shared-memory traffic per product) and 1 at 128 (the
// registers of O); keys in tiles of 64. dQ: 64 query rows, 16 per warp. dK/dV: 64
// key rows of one (batch, key-value head), 16 per warp, walking every query head
// of the group in tiles of 64 queries; K and V stay in registers at head dimension
// <= 64 and are read from shared memory per tile at 128. Query blocks are issued
// last-first, so that the long causal rows start first and the short ones fill the
// tail.
//
// Masks. Key j is visible to query i iff kpos[j] <= qpos[i]. A tile no key of
// which any row sees is skipped whole; one every key of which every row sees
// runs no test at all; the others (the diagonal's) first set their hidden scores
// to -inf in a pass of their own (mask_tile), behind a branch the whole block takes
// alike, so that the softmax's code is one path without a test or a branch per
// score.
//
// Instructions per score. A tile's scores are as many as its K and V values per
// thread, and at head dimension 64 each product is only 8 mma per 128 scores: the
// softmax's per-score work, not the tensor cores, sets the pace. So a score costs
// one fma (scale and subtract the maximum, in log2 units) and one ex2.approx
// (mma::exp2_approx: exp2f adds a test, a halving and a squaring for results below
// 2^-126, which are 0 in bf16 anyway); P is packed to bf16 once, and l adds the
// packed values by an mma of P against ones (the tensor cores sum across the
// quad). (2026-11-28, sm_90a, head dimension 64, counted in the SASS of a visible
// tile off the diagonal from bench/sass_mix.sh's listing: forward 704 instructions a
// warp, 136 of them mma; dQ 486 with 96; dK/dV 589 with 128.)
//
// Loads. fp32 rows are read 16 bytes at a time where every row start is 16-byte
// aligned (VEC: pointer, leading dimension and column offsets multiples of 4
// floats, as the model's packed q|k|v are), else a float at a time.
//
// Compiled by nvcc (ops/attention_cuda.cu) and, under tests/emu/cuda_emu.h, by the
// host compiler (tests/emu/test_flash_emu.cpp), where each lane's registers are
// its own and the collectives exchange them as the hardware does.
#ifndef FEMTOTRON_FLASH_MMA_CUH
#define FEMTOTRON_FLASH_MMA_CUH

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/flash_attention.cuh"  // FLASH_SMEM, FLASH_LAUNCH (its launch helpers)
#include "ops/mma_bf16.cuh"

// Every loop over a register array is unrolled: an array indexed by a loop counter
// the compiler does not unroll goes to local memory. (The host compiler of the
// emulation has no such pragma.)
#ifdef CUDA_EMU
#define MMA_UNROLL
#else
#define MMA_UNROLL _Pragma("unroll")
#endif

namespace flash_mma {

typedef __nv_bfloat16 bf16;
typedef uint32_t u32;
constexpr int THREADS = 128;  // 4 warps
constexpr int BN = 64;        // keys per tile (forward, dQ); queries per tile (dK/dV)
constexpr float LOG2E = 1.4426950408889634f;
// Tiles whose position bounds a block holds at once (8192 rows); tests/emu's
// test_flash_emu sets 2, so that its short sequences cross chunks.
#ifdef FLASH_MMA_CHUNK
constexpr int CHUNK = FLASH_MMA_CHUNK;
#else
constexpr int CHUNK = 128;
#endif

static inline bool head_dim_ok(int hd) { return hd == 32 || hd == 64 || hd == 128; }

template <int HD>
struct Shape {
    static constexpr int LD = HD + 8;              // bf16 row stride of a staged tile (16 bytes of padding)
    static constexpr int KS = HD / 16;             // 16-wide steps over the head dimension
    static constexpr int DT = HD / 8;              // 8-wide column tiles of an output row
    static constexpr int NT = BN / 8;              // 8-wide tiles of a 64-wide score row
    static constexpr int MT = HD <= 64 ? 2 : 1;    // the forward's 16-row tiles per warp
    static constexpr int BM = 16 * MT * 4;         // the forward's query rows per block
    static constexpr size_t tile = (size_t)BN * LD * 2;  // a staged (64, HD) bf16 tile
    static constexpr size_t stage = (size_t)BN * HD * 4;  // a (64, HD) fp32 tile fetched ahead
    static constexpr size_t bounds = 2 * CHUNK * 4;       // the position bounds of CHUNK tiles
    // Fetch the next tile by cp.async while computing on this one (see TileStream):
    // at head dimension 128 its fp32 staging would leave one block per multiprocessor
    // (or, for dK/dV, not fit at all), so there the tiles are read when needed.
    static constexpr bool PREFETCH = HD <= 64;
    // forward and dQ: K and V tiles (the block's Q, and dO, staged over them first:
    // BM <= 2 BN rows), the tile's key positions, the key tiles' bounds; prefetching,
    // the next tile's fp32 K and V and its positions
    static constexpr size_t fwd_at_stage = 2 * tile + BN * 4 + bounds;
    static constexpr size_t fwd = fwd_at_stage + (PREFETCH ? 2 * stage + BN * 4 : 0);
    // dK/dV: K, V, the query tile's Q and dO, its lse * log2(e), rowdot, positions,
    // the query tiles' bounds; prefetching, the next query tile's fp32 Q, dO, lse,
    // rowdot and positions
    static constexpr size_t dkv_at_stage = 4 * tile + 3 * BN * 4 + bounds;
    static constexpr size_t dkv = dkv_at_stage + (PREFETCH ? 2 * stage + 3 * BN * 4 : 0);
    static_assert((size_t)BM * LD * 2 <= 2 * tile, "the forward's Q tile fits over K and V");
};

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// The minimum and maximum over the warp of (a, b) per lane, every lane getting them.
__device__ __forceinline__ void warp_min_max(int a, int b, int *lo, int *hi) {
    int mn = imin(a, b), mx = imax(a, b);
    MMA_UNROLL
    for (int s = 16; s > 0; s /= 2) {
        mn = imin(mn, __shfl_xor_sync(0xffffffffu, mn, s));
        mx = imax(mx, __shfl_xor_sync(0xffffffffu, mx, s));
    }
    *lo = mn;
    *hi = mx;
}

// The minimum of *lo and the maximum of *hi over the block, every thread getting
// them: shuffles over each warp, then the 4 warps' through scratch (8 ints of shared
// memory no thread reads or writes meanwhile). Ends in a barrier's wake.
__device__ __forceinline__ void block_min_max(int *lo, int *hi, int *scratch) {
    warp_min_max(*lo, *hi, lo, hi);
    if (threadIdx.x % 32 == 0) {
        scratch[2 * (threadIdx.x / 32)] = *lo;
        scratch[2 * (threadIdx.x / 32) + 1] = *hi;
    }
    __syncthreads();
    MMA_UNROLL
    for (int w = 0; w < THREADS / 32; w++) {
        *lo = imin(*lo, scratch[2 * w]);
        *hi = imax(*hi, scratch[2 * w + 1]);
    }
}

// The block's threads stage rows [r0, r0 + R) of an fp32 matrix (row r at src + r *
// ld, HD values) as a bf16 tile (row stride LD), rounded. CHECK: rows at or past n
// are 0 (a partial tile); without it every row is there and none is tested.
template <int HD, int R, bool VEC, bool CHECK>
__device__ __forceinline__ void stage_rows_as(bf16 *dst, const float *src, size_t ld, int r0, int n) {
    constexpr int LD = Shape<HD>::LD, Q = HD / 4;  // 4-value pieces per row
    static_assert(THREADS % Q == 0 && R % (THREADS / Q) == 0, "every thread stages the same pieces of each row");
    const int r1 = (int)threadIdx.x / Q, c = 4 * ((int)threadIdx.x % Q);  // the thread's first row, its column
    // the thread's first piece, and the step to its next (THREADS / Q rows on): the
    // addresses as additions, not a 64-bit product a piece
    const float *p = src + (size_t)(r0 + r1) * ld + c;
    const size_t step = (size_t)(THREADS / Q) * ld;
    MMA_UNROLL
    for (int i = 0; i < R / (THREADS / Q); i++, p += step) {
        const int r = r1 + i * (THREADS / Q);
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (!CHECK || r0 + r < n) v = VEC ? mma::load_f4(p) : make_float4(p[0], p[1], p[2], p[3]);
        uint2 packed;
        packed.x = mma::pack_bf16(v.x, v.y);
        packed.y = mma::pack_bf16(v.z, v.w);
        *reinterpret_cast<uint2 *>(dst + r * LD + c) = packed;
    }
}

// stage_rows_as, testing rows only where the tile runs past n (a branch the whole
// block takes alike).
template <int HD, int R, bool VEC>
__device__ __forceinline__ void stage_rows(bf16 *dst, const float *src, size_t ld, int r0, int n) {
    if (r0 + R <= n) stage_rows_as<HD, R, VEC, false>(dst, src, ld, r0, n);
    else stage_rows_as<HD, R, VEC, true>(dst, src, ld, r0, n);
}

// A fetched (64, HD) fp32 staging tile (TileStream: rows past the data already
// zero) rounded into a bf16 tile.
template <int HD>
__device__ __forceinline__ void stage_fetched(bf16 *dst, const float *src) {
    stage_rows_as<HD, BN, true, false>(dst, src, HD, 0, BN);
}

// A operands of a warp's 16 rows [r0, r0 + 16) of a staged tile: a[k] covers columns
// 16k..16k+15 (ldmatrix x4: matrices rows 0-7 / 8-15 x columns 0-7 / 8-15).
template <int HD>
__device__ __forceinline__ void load_a(u32 (*a)[4], const bf16 *tile, int r0) {
    constexpr int LD = Shape<HD>::LD;
    const int lane = threadIdx.x % 32, row = r0 + lane % 8 + 8 * ((lane / 8) % 2), col = 8 * (lane / 16);
    MMA_UNROLL
    for (int k = 0; k < HD / 16; k++) mma::ldsm_x4(a[k], tile + row * LD + 16 * k + col);
}

// B operands for S = A T^T over 16 rows of a staged tile T (row-major, rows are the
// product's n): for n-tiles 2p and 2p+1 (T's rows 16p..16p+15) and k-step k (its
// columns 16k..16k+15), b[0..1] for tile 2p and b[2..3] for 2p+1.
template <int HD>
__device__ __forceinline__ void load_b_rows(u32 b[4], const bf16 *tile, int p, int k) {
    constexpr int LD = Shape<HD>::LD;
    const int lane = threadIdx.x % 32;
    mma::ldsm_x4(b, tile + (16 * p + lane % 8 + 8 * (lane / 16)) * LD + 16 * k + 8 * ((lane / 8) % 2));
}

// B operands for O = P T over a staged tile T (row-major, rows are the product's k):
// for k-step k (T's rows 16k..16k+15) and n-tiles 2p and 2p+1 (its columns
// 16p..16p+15), transposed by ldmatrix: b[0..1] for tile 2p, b[2..3] for 2p+1.
template <int LD>
__device__ __forceinline__ void load_b_cols(u32 b[4], const bf16 *tile, int k, int p) {
    const int lane = threadIdx.x % 32;
    mma::ldsm_x4_trans(b, tile + (16 * k + lane % 8 + 8 * ((lane / 8) % 2)) * LD + 16 * p + 8 * (lane / 16));
}

// acc[n] += a . T^T over 64 rows of T: a 16-row A operand (HD wide) against every
// row of a staged (64, HD) tile, into 8 n-tiles of 8.
template <int HD, int M>
__device__ __forceinline__ void scores(float (*acc)[Shape<HD>::NT][4], const u32 (*a)[Shape<HD>::KS][4],
                                       const bf16 *tile) {
    MMA_UNROLL
    for (int k = 0; k < Shape<HD>::KS; k++)
        MMA_UNROLL
        for (int p = 0; p < Shape<HD>::NT / 2; p++) {
            u32 b[4];
            load_b_rows<HD>(b, tile, p, k);
            MMA_UNROLL
            for (int m = 0; m < M; m++) {
                mma::m16n8k16(acc[m][2 * p], a[m][k], b[0], b[1]);
                mma::m16n8k16(acc[m][2 * p + 1], a[m][k], b[2], b[3]);
            }
        }
}

// Every element of n accumulator tiles to 0.
template <int N>
__device__ __forceinline__ void zero_tiles(float (*acc)[4]) {
    MMA_UNROLL
    for (int i = 0; i < N; i++)
        MMA_UNROLL
        for (int e = 0; e < 4; e++) acc[i][e] = 0.0f;
}

// The A operand of 16 columns [16c, 16c + 16) of a 16 x 64 accumulator tile, rounded
// to bf16 (its n-tiles 2c and 2c+1).
__device__ __forceinline__ void acc_to_a(u32 a[4], const float (*acc)[4], int c) {
    a[0] = mma::pack_bf16(acc[2 * c][0], acc[2 * c][1]);
    a[1] = mma::pack_bf16(acc[2 * c][2], acc[2 * c][3]);
    a[2] = mma::pack_bf16(acc[2 * c + 1][0], acc[2 * c + 1][1]);
    a[3] = mma::pack_bf16(acc[2 * c + 1][2], acc[2 * c + 1][3]);
}

// out[m][d] += a_m . T over rows [16c, 16c + 16) of a staged (64, HD) tile T, a_m
// the 16 x 16 bf16 A operand a[m].
template <int HD, int M>
__device__ __forceinline__ void accumulate_step(float (*out)[Shape<HD>::DT][4], const u32 (*a)[4], const bf16 *tile,
                                                int c) {
    MMA_UNROLL
    for (int p = 0; p < Shape<HD>::DT / 2; p++) {
        u32 b[4];
        load_b_cols<Shape<HD>::LD>(b, tile, c, p);
        MMA_UNROLL
        for (int m = 0; m < M; m++) {
            mma::m16n8k16(out[m][2 * p], a[m], b[0], b[1]);
            mma::m16n8k16(out[m][2 * p + 1], a[m], b[2], b[3]);
        }
    }
}

// out[m][d] += A_m . T over 64 rows of a staged (64, HD) tile T, A_m the bf16 operand
// of accumulator tile src[m] (16 x 64), out 16 x HD.
template <int HD, int M>
__device__ __forceinline__ void accumulate(float (*out)[Shape<HD>::DT][4], const float (*src)[Shape<HD>::NT][4],
                                           const bf16 *tile) {
    MMA_UNROLL
    for (int c = 0; c < BN / 16; c++) {
        u32 a[M][4];
        MMA_UNROLL
        for (int m = 0; m < M; m++) acc_to_a(a[m], src[m], c);
        accumulate_step<HD, M>(out, a, tile, c);
    }
}

// The same with the operands already packed: a[m][c] covers columns [16c, 16c + 16).
template <int HD, int M>
__device__ __forceinline__ void accumulate_packed(float (*out)[Shape<HD>::DT][4], const u32 (*a)[BN / 16][4],
                                                  const bf16 *tile) {
    MMA_UNROLL
    for (int c = 0; c < BN / 16; c++) {
        u32 ac[M][4];
        MMA_UNROLL
        for (int m = 0; m < M; m++)
            MMA_UNROLL
            for (int r = 0; r < 4; r++) ac[m][r] = a[m][c][r];
        accumulate_step<HD, M>(out, ac, tile, c);
    }
}

// The causal mask of a tile a diagonal crosses (one not every pair of which is
// visible): each score of M 16 x 64 accumulator tiles whose pair is not visible
// becomes -inf, which the softmax's exp2 turns into 0. The row positions are the
// lane's (rows g and g + 8 of tile m: row_pos[m][0..1]), the column positions a
// (64) array in shared memory, read two at a time (columns 2t and 2t + 1 of each
// 8-column tile). ROWS_ARE_QUERIES: (row, column) = (query, key), visible iff
// col_pos <= row_pos; else (key, query), visible iff row_pos <= col_pos. A separate
// pass behind a branch the whole block takes alike, so that the tiles every pair
// of which is visible (all but the diagonal's) run no per-score test at all.
template <bool ROWS_ARE_QUERIES, int M>
__device__ __forceinline__ void mask_tile(float (*acc)[BN / 8][4], const int *col_pos, const int (*row_pos)[2]) {
    const int t = threadIdx.x % 4;
    MMA_UNROLL
    for (int n = 0; n < BN / 8; n++) {
        const int2 cp = *reinterpret_cast<const int2 *>(col_pos + 8 * n + 2 * t);
        MMA_UNROLL
        for (int m = 0; m < M; m++)
            MMA_UNROLL
            for (int e = 0; e < 4; e++) {
                const int c = e % 2 ? cp.y : cp.x, r = row_pos[m][e / 2];
                if (ROWS_ARE_QUERIES ? c > r : r > c) acc[m][n][e] = -INFINITY;
            }
    }
}

// Positions of rows [r0, r0 + 64) into shared memory: pos[r] where r < n, else outside.
__device__ __forceinline__ void stage_pos(int *dst, const int *pos, int r0, int n, int outside) {
    static_assert(BN <= THREADS, "a thread per row");
    const int r = threadIdx.x;
    if (r < BN) dst[r] = r0 + r < n ? pos[r0 + r] : outside;
}

// ---- the tiles a block visits ----
// A block walks 64-row tiles of the other side (the keys for the forward and dQ, the
// queries for dK/dV). A tile is visible when some query of the block sees some key
// of it (Key j is visible to query i iff kpos[j] <= qpos[i]): key tile [lo, hi] of
// positions against the block's queries [qlo, qhi] when lo <= qhi; query tile [lo,
// hi] against the block's keys [klo, khi] when klo <= hi. It is seen whole (every
// query sees every key, no per-element test) when hi <= qlo, or khi <= lo.
//
// Why a stream. A causal block sees about half of the tiles. Finding that out tile by
// tile (fetch the positions, a barrier, reduce, skip) cost a global read's latency and
// two barriers for each invisible tile, and a visible tile's K and V were then read
// with the block waiting. Here the block first reduces the position bounds of up to
// CHUNK tiles at once (every warp a tile at a time, the reads independent), walks
// only the visible ones, and (PREFETCH) fetches the next visible tile's fp32 rows by
// cp.async into a staging area while it computes on the current one; the tile is
// then rounded to bf16 from shared memory by stage_rows, as from global memory.

// lo[t], hi[t] for tiles [t0, t0 + nt) of `pos` (n rows; a row at or past n counts
// as `outside`): warp w reduces tiles w, w + 4, ...
__device__ __forceinline__ void tile_bounds(int *lo, int *hi, const int *pos, int t0, int nt, int n, int outside) {
    const int lane = threadIdx.x % 32;
    for (int t = threadIdx.x / 32; t < nt; t += THREADS / 32) {  // the same trip count on every lane
        const int r = (t0 + t) * BN + lane;
        int mn, mx;
        warp_min_max(r < n ? pos[r] : outside, r + 32 < n ? pos[r + 32] : outside, &mn, &mx);
        if (lane == 0) {
            lo[t] = mn;
            hi[t] = mx;
        }
    }
}

// cp.async of rows [r0, r0 + 64) of an fp32 matrix (row r at src + r * ld, HD values)
// into a (64, HD) staging tile. 16 bytes at a time where rows are 16-byte aligned
// (VEC), else 4. CHECK: rows at or past n zero-filled; without it every row is there.
template <int HD, bool VEC, bool CHECK>
__device__ __forceinline__ void fetch_rows_as(float *dst, const float *src, size_t ld, int r0, int n) {
    constexpr int W = VEC ? 4 : 1, Q = HD / W;  // floats per copy, copies per row
    static_assert(THREADS % Q == 0 && BN % (THREADS / Q) == 0, "every thread copies the same pieces of each row");
    const int r1 = (int)threadIdx.x / Q, c = W * ((int)threadIdx.x % Q);  // the thread's first row, its column
    const float *p = src + (size_t)(r0 + r1) * ld + c;  // its first piece; the next THREADS / Q rows on
    const size_t step = (size_t)(THREADS / Q) * ld;
    MMA_UNROLL
    for (int i = 0; i < BN / (THREADS / Q); i++, p += step) {
        const int r = r1 + i * (THREADS / Q);
        const bool in = !CHECK || r0 + r < n;
        mma::copy_async<4 * W>(dst + r * HD + c, in ? p : src, in);  // (a valid address where nothing is read)
    }
}

// fetch_rows_as, testing rows only where the tile runs past n (as stage_rows).
template <int HD, bool VEC>
__device__ __forceinline__ void fetch_rows(float *dst, const float *src, size_t ld, int r0, int n) {
    if (r0 + BN <= n) fetch_rows_as<HD, VEC, false>(dst, src, ld, r0, n);
    else fetch_rows_as<HD, VEC, true>(dst, src, ld, r0, n);
}

// cp.async of entries [r0, r0 + 64) of a 4-byte array into dst (64); past n zero-filled.
__device__ __forceinline__ void fetch_row_values(void *dst, const void *src, int r0, int n) {
    const int r = threadIdx.x;  // a thread per row (BN <= THREADS)
    if (r < BN) mma::copy_async<4>((uint32_t *)dst + r, (const uint32_t *)src + (r0 + r < n ? r0 + r : 0), r0 + r < n);
}

// The visible tiles of one side, in order, each staged for the block by the caller's
// fill(tile) (from the staging, or from global memory), prefetched by its
// fetch(tile) when PREFETCH. KEYS: the tiles are key tiles and (blo, bhi) the
// block's query positions; else query tiles against the block's key positions.
// lo and hi: CHUNK ints each of shared memory.
template <bool KEYS, bool PREFETCH>
struct TileStream {
    int *lo, *hi;
    const int *pos;
    int n, blo, bhi;
    int tiles, c0 = 0, nt = 0, cur = 0;  // all tiles; the chunk's first and count; the next visible one in it

    __device__ TileStream(int *lo_, int *hi_, const int *pos_, int n_, int blo_, int bhi_)
        : lo(lo_), hi(hi_), pos(pos_), n(n_), blo(blo_), bhi(bhi_), tiles((n_ + BN - 1) / BN) {}
    __device__ bool visible(int t) const { return KEYS ? lo[t] <= bhi : blo <= hi[t]; }
    __device__ int find(int t) const {
        while (t < nt && !visible(t)) t++;
        return t;
    }

    // The next visible tile's first row, staged (the block may read it until the next
    // call), with *whole telling whether every pair of it is visible; -1 when none is
    // left. Every thread of the block calls it, the same number of times.
    template <class Fetch, class Fill>
    __device__ __forceinline__ int next(Fetch fetch, Fill fill, bool *whole) {
        while (cur >= nt) {  // the chunk is done: the next one's bounds
            if (c0 + nt >= tiles) return -1;
            c0 += nt;
            nt = imin(CHUNK, tiles - c0);
            __syncthreads();  // every thread is done reading the last chunk's bounds
            tile_bounds(lo, hi, pos, c0, nt, n, KEYS ? INT_MAX : INT_MIN);
            __syncthreads();
            cur = find(0);
            if (PREFETCH && cur < nt) fetch((c0 + cur) * BN);
        }
        const int t = cur;
        if (PREFETCH) mma::copy_async_wait();
        __syncthreads();  // the tile's copies have landed; every warp is done with the last tile
        fill((c0 + t) * BN);
        *whole = KEYS ? hi[t] <= blo : bhi <= lo[t];
        cur = find(t + 1);
        __syncthreads();  // the tile is staged; the staging area is free
        if (PREFETCH && cur < nt) fetch((c0 + cur) * BN);
        return (c0 + t) * BN;
    }
};

// A key tile (keys [j0, j0 + 64) of the head's K and V columns, row stride ldkv):
// fetch_key_tile copies its fp32 rows and positions into the staging (kf, vf, kpf);
// fill_key_tile stages it as bf16 tiles and positions (ks, vs, kp; keys past Sk at
// position INT_MAX, seen by no query), from the staging when PREFETCH, else from
// global memory.
template <int HD, bool VEC>
__device__ __forceinline__ void fetch_key_tile(float *kf, float *vf, int *kpf, const float *k, const float *v,
                                               size_t ldkv, const int *kpos, int j0, int Sk) {
    fetch_rows<HD, VEC>(kf, k, ldkv, j0, Sk);
    fetch_rows<HD, VEC>(vf, v, ldkv, j0, Sk);
    fetch_row_values(kpf, kpos, j0, Sk);
}
template <int HD, bool VEC, bool PREFETCH>
__device__ __forceinline__ void fill_key_tile(bf16 *ks, bf16 *vs, int *kp, const float *kf, const float *vf,
                                              const int *kpf, const float *k, const float *v, size_t ldkv,
                                              const int *kpos, int j0, int Sk) {
    if (PREFETCH) {
        stage_fetched<HD>(ks, kf);  // the staging's rows, rounded
        stage_fetched<HD>(vs, vf);
        const int r = threadIdx.x;  // a thread per row (BN <= THREADS)
        if (r < BN) kp[r] = j0 + r < Sk ? kpf[r] : INT_MAX;
    } else {
        stage_rows<HD, BN, VEC>(ks, k, ldkv, j0, Sk);
        stage_rows<HD, BN, VEC>(vs, v, ldkv, j0, Sk);
        stage_pos(kp, kpos, j0, Sk, INT_MAX);
    }
}

// ---- forward: fold one block of keys into (o, m, l) ----
// grid (ceil(Sq / BM), B * H); o (B*Sq, H*HD) unnormalised, m and l (B*H*Sq), as
// ops.h's attention_block_forward defines them. A lane holds rows g and g + 8 of
// each of its warp's MT 16-row tiles (g = lane / 4) and, of each 8-column tile,
// columns 2t and 2t + 1 (t = lane % 4).
// WHOLE: the keys are all there are (attention_forward: one block): the state
// starts empty instead of being read, and the kernel ends as
// attention_block_finish does, o = o / l and, into m, lse = m + log l (l unused):
// the same arithmetic on the same values, so the same bits as init + block +
// finish, without their three passes over o.
template <int HD, bool VEC, bool WHOLE>
__global__ void __launch_bounds__(THREADS)
    k_forward(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
              const int *qpos, const int *kpos, int Sq, int Sk, int H, int KV, float scale) {
    typedef Shape<HD> S;
    constexpr int MT = S::MT, BM = S::BM, LD = S::LD;
    FLASH_SMEM(smem);
    bf16 *ks = (bf16 *)smem, *vs = ks + BN * LD;  // (64, HD) each; the block's Q first, over both
    int *kp = (int *)(smem + 2 * S::tile);        // (64) the key tile's positions
    int *tlo = kp + BN, *thi = tlo + CHUNK;       // (CHUNK) each: key tiles' position bounds
    float *kf = (float *)(smem + S::fwd_at_stage), *vf = kf + BN * HD;  // (64, HD) each, fetched ahead
    int *kpf = (int *)(vf + BN * HD);                                   // (64)

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * BM;  // last block first
    const int b = blockIdx.y / H, h = blockIdx.y % H, grp = h / (H / KV);
    const size_t ostride = (size_t)H * HD, srow0 = ((size_t)b * H + h) * Sq;
    float *ob = o + (size_t)b * Sq * ostride + (size_t)h * HD;
    const float sl2 = scale * LOG2E;  // scores in log2 units: exp(x) = exp2(x log2 e)

    stage_rows<HD, BM, VEC>(ks, q + (size_t)b * Sq * ldq + (size_t)h * HD, (size_t)ldq, i0, Sq);
    __syncthreads();
    u32 qa[MT][S::KS][4];  // the warp's Q rows as A operands
    float oacc[MT][S::DT][4], m2[MT][2];  // m2: the running maximum, log2 units
    // The running l of rows g and g + 8 in lacc[mt][0] and [2]: an accumulator tile of
    // P times a matrix of ones, so that the tensor cores sum each row of P across
    // the quad (the other two registers hold the same sums, unread).
    float lacc[MT][4];
    int qp[MT][2];
    int qlo = INT_MAX, qhi = INT_MIN;
    MMA_UNROLL
    for (int mt = 0; mt < MT; mt++) {
        const int r0 = 16 * (MT * warp + mt);
        load_a<HD>(qa[mt], ks, r0);
        MMA_UNROLL
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + r0 + g + 8 * hr;
            const bool in = i < Sq;
            const bool read = in && !WHOLE;
            qp[mt][hr] = in ? qpos[i] : INT_MIN;
            m2[mt][hr] = read ? m[srow0 + i] * LOG2E : -INFINITY;
            lacc[mt][2 * hr] = read ? l[srow0 + i] : 0.0f;
            lacc[mt][2 * hr + 1] = 0.0f;
            MMA_UNROLL
            for (int d = 0; d < S::DT; d++) {
                oacc[mt][d][2 * hr] = read ? ob[(size_t)i * ostride + 8 * d + 2 * t] : 0.0f;
                oacc[mt][d][2 * hr + 1] = read ? ob[(size_t)i * ostride + 8 * d + 2 * t + 1] : 0.0f;
            }
            qlo = imin(qlo, qp[mt][hr]);
            qhi = imax(qhi, qp[mt][hr]);
        }
    }
    block_min_max(&qlo, &qhi, kp);  // the block's query positions (kp is free until the first tile)

    const float *kvb = kv + (size_t)b * Sk * ldkv + (size_t)grp * HD, *kh = kvb + koff, *vh = kvb + voff;
    TileStream<true, S::PREFETCH> keys(tlo, thi, kpos, Sk, qlo, qhi);
    bool all;  // every row sees every key of the tile
    while (keys.next([&](int j0) { fetch_key_tile<HD, VEC>(kf, vf, kpf, kh, vh, (size_t)ldkv, kpos, j0, Sk); },
                     [&](int j0) { fill_key_tile<HD, VEC, S::PREFETCH>(ks, vs, kp, kf, vf, kpf, kh, vh, (size_t)ldkv,
                                                                       kpos, j0, Sk); },
                     &all) >= 0) {
        float sacc[MT][S::NT][4];
        MMA_UNROLL
        for (int mt = 0; mt < MT; mt++) zero_tiles<S::NT>(sacc[mt]);
        scores<HD, MT>(sacc, qa, ks);

        if (!all) mask_tile<true, MT>(sacc, kp, qp);

        // The online softmax, per row (hr: g or g + 8): the tile's maximum score over
        // the quad, the new running maximum in log2 units, the rescale of (o, l), and
        // P = 2^(s sl2 - m) (one fma and one exp2 a score), rounded to bf16 and
        // packed as the A operands of P V; l then adds the rounded values (what P V
        // multiplies) by P times ones on the tensor cores, 8 mma a tile where the
        // sum took 2 integer and 2 float operations a pair of scores and 4 shuffles
        // a row. A masked score (-inf) gives 2^-inf = 0. A row that has seen no key
        // yet keeps m = -inf; its terms are taken against 0 instead (they are all
        // -inf), so that no -inf - -inf appears.
        u32 pa[MT][BN / 16][4];
        MMA_UNROLL
        for (int mt = 0; mt < MT; mt++)
            MMA_UNROLL
            for (int hr = 0; hr < 2; hr++) {
                float mx = -INFINITY;
                MMA_UNROLL
                for (int n = 0; n < S::NT; n++) mx = fmaxf(mx, fmaxf(sacc[mt][n][2 * hr], sacc[mt][n][2 * hr + 1]));
                mx = mma::quad_max(mx);
                const float mold = m2[mt][hr], mnew = fmaxf(mold, mx * sl2);  // sl2 > 0: max(s) sl2 = max(s sl2)
                const float msub = mnew == -INFINITY ? 0.0f : mnew;
                const float alpha = mnew == mold ? 1.0f : mma::exp2_approx(mold - msub);
                MMA_UNROLL
                for (int c = 0; c < BN / 16; c++)
                    MMA_UNROLL
                    for (int half = 0; half < 2; half++) {  // n-tiles 2c and 2c + 1: registers hr and 2 + hr
                        const float *sv = sacc[mt][2 * c + half] + 2 * hr;
                        pa[mt][c][2 * half + hr] = mma::pack_bf16(mma::exp2_approx(fmaf(sv[0], sl2, -msub)),
                                                                  mma::exp2_approx(fmaf(sv[1], sl2, -msub)));
                    }
                lacc[mt][2 * hr] *= alpha;
                m2[mt][hr] = mnew;
                MMA_UNROLL
                for (int d = 0; d < S::DT; d++) {
                    oacc[mt][d][2 * hr] *= alpha;
                    oacc[mt][d][2 * hr + 1] *= alpha;
                }
            }
        accumulate_packed<HD, MT>(oacc, pa, vs);  // o += P V
        MMA_UNROLL
        for (int mt = 0; mt < MT; mt++)
            MMA_UNROLL
            for (int c = 0; c < BN / 16; c++) mma::m16n8k16(lacc[mt], pa[mt][c], mma::BF16X2_ONES, mma::BF16X2_ONES);
    }

    MMA_UNROLL
    for (int mt = 0; mt < MT; mt++)
        MMA_UNROLL
        for (int hr = 0; hr < 2; hr++) {
            const int i = i0 + 16 * (MT * warp + mt) + g + 8 * hr;
            if (i >= Sq) continue;
            const float lv = lacc[mt][2 * hr], mv = m2[mt][hr] / LOG2E;
            const float inv = !WHOLE ? 1.0f : lv > 0.0f ? 1.0f / lv : 0.0f;  // a row that saw no key: o = 0
            MMA_UNROLL
            for (int d = 0; d < S::DT; d++) {
                ob[(size_t)i * ostride + 8 * d + 2 * t] = WHOLE ? oacc[mt][d][2 * hr] * inv : oacc[mt][d][2 * hr];
                ob[(size_t)i * ostride + 8 * d + 2 * t + 1] =
                    WHOLE ? oacc[mt][d][2 * hr + 1] * inv : oacc[mt][d][2 * hr + 1];
            }
            if (t == 0 && WHOLE) m[srow0 + i] = lv > 0.0f ? mv + logf(lv) : -INFINITY;  // lse
            if (t == 0 && !WHOLE) {
                m[srow0 + i] = mv;
                l[srow0 + i] = lv;
            }
        }
}

// P and dS of one (query, key) pair from its raw score s, dP = dO . v, the query's
// lse in log2 units (finite: see finite_lse2) and rowdot x scale (rds, formed once
// a row): P = 2^(s sl2 - lse2) (one fma and one exp2), dS = P (dP - rowdot) scale =
// P (dP scale - rds) (an fma and a multiply; the softmax's backward, ops.h). A
// masked score (-inf) gives P = 0 and dS = 0.
__device__ __forceinline__ void pair_grad(float s, float dp, float sl2, float lse2, float rds, float scale, float *p,
                                          float *ds) {
    *p = mma::exp2_approx(fmaf(s, sl2, -lse2));
    *ds = *p * fmaf(dp, scale, -rds);
}

// A row's lse in log2 units for pair_grad: a row that saw no key (lse = -inf) has
// every score masked, and -inf - -inf would be NaN where 2^-inf = 0 is meant.
__device__ __forceinline__ float finite_lse2(float lse) { return lse == -INFINITY ? 0.0f : lse * LOG2E; }

// ---- backward, dQ += dS K over one block of keys ----
// grid (ceil(Sq / 64), B * H); dq (B*Sq, ldq) at column h*HD. A warp owns 16 query rows.
// add: dq += the block's sum (a ring's blocks); else dq = it (one block: no zeroing
// pass over dq first).
template <int HD, bool VEC>
__global__ void __launch_bounds__(THREADS)
    k_backward_dq(float *dq, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff, const float *dout,
                  const float *lse, const float *rowdot, const int *qpos, const int *kpos, int Sq, int Sk, int H,
                  int KV, float scale, bool add) {
    typedef Shape<HD> S;
    constexpr int LD = S::LD;
    FLASH_SMEM(smem);
    bf16 *ks = (bf16 *)smem, *vs = ks + BN * LD;  // (64, HD) each; Q and dO staged there first
    int *kp = (int *)(smem + 2 * S::tile);        // (64) the key tile's positions
    int *tlo = kp + BN, *thi = tlo + CHUNK;       // (CHUNK) each: key tiles' position bounds
    float *kf = (float *)(smem + S::fwd_at_stage), *vf = kf + BN * HD;  // (64, HD) each, fetched ahead
    int *kpf = (int *)(vf + BN * HD);                                   // (64)

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * BN;
    const int b = blockIdx.y / H, h = blockIdx.y % H, grp = h / (H / KV);
    const size_t srow0 = ((size_t)b * H + h) * Sq, ostride = (size_t)H * HD;
    const float sl2 = scale * LOG2E;

    stage_rows<HD, BN, VEC>(ks, q + (size_t)b * Sq * ldq + (size_t)h * HD, (size_t)ldq, i0, Sq);
    stage_rows<HD, BN, VEC>(vs, dout + (size_t)b * Sq * ostride + (size_t)h * HD, ostride, i0, Sq);
    __syncthreads();
    u32 qa[1][S::KS][4], da[1][S::KS][4];  // the warp's Q and dO rows as A operands
    load_a<HD>(qa[0], ks, 16 * warp);
    load_a<HD>(da[0], vs, 16 * warp);
    float lse2[2], rd[2], dqacc[1][S::DT][4];
    int qp[2];
    int qlo = INT_MAX, qhi = INT_MIN;
    MMA_UNROLL
    for (int hr = 0; hr < 2; hr++) {
        const int i = i0 + 16 * warp + g + 8 * hr;
        const bool in = i < Sq;
        qp[hr] = in ? qpos[i] : INT_MIN;  // a row past Sq sees no key
        lse2[hr] = in ? finite_lse2(lse[srow0 + i]) : 0.0f;
        rd[hr] = in ? rowdot[srow0 + i] * scale : 0.0f;  // rowdot x scale (pair_grad)
        qlo = imin(qlo, qp[hr]);
        qhi = imax(qhi, qp[hr]);
    }
    zero_tiles<S::DT>(dqacc[0]);
    block_min_max(&qlo, &qhi, kp);

    const float *kvb = kv + (size_t)b * Sk * ldkv + (size_t)grp * HD, *kh = kvb + koff, *vh = kvb + voff;
    TileStream<true, S::PREFETCH> keys(tlo, thi, kpos, Sk, qlo, qhi);
    bool all;
    while (keys.next([&](int j0) { fetch_key_tile<HD, VEC>(kf, vf, kpf, kh, vh, (size_t)ldkv, kpos, j0, Sk); },
                     [&](int j0) { fill_key_tile<HD, VEC, S::PREFETCH>(ks, vs, kp, kf, vf, kpf, kh, vh, (size_t)ldkv,
                                                                       kpos, j0, Sk); },
                     &all) >= 0) {
        float sacc[1][S::NT][4], dpacc[1][S::NT][4];
        zero_tiles<S::NT>(sacc[0]);
        zero_tiles<S::NT>(dpacc[0]);
        scores<HD, 1>(sacc, qa, ks);   // S = Q K^T
        scores<HD, 1>(dpacc, da, vs);  // dP = dO V^T
        if (!all) mask_tile<true, 1>(sacc, kp, &qp);
        MMA_UNROLL
        for (int n = 0; n < S::NT; n++)
            MMA_UNROLL
            for (int e = 0; e < 4; e++) {
                const int hr = e / 2;
                float p;
                pair_grad(sacc[0][n][e], dpacc[0][n][e], sl2, lse2[hr], rd[hr], scale, &p, &sacc[0][n][e]);
            }
        accumulate<HD, 1>(dqacc, sacc, ks);  // dQ += dS K
    }

    float *dqb = dq + (size_t)b * Sq * ldq + (size_t)h * HD;
    MMA_UNROLL
    for (int hr = 0; hr < 2; hr++) {
        const int i = i0 + 16 * warp + g + 8 * hr;
        if (i >= Sq) continue;
        MMA_UNROLL
        for (int d = 0; d < S::DT; d++) {
            float *o = dqb + (size_t)i * ldq + 8 * d + 2 * t;
            o[0] = add ? o[0] + dqacc[0][d][2 * hr] : dqacc[0][d][2 * hr];
            o[1] = add ? o[1] + dqacc[0][d][2 * hr + 1] : dqacc[0][d][2 * hr + 1];
        }
    }
}

// ---- backward, dK += dS^T Q and dV += P^T dO over every query head of the group ----
// grid (ceil(Sk / 64), B * KV); dkv (B*Sk, ldkv) at columns koff + g*HD and voff +
// g*HD. A warp owns 16 key rows; the products run transposed (keys as rows):
// S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q. add: as k_backward_dq.
template <int HD, bool VEC>
__global__ void __launch_bounds__(THREADS)
    k_backward_dkv(float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                   const float *dout, const float *lse, const float *rowdot, const int *qpos, const int *kpos, int Sq,
                   int Sk, int H, int KV, float scale, bool add) {
    typedef Shape<HD> S;
    constexpr int LD = S::LD;
    constexpr bool KV_REGS = HD <= 64;  // K and V as A operands in registers; at 128 read per tile
    FLASH_SMEM(smem);
    bf16 *ks = (bf16 *)smem, *vs = ks + BN * LD, *qs = vs + BN * LD, *dos = qs + BN * LD;  // (64, HD) each
    float *lse2_s = (float *)(smem + 4 * S::tile), *rd_s = lse2_s + BN;  // (64) each, of the query tile: lse2, rowdot x scale
    int *qp_s = (int *)(rd_s + BN);                                      // (64)
    int *tlo = qp_s + BN, *thi = tlo + CHUNK;  // (CHUNK) each: query tiles' position bounds
    float *qf = (float *)(smem + S::dkv_at_stage), *dof = qf + BN * HD;  // (64, HD) each, fetched ahead
    float *lsef = dof + BN * HD, *rdf = lsef + BN;                       // (64) each
    int *qpf = (int *)(rdf + BN);                                        // (64)

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int j0 = (int)blockIdx.x * BN, b = blockIdx.y / KV, grp = blockIdx.y % KV, group = H / KV;
    const size_t ostride = (size_t)H * HD;
    const float sl2 = scale * LOG2E;
    const float *kvb = kv + (size_t)b * Sk * ldkv + (size_t)grp * HD;

    stage_rows<HD, BN, VEC>(ks, kvb + koff, (size_t)ldkv, j0, Sk);
    stage_rows<HD, BN, VEC>(vs, kvb + voff, (size_t)ldkv, j0, Sk);
    stage_pos(qp_s, kpos, j0, Sk, INT_MAX);  // the block's key positions, for the bounds (qp_s is free until then)
    __syncthreads();
    int klo, khi;
    warp_min_max(qp_s[lane], qp_s[lane + 32], &klo, &khi);
    int kpr[2];  // the positions of the lane's two key rows
    MMA_UNROLL
    for (int hr = 0; hr < 2; hr++) kpr[hr] = qp_s[16 * warp + g + 8 * hr];
    u32 ka[1][S::KS][4], va[1][S::KS][4];
    if (KV_REGS) {
        load_a<HD>(ka[0], ks, 16 * warp);
        load_a<HD>(va[0], vs, 16 * warp);
    }
    float dk[1][S::DT][4], dv[1][S::DT][4];
    zero_tiles<S::DT>(dk[0]);
    zero_tiles<S::DT>(dv[0]);

    for (int h = grp * group; h < (grp + 1) * group; h++) {
        const size_t srow0 = ((size_t)b * H + h) * Sq;
        const float *qh = q + (size_t)b * Sq * ldq + (size_t)h * HD, *doh = dout + (size_t)b * Sq * ostride + (size_t)h * HD;
        const float *lseh = lse + srow0, *rdh = rowdot + srow0;
        // The query tiles: their Q and dO rows, lse * log2(e) and rowdot (0 past Sq),
        // positions (INT_MIN past Sq: no key is seen), fetched ahead when PREFETCH.
        auto fetch = [&](int i0) {
            fetch_rows<HD, VEC>(qf, qh, (size_t)ldq, i0, Sq);
            fetch_rows<HD, VEC>(dof, doh, ostride, i0, Sq);
            fetch_row_values(lsef, lseh, i0, Sq);
            fetch_row_values(rdf, rdh, i0, Sq);
            fetch_row_values(qpf, qpos, i0, Sq);
        };
        auto fill = [&](int i0) {
            if (S::PREFETCH) {
                stage_fetched<HD>(qs, qf);  // the staging's rows, rounded
                stage_fetched<HD>(dos, dof);
            } else {
                stage_rows<HD, BN, VEC>(qs, qh, (size_t)ldq, i0, Sq);
                stage_rows<HD, BN, VEC>(dos, doh, ostride, i0, Sq);
            }
            const int r = threadIdx.x;  // a thread per row (BN <= THREADS)
            if (r < BN) {
                const bool in = i0 + r < Sq;
                lse2_s[r] = in ? finite_lse2(S::PREFETCH ? lsef[r] : lseh[i0 + r]) : 0.0f;
                rd_s[r] = in ? (S::PREFETCH ? rdf[r] : rdh[i0 + r]) * scale : 0.0f;  // rowdot x scale
                qp_s[r] = in ? (S::PREFETCH ? qpf[r] : qpos[i0 + r]) : INT_MIN;
            }
        };
        // (the first chunk's barrier also ends every warp's use of qp_s for the key bounds)
        TileStream<false, S::PREFETCH> queries(tlo, thi, qpos, Sq, klo, khi);
        bool all;
        while (queries.next(fetch, fill, &all) >= 0) {
            if (!KV_REGS) {
                load_a<HD>(ka[0], ks, 16 * warp);
                load_a<HD>(va[0], vs, 16 * warp);
            }

            float st[1][S::NT][4], dpt[1][S::NT][4];  // (16 keys, 64 queries) S^T and dP^T
            zero_tiles<S::NT>(st[0]);
            zero_tiles<S::NT>(dpt[0]);
            scores<HD, 1>(st, ka, qs);    // S^T = K Q^T
            scores<HD, 1>(dpt, va, dos);  // dP^T = V dO^T
            if (!all) mask_tile<false, 1>(st, qp_s, &kpr);
            MMA_UNROLL
            for (int n = 0; n < S::NT; n++) {
                // the lane's two query columns 8n + 2t and 8n + 2t + 1: their lse2 and rowdot x scale
                const float2 l2 = *reinterpret_cast<const float2 *>(lse2_s + 8 * n + 2 * t);
                const float2 r2 = *reinterpret_cast<const float2 *>(rd_s + 8 * n + 2 * t);
                MMA_UNROLL
                for (int e = 0; e < 4; e++)
                    pair_grad(st[0][n][e], dpt[0][n][e], sl2, e % 2 ? l2.y : l2.x, e % 2 ? r2.y : r2.x, scale,
                              &st[0][n][e], &dpt[0][n][e]);
            }
            accumulate<HD, 1>(dv, st, dos);  // dV += P^T dO
            accumulate<HD, 1>(dk, dpt, qs);  // dK += dS^T Q
        }
    }

    float *dkb = dkv + (size_t)b * Sk * ldkv + koff + (size_t)grp * HD;
    float *dvb = dkv + (size_t)b * Sk * ldkv + voff + (size_t)grp * HD;
    MMA_UNROLL
    for (int hr = 0; hr < 2; hr++) {
        const int j = j0 + 16 * warp + g + 8 * hr;
        if (j >= Sk) continue;
        MMA_UNROLL
        for (int d = 0; d < S::DT; d++)
            MMA_UNROLL
            for (int e = 0; e < 2; e++) {
                float *ok = dkb + (size_t)j * ldkv + 8 * d + 2 * t + e, *ov = dvb + (size_t)j * ldkv + 8 * d + 2 * t + e;
                *ok = add ? *ok + dk[0][d][2 * hr + e] : dk[0][d][2 * hr + e];
                *ov = add ? *ov + dv[0][d][2 * hr + e] : dv[0][d][2 * hr + e];
            }
    }
}

// ---- launchers: ops.h's attention_block_forward/backward arguments ----
// The caller checks head_dim_ok(hd) and that B * H fits a grid's y (65535). VEC when
// every row start the kernels read is 16-byte aligned.
static inline bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

template <int HD, bool VEC, bool WHOLE>
void forward_hd(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV) {
    const dim3 grid((unsigned)((Sq + Shape<HD>::BM - 1) / Shape<HD>::BM), (unsigned)(B * H));
    auto kernel = &k_forward<HD, VEC, WHOLE>;  // (the macro's argument: no comma)
    FLASH_LAUNCH(kernel, grid, Shape<HD>::fwd, o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, Sq,
                 Sk, H, KV, 1.0f / sqrtf((float)HD));
}

template <int HD, bool VEC>
void backward_hd(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff, int voff,
                 const float *dout, const float *lse, const float *rowdot, const int *qpos, const int *kpos, int B,
                 int Sq, int Sk, int H, int KV, bool add) {
    const float scale = 1.0f / sqrtf((float)HD);
    const dim3 gq((unsigned)((Sq + BN - 1) / BN), (unsigned)(B * H)), gk((unsigned)((Sk + BN - 1) / BN), (unsigned)(B * KV));
    auto kdq = &k_backward_dq<HD, VEC>;
    auto kdkv = &k_backward_dkv<HD, VEC>;
    FLASH_LAUNCH(kdq, gq, Shape<HD>::fwd, dq, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot,
                 qpos, kpos, Sq, Sk, H, KV, scale, add);
    FLASH_LAUNCH(kdkv, gk, Shape<HD>::dkv, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot,
                 qpos, kpos, Sq, Sk, H, KV, scale, add);
}

// Every row start 16-byte aligned: the base pointers, the leading dimensions and
// the column offsets (head dimensions are multiples of 4).
static inline bool rows_aligned(const float *q, int ldq, const float *kv, int ldkv, int koff, int voff) {
    return aligned16(q) && aligned16(kv) && ldq % 4 == 0 && ldkv % 4 == 0 && koff % 4 == 0 && voff % 4 == 0;
}

template <bool WHOLE>
static inline void forward_any(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv,
                               int koff, int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H,
                               int KV, int hd) {
    const bool vec = rows_aligned(q, ldq, kv, ldkv, koff, voff);
#define FLASH_MMA_FWD(HD)                                                                                          \
    (vec ? forward_hd<HD, true, WHOLE>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV)       \
         : forward_hd<HD, false, WHOLE>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV))
    switch (hd) {
    case 32: FLASH_MMA_FWD(32); break;
    case 64: FLASH_MMA_FWD(64); break;
    default: FLASH_MMA_FWD(128); break;
    }
#undef FLASH_MMA_FWD
}

// One block of keys folded into the running (o, m, l) (attention_block_forward).
static inline void forward(float *o, float *m, float *l, const float *q, int ldq, const float *kv, int ldkv, int koff,
                           int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd) {
    forward_any<false>(o, m, l, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV, hd);
}

// The whole attention of queries over all their keys in one kernel: out normalised
// and lse (B*H*Sq), the bits of attention_block_init + forward + finish.
static inline void forward_whole(float *out, float *lse, const float *q, int ldq, const float *kv, int ldkv, int koff,
                                 int voff, const int *qpos, const int *kpos, int B, int Sq, int Sk, int H, int KV,
                                 int hd) {
    forward_any<true>(out, lse, nullptr, q, ldq, kv, ldkv, koff, voff, qpos, kpos, B, Sq, Sk, H, KV, hd);
}

// dout's rows (H * hd floats apart) are aligned with q's whenever its base is.
// add: dq and dkv += the block's gradients (attention_block_backward); else the
// kernels write them (attention_backward: one block, every value of dq's and dkv's
// columns written, by exactly one thread: the zeroing pass before is not needed).
static inline void backward(float *dq, float *dkv, const float *q, int ldq, const float *kv, int ldkv, int koff,
                            int voff, const float *dout, const float *lse, const float *rowdot, const int *qpos,
                            const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd, bool add) {
    const bool vec = rows_aligned(q, ldq, kv, ldkv, koff, voff) && aligned16(dout);
#define FLASH_MMA_BWD(HD)                                                                                          \
    (vec ? backward_hd<HD, true>(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq, Sk, \
                                 H, KV, add)                                                                      \
         : backward_hd<HD, false>(dq, dkv, q, ldq, kv, ldkv, koff, voff, dout, lse, rowdot, qpos, kpos, B, Sq,    \
                                  Sk, H, KV, add))
    switch (hd) {
    case 32: FLASH_MMA_BWD(32); break;
    case 64: FLASH_MMA_BWD(64); break;
    default: FLASH_MMA_BWD(128); break;
    }
#undef FLASH_MMA_BWD
}

}  // namespace flash_mma

#endif
