// ops/mma_bf16.cuh — the warp-level tensor-core instructions the register-tiled
// attention (ops/flash_mma.cuh) is written in: mma.sync m16n8k16 with bf16 operands
// and fp32 accumulators, ldmatrix (x4, plain and transposed) from shared memory,
// bf16 pairs packed into one 32-bit register, and the asynchronous copies (cp.async)
// that fetch the next tile while the current one is computed on.
//
// Unlike WMMA's opaque fragments, these put each element in a documented lane and
// register (PTX ISA, "Matrix Fragments for mma.m16n8k16"), which is what lets a
// kernel keep a score tile in registers, run the softmax on it there and feed it
// back as the next product's operand without a trip through shared memory. With
// g = lane / 4 and t = lane % 4:
//   A (16x16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..),
//                         a[3] = (g+8, 2t+8..);
//   B (16x8, k x n):      b[0] = (2t..2t+1, g), b[1] = (2t+8..2t+9, g);
//   C, D (16x8, fp32):    c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1).
// A register's lower 16 bits hold the first (lower-index) element of its pair. So
// the accumulators of two adjacent 8-column tiles, rounded and packed, are exactly
// the A operand of the 16 columns they cover (the FlashAttention-2 trick).
//
// ldmatrix x4: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of
// matrix i; a lane's register i gets that matrix's (g, 2t..2t+1), or with .trans
// its (2t, g) and (2t+1, g). Under tests/emu/cuda_emu.h (CUDA_EMU) the same calls
// run on the host, each lane exchanging its part with the warp.
#ifndef FEMTOTRON_MMA_BF16_CUH
#define FEMTOTRON_MMA_BF16_CUH

#include <stdint.h>

#ifndef CUDA_EMU
#include <cuda_bf16.h>
#endif

namespace mma {

// d += a b on the tensor cores (d is both C and D).
__device__ __forceinline__ void m16n8k16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifndef CUDA_EMU
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    const uint32_t b[2] = {b0, b1};
    emu_mma_m16n8k16(d, a, b, d);
#endif
}

// Four 8x8 bf16 matrices from shared memory; `row` is this lane's row address.
// TRANS: each matrix transposed on the way (ldmatrix .trans).
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4_as(uint32_t r[4], const void *row) {
#ifndef CUDA_EMU
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
#define MMA_LDSM_X4(TRANS_SUFFIX)                                                                    \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4" TRANS_SUFFIX ".shared.b16 {%0,%1,%2,%3}, [%4];\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                    \
                 : "r"(addr))
    if (TRANS) MMA_LDSM_X4(".trans");
    else MMA_LDSM_X4("");
#undef MMA_LDSM_X4
#else
    emu_ldmatrix_x4(r, row, TRANS);
#endif
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *row) { ldsm_x4_as<false>(r, row); }
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *row) { ldsm_x4_as<true>(r, row); }

// (lo, hi) rounded to bf16 (nearest, ties to even), lo in the lower 16 bits.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
#ifndef CUDA_EMU
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) at the lower address
    return *reinterpret_cast<uint32_t *>(&v);
#else
    const __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
    return (uint32_t)l.bits | (uint32_t)h.bits << 16;
#endif
}

// Two bf16 ones packed: a B operand of ones, with which an mma sums the rows of A.
constexpr uint32_t BF16X2_ONES = 0x3f803f80u;

// 2^x by the multi-function unit's one instruction (ex2.approx.ftz.f32: relative
// error at most 2^-22, subnormal inputs and results flushed to 0, 2^-inf = 0).
// exp2f is that instruction wrapped in a test, a halving and a squaring for
// results below 2^-126, where the softmax's terms are 0 in bf16 anyway: eight
// instructions where one does, on every score. The emulation computes exp2f and
// flushes as the hardware does.
__device__ __forceinline__ float exp2_approx(float x) {
#ifndef CUDA_EMU
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#else
    if (fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
    const float y = exp2f(x);
    return fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
#endif
}

// Four floats from a 16-byte aligned address in one 128-bit load (the emulation
// checks the alignment a GPU would fault on).
__device__ __forceinline__ float4 load_f4(const float *p) {
#ifdef CUDA_EMU
    if ((uintptr_t)p % 16) emu_fail("a 128-bit load from an address not 16-byte aligned");
#endif
    return *reinterpret_cast<const float4 *>(p);
}

// Asynchronous copies from global to shared memory (cp.async, sm_80 and later): the
// copy runs while the thread goes on, so a block can fetch its next tile while it
// computes on the current one. `bytes` is 16 (cp.async.cg: both addresses 16-byte
// aligned; through L2 only, the data is streamed) or 4 (cp.async.ca); where `valid` is
// false nothing is read and the destination is zero-filled (src-size 0), but `src`
// must still be a valid address. A thread's copies are complete, and visible to it,
// after its copy_async_wait(); other threads see them after a barrier that follows
// it. Under the emulation each copy lands only at the wait, so a read that does not
// wait reads the poisoned shared memory.
template <int BYTES>
__device__ __forceinline__ void copy_async(void *smem_dst, const void *src, bool valid) {
    static_assert(BYTES == 16 || BYTES == 4, "cp.async copies 16 or 4 bytes here");
#ifndef CUDA_EMU
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
    const int src_size = valid ? BYTES : 0;
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_size));
#else
    emu_copy_async(smem_dst, src, BYTES, valid);
#endif
}
__device__ __forceinline__ void copy_async_wait() {
#ifndef CUDA_EMU
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
    emu_copy_async_wait();
#endif
}

// The maximum over the four lanes of a quad (the lanes that hold one row of an
// accumulator tile), every lane getting it: a butterfly of two shuffles. (A row's
// sum is an mma of the tile against ones: BF16X2_ONES.)
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

}  // namespace mma

#endif
