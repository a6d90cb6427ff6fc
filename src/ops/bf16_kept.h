// ops/bf16_kept.h — the bookkeeping of the kept bf16 copy of the weights (ops.h:
// ops_keep_bf16_weights), shared by the CPU and CUDA backends
// (ops/matmul_bf16_cpu.c, ops/matmul_cuda.cu), which each own the copy's values
// and round them with their own kernels. Offsets are into the arena.
//
// Generations. ops_bf16_weights_changed starts a new one (the optimizer changed
// the weights). A weight (a contiguous slice the products read) is rounded the
// first time a product reads it in a generation and read as it is until the next:
// `seen` records which slices hold the current generation, a few hundred tensors a
// rank, searched in order; when full, entries are reused round robin (a slice
// rounded twice gets the same values, so reuse changes no result).
//
// Spans AdamW wrote. AdamW writes the bf16 copy of what it updates as it goes;
// those slices, as offsets [lo, hi), are pending until the next generation starts,
// and then fresh: a weight inside one fresh span is read as written, not rounded
// again. AdamW's runs come in arena order and adjacent ones merge; past
// BF16_MAX_SPANS one is forgotten and its weights are rounded as before.
#ifndef FEMTOTRON_BF16_KEPT_H
#define FEMTOTRON_BF16_KEPT_H

#include <stddef.h>
#include <string.h>

#define BF16_MAX_SEEN 4096
#define BF16_MAX_SPANS 1024

typedef struct {
    size_t lo, hi;
} Bf16Span;

typedef struct {
    unsigned gen;  // the current generation
    struct {
        size_t lo, n;
        unsigned gen;
    } seen[BF16_MAX_SEEN];  // slices rounded (or found fresh), with their generation
    int nseen, next_seen;   // entries in use; the one to reuse once all are
    Bf16Span pending[BF16_MAX_SPANS], fresh[BF16_MAX_SPANS];
    int npending, nfresh;
} Bf16Kept;

// A new arena (or none): nothing rounded, nothing written.
static inline void bf16_kept_reset(Bf16Kept *k) { k->nseen = k->next_seen = k->npending = k->nfresh = 0; }

// ops_bf16_weights_changed: a new generation; what AdamW wrote is fresh in it.
static inline void bf16_kept_next(Bf16Kept *k) {
    k->gen++;
    memcpy(k->fresh, k->pending, sizeof(Bf16Span) * (size_t)k->npending);
    k->nfresh = k->npending;
    k->npending = 0;
}

// AdamW writes the copy of [lo, hi) for the next generation (without room to
// record it, the slice is rounded when read instead: the same values).
static inline void bf16_kept_written(Bf16Kept *k, size_t lo, size_t hi) {
    if (k->npending && k->pending[k->npending - 1].hi == lo) k->pending[k->npending - 1].hi = hi;
    else if (k->npending < BF16_MAX_SPANS) k->pending[k->npending].lo = lo, k->pending[k->npending++].hi = hi;
}

// A product reads the weight [lo, lo + n): 1 when its copy must be rounded now
// (neither rounded in this generation nor written by AdamW for it), else 0. Either
// way the slice holds the current generation afterwards.
static inline int bf16_kept_stale(Bf16Kept *k, size_t lo, size_t n) {
    int i = 0;
    while (i < k->nseen && !(k->seen[i].lo == lo && k->seen[i].n == n)) i++;
    if (i < k->nseen && k->seen[i].gen == k->gen) return 0;
    if (i == k->nseen) {  // a new slice: a free entry, or the next to reuse
        if (k->nseen < BF16_MAX_SEEN) k->nseen++;
        else i = k->next_seen, k->next_seen = (k->next_seen + 1) % BF16_MAX_SEEN;
        k->seen[i].lo = lo, k->seen[i].n = n;
    }
    k->seen[i].gen = k->gen;
    for (int s = 0; s < k->nfresh; s++)
        if (k->fresh[s].lo <= lo && lo + n <= k->fresh[s].hi) return 0;
    return 1;
}

#endif
