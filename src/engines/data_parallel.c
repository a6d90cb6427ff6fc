// engines/data_parallel.c — the data-parallel engine's plan and step: buckets,
// owned parts, planned buffers, the ParamAccess the model calls, and the bucketed
// gradient reduction overlapped with backward, for ZeRO-0/1/2/3. The table in
// data_parallel.h says who holds what at each stage; the update after the step is
// in data_parallel_update.c, parameter init and checkpoint pieces in
// data_parallel_pieces.c.
#include "engines/data_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "util.h"

#define DP_WINDOWS 3  // held tied embedding + the unit in use + one in flight

// ------------------------------------------------------------------ buckets

// Group whole held units into buckets of about `bytes`, walking from the last unit
// (first to get its gradients) to the first; a bucket never spans a unit this rank
// does not hold (pipeline chunks), and ZeRO-3 uses one unit per bucket.
static void make_buckets(DataParallel *dp, double bucket_mb, const int *held) {
    const LlamaModel *m = dp->model;
    const size_t limit = dp->zero == 3 ? 1 : (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    const int nu = m->n_units;
    dp->bucket_of_unit = xmalloc(sizeof(int) * (size_t)nu, "bucket of unit");    // (n_units)
    dp->unit_local = xcalloc(sizeof(size_t) * (size_t)nu, "unit local offsets");  // (n_units)
    size_t local = 0;
    for (int u = 0; u < nu; u++) {
        dp->bucket_of_unit[u] = -1;
        if (held && !held[u]) continue;
        dp->unit_local[u] = local;
        local += m->unit_lo[u + 1] - m->unit_lo[u];
    }
    dp->n_elements = local;
    // Bucket boundaries, from the end: a bucket closes when it reaches the size
    // limit, or when the next unit down is not held or not adjacent.
    int *first = xmalloc(sizeof(int) * (size_t)nu, "bucket plan");  // (n_units) first unit of each
    int *last = xmalloc(sizeof(int) * (size_t)nu, "bucket plan");   // (n_units) last unit of each
    int nb = 0, open_last = -1;
    size_t acc = 0;
    for (int u = nu - 1; u >= 0; u--) {
        if (held && !held[u]) continue;
        if (open_last < 0) open_last = u;
        acc += m->unit_lo[u + 1] - m->unit_lo[u];
        // A shared tied embedding is a bucket of its own (aligned owned parts).
        int next_held = u > 0 && (!held || held[u - 1]) && !(u == 1 && dp->embed_shared);
        if (acc >= limit || !next_held) {
            first[nb] = u;
            last[nb++] = open_last;
            open_last = -1;
            acc = 0;
        }
    }
    dp->n_buckets = nb;
    dp->buckets = xcalloc(sizeof(Bucket) * (size_t)(nb > 0 ? nb : 1), "buckets");
    size_t shard_off = 0;
    for (int k = 0; k < nb; k++) {  // reverse into flat order
        Bucket *b = &dp->buckets[k];
        b->unit_first = first[nb - 1 - k];
        b->unit_last = last[nb - 1 - k];
        b->glo = m->unit_lo[b->unit_first];
        b->lo = dp->unit_local[b->unit_first];
        b->hi = b->lo + (m->unit_lo[b->unit_last + 1] - b->glo);
        size_t len = b->hi - b->lo, chunk = comm_split_chunk(len, dp->n);
        size_t start = (size_t)dp->rank * chunk;
        b->own_lo = b->lo + (start < len ? start : len);
        b->own_hi = b->own_lo + comm_split_part(len, dp->n, dp->rank);
        b->shard_off = shard_off;
        shard_off += b->own_hi - b->own_lo;
        b->req = COMM_REQUEST_IDLE;
        for (int u = b->unit_first; u <= b->unit_last; u++) dp->bucket_of_unit[u] = k;
    }
    dp->shard_n = shard_off;
    free(first);
    free(last);
}

// ------------------------------------------------------------- window pools

static float *pool_take(float **pool, int *used, int n) {
    for (int i = 0; i < n; i++)
        if (!used[i]) {
            used[i] = 1;
            return pool[i];
        }
    return NULL;
}

static void pool_give(float **pool, int *used, int n, const float *w) {
    for (int i = 0; i < n; i++)
        if (pool[i] == w) used[i] = 0;
}

// ------------------------------------------------------------- reductions

float *dp_owned_grads(const DataParallel *dp, const Bucket *b) {
    return dp->zero == 1 ? dp->grads + b->own_lo : dp->shard_grads + b->shard_off;
}

static void complete_bucket(DataParallel *dp, Bucket *b) {
    int was_active = b->req.slot >= 0;
    comm_wait(&b->req, "gradient reduction");
    // Stage 1 reduce-scatters in place: MPI leaves this rank's reduced part at the
    // start of the bucket; move it where it belongs.
    if (was_active && dp->zero == 1 && b->own_lo != b->lo)
        move_f32(dp->grads + b->own_lo, dp->grads + b->lo, b->own_hi - b->own_lo);
    if (b->flight_window) {
        pool_give(dp->grad_pool, dp->grad_pool_used, dp->n_windows, b->flight_window);
        b->flight_window = NULL;
    }
}

static void launch_bucket(DataParallel *dp, Bucket *b) {
    const size_t len = b->hi - b->lo, own = b->own_hi - b->own_lo;
    if (b->req.slot >= 0) complete_bucket(dp, b);  // the previous round must land first
    if (dp->zero == 0) {
        b->req = group_iallreduce_sum_f32(GROUP_DPCP, dp->grads + b->lo, len);
    } else if (dp->zero == 1) {
        b->req = group_ireduce_scatter_split_f32(GROUP_DPCP, NULL, dp->grads + b->lo, len);
    } else {
        // No whole gradient buffer: the reduce-scatter of every micro-batch lands in
        // the owned part. To accumulate over micro-batches without a second buffer,
        // this rank first adds what it already holds into its own part of the window:
        // the sum over ranks then includes it exactly once.
        float *mine = b->grad_window + (b->own_lo - b->lo);
        const float *held = dp->shard_grads + b->shard_off;
        if (b->rounds > 0) residual_forward(mine, mine, held, own);
        b->req = group_ireduce_scatter_split_f32(GROUP_DPCP, b->grad_window,
                                                 dp_owned_grads(dp, b), len);
        // The next micro-batch's gradients for this bucket go to a fresh window.
        b->flight_window = b->grad_window;
        b->grad_window = NULL;
    }
    b->rounds++;
    if (!dp->overlap) complete_bucket(dp, b);
}

// Let MPI move in-flight reductions along (Open MPI progresses non-blocking
// collectives only inside MPI calls).
static void progress(DataParallel *dp) {
    for (int k = 0; k < dp->n_buckets; k++)
        if (dp->buckets[k].req.slot >= 0) comm_test(&dp->buckets[k].req);
}

// ------------------------------------------------------------ ParamAccess

static const float *acquire_params(void *ctx, int unit) {
    DataParallel *dp = ctx;
    if (dp->bucket_of_unit[unit] < 0) die("unit %d is not held by this rank", unit);
    if (dp->zero < 3) return dp->params + dp->unit_local[unit];
    Bucket *b = &dp->buckets[dp->bucket_of_unit[unit]];
    if (b->param_refs++ == 0) {
        // ZeRO-3: gather the unit from every rank's owned part, just before use.
        b->param_window = pool_take(dp->param_pool, dp->param_pool_used, dp->n_windows);
        if (!b->param_window) die("ZeRO-3: more than %d units held at once", dp->n_windows);
        copy_f32(b->param_window + (b->own_lo - b->lo), dp->params + b->shard_off,
                 b->own_hi - b->own_lo);
        CommRequest r = group_iallgather_split_f32(GROUP_DPCP, b->param_window, b->hi - b->lo);
        comm_wait(&r, "ZeRO-3 parameter all-gather");
    }
    return b->param_window + (dp->unit_local[unit] - b->lo);
}

static void release_params(void *ctx, int unit) {
    DataParallel *dp = ctx;
    if (dp->zero < 3) return;
    Bucket *b = &dp->buckets[dp->bucket_of_unit[unit]];
    if (--b->param_refs == 0) {  // freed after use: only a few units are ever whole
        pool_give(dp->param_pool, dp->param_pool_used, dp->n_windows, b->param_window);
        b->param_window = NULL;
    }
}

static float *unit_grads(void *ctx, int unit) {
    DataParallel *dp = ctx;
    if (dp->zero < 2) return dp->grads + dp->unit_local[unit];
    Bucket *b = &dp->buckets[dp->bucket_of_unit[unit]];
    if (!b->grad_window) {
        float *w;
        while (!(w = pool_take(dp->grad_pool, dp->grad_pool_used, dp->n_windows))) {
            // Every window is busy: finish the oldest reduction in flight (the
            // highest bucket, since backward walks downwards) to free one.
            int k = dp->n_buckets - 1;
            while (k >= 0 && !(dp->buckets[k].req.slot >= 0 && dp->buckets[k].flight_window)) k--;
            if (k < 0) die("ZeRO-%d: no gradient window free and none in flight", dp->zero);
            complete_bucket(dp, &dp->buckets[k]);
        }
        zero_f32(w, b->hi - b->lo);
        b->grad_window = w;
    }
    return b->grad_window + (dp->unit_local[unit] - b->lo);
}

// A bucket is reduced once all its units have this micro-batch's gradients
// (stage 2-3) or every micro-batch's (stage 0-1).
static void grads_done(void *ctx, int unit) {
    DataParallel *dp = ctx;
    Bucket *b = &dp->buckets[dp->bucket_of_unit[unit]];
    const int units = b->unit_last - b->unit_first + 1;
    b->done++;
    int ready = dp->zero >= 2 ? b->done % units == 0 : b->done == units * dp->micros;
    if (ready && (dp->overlap || dp->zero >= 2)) launch_bucket(dp, b);
    progress(dp);
}

// ------------------------------------------------------------------- setup

// The plan: buckets, owned parts and window counts from the group size n and this
// rank's index in it. Pure bookkeeping, no MPI and no planned buffer.
static void plan_buckets(DataParallel *dp, const LlamaModel *model, const ParallelConfig *pc,
                         const int *held, int n, int rank) {
    memset(dp, 0, sizeof *dp);
    dp->model = model;
    dp->zero = pc->zero;
    dp->n = n;
    dp->rank = rank;
    dp->overlap = pc->overlap;
    // Shared when another rank holds the other use: the copy here (held 2), or the
    // embedding here without the head (zb-v's rank 0 holds both: nothing shared).
    dp->embed_shared = model->cfg.tie_word_embeddings && pc->pp > 1 && held && held[0] &&
                       (held[0] == 2 || !held[model->L + 1]);
    dp->embed_copy = held && held[0] == 2;
    make_buckets(dp, pc->bucket_mb, held);
    // Window pools (stage 2-3): the pointer tables are bookkeeping, the windows
    // themselves planned buffers (plan_buffers).
    dp->n_windows = dp->zero >= 2 ? DP_WINDOWS : 0;
    if (dp->n_windows) {
        dp->grad_pool = xcalloc(sizeof(float *) * DP_WINDOWS, "window pool");     // (n_windows)
        dp->grad_pool_used = xcalloc(sizeof(int) * DP_WINDOWS, "window pool");    // (n_windows)
        dp->param_pool = xcalloc(sizeof(float *) * DP_WINDOWS, "window pool");    // (n_windows)
        dp->param_pool_used = xcalloc(sizeof(int) * DP_WINDOWS, "window pool");   // (n_windows)
    }
}

// Every planned buffer of a planned engine (the table in data_parallel.h), allocated
// (plan_only NULL) or only added up by kind: the trainer and the planner run this
// same code, so what is allocated is what is predicted.
static void plan_buffers(DataParallel *dp, MemTally *plan_only) {
    const size_t f = sizeof(float), n = dp->n_elements, s = dp->shard_n;
    dp->params = buf_take(plan_only, MEM_PARAMS, f * (dp->zero == 3 ? s : n), "parameters");
    if (dp->zero < 2) dp->grads = buf_take(plan_only, MEM_GRADS, f * n, "gradients");
    if (dp->zero >= 2) dp->shard_grads = buf_take(plan_only, MEM_GRADS, f * s, "gradient shard");
    dp->m = buf_take(plan_only, MEM_OPTIMIZER, f * (dp->zero == 0 ? n : s), "AdamW first moments");
    dp->v = buf_take(plan_only, MEM_OPTIMIZER, f * (dp->zero == 0 ? n : s), "AdamW second moments");
    size_t max_len = 0;  // the largest bucket: every window holds any bucket
    for (int k = 0; k < dp->n_buckets; k++) {
        size_t len = dp->buckets[k].hi - dp->buckets[k].lo;
        max_len = len > max_len ? len : max_len;
    }
    for (int i = 0; i < dp->n_windows; i++) {
        dp->grad_pool[i] = buf_take(plan_only, MEM_COMM, f * max_len, "gradient window");  // (max bucket)
        if (dp->zero == 3)
            dp->param_pool[i] = buf_take(plan_only, MEM_COMM, f * max_len, "parameter window");  // (max bucket)
    }
}

void dp_init(DataParallel *dp, const LlamaModel *model, const ParallelConfig *pc, const int *held,
             int n, int rank, MemTally *plan_only) {
    plan_buckets(dp, model, pc, held, n, rank);
    plan_buffers(dp, plan_only);
    ParamAccess pa = {dp, acquire_params, release_params, unit_grads, grads_done};
    dp->access = pa;
}

void dp_free(DataParallel *dp) {
    for (int i = 0; i < dp->n_windows; i++) {
        buf_free(dp->grad_pool[i]);
        buf_free(dp->param_pool[i]);
    }
    free(dp->grad_pool);
    free(dp->grad_pool_used);
    free(dp->param_pool);
    free(dp->param_pool_used);
    buf_free(dp->params);
    buf_free(dp->grads);
    buf_free(dp->shard_grads);
    buf_free(dp->m);
    buf_free(dp->v);
    free(dp->buckets);
    free(dp->bucket_of_unit);
    free(dp->unit_local);
    memset(dp, 0, sizeof *dp);
}

// --------------------------------------------------------------- the step

void dp_begin_step(DataParallel *dp, int micros) {
    dp->micros = micros;
    for (int k = 0; k < dp->n_buckets; k++) {
        dp->buckets[k].done = 0;
        dp->buckets[k].rounds = 0;
    }
    if (dp->grads) zero_f32(dp->grads, dp->n_elements);
    if (dp->shard_grads) zero_f32(dp->shard_grads, dp->shard_n);
}

void dp_finish_grads(DataParallel *dp) {
    // Without overlap, stages 0-1 reduce everything now, after backward.
    if (!dp->overlap && dp->zero < 2)
        for (int k = dp->n_buckets - 1; k >= 0; k--) launch_bucket(dp, &dp->buckets[k]);
    for (int k = dp->n_buckets - 1; k >= 0; k--) complete_bucket(dp, &dp->buckets[k]);
    if (dp->embed_shared) {
        // Tied embedding on two stages: the embedding gradient (first stage) plus the
        // head gradient (last stage), the same part of the same tensor on both.
        const Bucket *b = &dp->buckets[dp->bucket_of_unit[0]];
        if (dp->zero == 0)
            group_allreduce_sum_f32(GROUP_EMBED, dp->grads + b->lo, b->hi - b->lo);
        else
            group_allreduce_sum_f32(GROUP_EMBED, dp_owned_grads(dp, b), b->own_hi - b->own_lo);
    }
}
