// parallel_layers/tensor_parallel.c — the f/g operators, column- and row-parallel
// linear layers, the sequence-parallel norm gradient, vocab-parallel embedding and loss.
#include "parallel_layers/tensor_parallel.h"

#include "ops/ops.h"
#include "util.h"

TensorParallel tp_group(int size, int rank, int sp) {
    TensorParallel tp = {size, rank, sp && size > 1};
    return tp;
}

VocabShard tp_vocab_shard(const TensorParallel *tp, int V) {
    VocabShard vs;
    vs.V = V;
    vs.rows = (V + tp->size - 1) / tp->size;
    vs.v0 = vs.rows * tp->rank;
    vs.valid = V - vs.v0 < 0 ? 0 : (V - vs.v0 < vs.rows ? V - vs.v0 : vs.rows);
    return vs;
}

int tp_rows(const TensorParallel *tp, int N) { return tp->sp ? N / tp->size : N; }

const float *tp_gather(const TensorParallel *tp, const float *x, float *full, int N, int D) {
    if (!tp->sp) return x;
    const size_t shard = (size_t)(N / tp->size) * D;
    copy_f32(full + (size_t)tp->rank * shard, x, shard);
    group_allgather_f32(GROUP_TP, full, shard);
    return full;
}

CommRequest tp_reduce_start(const TensorParallel *tp, float *partial, float *out, int N, int D) {
    if (tp->size == 1) return COMM_REQUEST_IDLE;
    if (!tp->sp) {
        if (out != partial) die("tp_reduce: without sequence parallel the all-reduce is in place");
        return group_iallreduce_sum_f32(GROUP_TP, partial, (size_t)N * D);
    }
    return group_ireduce_scatter_f32(GROUP_TP, partial, out, (size_t)(N / tp->size) * D);
}

void tp_reduce_finish(CommRequest *r) { comm_wait(r, "tensor-parallel reduction"); }

void tp_allreduce_sum(const TensorParallel *tp, float *buf, size_t n) {
    if (tp->size > 1) group_allreduce_sum_f32(GROUP_TP, buf, n);
}

void tp_reduce(const TensorParallel *tp, float *partial, float *out, int N, int D) {
    CommRequest r = tp_reduce_start(tp, partial, out, N, D);
    tp_reduce_finish(&r);
}

// ------------------------------------------------------------- linear layers

void tp_column_forward(const TensorParallel *tp, float *out, const float *x, float *full,
                       const float *w, int N, int D, int out_local) {
    matmul_forward(out, tp_gather(tp, x, full, N, D), w, N, D, out_local);
}

// gather(x16)(N, D) of a bf16 x16(tp_rows, D): the all-gather moves its bits as
// D/2 floats a row (D even: llama_build), no conversion either way. *room: the
// gathered rows' own buffer, N x D floats (full, or x16's when nothing is
// gathered: tp_rows = N), where a backend that cannot read bf16 widens them in
// place (ops.h).
static uint16_t *gather16(const TensorParallel *tp, uint16_t *x16, float *full, int N, int D, float **room) {
    if (D % 2) die("tensor-parallel bf16 activations need an even width (got %d)", D);
    float *x = (float *)x16;
    *room = (float *)tp_gather(tp, x, full, N, D / 2);  // x itself, or full
    return (uint16_t *)*room;
}

const uint16_t *tp_gather_bf16(const TensorParallel *tp, const uint16_t *x16, float *full, int N, int D) {
    float *room;
    return gather16(tp, (uint16_t *)x16, full, N, D, &room);
}

void tp_column_forward_from_bf16(const TensorParallel *tp, float *out, uint16_t *x16, float *full, const float *w,
                                 int N, int D, int out_local) {
    float *room;
    const uint16_t *x16_full = gather16(tp, x16, full, N, D, &room);
    matmul_forward_from_bf16(out, x16_full, room, w, N, D, out_local);
}

void tp_column_forward_bf16(const TensorParallel *tp, uint16_t *out16, float *out_scratch, uint16_t *x16, float *full,
                            const float *w, int N, int D, int out_local) {
    float *room;
    const uint16_t *x16_full = gather16(tp, x16, full, N, D, &room);
    matmul_forward_bf16(out16, out_scratch, x16_full, room, w, N, D, out_local);
}

void tp_column_backward(const TensorParallel *tp, float *din, float *dw, const float *dout,
                        const float *x, const float *w, float *full, float *partial, int N, int D,
                        int out_local) {
    const float *x_full = tp_gather(tp, x, full, N, D);  // re-gathered, not stored
    float *p = tp->sp ? partial : din;
    matmul_backward(p, NULL, dout, x_full, w, N, D, out_local, 0);  // input gradient only
    CommRequest r = tp_reduce_start(tp, p, din, N, D);
    matmul_backward(NULL, dw, dout, x_full, w, N, D, out_local, 0);  // weight gradient, meanwhile
    tp_reduce_finish(&r);
}

