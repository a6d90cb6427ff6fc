// parallel_layers/context_parallel.c — zigzag split and ring attention.
#include "parallel_layers/context_parallel.h"

#include <string.h>

#include "dist/comm.h"
#include "ops/ops.h"
#include "util.h"

#define TAG_KV 100       // key/value blocks (forward and backward)
#define TAG_KV_GRAD 101  // a block's partial key/value gradient, backward (the last one: home)

size_t cp_ring_floats(const ContextParallel *cp, int B, int S, int KV, int hd) {
    const size_t N = (size_t)B * S, kvw = 2 * (size_t)KV * hd;  // a token's k|v width
    // The backward's 5 blocks of (N, kvw) (ring_attention_backward; the forward uses
    // 2), planned as 6 so that every memory figure stays what it was.
    return cp->size > 1 ? 2 * N * 2 * kvw + 2 * N * kvw : 0;
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
    // Every block's k|v goes once around the ring, and its gradient dk|dv follows,
    // summed rank by rank: rank r at step j holds block src = r - j, adds its own
    // contribution to the partial sum that ranks src .. r - 1 made, and passes it on;
    // after cp steps the sum is complete and arrives at its owner. Both hops overlap
    // compute: the k|v of the next block travels while this one is computed (as in
    // the forward), and this rank's contribution is computed into a zeroed buffer
    // while the partial sum it joins is still on its way from prev (sent when prev
    // finished its own compute), so only the final addition waits for it.
    // Ring buffers, (B*Sl, 2*KVl*hd) each: kv[2] the k|v held and the next; acc[2]
    // the partial sum being completed here and the previous one, still being sent;
    // in the partial sum arriving from prev. 5 of the 6 that cp_ring_floats plans.
    const size_t rows = (size_t)B * Sl, n = rows * kvw;
    float *kv[2] = {ra->ring, ra->ring + n};
    float *acc[2] = {ra->ring + 2 * n, ra->ring + 3 * n};
    float *in = ra->ring + 4 * n;
    copy_rows_f32(kv[0], kvw, qkv + Hl * hd, ld, rows, kvw);  // this rank's k|v columns
    zero_f32(dqkv, rows * ld);
    attention_rowdot(ra->rowdot, dout, out, B, Sl, Hl, hd);
    const int next = (r + 1) % cp, prev = (r + cp - 1) % cp;
    CommRequest acc_tx[2] = {COMM_REQUEST_IDLE, COMM_REQUEST_IDLE};
    for (int j = 0, cur = 0; j < cp; j++, cur ^= 1) {
        const int src = (r - j + cp) % cp;  // owner of the block held at step j
        CommRequest kv_rx = COMM_REQUEST_IDLE, kv_tx = COMM_REQUEST_IDLE, d_rx = COMM_REQUEST_IDLE;
        if (j < cp - 1) {  // the next block's k|v travels while this one is computed
            kv_rx = group_irecv_f32(GROUP_CP, kv[cur ^ 1], n, prev, TAG_KV);
            kv_tx = group_isend_f32(GROUP_CP, kv[cur], n, next, TAG_KV);
        }
        if (j > 0) d_rx = group_irecv_f32(GROUP_CP, in, n, prev, TAG_KV_GRAD);  // the partial sum of src
        comm_wait(&acc_tx[cur], "context-parallel gradient send");  // sent two steps ago
        zero_f32(acc[cur], n);
        attention_block_backward(dqkv, acc[cur], qkv, ld, kv[cur], kvw, 0, KVl * hd, dout, lse, ra->rowdot,
                                 ra->pos, ra->pos_of + (size_t)src * Sl, B, Sl, Sl, Hl, KVl, hd, ra->scratch);
        if (j > 0) {
            comm_wait(&d_rx, "context-parallel gradient receive");
            residual_forward(acc[cur], in, acc[cur], n);  // ranks src .. r-1, then r
        }
        // Onwards to next; the sum made at the last step (block r + 1) is complete,
        // and this send is its way home.
        acc_tx[cur] = group_isend_f32(GROUP_CP, acc[cur], n, next, TAG_KV_GRAD);
        comm_wait(&kv_rx, "context-parallel key/value receive");
        comm_wait(&kv_tx, "context-parallel key/value send");
    }
    // This rank's own block, complete: the last sum prev made.
    CommRequest home = group_irecv_f32(GROUP_CP, in, n, prev, TAG_KV_GRAD);
    comm_wait(&home, "context-parallel gradient receive");
    copy_rows_f32(dqkv + (size_t)Hl * hd, ld, in, kvw, rows, kvw);
    comm_wait(&acc_tx[0], "context-parallel gradient send");
    comm_wait(&acc_tx[1], "context-parallel gradient send");
}

void cp_open_links(const ContextParallel *cp) {
    if (cp->size == 1) return;
    const int next = (cp->rank + 1) % cp->size, prev = (cp->rank + cp->size - 1) % cp->size;
    const CommLink ends[] = {{next, TAG_KV, 1}, {next, TAG_KV_GRAD, 1}, {prev, TAG_KV, 0}, {prev, TAG_KV_GRAD, 0}};
    group_open_links(GROUP_CP, ends, 4);
}

void cp_allreduce_sum(const ContextParallel *cp, float *buf, size_t n) {
    if (cp->size > 1) group_allreduce_sum_f32(GROUP_CP, buf, n);
}
