// ops/bf16_spans.h — which slices of the kept bf16 copy of the weights the optimizer
// wrote itself (ops.h: ops_keep_bf16_weights), shared by the CPU's and the CUDA
// backend's bookkeeping (ops/matmul_bf16_cpu.c, ops/matmul_cuda.cu). AdamW writes
// the bf16 copy of what it updates as it goes; those slices, as arena offsets [lo,
// hi), are pending until ops_bf16_weights_changed starts the next generation, and
// then fresh: a weight inside one fresh span is read as written, not rounded again.
// AdamW's runs come in arena order and adjacent ones merge; past BF16_MAX_SPANS one
// is forgotten and its weights are rounded as before (the same values).
#ifndef FEMTOTRON_BF16_SPANS_H
#define FEMTOTRON_BF16_SPANS_H

#include <stddef.h>
#include <string.h>

#define BF16_MAX_SPANS 1024

typedef struct {
    size_t lo, hi;
} Bf16Span;

typedef struct {
    Bf16Span pending[BF16_MAX_SPANS], fresh[BF16_MAX_SPANS];
    int npending, nfresh;
} Bf16Spans;

// Record [lo, hi) as written for the next generation; 0 when there was no room
// (the slice is then rounded when read, as if never written).
static inline int bf16_spans_add(Bf16Spans *s, size_t lo, size_t hi) {
    if (s->npending && s->pending[s->npending - 1].hi == lo) {
        s->pending[s->npending - 1].hi = hi;
        return 1;
    }
    if (s->npending == BF16_MAX_SPANS) return 0;
    s->pending[s->npending].lo = lo;
    s->pending[s->npending].hi = hi;
    s->npending++;
    return 1;
}

// A new generation: what was pending is fresh, nothing is pending.
static inline void bf16_spans_next(Bf16Spans *s) {
    memcpy(s->fresh, s->pending, sizeof(Bf16Span) * (size_t)s->npending);
    s->nfresh = s->npending;
    s->npending = 0;
}

// 1 when [lo, hi) lies inside one fresh span.
static inline int bf16_spans_fresh(const Bf16Spans *s, size_t lo, size_t hi) {
    for (int i = 0; i < s->nfresh; i++)
        if (s->fresh[i].lo <= lo && hi <= s->fresh[i].hi) return 1;
    return 0;
}

#endif
