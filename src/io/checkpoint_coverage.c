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

// The non-empty pieces of one kind over the ranks of tensor-parallel rank tp_rank
// must tile that rank's flat order [0, n) exactly (`model` is its table): sort them
// by start and walk, so the first gap or overlap is named with its ranks. Without
// tensor parallelism that is every rank and the global flat order.
static void check_partition(const PieceTable *t, CkptKind kind, const LlamaModel *model,
                            int tp_rank, const char *where) {
    size_t n = model->num_elements, len = (size_t)t->world * (size_t)t->per_rank, k = 0;
    Range *r = xmalloc((len ? len : 1) * sizeof *r, "checkpoint piece ranges");  // (len)
    for (size_t s = 0; s < len; s++) {
        const double *e = t->slot + 3 * s;
        int rank = (int)(s / (size_t)t->per_rank);
        if (e[0] != (double)kind + 1 || e[1] == e[2]) continue;
        if ((int)t->head[(size_t)rank * RANK_HEAD + 1] != tp_rank) continue;
        r[k++] = (Range){(size_t)e[1], (size_t)e[2], rank};
    }
    qsort(r, k, sizeof *r, cmp_range);
    const char *kn = CKPT_KIND_NAMES[kind];
    char of[64] = "";  // which flat order, when there are several
    if (model->tp.size > 1) snprintf(of, sizeof of, " of tensor-parallel rank %d's flat order", tp_rank);
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

// The parameter table of every tensor-parallel rank, rebuilt from the shared model
// config, for rank 0 to judge the other ranks' pieces. Returns (tp) tables; without
// tensor parallelism the one table is the model's own (no rebuild).
const LlamaModel *ckpt_tp_tables(const LlamaModel *model) {
    if (model->tp.size == 1) return model;
    LlamaModel *tabs = xmalloc((size_t)model->tp.size * sizeof *tabs, "tensor-parallel tables");  // (tp)
    for (int tr = 0; tr < model->tp.size; tr++)
        llama_build(&tabs[tr], &model->cfg, model_tp_shard(model->tp.size, tr, model->tp.sp));
    return tabs;
}

void ckpt_free_tp_tables(const LlamaModel *tabs, const LlamaModel *model) {
    if (tabs == model) return;
    LlamaModel *own = (LlamaModel *)tabs;  // allocated by ckpt_tp_tables
    for (int tr = 0; tr < model->tp.size; tr++) llama_free(&own[tr]);
    free(own);
}

// Every rank must run rank 0's tensor-parallel degree, with the table its tp rank
// builds: pieces are judged against those tables.
void ckpt_check_tables_agree(const PieceTable *t, const LlamaModel *tabs, int tp,
                             const char *where) {
    for (int r = 0; r < t->world; r++) {
        const double *h = t->head + (size_t)r * RANK_HEAD;
        if ((int)h[0] != tp || h[1] < 0 || h[1] >= tp)
            die("%s: rank %d is tensor-parallel rank %.0f of %.0f, but rank 0 runs tp = %d", where,
                r, h[1], h[0], tp);
        size_t want = tabs[(int)h[1]].num_elements;
        if (h[2] != (double)want)
            die("%s: rank %d (tensor-parallel rank %.0f) holds %.0f parameter elements, but that "
                "rank of this model holds %zu: the ranks built different models", where, r, h[1],
                h[2], want);
    }
}

// Rank 0's verdict on the gathered pieces of one kind. Per tensor-parallel rank,
// the pieces must partition that rank's flat order; the tp ranks' tables hold
// disjoint slices of every tensor (replicas: tp rank 0 writes), so that makes every
// global element written exactly once, and a gap or an overlap is named with its
// range and ranks. The global count (elements put into the file over all ranks,
// padding and non-writing replicas excluded, against the sum of the global tensor
// sizes) checks the same from the other side, without trusting the tables.
void ckpt_check_coverage(const PieceTable *t, CkptKind kind, const LlamaModel *tabs, int tp,
                         size_t global_total, const char *where) {
    for (int tr = 0; tr < tp; tr++) check_partition(t, kind, &tabs[tr], tr, where);
    double written = 0;
    for (int r = 0; r < t->world; r++) written += t->head[(size_t)r * RANK_HEAD + 3 + kind];
    if (written != (double)global_total)
        die("%s: the %s pieces of all ranks put %.0f elements into the checkpoint, but the "
            "model's global tensors hold %zu: the ranks' parameter tables do not fit together",
            where, CKPT_KIND_NAMES[kind], written, global_total);
}
