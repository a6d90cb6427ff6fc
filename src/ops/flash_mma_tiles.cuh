// ops/flash_mma_tiles.cuh — the pieces ops/flash_mma.cuh's kernels share: the tile
// shapes and shared-memory layout per head dimension, staging fp32 rows as bf16
// tiles (from global memory, or from a cp.async staging area), the position bounds
// of the tiles a block visits, and the stream of visible tiles with the next one
// fetched ahead. The kernels: ops/flash_mma_forward.cuh and
// ops/flash_mma_backward.cuh; the design (tiles, masks, loads): ops/flash_mma.cuh.
#ifndef FEMTOTRON_FLASH_MMA_TILES_CUH
#define FEMTOTRON_FLASH_MMA_TILES_CUH

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/flash_launch.cuh"  // FLASH_SMEM, FLASH_LAUNCH, FLASH_THREADS
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
constexpr int THREADS = FLASH_THREADS;  // 4 warps
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

}  // namespace flash_mma

#endif
