// tests/emu/cuda_emu_device.h — what the kernels compute with: bf16 (cuda_bf16.h), WMMA
// fragments (mma.h), cp.async, and the per-lane warp collectives (shuffles,
// mma.sync, ldmatrix) in the PTX ISA's documented layouts.
// A part of tests/emu/cuda_emu.h, which includes its parts in order (each reads
// what the ones before it declare); include cuda_emu.h, not this.
#ifndef FEMTOTRON_CUDA_EMU_DEVICE_H
#define FEMTOTRON_CUDA_EMU_DEVICE_H

// ---------------------------------------------------------------- bf16 (cuda_bf16.h)
// Round to nearest, ties to even; NaN stays NaN.
struct __nv_bfloat16 {
    uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) r.bits = (uint16_t)((u >> 16) | 0x40u);
    else r.bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---------------------------------------------------------------- WMMA (mma.h)
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

// A collective operation: counted for every lane (run_block checks that the lanes
// of a warp made the same number of calls); only lane 0 does the work, since all
// lanes pass the same arguments and hold the same tiles, and only lane 0's tiles
// are ever stored.
inline bool lane0_of_collective() {
    emu::collective_calls[threadIdx.x]++;
    return threadIdx.x % 32 == 0;
}
inline bool collective(const void *p, unsigned ldm, size_t elem) {
    if (!lane0_of_collective()) return false;
    if ((uintptr_t)p % 32) emu_fail("wmma pointer not 256-bit aligned");
    if ((ldm * elem) % 16) emu_fail("wmma ldm not a multiple of 16 bytes");
    return true;
}
template <class L>
inline size_t at(int r, int c, unsigned ldm) {
    return std::is_same<L, row_major>::value ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}

template <class Use, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ldm) {
    if (!collective(p, ldm, 2)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.e[r * 16 + c] = p[at<L>(r, c, ldm)];
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                             layout_t layout) {
    if (!collective(p, ldm, 4)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.e[r * 16 + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout) {
    if (!collective(p, ldm, 4)) return;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.e[r * 16 + c];
}
template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, T v) {
    for (int i = 0; i < 256; i++) f.e[i] = v;
}
// d = a b + c: products of bf16 values are exact in fp32, summed in fp32 (the
// tensor core's order of the 16 terms is unspecified; here k = 0..15).
template <class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    if (!lane0_of_collective()) return;
    float bt[256], out[256];  // b transposed, for a row-by-row inner loop; out: d may be c
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++) bt[n * 16 + k] = __bfloat162float(b.e[k * 16 + n]);
    for (int r = 0; r < 16; r++) {
        float ar[16];
        for (int k = 0; k < 16; k++) ar[k] = __bfloat162float(a.e[r * 16 + k]);
        for (int n = 0; n < 16; n++) {
            float s = c.e[r * 16 + n];
            for (int k = 0; k < 16; k++) s += ar[k] * bt[n * 16 + k];
            out[r * 16 + n] = s;
        }
    }
    memcpy(d.e, out, sizeof out);
}
}  // namespace wmma
}  // namespace nvcuda

// ---------------------------------------------------------------- cp.async
// cp.async(.cg 16 / .ca 4 bytes).shared.global with src-size `valid ? bytes : 0`:
// the source is read now, the shared memory written only at the thread's wait
// (cp.async.wait_all), so a kernel that reads before waiting, or before the barrier
// after every thread's wait, reads stale or poisoned (NaN) shared memory.
inline void emu_copy_async(void *dst, const void *src, unsigned bytes, bool valid) {
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes) emu_fail("cp.async address not aligned to its size");
    emu::AsyncCopy c;
    c.dst = dst;
    c.bytes = bytes;
    if (valid)
        memcpy(c.data, src, bytes);
    else
        memset(c.data, 0, bytes);
    emu::async_copies[threadIdx.x].push_back(c);
}
inline void emu_copy_async_wait() {
    for (const emu::AsyncCopy &c : emu::async_copies[threadIdx.x]) memcpy(c.dst, c.data, c.bytes);
    emu::async_copies[threadIdx.x].clear();
}

