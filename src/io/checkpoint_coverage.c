// io/checkpoint_coverage.c — the collective save's check that the pieces of all
// ranks write every global element exactly once: piece metadata gathered from
// every rank, judged on rank 0 against every tensor-parallel rank's table.
#include "io/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>

#include "dist/comm.h"
#include "io/checkpoint_internal.h"
#include "util.h"

// Global elements piece pc puts into the file: its elements minus vocab padding
// and minus replicas another tensor-parallel rank writes.
static size_t global_written(const CkptPiece *pc, const LlamaModel *model) {
    size_t total = 0, a, b;
    Block blk[3];
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        if (!p->replica_writer || !ckpt_piece_in_tensor(pc, p, &a, &b)) continue;
        int nb = ckpt_map_range(p, a, b, blk);
        for (int k = 0; k < nb; k++)
            if (blk[k].g >= 0) total += blk[k].len * blk[k].n_runs;
    }
    return total;
}

// The model tensor holding flat element e (e < num_elements), for messages.
static const char *tensor_at(const LlamaModel *model, size_t e) {
    for (int i = 0; i < model->n_params; i++)
        if (e < model->params[i].offset + model->params[i].numel) return model->params[i].name;
    return "(past the end)";
}

// ---------------------------------------------------------------- gathering

// Every rank's piece metadata into t (PieceTable): only (kind, lo, hi) and a few
// counts travel, never tensor data. Collective over the world.
void ckpt_gather_pieces(PieceTable *t, const LlamaModel *model, const CkptPiece *pieces,
                        int n_pieces) {
    double most = n_pieces;
    group_allreduce_max_f64(GROUP_WORLD, &most, 1);
    t->world = comm_world_size();
    t->per_rank = (int)most;
    size_t heads = (size_t)t->world * RANK_HEAD;
    size_t len = heads + (size_t)t->world * (size_t)(t->per_rank ? t->per_rank : 1) * 3;
    // Zero-filled: each rank fills only its own rows, so the sum is a gather.
    t->head = xcalloc(len * sizeof(double), "checkpoint piece table");
    t->slot = t->head + heads;
    int r = comm_world_rank();
    double *h = t->head + (size_t)r * RANK_HEAD;
    h[0] = model->tp.size;
    h[1] = model->tp.rank;
    h[2] = (double)model->num_elements;
    h[6] = model->ep.size;
    h[7] = model->ep.rank;
    double *mine = t->slot + (size_t)r * (size_t)t->per_rank * 3;
    for (int i = 0; i < n_pieces; i++) {
        mine[3 * i] = (double)pieces[i].kind + 1;
        mine[3 * i + 1] = (double)pieces[i].lo;
        mine[3 * i + 2] = (double)pieces[i].hi;
        h[3 + pieces[i].kind] += (double)global_written(&pieces[i], model);
    }
    group_allreduce_sum_f64(GROUP_WORLD, t->head, len);
}

// 1 when some rank passes a piece of this kind (even an empty one).
int ckpt_kind_given(const PieceTable *t, CkptKind kind) {
    size_t len = (size_t)t->world * (size_t)t->per_rank;
    for (size_t s = 0; s < len; s++)
        if (t->slot[3 * s] == (double)kind + 1) return 1;
    return 0;
}

typedef struct {
    size_t lo, hi;
    int rank;
} Range;

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->rank - y->rank;
}

// The shard (tensor-parallel rank, expert-parallel rank) of rank r, as an index of
// the tables (ckpt_tp_tables).
static int shard_of(const PieceTable *t, int r) {
    const double *h = t->head + (size_t)r * RANK_HEAD;
    return (int)h[1] * (int)h[6] + (int)h[7];
}

typedef struct {
    Range *r;
    size_t n, cap;
} RangeList;

static void range_push(RangeList *l, size_t lo, size_t hi, int rank) {
    if (l->n && l->r[l->n - 1].rank == rank && l->r[l->n - 1].hi == lo) {  // merge a continuation
        l->r[l->n - 1].hi = hi;
        return;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        Range *grown = realloc(l->r, l->cap * sizeof *l->r);  // (cap)
        if (!grown) die("out of memory: %zu checkpoint piece ranges", l->cap);
        l->r = grown;
    }
    l->r[l->n++] = (Range){lo, hi, rank};
}

// The parts of [lo, hi) that are not experts (ParamInfo.expert), in flat order.
static void push_dense_parts(RangeList *l, const LlamaModel *model, size_t lo, size_t hi, int rank) {
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a < b && !p->expert) range_push(l, a, b, rank);
    }
}

