// tests/emu/cuda_emu.h — the small part of CUDA that src/ops/flash_attention.cuh
// uses, run on the host, so the tensor-core attention kernels are tested on
// machines without a GPU (tests/emu/test_flash_emu.cpp, in CI).
//
// Each CUDA thread of a block is a host thread; __syncthreads and __syncwarp are
// barriers over the block's and the warp's threads; dynamic shared memory is one
// buffer per block, filled with NaN bytes before the launch so a read of what no
// thread wrote shows up. Blocks run one after another.
//
// WMMA fragments (nvcuda::wmma, m16n16k16, bf16 operands, fp32 accumulators) are
// per-thread objects in CUDA whose element layout is unspecified; here every
// thread holds the whole 16x16 tile, computes what the warp computes, and only the
// warp's lane 0 stores it (a lane that reads the stored tile before __syncwarp
// reads stale bytes, as on a GPU). The documented constraints are checked: a
// pointer 256-bit aligned, ldm a multiple of 16 bytes, all 32 lanes of the warp
// calling the collective operation.
//
// What this cannot check: register pressure, shared-memory bank conflicts, speed,
// and anything the hardware does differently from the documentation. The same
// kernels compiled by nvcc are compared with the CPU ops on a GPU (tests/gpu/gpu_ops.c).
#ifndef FEMTOTRON_CUDA_EMU_H
#define FEMTOTRON_CUDA_EMU_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

#define CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

static inline void emu_fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    abort();
}

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Per thread: its index and its block's; per launch: the shapes.
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

// The running block's barriers and shared memory.
struct EmuBlock {
    pthread_barrier_t all;                 // __syncthreads
    std::vector<pthread_barrier_t> warps;  // __syncwarp, one per warp
    unsigned char *smem = nullptr;
    size_t smem_bytes = 0;
};
static EmuBlock *emu_block;

static inline void __syncthreads() { pthread_barrier_wait(&emu_block->all); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu_fail("__syncwarp with a partial mask is not emulated");
    pthread_barrier_wait(&emu_block->warps[threadIdx.x / 32]);
}
static inline unsigned char *emu_dynamic_smem() { return emu_block->smem; }

// ---- bf16 (cuda_bf16.h): round to nearest, ties to even; NaN stays NaN ----
struct __nv_bfloat16 {
    uint16_t bits;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) r.bits = (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
    else r.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- WMMA, m16n16k16 only ----
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "only m16n16k16 is emulated");
    T e[16 * 16];  // the whole tile, row-major: e[r * 16 + c]
};

// Every lane of the warp calls a collective operation; a call from a diverged warp
// (not all 32 lanes) deadlocks a GPU or corrupts the tile, so it is fatal here. The
// check is a warp barrier on entry: a missing lane hangs the barrier, which the
// test's watchdog reports.
static inline void emu_collective(const void *p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32) emu_fail("wmma pointer not 256-bit aligned");
    if ((ldm * elem) % 16) emu_fail("wmma ldm not a multiple of 16 bytes");
    __syncwarp();
}
static inline bool emu_lane0() { return threadIdx.x % 32 == 0; }

template <class L>
static inline size_t emu_at(int r, int c, unsigned ldm) {  // element (r, c) of a tile in memory
    return std::is_same<L, row_major>::value ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}

template <class Use, class L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p,
                                    unsigned ldm) {
    emu_collective(p, ldm, 2);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.e[r * 16 + c] = p[emu_at<L>(r, c, ldm)];
    __syncwarp();
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                    layout_t layout) {
    emu_collective(p, ldm, 4);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.e[r * 16 + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    __syncwarp();
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t layout) {
    emu_collective(p, ldm, 4);
    if (emu_lane0())
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.e[r * 16 + c];
}
template <class Use, class T, class L>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
    for (int i = 0; i < 256; i++) f.e[i] = v;
}
// d = a b + c: the products of bf16 values are exact in fp32, summed in fp32 (the
// tensor core's order of the 16 terms is unspecified; here it is k = 0..15).
template <class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    __syncwarp();
    float out[256];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.e[r * 16 + n];
            for (int k = 0; k < 16; k++) s += __bfloat162float(a.e[r * 16 + k]) * __bfloat162float(b.e[k * 16 + n]);
            out[r * 16 + n] = s;
        }
    memcpy(d.e, out, sizeof out);
}
}  // namespace wmma
}  // namespace nvcuda

// kernel<<<grid, block, smem>>>(args...): block by block, each block's threads
// started together and joined; 1-D blocks of whole warps only.
template <class... P, class... A>
static void emu_launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(P...), A... args) {
    if (block.y != 1 || block.z != 1 || block.x % 32 || block.x == 0) emu_fail("blocks must be 1-D whole warps");
    if (smem > 227 * 1024) emu_fail("dynamic shared memory above the 227 KiB an sm_90 block can have");
    gridDim = grid;
    blockDim = block;
    std::vector<unsigned char> mem(smem + 128);
    unsigned char *base = mem.data() + (128 - (uintptr_t)mem.data() % 128) % 128;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                EmuBlock blk;
                pthread_barrier_init(&blk.all, nullptr, block.x);
                blk.warps.resize(block.x / 32);
                for (auto &w : blk.warps) pthread_barrier_init(&w, nullptr, 32);
                memset(base, 0xff, smem);  // NaN floats: unwritten shared memory is visible
                blk.smem = base;
                blk.smem_bytes = smem;
                emu_block = &blk;
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < block.x; t++)
                    threads.emplace_back([=]() {
                        threadIdx = dim3(t, 0, 0);
                        blockIdx = dim3(bx, by, bz);
                        kernel(args...);
                    });
                for (auto &th : threads) th.join();
                pthread_barrier_destroy(&blk.all);
                for (auto &w : blk.warps) pthread_barrier_destroy(&w);
            }
    emu_block = nullptr;
}

#endif
