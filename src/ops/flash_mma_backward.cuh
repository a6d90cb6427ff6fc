// ops/flash_mma_backward.cuh — the backward kernels of ops/flash_mma.cuh (its design
// comment: the tiles, masks and instructions per score): dQ over the keys of a query
// block, and dK, dV over every query head of a key block's group, each pair's P and
// dS formed again from the forward's log-sum-exp.
#ifndef FEMTOTRON_FLASH_MMA_BACKWARD_CUH
#define FEMTOTRON_FLASH_MMA_BACKWARD_CUH

#include "ops/flash_mma_tiles.cuh"

namespace flash_mma {

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

}  // namespace flash_mma

#endif
