// io/checkpoint_pieces.c — map pieces of a rank's own flat order to runs of the
// global tensors that the checkpoint files hold, and check the pieces and the
// parameter table that mapping trusts.
//
// With tensor parallelism a rank's flat order holds a slice of each tensor
// (ParamInfo), whose elements map to runs of the global tensor: contiguous for a
// row split, one per row for a column split. Saving and loading both go through
// this mapping, so any layout can resume from a checkpoint written by any other.
#include "io/checkpoint.h"

#include <stdint.h>
#include <stdlib.h>

#include "io/checkpoint_internal.h"
#include "util.h"

const char *const CKPT_KIND_NAMES[] = {"params", "exp_avg", "exp_avg_sq"};

static size_t global_numel(const ParamInfo *p) {
    return p->ndim == 1 ? (size_t)p->shape[0] : (size_t)p->shape[0] * (size_t)p->shape[1];
}

// Pieces address the rank's own flat order (the parameter table's offsets); the
// mapping to global elements below trusts every slice to lie inside its global
// tensor and the tensors to sit back to back. A table that breaks that would
// write other tensors' bytes, so it is refused, naming the tensor.
void ckpt_check_table(const LlamaModel *model, const char *where) {
    size_t off = 0;
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        const int64_t *g = p->shape, *l = p->local_shape;
        int ok = p->ndim == 2 || (p->ndim == 1 && g[1] == 1);
        if (l[0] == 0 && p->numel == 0) ;  // nothing held: an expert of another expert-parallel rank
        else if (p->split == SPLIT_NONE) ok = ok && l[0] == g[0] && l[1] == g[1];
        else if (p->split == SPLIT_ROWS)
            ok = ok && l[1] == g[1] && p->start >= 0 && p->valid >= 0 && p->valid <= l[0] &&
                 p->start + p->valid <= g[0];
        else if (p->split == SPLIT_COLS)
            ok = ok && l[0] == g[0] && p->start >= 0 && p->valid == l[1] &&
                 p->start + l[1] <= g[1];
        else ok = 0;
        if (!ok || l[0] < 0 || l[1] < 0 || p->numel != (size_t)l[0] * (size_t)l[1])
            die("%s: tensor %s: the parameter table's slice (split %d, start %lld, valid %lld, "
                "local shape [%lld, %lld], %zu elements) does not fit its global shape "
                "[%lld, %lld]", where, p->name, (int)p->split, (long long)p->start,
                (long long)p->valid, (long long)l[0], (long long)l[1], p->numel,
                (long long)g[0], (long long)g[1]);
        if (p->offset != off)
            die("%s: tensor %s sits at offset %zu of the parameter table, not %zu: the tensors "
                "are not back to back", where, p->name, p->offset, off);
        off += p->numel;
    }
    if (off != model->num_elements)
        die("%s: the parameter table's tensors hold %zu elements, but num_elements is %zu",
            where, off, model->num_elements);
}

// Element index, in the files, of each tensor's first element: the files hold the
// global tensors back to back in table order, whatever slice this rank holds.
// Returns (n_params + 1) offsets; the last is the global total.
size_t *ckpt_global_bases(const LlamaModel *model) {
    size_t *base = xmalloc(((size_t)model->n_params + 1) * sizeof *base, "checkpoint offsets");  // (n_params + 1)
    base[0] = 0;
    for (int i = 0; i < model->n_params; i++) base[i + 1] = base[i] + global_numel(&model->params[i]);
    return base;
}

// Map local elements [a, b) of p (a < b <= numel) to at most 3 blocks, in local
// order. Rows of a row split are whole rows of the global tensor, so the valid ones
// form one global run; a column split is one run per row, and the whole rows in the
// middle of the range are one strided block (one read for all of them).
int ckpt_map_range(const ParamInfo *p, size_t a, size_t b, Block *out) {
    int k = 0;
    size_t lc = (size_t)p->local_shape[1];
    int64_t gc = p->shape[1];
    if (p->split == SPLIT_NONE || (p->split == SPLIT_COLS && (int64_t)lc == gc)) {
        out[k++] = (Block){a, b - a, 1, (int64_t)a, 0};
    } else if (p->split == SPLIT_ROWS) {
        size_t vend = (size_t)p->valid * lc;  // padding rows come after the valid ones
        if (a < vend) out[k++] = (Block){a, (b < vend ? b : vend) - a, 1, p->start * gc + (int64_t)a, 0};
        size_t pad = a > vend ? a : vend;
        if (b > pad) out[k++] = (Block){pad, b - pad, 1, -1, 0};
    } else {  // SPLIT_COLS narrower than the tensor
        size_t i0 = a / lc, j0 = a % lc, i1 = b / lc, j1 = b % lc;  // b = (i1, j1) exclusive
#define GLOBAL_AT(i, j) ((int64_t)(i) * gc + p->start + (int64_t)(j))
        if (i0 == i1) {  // inside one row
            out[k++] = (Block){a, b - a, 1, GLOBAL_AT(i0, j0), 0};
            return k;
        }
        size_t r0 = i0;
        if (j0 > 0) {
            out[k++] = (Block){a, lc - j0, 1, GLOBAL_AT(i0, j0), 0};
            r0++;
        }
        if (i1 > r0) out[k++] = (Block){r0 * lc, lc, i1 - r0, GLOBAL_AT(r0, 0), gc};
        if (j1 > 0) out[k++] = (Block){i1 * lc, j1, 1, GLOBAL_AT(i1, 0), 0};
#undef GLOBAL_AT
    }
    return k;
}

// The part of piece pc that falls in tensor p, as local elements [*a, *b) of p;
// 0 when they do not meet.
int ckpt_piece_in_tensor(const CkptPiece *pc, const ParamInfo *p, size_t *a, size_t *b) {
    size_t begin = p->offset, end = p->offset + p->numel;
    if (p->numel == 0) return 0;  // an expert another expert-parallel rank holds
    if (end <= pc->lo || begin >= pc->hi || pc->hi == pc->lo) return 0;
    *a = (pc->lo > begin ? pc->lo : begin) - begin;
    *b = (pc->hi < end ? pc->hi : end) - begin;
    return 1;
}

// This rank's own pieces: a known kind, lo <= hi <= n, storage when non-empty.
void ckpt_check_local_pieces(const CkptPiece *pieces, int n_pieces, size_t n,
                             const char *where) {
    if (n_pieces < 0 || (n_pieces > 0 && !pieces))
        die("%s: invalid piece list (%d pieces at %p)", where, n_pieces, (const void *)pieces);
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece *p = &pieces[i];
        if ((int)p->kind < 0 || (int)p->kind >= CKPT_N_KINDS)
            die("%s: piece %d has unknown kind %d", where, i, (int)p->kind);
        if (p->lo > p->hi || p->hi > n)
            die("%s: piece %d (%s) covers [%zu, %zu), which is not a range inside the model's "
                "%zu elements", where, i, CKPT_KIND_NAMES[p->kind], p->lo, p->hi, n);
        if (p->hi > p->lo && !p->data)
            die("%s: piece %d (%s, [%zu, %zu)) has no storage (data is NULL)", where, i,
                CKPT_KIND_NAMES[p->kind], p->lo, p->hi);
    }
}
