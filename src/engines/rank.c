// engines/rank.c — a rank's model shard, pipeline and data-parallel engine, built
// in the order their sizes depend on each other (rank.h).
#include "engines/rank.h"

#include <string.h>

void rank_build(Rank *r, const Config *cfg, GridCoords at, MemTally *plan_only) {
    memset(r, 0, sizeof *r);
    r->at = at;
    llama_build(&r->model, &cfg->model, model_shard_of(cfg, at));
    const size_t full = (size_t)cfg->training.micro_batch_size * cfg->training.seq_length;
    r->full_tokens = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");
    r->full_targets = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");
    // The pipeline decides which units this rank holds; the data-parallel engine
    // holds exactly those, sharded over the dp x cp group.
    pp_init(&r->pipe, &r->model, cfg, at.pp, plan_only);
    const ParallelConfig *p = &cfg->parallel;
    dp_init(&r->dp, &r->model, p, r->pipe.held, p->dp * p->cp, grid_dpcp_index(p, at), plan_only);
    if (cfg->checkpoint.async && cfg->checkpoint.dir[0])
        r->snapshot = buf_take(plan_only, MEM_SNAPSHOT, sizeof(float) * dp_save_elements(&r->dp),
                               "checkpoint snapshot");
}

void rank_free(Rank *r) {
    pp_free(&r->pipe);
    dp_free(&r->dp);
    buf_free(r->full_tokens);
    buf_free(r->full_targets);
    buf_free(r->snapshot);
    llama_free(&r->model);
    memset(r, 0, sizeof *r);
}