// The non-empty pieces of one kind over the ranks of shard `shard` must tile that
// shard's flat order [0, n) exactly (`model` is its table): sort them by start and
// walk, so the first gap or overlap is named with its ranks. Without tensor or
// expert parallelism that is every rank and the global flat order. Under expert
// parallelism the dense tensors sit at the same offsets in every expert-parallel
// rank's flat order and are shared out among all of them (engines/data_parallel.h),
// so the dense parts of the other expert-parallel ranks' pieces count too; the
// experts only from the ranks holding them.
static void check_partition(const PieceTable *t, CkptKind kind, const LlamaModel *model,
                            int shard, const char *where) {
    size_t n = model->num_elements, len = (size_t)t->world * (size_t)t->per_rank;
    const int ep = model->ep.size;
    RangeList rl = {NULL, 0, 0};
    for (size_t s = 0; s < len; s++) {
        const double *e = t->slot + 3 * s;
        int rank = (int)(s / (size_t)t->per_rank);
        if (e[0] != (double)kind + 1 || e[1] == e[2]) continue;
        int other = shard_of(t, rank);
        if (other == shard) range_push(&rl, (size_t)e[1], (size_t)e[2], rank);
        else if (other / ep == shard / ep) push_dense_parts(&rl, model, (size_t)e[1], (size_t)e[2], rank);
    }
    Range *r = rl.r;
    size_t k = rl.n;
    if (k) qsort(r, k, sizeof *r, cmp_range);  // r is NULL when no rank gave a piece
    const char *kn = CKPT_KIND_NAMES[kind];
    char of[96] = "";  // which flat order, when there are several
    if (model->tp.size > 1 && model->ep.size > 1)
        snprintf(of, sizeof of, " of tensor-parallel rank %d, expert-parallel rank %d's flat order",
                 model->tp.rank, model->ep.rank);
    else if (model->tp.size > 1)
        snprintf(of, sizeof of, " of tensor-parallel rank %d's flat order", model->tp.rank);
    else if (model->ep.size > 1)
        snprintf(of, sizeof of, " of expert-parallel rank %d's flat order", model->ep.rank);
    size_t covered = 0;  // [0, covered) is written exactly once so far
    for (size_t i = 0; i < k; i++) {
        if (r[i].lo > covered)
            die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written by no rank: the "
                "pieces leave a gap", where, kn, covered, r[i].lo, of, tensor_at(model, covered));
        if (r[i].lo < covered)
            die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written twice, by rank "
                "%d and rank %d: the pieces overlap", where, kn, r[i].lo,
                r[i].hi < covered ? r[i].hi : covered, of, tensor_at(model, r[i].lo),
                r[i - 1].rank, r[i].rank);
        covered = r[i].hi;
    }
    if (covered < n)
        die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written by no rank: the "
            "pieces leave a gap%s", where, kn, covered, n, of, tensor_at(model, covered),
            k == 0 && kind != CKPT_PARAMS ? " (AdamW moments: give both exp_avg and "
                                             "exp_avg_sq pieces, or neither)" : "");
    free(r);
}

// The parameter table of every shard (tensor-parallel rank x expert-parallel rank),
// rebuilt from the shared model config, for rank 0 to judge the other ranks'
// pieces. Returns (tp * ep) tables; without either the one table is the model's
// own (no rebuild).
const LlamaModel *ckpt_tp_tables(const LlamaModel *model) {
    const int tp = model->tp.size, ep = model->ep.size;
    if (tp * ep == 1) return model;
    LlamaModel *tabs = xmalloc((size_t)(tp * ep) * sizeof *tabs, "shard tables");  // (tp * ep)
    for (int tr = 0; tr < tp; tr++)
        for (int er = 0; er < ep; er++) {
            ModelShard sh = model_tp_shard(tp, tr, model->tp.sp);
            sh.ep.size = ep;
            sh.ep.rank = er;
            llama_build(&tabs[tr * ep + er], &model->cfg, sh);
        }
    return tabs;
}

void ckpt_free_tp_tables(const LlamaModel *tabs, const LlamaModel *model) {
    if (tabs == model) return;
    LlamaModel *own = (LlamaModel *)tabs;  // allocated by ckpt_tp_tables
    for (int s = 0; s < model->tp.size * model->ep.size; s++) llama_free(&own[s]);
    free(own);
}

// Every rank must run rank 0's tensor- and expert-parallel degrees, with the table
// its shard builds: pieces are judged against those tables.
void ckpt_check_tables_agree(const PieceTable *t, const LlamaModel *tabs, const LlamaModel *model,
                             const char *where) {
    const int tp = model->tp.size, ep = model->ep.size;
    for (int r = 0; r < t->world; r++) {
        const double *h = t->head + (size_t)r * RANK_HEAD;
        if ((int)h[0] != tp || h[1] < 0 || h[1] >= tp)
            die("%s: rank %d is tensor-parallel rank %.0f of %.0f, but rank 0 runs tp = %d", where,
                r, h[1], h[0], tp);
        if ((int)h[6] != ep || h[7] < 0 || h[7] >= ep)
            die("%s: rank %d is expert-parallel rank %.0f of %.0f, but rank 0 runs ep = %d", where,
                r, h[7], h[6], ep);
        size_t want = tabs[shard_of(t, r)].num_elements;
        if (h[2] != (double)want)
            die("%s: rank %d (tensor-parallel rank %.0f, expert-parallel rank %.0f) holds %.0f "
                "parameter elements, but that shard of this model holds %zu: the ranks built "
                "different models", where, r, h[1], h[7], h[2], want);
    }
}

// Rank 0's verdict on the gathered pieces of one kind. Per shard (tensor- and expert-parallel rank),
// the pieces must partition that rank's flat order; the tp ranks' tables hold
// disjoint slices of every tensor (replicas: tp rank 0 writes), so that makes every
// global element written exactly once, and a gap or an overlap is named with its
// range and ranks. The global count (elements put into the file over all ranks,
// padding and non-writing replicas excluded, against the sum of the global tensor
// sizes) checks the same from the other side, without trusting the tables.
void ckpt_check_coverage(const PieceTable *t, CkptKind kind, const LlamaModel *tabs,
                         const LlamaModel *model, size_t global_total, const char *where) {
    for (int sh = 0; sh < model->tp.size * model->ep.size; sh++) check_partition(t, kind, &tabs[sh], sh, where);
    double written = 0;
    for (int r = 0; r < t->world; r++) written += t->head[(size_t)r * RANK_HEAD + 3 + kind];
    if (written != (double)global_total)
        die("%s: the %s pieces of all ranks put %.0f elements into the checkpoint, but the "
            "model's global tensors hold %zu: the ranks' parameter tables do not fit together",
            where, CKPT_KIND_NAMES[kind], written, global_total);
}
