// plan/memory_rank.c — femtotron's own runs: a rank's memory, exactly.
//
// What is counted: every buffer whose size depends on the model, the batch or the
// layout (DESIGN.md invariant 3: planned from the config, allocated once), in five
// kinds (util.h: MemKind):
//   params       the flat parameter buffer: whole held units, or the ZeRO-3 own parts
//   grads        the flat gradient buffer (ZeRO-0/1), or the reduced own parts (ZeRO-2/3)
//   optimizer    the two AdamW moments: whole (ZeRO-0) or own parts (ZeRO-1/2/3)
//   activations  every pipeline slot's activation arena (tensor- and context-parallel
//                scratch included) and position tables, the token/target slots,
//                the trainer's whole sequences before the context-parallel split
//   comm         the ZeRO-2/3 gradient and parameter windows, the pipeline's
//                gradient send/receive messages
// Not counted: small bookkeeping (tables, schedules, requests), transient I/O
// staging, the data loader's tables, MPI's own buffers (util.h lists them).
//
// Why predicted == measured. The MEASUREMENT is independent of this file: every
// planned buffer is made by buf_alloc (util.c), which counts the bytes it was
// actually asked for, per kind, in the rank's process; the rank prints the
// counters at start-up (train_cmd.c: "memory bytes (rank R): ..."). The PREDICTION
// runs the very code that sized those requests, in plan-only mode: trainer_init is
//   trainer_build_model -> trainer_sequence_buffers -> pp_plan + pp_buffers
//   -> dp_plan + dp_buffers
// and each *_buffers function makes its buffers through buf_take(plan_only, ...),
// which allocates when plan_only is NULL and otherwise only adds the bytes to a
// tally; the activation arenas are sized by activations_alloc_bytes, the function
// activations_alloc itself uses. So sizes cannot drift apart: what differs is only
// where the inputs come from. The trainer takes its grid coordinates, dp x cp group
// size and rank from MPI (comm_grid, group_size, group_rank); this file computes
// them from the config (plan_rank_coords, and the dp x cp rank dp_i * cp + cp_i,
// the order comm_grid_init gives GROUP_DPCP). tests/test_parity.sh checks the two
// agree for every rank and kind of every parity layout; a buffer allocated outside
// the plan functions, or a coordinate mapped differently, shows up there.
#include "plan/memory_rank.h"

#include <string.h>

#include "model/llama.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "util.h"

void plan_rank_coords(const ParallelConfig *p, int rank, int *dp_i, int *pp_i, int *cp_i, int *tp_i) {
    // dist/comm.h: rank = ((outer) * cp + cp_i) * tp + tp_i, outer = dp_i * pp + pp_i
    // ("dp-pp-cp-tp") or pp_i * dp + dp_i ("pp-dp-cp-tp").
    *tp_i = rank % p->tp;
    *cp_i = rank / p->tp % p->cp;
    const int outer = rank / (p->tp * p->cp);
    if (strcmp(p->order, "pp-dp-cp-tp") == 0) {
        *dp_i = outer % p->dp;
        *pp_i = outer / p->dp;
    } else {
        *pp_i = outer % p->pp;
        *dp_i = outer / p->pp;
    }
}

MemoryReport plan_rank_memory(const Config *cfg, int dp_i, int pp_i, int cp_i, int tp_i) {
    const ParallelConfig *pc = &cfg->parallel;
    MemTally tally;
    memset(&tally, 0, sizeof tally);
    // The same steps as trainer_init, each with plan_only = &tally.
    LlamaModel model;
    trainer_build_model(&model, cfg, tp_i, cp_i);
    int32_t *tokens, *targets;  // stay NULL: nothing is allocated
    trainer_sequence_buffers(&tokens, &targets, cfg, &tally);
    Pipeline pipe;
    pp_plan(&pipe, &model, cfg, pp_i);
    pp_buffers(&pipe, &model, cfg, &tally);
    DataParallel dp;
    // ZeRO shards span the dp x cp group (GROUP_DPCP): pc->dp * pc->cp ranks, this
    // one numbered dp_i * cp + cp_i (dist/comm.c, comm_grid_init's key).
    dp_plan(&dp, &model, pc, pipe.held, pc->dp * pc->cp, dp_i * pc->cp + cp_i);
    dp_buffers(&dp, &tally);
    dp_free(&dp);
    pp_free(&pipe);
    llama_free(&model);
    return memory_report(tally.bytes);
}

size_t plan_memory_total(const MemoryReport *r) {
    return r->params + r->grads + r->optimizer + r->activations + r->comm;
}

MemoryReport plan_max_rank_memory(const Config *cfg, int *rank) {
    const ParallelConfig *pc = &cfg->parallel;
    const int world = pc->dp * pc->pp * pc->cp * pc->tp;
    MemoryReport best;
    memset(&best, 0, sizeof best);
    int best_rank = -1;
    for (int r = 0; r < world; r++) {
        int dp_i, pp_i, cp_i, tp_i;
        plan_rank_coords(pc, r, &dp_i, &pp_i, &cp_i, &tp_i);
        MemoryReport m = plan_rank_memory(cfg, dp_i, pp_i, cp_i, tp_i);
        if (best_rank < 0 || plan_memory_total(&m) > plan_memory_total(&best)) {
            best = m;
            best_rank = r;
        }
    }
    if (rank) *rank = best_rank;
    return best;
}
