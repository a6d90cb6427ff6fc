// plan/memory_rank.c — femtotron's own runs: a rank's memory, exactly.
//
// What is counted: every buffer whose size depends on the model, the batch or the
// layout (docs/DESIGN.md, invariant 3: all memory planned: sized from the config, allocated once), in five
// kinds (util.h: MemKind):
//   params       the flat parameter buffer: whole held units, or the ZeRO-3 own parts
//   grads        the flat gradient buffer (ZeRO-0/1), or the reduced own parts (ZeRO-2/3)
//   optimizer    the two AdamW moments: whole (ZeRO-0) or own parts (ZeRO-1/2/3)
//   activations  every pipeline slot's activation arena (tensor- and context-parallel
//                scratch included) and position tables, the token/target slots,
//                the trainer's whole sequences before the context-parallel split,
//                and on the GPU the backend's own work buffers (engines/rank.c)
//   comm         the ZeRO-2/3 gradient and parameter windows, the pipeline's
//                gradient send/receive messages
// Not counted: small bookkeeping (tables, schedules, requests), transient I/O
// staging, the data loader's tables, MPI's own buffers (util.h lists them).
//
// Why predicted == measured. The MEASUREMENT is independent of this file: every
// planned buffer is made by buf_alloc (util.c), which counts the bytes it was
// actually asked for, per kind, in the rank's process; the rank prints the
// counters at start-up (train_cmd.c: "memory bytes (rank R): ..."). The PREDICTION
// runs the very code that sized those requests: the trainer builds its rank with
// rank_build(..., plan_only = NULL) and this file calls the same rank_build with a
// tally, in which every planned buffer goes through buf_take(plan_only, ...): it
// allocates when plan_only is NULL and otherwise only adds the bytes. So sizes
// cannot drift apart; what differs is only where the coordinates come from, and
// both take them from grid_coords (dist/grid.h) of the world rank.
// tests/shell/test_parity.sh checks the two agree for every rank and kind of every
// parity layout; a buffer allocated outside rank_build shows up there.
#include "plan/memory_rank.h"

#include <string.h>

#include "engines/rank.h"

MemoryReport plan_rank_memory(const Config *cfg, GridCoords at) {
    MemTally tally;
    memset(&tally, 0, sizeof tally);
    Rank r;
    rank_build(&r, cfg, at, &tally);  // what trainer_init builds, counted, not allocated
    rank_free(&r);
    return memory_report(tally.bytes);
}

size_t plan_memory_total(const MemoryReport *r) {
    return r->params + r->grads + r->optimizer + r->activations + r->comm + r->snapshot;
}

MemoryReport plan_max_rank_memory(const Config *cfg, int *rank) {
    const ParallelConfig *pc = &cfg->parallel;
    const int world = pc->dp * pc->pp * pc->cp * pc->tp;
    MemoryReport best;
    memset(&best, 0, sizeof best);
    int best_rank = -1;
    for (int r = 0; r < world; r++) {
        MemoryReport m = plan_rank_memory(cfg, grid_coords(pc, r));
        if (best_rank < 0 || plan_memory_total(&m) > plan_memory_total(&best)) {
            best = m;
            best_rank = r;
        }
    }
    if (rank) *rank = best_rank;
    return best;
}
