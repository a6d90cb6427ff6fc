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
//
// Files: ops/flash_mma_tiles.cuh (shapes, staging, the tile stream),
// ops/flash_mma_forward.cuh and ops/flash_mma_backward.cuh (the kernels), and
// here their launchers.
#ifndef FEMTOTRON_FLASH_MMA_CUH
#define FEMTOTRON_FLASH_MMA_CUH

#include <math.h>
#include <stdint.h>

#include "ops/flash_mma_backward.cuh"
#include "ops/flash_mma_forward.cuh"

namespace flash_mma {

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
