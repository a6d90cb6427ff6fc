// parallel/tensor_parallel.c — the f/g operators, vocab-parallel embedding and loss.
#include "parallel/tensor_parallel.h"

#include <string.h>

#include "ops/ops.h"
#include "util.h"

int tp_rows(const LlamaModel *m, int N) { return m->sp ? N / m->tp : N; }

const float *tp_gather(const LlamaModel *m, const float *x, float *full, int N, int D) {
    if (!m->sp) return x;
    const size_t shard = (size_t)(N / m->tp) * D;
    memcpy(full + (size_t)m->tp_rank * shard, x, sizeof(float) * shard);
    group_allgather_f32(GROUP_TP, full, shard);
    return full;
}

CommRequest tp_reduce_start(const LlamaModel *m, float *partial, float *out, int N, int D) {
    if (m->tp == 1) return COMM_REQUEST_IDLE;
    if (!m->sp) {
        if (out != partial) die("tp_reduce: without sequence parallel the all-reduce is in place");
        return group_iallreduce_sum_f32(GROUP_TP, partial, (size_t)N * D);
    }
    return group_ireduce_scatter_f32(GROUP_TP, partial, out, (size_t)(N / m->tp) * D);
}

void tp_reduce_finish(CommRequest *r) { comm_wait(r, "tensor-parallel reduction"); }

void tp_reduce(const LlamaModel *m, float *partial, float *out, int N, int D) {
    CommRequest r = tp_reduce_start(m, partial, out, N, D);
    tp_reduce_finish(&r);
}

void tp_sum_replicated(const LlamaModel *m, float *g, size_t n) {
    if (m->sp) group_allreduce_sum_f32(GROUP_TP, g, n);
}

void tp_embedding_forward(const LlamaModel *m, float *out, const int32_t *tokens,
                          const float *table, float *full, int N) {
    if (m->tp == 1) {
        embedding_forward(out, tokens, table, N, m->D);
        return;
    }
    // Each rank contributes the rows of its vocabulary slice, zeros elsewhere; the
    // sum over the group is the lookup.
    float *partial = m->sp ? full : out;
    embedding_forward_range(partial, tokens, table, N, m->D, m->v0, m->v_valid);
    tp_reduce(m, partial, out, N, m->D);
}

void tp_embedding_backward(const LlamaModel *m, float *dtable, const float *dout,
                           const int32_t *tokens, float *full, int N) {
    if (m->tp == 1) {
        embedding_backward(dtable, dout, tokens, N, m->D);
        return;
    }
    const float *d = tp_gather(m, dout, full, N, m->D);  // every token's gradient
    embedding_backward_range(dtable, d, tokens, N, m->D, m->v0, m->v_valid);
}

double tp_cross_entropy(const LlamaModel *m, float *logits, const int32_t *targets, int N,
                        float grad_scale, int want_grads, float *stats) {
    if (m->tp == 1) {
        return want_grads ? cross_entropy_forward_backward(logits, targets, N, m->V, grad_scale)
                          : cross_entropy_forward(logits, targets, N, m->V);
    }
    // loss_n = log(sum_v exp(x_v - M)) + M - x_target, with M the row maximum over
    // the whole vocabulary: a max and two sums over the group, N numbers each.
    float *rowmax = stats, *sumexp = stats + N, *tlogit = stats + 2 * (size_t)N;
    ce_shard_max(logits, N, m->Vl, m->v_valid, rowmax);
    group_allreduce_max_f32(GROUP_TP, rowmax, (size_t)N);
    ce_shard_sums(logits, targets, N, m->Vl, m->v_valid, m->v0, rowmax, sumexp, tlogit);
    group_allreduce_sum_f32(GROUP_TP, sumexp, 2 * (size_t)N);  // sumexp and tlogit together
    return ce_shard_finish(logits, targets, N, m->Vl, m->v_valid, m->v0, rowmax, sumexp, tlogit,
                           grad_scale, want_grads);
}