// The residual add after a reduction (several ranks): out += add.
static void add_after_reduce(const TensorParallel *tp, float *out, const float *add, int N, int D) {
    if (add) residual_forward(out, out, add, (size_t)tp_rows(tp, N) * D);
}

void tp_row_forward(const TensorParallel *tp, float *out, const float *add, const float *x, const float *w,
                    float *partial, int N, int in_local, int D) {
    if (add && tp->size == 1) {
        matmul_forward_add(out, add, x, w, N, in_local, D);
        return;
    }
    float *p = tp->sp ? partial : out;
    matmul_forward(p, x, w, N, in_local, D);
    tp_reduce(tp, p, out, N, D);
    add_after_reduce(tp, out, add, N, D);
}

void tp_row_backward(const TensorParallel *tp, float *din, float *dw, const float *dout,
                     const float *x, const float *w, float *full, int N, int in_local, int D) {
    const float *dout_full = tp_gather(tp, dout, full, N, D);  // row-parallel needs all tokens
    matmul_backward(din, dw, dout_full, x, w, N, in_local, D, 0);
}

void tp_row_forward_from_bf16(const TensorParallel *tp, float *out, const float *add, const uint16_t *x16,
                              float *xscratch, const float *w, float *partial, int N, int in_local, int D) {
    if (add && tp->size == 1) {
        matmul_forward_from_bf16_add(out, add, x16, xscratch, w, N, in_local, D);
        return;
    }
    float *p = tp->sp ? partial : out;
    matmul_forward_from_bf16(p, x16, xscratch, w, N, in_local, D);
    tp_reduce(tp, p, out, N, D);
    add_after_reduce(tp, out, add, N, D);
}

void tp_row_backward_from_bf16(const TensorParallel *tp, float *din, float *dw, const float *dout,
                               const uint16_t *x16, float *xscratch, const float *w, float *full, int N,
                               int in_local, int D) {
    const float *dout_full = tp_gather(tp, dout, full, N, D);
    matmul_backward_from_bf16(din, dw, dout_full, x16, xscratch, w, N, in_local, D, 0);
}

void tp_row_backward_from_bf16_to_bf16(const TensorParallel *tp, uint16_t *din16, float *din_scratch, float *dw,
                                       const float *dout, const uint16_t *x16, float *xscratch, const float *w,
                                       float *full, int N, int in_local, int D) {
    matmul_backward_from_bf16_to_bf16(din16, din_scratch, dw, tp_gather(tp, dout, full, N, D), x16, xscratch, w, N,
                                      in_local, D);
}

// tp_column_backward's kernels, in its order, for the parts asked for: din NULL is
// tp_column_backward_weight's, dw NULL tp_column_backward_input's.
void tp_column_backward_bf16(const TensorParallel *tp, float *din, float *dw, const uint16_t *dout16,
                             float *dscratch, uint16_t *x16, const float *w, float *full, float *partial, int N,
                             int D, int out_local) {
    float *room = NULL;
    const uint16_t *x16_full = dw ? gather16(tp, x16, full, N, D, &room) : NULL;
    float *p = tp->sp ? partial : din;
    CommRequest r = COMM_REQUEST_IDLE;
    if (din) {
        matmul_backward_bf16(p, NULL, dout16, dscratch, NULL, NULL, w, N, D, out_local, 0);
        r = tp_reduce_start(tp, p, din, N, D);
    }
    if (dw) matmul_backward_bf16(NULL, dw, dout16, dscratch, x16_full, room, NULL, N, D, out_local, 0);
    tp_reduce_finish(&r);  // nothing when idle
}

// A norm's weight gradient under sequence parallelism is a partial sum over this
// rank's rows: it goes to the zeroed scratch, is summed over the group, then added
// to dweight. Without it, straight into dweight.
static float *norm_dw_target(const TensorParallel *tp, float *dweight, float *dw_scratch, int D) {
    if (!tp->sp) return dweight;
    zero_f32(dw_scratch, (size_t)D);
    return dw_scratch;
}

static void norm_dw_finish(const TensorParallel *tp, float *dweight, float *dw_scratch, int D) {
    if (!tp->sp) return;
    group_allreduce_sum_f32(GROUP_TP, dw_scratch, (size_t)D);
    residual_forward(dweight, dweight, dw_scratch, (size_t)D);
}

void tp_norm_backward(const TensorParallel *tp, float *din, uint16_t *din16, float *dweight, const float *dout,
                      const float *xhat, const float *weight, const float *rstd, float *dw_scratch,
                      int Nr, int D) {
    rmsnorm_backward_with_bf16(din, din16, norm_dw_target(tp, dweight, dw_scratch, D), dout, xhat, weight, rstd, Nr,
                               D);
    norm_dw_finish(tp, dweight, dw_scratch, D);
}

// ------------------------------------------ the backwards split (zero bubble)

