// engines/data_parallel_pieces.c — the parameters and moments this rank holds, as
// ranges of the global flat order: initialised by global index (docs/DESIGN.md,
// invariant 1) or read from a Hugging Face model, and the pieces it writes into a
// checkpoint or fills when resuming under any layout (io/checkpoint.h).
#include "engines/data_parallel.h"

#include <stdlib.h>

#include "model/init.h"
#include "ops/ops.h"
#include "util.h"

// Global range of a local range inside bucket b.
#define GLOBAL(b, x) ((b)->glo + ((x) - (b)->lo))

void dp_init_params(DataParallel *dp, uint64_t seed, const char *hf_dir) {
    const LlamaModel *m = dp->model;
    const int from_hf = hf_dir && hf_dir[0];
    CkptPiece *pieces = xmalloc(sizeof(CkptPiece) * (size_t)(dp->n_buckets + 1), "pieces");
    int np = 0;
    ops_sync();  // the host writes the parameters: no op may still use them
    // Stage 0-2 hold every held unit whole, stage 3 only the own parts; either way
    // each piece is drawn by global index (or read from the Hugging Face files).
    for (int k = 0; k < dp->n_buckets; k++) {
        const Bucket *b = &dp->buckets[k];
        size_t lo = dp->zero == 3 ? b->own_lo : b->lo, hi = dp->zero == 3 ? b->own_hi : b->hi;
        float *dst = dp->zero == 3 ? dp->params + b->shard_off : dp->params + b->lo;
        if (hi == lo) continue;
        if (!from_hf) llama_init_range(m, seed, GLOBAL(b, lo), GLOBAL(b, hi), dst);
        pieces[np++] = (CkptPiece){CKPT_PARAMS, GLOBAL(b, lo), GLOBAL(b, hi), dst};
    }
    if (from_hf) load_hf_weights_pieces(hf_dir, m, pieces, np);
    free(pieces);
}

int dp_max_pieces(const DataParallel *dp) { return 3 * dp->n_buckets + 3; }

size_t dp_save_elements(const DataParallel *dp) {
    size_t n = 0;
    for (int k = 0; k < dp->n_buckets; k++)
        if (!dp_bucket_is_copy(dp, &dp->buckets[k]))
            n += dp->buckets[k].own_hi - dp->buckets[k].own_lo;
    return 3 * n;  // params, exp_avg, exp_avg_sq
}

// Pieces for the own part of every bucket: each rank writes 1/N of every kind (a
// tied embedding's copy on the last stage is the first stage's to write).
int dp_save_pieces(const DataParallel *dp, CkptPiece *pieces) {
    int np = 0;
    for (int k = 0; k < dp->n_buckets; k++) {
        const Bucket *b = &dp->buckets[k];
        if (b->own_hi == b->own_lo || dp_bucket_is_copy(dp, b)) continue;
        size_t local = dp->zero == 0 ? b->own_lo : b->shard_off;  // where the part sits in m, v
        float *p = dp->zero == 3 ? dp->params + b->shard_off : dp->params + b->own_lo;
        size_t glo = GLOBAL(b, b->own_lo), ghi = GLOBAL(b, b->own_hi);
        pieces[np++] = (CkptPiece){CKPT_PARAMS, glo, ghi, p};
        pieces[np++] = (CkptPiece){CKPT_EXP_AVG, glo, ghi, dp->m + local};
        pieces[np++] = (CkptPiece){CKPT_EXP_AVG_SQ, glo, ghi, dp->v + local};
    }
    return np;
}

// Pieces to fill on resume: whole held units where this stage keeps them whole.
int dp_load_pieces(DataParallel *dp, CkptPiece *pieces) {
    int np = 0;
    for (int k = 0; k < dp->n_buckets; k++) {
        const Bucket *b = &dp->buckets[k];
        size_t glo = b->glo, ghi = GLOBAL(b, b->hi);
        size_t olo = GLOBAL(b, b->own_lo), ohi = GLOBAL(b, b->own_hi);
        if (dp->zero < 3)
            pieces[np++] = (CkptPiece){CKPT_PARAMS, glo, ghi, dp->params + b->lo};
        else if (ohi > olo)
            pieces[np++] = (CkptPiece){CKPT_PARAMS, olo, ohi, dp->params + b->shard_off};
        if (dp->zero == 0) {
            pieces[np++] = (CkptPiece){CKPT_EXP_AVG, glo, ghi, dp->m + b->lo};
            pieces[np++] = (CkptPiece){CKPT_EXP_AVG_SQ, glo, ghi, dp->v + b->lo};
        } else if (ohi > olo) {
            pieces[np++] = (CkptPiece){CKPT_EXP_AVG, olo, ohi, dp->m + b->shard_off};
            pieces[np++] = (CkptPiece){CKPT_EXP_AVG_SQ, olo, ohi, dp->v + b->shard_off};
        }
    }
    return np;
}
