// ops/flash_mma_forward.cuh — the forward kernel of ops/flash_mma.cuh (its design
// comment: the tiles, masks and instructions per score): one block of keys folded
// into the running (o, m, l), or, WHOLE, the whole attention normalised with its
// log-sum-exp.
#ifndef FEMTOTRON_FLASH_MMA_FORWARD_CUH
#define FEMTOTRON_FLASH_MMA_FORWARD_CUH

#include "ops/flash_mma_tiles.cuh"

namespace flash_mma {

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

}  // namespace flash_mma

#endif
