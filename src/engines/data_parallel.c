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

// Windows (ZeRO-2/3), each the size of the largest bucket. The model holds one
// unit or piece at a time (model/llama.c), so ZeRO-3 needs one parameter window;
// gradients need the one being filled and one whose reduce-scatter is in flight
// (a third request waits for the oldest reduction to land).
#define DP_PARAM_WINDOWS 1
#define DP_GRAD_WINDOWS 2
#define DP_MAX_WINDOWS 4  // expert parallelism: one more of each (two pieces per layer)

// ------------------------------------------------------------------ buckets

// The pieces this rank holds, in flat order (model/param_access.h): every held unit
// in one piece, except that under ZeRO-2/3 the row tables (embedding, final norm +
// head) come in pieces no larger than a bucket or a layer, whichever is smaller, so
// that no window is ever larger than that.
static void make_pieces(DataParallel *dp, double bucket_mb, const int *held) {
    const LlamaModel *m = dp->model;
    const int nu = m->n_units;
    size_t layer = 0;  // the largest layer unit
    for (int u = 1; u <= m->L; u++)
        if (m->unit_lo[u + 1] - m->unit_lo[u] > layer) layer = m->unit_lo[u + 1] - m->unit_lo[u];
    const size_t bucket = (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    dp->piece_max = dp->zero >= 2 ? (bucket < layer ? bucket : layer) : 0;
    dp->unit_piece0 = xmalloc(sizeof(int) * (size_t)nu, "unit pieces");  // (n_units)
    int np = 0;
    for (int u = 0; u < nu; u++) {
        dp->unit_piece0[u] = -1;
        if (held && !held[u]) continue;
        dp->unit_piece0[u] = np;
        np += llama_unit_n_pieces(m, u, dp->piece_max);
    }
    dp->n_pieces = np;
    const size_t n1 = (size_t)(np > 0 ? np : 1);
    dp->piece_unit = xmalloc(sizeof(int) * n1, "piece units");           // (n_pieces)
    dp->piece_uses = xmalloc(sizeof(int) * n1, "piece uses");            // (n_pieces)
    dp->piece_expert = xmalloc(sizeof(int) * n1, "piece groups");        // (n_pieces)
    dp->piece_local = xmalloc(sizeof(size_t) * n1, "piece offsets");     // (n_pieces)
    dp->piece_glo = xmalloc(sizeof(size_t) * n1, "piece offsets");       // (n_pieces)
    dp->piece_len = xmalloc(sizeof(size_t) * n1, "piece lengths");       // (n_pieces)
    dp->bucket_of_piece = xmalloc(sizeof(int) * n1, "piece buckets");    // (n_pieces)
    // A tied embedding used by this rank's embedding and head (one stage) gets two
    // hand-overs per micro-batch (model/param_access.h).
    const int both = m->cfg.tie_word_embeddings && (!held || (held[0] == 1 && held[m->L + 1]));
    size_t local = 0;
    for (int u = 0, p = 0; u < nu; u++) {
        if (dp->unit_piece0[u] < 0) continue;
        for (int k = 0; k < llama_unit_n_pieces(m, u, dp->piece_max); k++, p++) {
            size_t lo, hi;
            llama_unit_piece(m, u, dp->piece_max, k, &lo, &hi);
            dp->piece_unit[p] = u;
            dp->piece_uses[p] = u == 0 && both ? 2 : 1;
            dp->piece_expert[p] = k == 1 && llama_unit_split_experts(m, u);  // the experts' piece
            dp->piece_glo[p] = lo;
            dp->piece_len[p] = hi - lo;
            dp->piece_local[p] = local;
            local += hi - lo;
        }
    }
    dp->n_elements = local;
}

// Group whole held pieces into buckets of about `bytes`, walking from the last
// (first to get its gradients) to the first; a bucket never spans a unit this rank
// does not hold (pipeline chunks), a tied embedding's pieces are buckets of their
// own (aligned owned parts on both stages that hold it; one hand-over per bucket
// per use), and ZeRO-3 uses one piece per bucket.
static void make_buckets(DataParallel *dp, double bucket_mb, const int *held) {
    make_pieces(dp, bucket_mb, held);
    const int tied = dp->model->cfg.tie_word_embeddings, np = dp->n_pieces;
    const size_t limit = dp->zero == 3 ? 1 : (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
    const size_t n1 = (size_t)(np > 0 ? np : 1);
    int *first = xmalloc(sizeof(int) * n1, "bucket plan");  // (n_pieces) first piece of each
    int *last = xmalloc(sizeof(int) * n1, "bucket plan");   // (n_pieces) last piece of each
    int nb = 0, open_last = -1;
    size_t acc = 0;
    for (int p = np - 1; p >= 0; p--) {
        if (open_last < 0) open_last = p;
        acc += dp->piece_len[p];
        const int u = dp->piece_unit[p];
        // The next piece down joins this bucket when it is globally adjacent (same
        // unit, or the unit below), neither is a tied embedding's piece, and both are
        // reduced over the same group (experts or not).
        const int joins = p > 0 && dp->piece_unit[p - 1] >= u - 1 && !(tied && (u == 0 || dp->piece_unit[p - 1] == 0)) &&
                          dp->piece_expert[p - 1] == dp->piece_expert[p];
        if (acc >= limit || !joins) {
            first[nb] = p;
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
        b->piece_first = first[nb - 1 - k];
        b->piece_last = last[nb - 1 - k];
        b->unit_first = dp->piece_unit[b->piece_first];
        b->glo = dp->piece_glo[b->piece_first];
        b->lo = dp->piece_local[b->piece_first];
        b->hi = dp->piece_local[b->piece_last] + dp->piece_len[b->piece_last];
        const int expert = dp->piece_expert[b->piece_first];
        b->group = expert ? GROUP_EDP : GROUP_DPCP;
        b->gn = expert ? dp->edp_n : dp->n;
        b->grank = expert ? dp->edp_rank : dp->rank;
        size_t len = b->hi - b->lo, chunk = comm_split_chunk(len, b->gn);
        size_t start = (size_t)b->grank * chunk;
        b->own_lo = b->lo + (start < len ? start : len);
        b->own_hi = b->own_lo + comm_split_part(len, b->gn, b->grank);
        b->shard_off = shard_off;
        shard_off += b->own_hi - b->own_lo;
        b->req = COMM_REQUEST_IDLE;
        for (int p = b->piece_first; p <= b->piece_last; p++) {
            dp->bucket_of_piece[p] = k;
            b->uses += dp->piece_uses[p];
        }
    }
    dp->shard_n = shard_off;
    free(first);
    free(last);
}

// ------------------------------------------------------------- window pools

size_t dp_window_elements(const DataParallel *dp) {
    size_t max_len = 0;  // the largest bucket: every window holds any bucket
    for (int k = 0; k < dp->n_buckets; k++) {
        size_t len = dp->buckets[k].hi - dp->buckets[k].lo;
        max_len = len > max_len ? len : max_len;
    }
    return max_len;
}

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
        pool_give(dp->grad_pool, dp->grad_pool_used, dp->n_grad_windows, b->flight_window);
        b->flight_window = NULL;
    }
}

static void launch_bucket(DataParallel *dp, Bucket *b) {
    const size_t len = b->hi - b->lo, own = b->own_hi - b->own_lo;
    if (b->req.slot >= 0) complete_bucket(dp, b);  // the previous round must land first
    if (dp->zero == 0) {
        b->req = group_iallreduce_sum_f32(b->group, dp->grads + b->lo, len);
    } else if (dp->zero == 1) {
        b->req = group_ireduce_scatter_split_f32(b->group, NULL, dp->grads + b->lo, len);
    } else {
        // No whole gradient buffer: the reduce-scatter of every micro-batch lands in
        // the owned part. To accumulate over micro-batches without a second buffer,
        // this rank first adds what it already holds into its own part of the window:
        // the sum over ranks then includes it exactly once.
        float *mine = b->grad_window + (b->own_lo - b->lo);
        const float *held = dp->shard_grads + b->shard_off;
        if (b->rounds > 0) residual_forward(mine, mine, held, own);
        b->req = group_ireduce_scatter_split_f32(b->group, b->grad_window,
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

// Index of piece k of unit u among the held pieces (fatal when not held).
static int piece_of(const DataParallel *dp, int unit, int k) {
    if (dp->unit_piece0[unit] < 0) die("unit %d is not held by this rank", unit);
    return dp->unit_piece0[unit] + k;
}

static const float *acquire_piece(void *ctx, int unit, int k) {
    DataParallel *dp = ctx;
    const int p = piece_of(dp, unit, k);
    if (dp->zero < 3) return dp->params + dp->piece_local[p];
    Bucket *b = &dp->buckets[dp->bucket_of_piece[p]];
    if (b->param_refs++ == 0) {
        // ZeRO-3: gather the piece from every rank's owned part, just before use.
        b->param_window = pool_take(dp->param_pool, dp->param_pool_used, dp->n_param_windows);
        if (!b->param_window) die("ZeRO-3: more than %d units or pieces held at once", dp->n_param_windows);
        copy_f32(b->param_window + (b->own_lo - b->lo), dp->params + b->shard_off,
                 b->own_hi - b->own_lo);
        CommRequest r = group_iallgather_split_f32(b->group, b->param_window, b->hi - b->lo);
        comm_wait(&r, "ZeRO-3 parameter all-gather");
    }
    return b->param_window + (dp->piece_local[p] - b->lo);
}

static void release_piece(void *ctx, int unit, int k) {
    DataParallel *dp = ctx;
    if (dp->zero < 3) return;
    Bucket *b = &dp->buckets[dp->bucket_of_piece[piece_of(dp, unit, k)]];
    if (--b->param_refs == 0) {  // freed after use: only one piece is ever whole
        pool_give(dp->param_pool, dp->param_pool_used, dp->n_param_windows, b->param_window);
        b->param_window = NULL;
    }
}

static float *piece_grads(void *ctx, int unit, int k) {
    DataParallel *dp = ctx;
    const int p = piece_of(dp, unit, k);
    if (dp->zero < 2) return dp->grads + dp->piece_local[p];
    Bucket *b = &dp->buckets[dp->bucket_of_piece[p]];
    if (!b->grad_window) {
        float *w;
        while (!(w = pool_take(dp->grad_pool, dp->grad_pool_used, dp->n_grad_windows))) {
            // Every window is busy: finish a reduction in flight (the highest bucket,
            // usually the oldest, since backward walks downwards) to free one.
            int j = dp->n_buckets - 1;
            while (j >= 0 && !(dp->buckets[j].req.slot >= 0 && dp->buckets[j].flight_window)) j--;
            if (j < 0) die("ZeRO-%d: no gradient window free and none in flight", dp->zero);
            complete_bucket(dp, &dp->buckets[j]);
        }
        zero_f32(w, b->hi - b->lo);
        b->grad_window = w;
    }
    return b->grad_window + (dp->piece_local[p] - b->lo);
}

// A bucket is reduced once all its pieces have this micro-batch's gradients
// (stage 2-3: every hand-over of a bucket's pieces; a tied embedding's piece, alone
// in its bucket, is reduced after each of its uses, the second round adding to the
// first) or every micro-batch's (stage 0-1: each piece's uses x micro-batches).
static void piece_grads_done(void *ctx, int unit, int k) {
    DataParallel *dp = ctx;
    Bucket *b = &dp->buckets[dp->bucket_of_piece[piece_of(dp, unit, k)]];
    const int pieces = b->piece_last - b->piece_first + 1;
    b->done++;
    int ready = dp->zero >= 2 ? b->done % pieces == 0 : b->done == b->uses * dp->micros;
    if (ready && (dp->overlap || dp->zero >= 2)) launch_bucket(dp, b);
    progress(dp);
}

// Units in one piece (layers) through the piece calls.
static int whole_unit(const DataParallel *dp, int unit) {
    if (llama_unit_n_pieces(dp->model, unit, dp->piece_max) != 1)
        die("unit %d is handed out in pieces; the model must ask for its pieces", unit);
    return unit;
}
static const float *acquire_params(void *ctx, int unit) { return acquire_piece(ctx, whole_unit(ctx, unit), 0); }
static void release_params(void *ctx, int unit) { release_piece(ctx, unit, 0); }
static float *unit_grads(void *ctx, int unit) { return piece_grads(ctx, whole_unit(ctx, unit), 0); }
static void grads_done(void *ctx, int unit) { piece_grads_done(ctx, unit, 0); }

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
    // Ranks holding the same experts: every ep-th index of dp x cp (dist/grid.h).
    const int ep = model->ep.size > 0 ? model->ep.size : 1;
    dp->edp_n = n / ep;
    dp->edp_rank = rank / ep;
    dp->overlap = pc->overlap;
    // Shared when another rank holds the other use: the copy here (held 2), or the
    // embedding here without the head (zb-v's rank 0 holds both: nothing shared).
    dp->embed_shared = model->cfg.tie_word_embeddings && pc->pp > 1 && held && held[0] &&
                       (held[0] == 2 || !held[model->L + 1]);
    dp->embed_copy = held && held[0] == 2;
    make_buckets(dp, pc->bucket_mb, held);
    // Window pools (stage 2-3 gradients, stage 3 parameters): the pointer tables
    // are bookkeeping, the windows themselves planned buffers (plan_buffers).
    // A layer in two pieces (expert parallelism) is held and filled two pieces at once.
    const int at_once = model->E > 0 && ep > 1 ? 2 : 1;
    dp->n_grad_windows = dp->zero >= 2 ? DP_GRAD_WINDOWS + at_once - 1 : 0;
    dp->n_param_windows = dp->zero == 3 ? DP_PARAM_WINDOWS * at_once : 0;
    // ZeRO-3 keeps P/n of the P parameters and gradients a ZeRO-1 rank holds whole:
    // it saves 2P(1 - 1/n) elements and spends its windows. When three windows
    // would spend more than that (a stage of one or two layers at dp 2), one
    // gradient window: reductions no longer overlap the next piece's backward, but
    // ZeRO-3 never needs more memory than ZeRO-1 (one parameter window and one
    // gradient window are at most 2 layers <= 2P(1 - 1/n) for any stage holding a
    // layer, n >= 2).
    if (dp->zero == 3) {
        const double saved = 2.0 * (double)dp->n_elements * (dp->n - 1) / dp->n;
        if ((double)(dp->n_param_windows + dp->n_grad_windows) * (double)dp_window_elements(dp) > saved)
            dp->n_grad_windows = at_once;
    }
    dp->grad_pool = xcalloc(sizeof(float *) * DP_MAX_WINDOWS, "window pool");      // (n_grad_windows)
    dp->grad_pool_used = xcalloc(sizeof(int) * DP_MAX_WINDOWS, "window pool");     // (n_grad_windows)
    dp->param_pool = xcalloc(sizeof(float *) * DP_MAX_WINDOWS, "window pool");    // (n_param_windows)
    dp->param_pool_used = xcalloc(sizeof(int) * DP_MAX_WINDOWS, "window pool");   // (n_param_windows)
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
    const size_t max_len = dp_window_elements(dp);
    for (int i = 0; i < dp->n_grad_windows; i++)
        dp->grad_pool[i] = buf_take(plan_only, MEM_COMM, f * max_len, "gradient window");  // (max bucket)
    for (int i = 0; i < dp->n_param_windows; i++)
        dp->param_pool[i] = buf_take(plan_only, MEM_COMM, f * max_len, "parameter window");  // (max bucket)
}

void dp_init(DataParallel *dp, const LlamaModel *model, const ParallelConfig *pc, const int *held,
             int n, int rank, MemTally *plan_only) {
    plan_buckets(dp, model, pc, held, n, rank);
    plan_buffers(dp, plan_only);
    ParamAccess pa = {dp,          dp->piece_max, acquire_params, release_params,   unit_grads,
                      grads_done,  acquire_piece, release_piece,  piece_grads,      piece_grads_done};
    dp->access = pa;
}

void dp_free(DataParallel *dp) {
    for (int i = 0; i < dp->n_grad_windows; i++) buf_free(dp->grad_pool[i]);
    for (int i = 0; i < dp->n_param_windows; i++) buf_free(dp->param_pool[i]);
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
    free(dp->unit_piece0);
    free(dp->piece_unit);
    free(dp->piece_uses);
    free(dp->piece_expert);
    free(dp->piece_local);
    free(dp->piece_glo);
    free(dp->piece_len);
    free(dp->bucket_of_piece);
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
        // head gradient (last stage), the same part of the same tensor on both
        // (its pieces are buckets of their own, cut alike on both stages).
        for (int k = 0; k < dp->n_buckets; k++) {
            const Bucket *b = &dp->buckets[k];
            if (b->unit_first != 0) continue;
            if (dp->zero == 0)
                group_allreduce_sum_f32(GROUP_EMBED, dp->grads + b->lo, b->hi - b->lo);
            else
                group_allreduce_sum_f32(GROUP_EMBED, dp_owned_grads(dp, b), b->own_hi - b->own_lo);
        }
    }
}
