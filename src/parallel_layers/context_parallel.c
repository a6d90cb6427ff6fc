// parallel_layers/context_parallel.c — zigzag split and ring attention.
#include "parallel_layers/context_parallel.h"

#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "util.h"

#define TAG_KV 100       // key/value blocks, forward
#define TAG_KV_GRAD 101  // key/value blocks with their gradients, backward
#define TAG_HOME 102     // a block's finished gradient, back to its owner

size_t cp_ring_floats(const ContextParallel *cp, int B, int S, int KV, int hd) {
    const size_t N = (size_t)B * S, kvw = 2 * (size_t)KV * hd;  // a token's k|v width
    return cp->size > 1 ? 2 * N * 2 * kvw + 2 * N * kvw : 0;   // 2 ring blocks + homing pair
}

void cp_positions(int S, int cp, int r, int *pos) {
    const int C = S / (2 * cp);
    for (int i = 0; i < C; i++) {
        pos[i] = r * C + i;                     // chunk r
        pos[C + i] = (2 * cp - 1 - r) * C + i;  // chunk 2cp-1-r
    }
}

void cp_take_local(const int32_t *full, int32_t *local, int B, int S, int cp, int r) {
    const int C = S / (2 * cp), Sl = S / cp;
    for (int b = 0; b < B; b++) {
        memcpy(local + (size_t)b * Sl, full + (size_t)b * S + (size_t)r * C, sizeof(int32_t) * C);
        memcpy(local + (size_t)b * Sl + C, full + (size_t)b * S + (size_t)(2 * cp - 1 - r) * C,
               sizeof(int32_t) * C);
    }
}


void ring_attention_forward(const ContextParallel *cpg, const RingAttention *ra, const float *qkv,
                            float *out, float *lse) {
    const int B = ra->B, Sl = ra->S, Hl = ra->H, KVl = ra->KV, hd = ra->hd;
    const int ld = (Hl + 2 * KVl) * hd, kvw = 2 * KVl * hd, cp = cpg->size, r = cpg->rank;
    if (cp == 1) {
        attention_forward(out, lse, ra->m, ra->l, qkv, ra->pos, B, Sl, Hl, KVl, hd, ra->scratch);
        return;
    }
    const size_t rows = (size_t)B * Sl, n = rows * kvw;
    float *ring[2] = {ra->ring, ra->ring + n};  // (B*Sl, 2*KVl*hd) each
    copy_rows_f32(ring[0], kvw, qkv + Hl * hd, ld, rows, kvw);  // this rank's k|v columns
    attention_block_init(out, ra->m, ra->l, B, Sl, Hl, hd);
    const int next = (r + 1) % cp, prev = (r + cp - 1) % cp;
    for (int j = 0, cur = 0; j < cp; j++, cur ^= 1) {
        const int src = (r - j + cp) % cp;  // owner of the block held at step j
        CommRequest rx = COMM_REQUEST_IDLE, tx = COMM_REQUEST_IDLE;
        if (j < cp - 1) {  // the next block travels while this one is computed
            rx = group_irecv_f32(GROUP_CP, ring[cur ^ 1], n, prev, TAG_KV);
            tx = group_isend_f32(GROUP_CP, ring[cur], n, next, TAG_KV);
        }
        attention_block_forward(out, ra->m, ra->l, qkv, ld, ring[cur], kvw, 0, KVl * hd,
                                ra->pos, ra->pos_of + (size_t)src * Sl, B, Sl, Sl, Hl, KVl, hd,
                                ra->scratch);
        comm_wait(&rx, "context-parallel key/value receive");
        comm_wait(&tx, "context-parallel key/value send");
    }
    attention_block_finish(out, lse, ra->m, ra->l, B, Sl, Hl, hd);
}

void ring_attention_backward(const ContextParallel *cpg, const RingAttention *ra, float *dqkv,
                             const float *dout, const float *qkv, const float *out,
                             const float *lse) {
    const int B = ra->B, Sl = ra->S, Hl = ra->H, KVl = ra->KV, hd = ra->hd;
    const int ld = (Hl + 2 * KVl) * hd, kvw = 2 * KVl * hd, cp = cpg->size, r = cpg->rank;
    if (cp == 1) {
        attention_backward(dqkv, ra->rowdot, dout, qkv, out, lse, ra->pos, B, Sl, Hl, KVl, hd,
                           ra->scratch);
        return;
    }
    const size_t rows = (size_t)B * Sl, bw = 2 * (size_t)kvw, n = rows * bw;
    // Ring rows: [k | v | dk | dv], (B*Sl, 4*KVl*hd) each.
    float *ring[2] = {ra->ring, ra->ring + n};
    zero_f32(ring[0], n);
    copy_rows_f32(ring[0], bw, qkv + Hl * hd, ld, rows, kvw);  // k|v, their gradients 0
    zero_f32(dqkv, rows * ld);
    attention_rowdot(ra->rowdot, dout, out, B, Sl, Hl, hd);
    const int next = (r + 1) % cp, prev = (r + cp - 1) % cp;
    int cur = 0;
    for (int j = 0; j < cp; j++) {
        const int src = (r - j + cp) % cp;
        CommRequest rx = COMM_REQUEST_IDLE;
        if (j < cp - 1) rx = group_irecv_f32(GROUP_CP, ring[cur ^ 1], n, prev, TAG_KV_GRAD);
        // Keys/values are read at columns 0 and KVl*hd; their gradients are written
        // at the same offsets from the dk column (2*KVl*hd).
        attention_block_backward(dqkv, ring[cur] + kvw, qkv, ld, ring[cur], (int)bw, 0, KVl * hd,
                                 dout, lse, ra->rowdot, ra->pos, ra->pos_of + (size_t)src * Sl, B,
                                 Sl, Sl, Hl, KVl, hd, ra->scratch);
        if (j < cp - 1) {
            CommRequest tx = group_isend_f32(GROUP_CP, ring[cur], n, next, TAG_KV_GRAD);
            comm_wait(&rx, "context-parallel key/value receive");
            comm_wait(&tx, "context-parallel key/value send");
            cur ^= 1;
        }
    }
    // The block held now belongs to `next` (r - (cp-1) = r + 1): send its finished
    // gradient home, and receive this rank's own from `prev`.
    float *home = ra->ring + 2 * n;  // (B*Sl, 2*KVl*hd)
    float *out_grad = home + rows * kvw;  // (B*Sl, 2*KVl*hd)
    copy_rows_f32(out_grad, kvw, ring[cur] + kvw, bw, rows, kvw);  // the dk|dv columns
    CommRequest rx = group_irecv_f32(GROUP_CP, home, rows * kvw, prev, TAG_HOME);
    CommRequest tx = group_isend_f32(GROUP_CP, out_grad, rows * kvw, next, TAG_HOME);
    comm_wait(&rx, "context-parallel gradient receive");
    comm_wait(&tx, "context-parallel gradient send");
    copy_rows_f32(dqkv + (size_t)Hl * hd, ld, home, kvw, rows, kvw);
}

void cp_allreduce_sum(const ContextParallel *cp, float *buf, size_t n) {
    if (cp->size > 1) group_allreduce_sum_f32(GROUP_CP, buf, n);
}