// ---------------------------------------------------------------- per-lane warp collectives
// Unlike WMMA's, these instructions spread their operands over the lanes in a
// documented layout (PTX ISA: mma.m16n8k16, ldmatrix, shfl.sync), which the
// kernels rely on, so each lane holds only its own registers here too: every lane
// puts its part in the warp's exchange, meets the others at a warp barrier, and
// reads what the instruction gives it. All 32 lanes must make the same calls
// (counted as WMMA's are); a lane elsewhere deadlocks the warp, which the scheduler
// reports.
namespace emu {
template <class T>
inline XSlot &warp_exchange(const T &mine) {
    static_assert(sizeof(T) <= XBYTES, "exchange record too large");
    const unsigned t = threadIdx.x;
    collective_calls[t]++;
    XSlot &slot = xslots[2 * (t / 32) + xcalls[t]++ % 2];
    memcpy(slot.lane[t % 32], &mine, sizeof(T));
    barrier(WAIT_WARP);
    return slot;
}
template <class T>
inline T from_lane(const XSlot &slot, unsigned lane) {
    T v;
    memcpy(&v, slot.lane[lane], sizeof(T));
    return v;
}
inline float bf16_half(uint32_t reg, int hi) {
    uint32_t u = hi ? reg & 0xffff0000u : reg << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
}  // namespace emu

// shfl.sync.bfly: the value of lane (this lane ^ lane_mask), for 4-byte T, and 8-byte
// T (double, long long: CUDA's overloads shuffle the two halves).
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- and 8-byte shuffles only are emulated");
    if (mask != 0xffffffffu || width != 32) emu_fail("__shfl_xor_sync with a partial mask or width is not emulated");
    const emu::XSlot &slot = emu::warp_exchange(v);
    return emu::from_lane<T>(slot, (threadIdx.x % 32) ^ (unsigned)lane_mask);
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a b + c, a 16x16 and b
// 16x8 bf16, c and d 16x8 fp32. With g = lane / 4 and t = lane % 4, a lane holds
// a's (g, 2t..2t+1) in a[0], (g+8, 2t..) in a[1], (g, 2t+8..) in a[2] and
// (g+8, 2t+8..) in a[3] (the lower half of a register the first element); b's
// (2t..2t+1, g) in b[0] and (2t+8.., g) in b[1]; c's and d's (g, 2t..2t+1) in
// [0..1] and (g+8, 2t..) in [2..3]. Products of bf16 values are exact in fp32;
// the 16 terms are added in k order here (the tensor core's order is unspecified).
inline void emu_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    struct Regs {
        uint32_t a[4], b[2];
        float c[4];
    } mine;
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, c, sizeof mine.c);
    emu::XSlot &slot = emu::warp_exchange(mine);
    const uint64_t call = emu::xcalls[threadIdx.x];  // the same on every lane of the warp
    if (slot.done != call) {  // the first lane past the barrier does the warp's product for all
        slot.done = call;
        Regs L[32];
        for (unsigned l = 0; l < 32; l++) L[l] = emu::from_lane<Regs>(slot, l);
        float A[16][16], B[16][8];  // the whole operands, unpacked from the lanes' registers
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++)
                A[r][k] = emu::bf16_half(L[(r % 8) * 4 + (k % 8) / 2].a[(r >= 8) + 2 * (k >= 8)], k % 2);
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 8; n++) B[k][n] = emu::bf16_half(L[n * 4 + (k % 8) / 2].b[k >= 8], k % 2);
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 4; i++) {
                const int r = lane / 4 + 8 * (i / 2), n = 2 * (lane % 4) + i % 2;
                float s = L[lane].c[i];
                for (int k = 0; k < 16; k++) s += A[r][k] * B[k][n];
                slot.result[lane][i] = s;
            }
    }
    memcpy(d, slot.result[threadIdx.x % 32], 4 * sizeof(float));
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8x8 matrices of 16-bit
// values; lanes 8i..8i+7 give the addresses of matrix i's rows 0..7 (16 bytes each,
// 16-byte aligned). Register i of a lane gets matrix i's (lane / 4, 2 (lane % 4)..+1),
// or with trans its (2 (lane % 4), lane / 4) and (2 (lane % 4) + 1, lane / 4).
inline void emu_ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    if ((uintptr_t)row % 16) emu_fail("ldmatrix row address not 16-byte aligned");
    const emu::XSlot &slot = emu::warp_exchange(row);
    const unsigned lane = threadIdx.x % 32;
    for (unsigned i = 0; i < 4; i++) {
        uint16_t e[2];
        for (unsigned h = 0; h < 2; h++) {
            const unsigned rr = trans ? 2 * (lane % 4) + h : lane / 4, cc = trans ? lane / 4 : 2 * (lane % 4) + h;
            const uint16_t *p = emu::from_lane<const uint16_t *>(slot, 8 * i + rr);
            e[h] = p[cc];
        }
        r[i] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
}

#endif