void tp_column_backward_input(const TensorParallel *tp, float *din, const float *dout, const float *w,
                              float *partial, int N, int D, int out_local) {
    float *p = tp->sp ? partial : din;
    matmul_backward(p, NULL, dout, NULL, w, N, D, out_local, 0);  // din does not read x
    tp_reduce(tp, p, din, N, D);
}

void tp_column_backward_weight(const TensorParallel *tp, float *dw, const float *dout, const float *x,
                               float *full, int N, int D, int out_local) {
    matmul_backward(NULL, dw, dout, tp_gather(tp, x, full, N, D), NULL, N, D, out_local, 0);
}

void tp_row_backward_input(const TensorParallel *tp, float *din, const float *dout, const float *w,
                           float *full, int N, int in_local, int D) {
    matmul_backward(din, NULL, tp_gather(tp, dout, full, N, D), NULL, w, N, in_local, D, 0);
}

void tp_row_backward_input_to_bf16(const TensorParallel *tp, uint16_t *din16, float *din_scratch, const float *dout,
                                   const float *w, float *full, int N, int in_local, int D) {
    matmul_backward_input_to_bf16(din16, din_scratch, tp_gather(tp, dout, full, N, D), w, N, in_local, D);
}

void tp_row_backward_weight(const TensorParallel *tp, float *dw, const float *dout, const float *x,
                            float *full, int N, int in_local, int D) {
    matmul_backward(NULL, dw, tp_gather(tp, dout, full, N, D), x, NULL, N, in_local, D, 0);
}

void tp_norm_backward_input(float *din, uint16_t *din16, const float *dout, const float *xhat, const float *weight,
                            const float *rstd, int Nr, int D) {
    rmsnorm_backward_with_bf16(din, din16, NULL, dout, xhat, weight, rstd, Nr, D);
}

void tp_norm_backward_weight(const TensorParallel *tp, float *dweight, const float *dout, const float *xhat,
                             float *dw_scratch, int Nr, int D) {
    rmsnorm_backward(NULL, norm_dw_target(tp, dweight, dw_scratch, D), dout, xhat, NULL, NULL, Nr, D);
    norm_dw_finish(tp, dweight, dw_scratch, D);
}

// ------------------------------------------------------- embedding and loss

void tp_embedding_forward(const TensorParallel *tp, const VocabShard *vs, float *out,
                          const int32_t *tokens, const float *table, float *full, int N, int D) {
    if (tp->size == 1) {
        embedding_forward(out, tokens, table, N, D, vs->V);
        return;
    }
    ops_check_ids(tokens, N, vs->V, "vocab-parallel embedding");  // every rank: the whole vocabulary
    // Each rank contributes the rows of its vocabulary slice, zeros elsewhere; the
    // sum over the group is the lookup.
    float *partial = tp->sp ? full : out;
    embedding_forward_range(partial, tokens, table, N, D, vs->v0, vs->valid);
    tp_reduce(tp, partial, out, N, D);
}

void tp_embedding_backward(const TensorParallel *tp, const VocabShard *vs, float *dtable,
                           const float *dout, const int32_t *tokens, float *full, int N, int D) {
    if (tp->size == 1) {
        embedding_backward(dtable, dout, tokens, N, D, vs->V);
        return;
    }
    ops_check_ids(tokens, N, vs->V, "vocab-parallel embedding backward");
    const float *d = tp_gather(tp, dout, full, N, D);  // every token's gradient
    embedding_backward_range(dtable, d, tokens, N, D, vs->v0, vs->valid);
}

void tp_cross_entropy(const TensorParallel *tp, const VocabShard *vs, int V, float *logits,
                      const int32_t *targets, int N, float grad_scale, int want_grads, float *stats,
                      double *loss_sum) {
    if (tp->size == 1) {
        if (want_grads == CE_GRADS_BF16)
            cross_entropy_forward_backward_bf16(logits, targets, N, V, grad_scale, loss_sum);
        else if (want_grads)
            cross_entropy_forward_backward(logits, targets, N, V, grad_scale, loss_sum);
        else
            cross_entropy_forward(logits, targets, N, V, loss_sum);
        return;
    }
    // loss_n = log(sum_v exp(x_v - M)) + M - x_target, with M the row maximum over
    // the whole vocabulary: a max and two sums over the group, N numbers each.
    ops_check_ids(targets, N, V, "vocab-parallel cross-entropy target");
    float *rowmax = stats, *sumexp = stats + N, *tlogit = stats + 2 * (size_t)N;
    ce_shard_max(logits, N, vs->rows, vs->valid, rowmax);
    group_allreduce_max_f32(GROUP_TP, rowmax, (size_t)N);
    ce_shard_sums(logits, targets, N, vs->rows, vs->valid, vs->v0, rowmax, sumexp, tlogit);
    group_allreduce_sum_f32(GROUP_TP, sumexp, 2 * (size_t)N);  // sumexp and tlogit together
    ce_shard_finish(logits, targets, N, vs->rows, vs->valid, vs->v0, rowmax, sumexp, tlogit, grad_scale,
                    want_grads, loss_sum);
}
