// engines/data_parallel_update.c — after the step's reductions: the global
// gradient norm, clipping, and AdamW on what this rank owns under its ZeRO stage
// (the table in data_parallel.h), then the parameter all-gather (ZeRO-1/2).
#include "engines/data_parallel.h"

#include <math.h>

#include "ops/ops.h"
#include "util.h"

// *acc += the sum of squares of g over the model-order range [lo, hi) (local buffer
// g at lo), counting a replicated tensor on one tensor-parallel rank only: one
// sum_squares per run of adjacent counted tensors (one launch and one partial sum
// on a GPU, instead of one per tensor; the same double sum up to its grouping).
static void sumsq_range(const LlamaModel *m, size_t lo, size_t hi, const float *g, double *acc) {
    size_t run_a = 0, run_b = 0;  // the run so far, [run_a, run_b) global; empty when equal
    for (int i = 0; i <= m->n_params; i++) {
        size_t a = 0, b = 0;
        if (i < m->n_params) {
            const ParamInfo *pi = &m->params[i];
            a = pi->offset > lo ? pi->offset : lo;
            b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
            if (a >= b || !pi->replica_writer) continue;
            if (run_b > run_a && a == run_b) {  // extends the run
                run_b = b;
                continue;
            }
        }
        if (run_b > run_a) sum_squares(g + (run_a - lo), run_b - run_a, acc);
        run_a = a, run_b = b;
    }
}

void dp_grad_sumsq(const DataParallel *dp, double *sums) {
    for (int k = 0; k < dp->n_buckets; k++) {
        const Bucket *b = &dp->buckets[k];
        if (dp_bucket_is_copy(dp, b)) continue;  // counted on the first stage
        if (dp->zero == 0)  // every rank of the bucket's group holds the same reduced sum
            sumsq_range(dp->model, b->glo, b->glo + (b->hi - b->lo), dp->grads + b->lo,
                        sums + (b->group == GROUP_EDP));
        else
            sumsq_range(dp->model, b->glo + (b->own_lo - b->lo), b->glo + (b->own_hi - b->lo),
                        dp_owned_grads(dp, b), sums);
    }
}

double dp_grad_norm(const DataParallel *dp, const double local[2]) {
    double ss = local[0], ss_experts = local[1];
    // Stage 0: the ranks of an expert-parallel group hold different experts, each whole.
    // Stages 1-3: the owned parts of dp x cp cover the dense tensors once, and those of
    // the ep groups' ranks every expert once.
    if (dp->zero == 0 && dp->model->E > 0 && dp->model->ep.size > 1) group_allreduce_sum_f64(GROUP_EP, &ss_experts, 1);
    ss += ss_experts;
    if (dp->zero > 0) group_allreduce_sum_f64(GROUP_DPCP, &ss, 1);
    group_allreduce_sum_f64(GROUP_PP, &ss, 1);  // stages hold different parameters
    group_allreduce_sum_f64(GROUP_TP, &ss, 1);  // and tensor-parallel ranks different slices
    return sqrt(ss);
}

// AdamW over the GLOBAL flat range [lo, hi), with the four local buffers addressed
// relative to lo, on the gradients times clip (the clipping coefficient, or 1). Weight
// decay depends on the tensor; the update is element-wise, so each run of adjacent
// tensors that share their decay is one adamw_update (one launch on a GPU: about 4
// per layer instead of 9), with the same bits as tensor by tensor.
static void adamw_range(const LlamaModel *m, size_t lo, size_t hi, float *p, const float *g,
                        float *mom1, float *mom2, float clip, float lr, const TrainingConfig *tc,
                        int step) {
    size_t run_a = 0, run_b = 0;  // the run so far, [run_a, run_b) global; empty when equal
    int run_decay = 0;
    for (int i = 0; i <= m->n_params; i++) {
        size_t a = 0, b = 0;
        int decay = 0;
        if (i < m->n_params) {
            const ParamInfo *pi = &m->params[i];
            a = pi->offset > lo ? pi->offset : lo;
            b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
            decay = pi->weight_decay != 0;
            if (a >= b) continue;
            if (run_b > run_a && a == run_b && decay == run_decay) {  // extends the run
                run_b = b;
                continue;
            }
        }
        if (run_b > run_a) {  // the run ends here
            const size_t o = run_a - lo;
            adamw_update(p + o, g + o, mom1 + o, mom2 + o, run_b - run_a, clip, lr, (float)tc->beta1,
                         (float)tc->beta2, (float)tc->eps, run_decay ? (float)tc->weight_decay : 0.0f, step);
        }
        run_a = a, run_b = b, run_decay = decay;
    }
}

void dp_clip_and_update(DataParallel *dp, double clip_coef, float lr, const TrainingConfig *tc,
                        int step) {
    const LlamaModel *m = dp->model;
    // torch.nn.utils.clip_grad_norm_ scales the gradients by clip_coef when it is
    // below 1; AdamW reads each gradient once anyway, so it applies the factor.
    const float clip = clip_coef < 1.0 ? (float)clip_coef : 1.0f;
    if (dp->zero == 0) {
        for (int k = 0; k < dp->n_buckets; k++) {
            const Bucket *b = &dp->buckets[k];
            adamw_range(m, b->glo, b->glo + (b->hi - b->lo), dp->params + b->lo, dp->grads + b->lo,
                        dp->m + b->lo, dp->v + b->lo, clip, lr, tc, step);
        }
        return;
    }
    for (int k = 0; k < dp->n_buckets; k++) {
        const Bucket *b = &dp->buckets[k];
        float *p = dp->zero == 3 ? dp->params + b->shard_off : dp->params + b->own_lo;
        adamw_range(m, b->glo + (b->own_lo - b->lo), b->glo + (b->own_hi - b->lo), p,
                    dp_owned_grads(dp, b),
                    dp->m + b->shard_off, dp->v + b->shard_off, clip, lr, tc, step);
    }
    if (dp->zero == 3) return;  // parameters stay sharded until a unit is used
    // ZeRO-1/2: every rank updated its own part in place; gather the rest.
    for (int k = 0; k < dp->n_buckets; k++) {
        Bucket *b = &dp->buckets[k];
        b->req = group_iallgather_split_f32(b->group, dp->params + b->lo, b->hi - b->lo);
    }
    for (int k = 0; k < dp->n_buckets; k++) comm_wait(&dp->buckets[k].req, "parameter all-gather");
}
