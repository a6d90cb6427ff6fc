// engines/data_parallel_update.c — after the step's reductions: the global
// gradient norm, clipping, and AdamW on what this rank owns under its ZeRO stage
// (the table in data_parallel.h), then the parameter all-gather (ZeRO-1/2).
#include "engines/data_parallel.h"

#include <math.h>

#include "ops/ops.h"
#include "util.h"

// Runs of tensors over the GLOBAL flat range [lo, hi): maximal stretches of adjacent
// tensors with the same key (key < 0: the tensor is left out), clipped to the range,
// in model order. The per-tensor optimizer ops are element-wise or sums, so one op
// per run does what one per tensor did, with one launch on a GPU instead of several.
typedef struct {
    size_t a, b;  // [a, b), global
    int key;
} Run;

// The next run from tensor *i on into r: 1, or 0 when there is none left.
static int next_run(const LlamaModel *m, size_t lo, size_t hi, int (*key)(const ParamInfo *), int *i, Run *r) {
    *r = (Run){0, 0, 0};
    for (; *i < m->n_params; (*i)++) {
        const ParamInfo *pi = &m->params[*i];
        const size_t a = pi->offset > lo ? pi->offset : lo;
        const size_t b = pi->offset + pi->numel < hi ? pi->offset + pi->numel : hi;
        const int k = key(pi);
        if (a >= b || k < 0) continue;
        if (r->b > r->a) {
            if (a != r->b || k != r->key) return 1;  // tensor *i starts the next run
            r->b = b;
        } else {
            *r = (Run){a, b, k};
        }
    }
    return r->b > r->a;
}

// Tensor-parallel replicas count once, on their writer; weight decay by tensor.
static int counted_key(const ParamInfo *pi) { return pi->replica_writer ? 0 : -1; }
static int decay_key(const ParamInfo *pi) { return pi->weight_decay != 0; }

// *acc += the sum of squares of g over the model-order range [lo, hi) (local buffer
// g at lo), counting a replicated tensor on one tensor-parallel rank only (the same
// double sum as tensor by tensor, up to its grouping).
static void sumsq_range(const LlamaModel *m, size_t lo, size_t hi, const float *g, double *acc) {
    Run r;
    for (int i = 0; next_run(m, lo, hi, counted_key, &i, &r);) sum_squares(g + (r.a - lo), r.b - r.a, acc);
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
// relative to lo, on the gradients times clip (the clipping coefficient, or 1), one
// update per run of tensors sharing their weight decay (about 4 per layer instead
// of 9; element-wise, so the same bits as tensor by tensor).
static void adamw_range(const LlamaModel *m, size_t lo, size_t hi, float *p, const float *g,
                        float *mom1, float *mom2, float clip, float lr, const TrainingConfig *tc,
                        int step) {
    Run r;
    for (int i = 0; next_run(m, lo, hi, decay_key, &i, &r);) {
        const size_t o = r.a - lo;
        adamw_update(p + o, g + o, mom1 + o, mom2 + o, r.b - r.a, clip, lr, (float)tc->beta1, (float)tc->beta2,
                     (float)tc->eps, r.key ? (float)tc->weight_decay : 0.0f, step);
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
