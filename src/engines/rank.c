// engines/rank.c — a rank's model shard, pipeline and data-parallel engine, built
// in the order their sizes depend on each other (rank.h).
#include "engines/rank.h"

#include <string.h>

#include "ops/ops.h"

void rank_build(Rank *r, const Config *cfg, GridCoords at, MemTally *plan_only) {
    memset(r, 0, sizeof *r);
    r->at = at;
    llama_build(&r->model, &cfg->model, model_shard_of(cfg, at));
    const size_t full = (size_t)cfg->training.micro_batch_size * cfg->training.seq_length;
    r->full_tokens = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");
    r->full_targets = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * full, "sequences");
    r->step_scalars = buf_take(plan_only, MEM_ACTIVATIONS, 3 * sizeof(double), "step scalars");  // (3)
    // The pipeline decides which units this rank holds; the data-parallel engine
    // holds exactly those, sharded over the dp x cp group.
    pp_init(&r->pipe, &r->model, cfg, at.pp, plan_only);
    const ParallelConfig *p = &cfg->parallel;
    dp_init(&r->dp, &r->model, p, r->pipe.held, p->dp * p->cp, grid_dpcp_index(p, at), plan_only);
    // bf16 products read a bf16 copy of the weights, rounded once per step, not once
    // per product (ops.h). Not under ZeRO-3: its weights are gathered into windows
    // for each use, and rounded there.
    const int bf16 = cfg->training.precision == PRECISION_BF16, kept = bf16 && p->zero < 3;
    if (kept) {
        r->bf16_weights = buf_take(plan_only, MEM_PARAMS, 2 * r->dp.n_elements, "bf16 weight copy");
        if (!plan_only) ops_keep_bf16_weights(r->dp.params, r->dp.n_elements, r->bf16_weights);
    }
    // The backend's own work buffers (ops.h: OpsBounds), planned like the rest:
    // sized from the widest operands of this rank's step, installed before step 1.
    // CUDA's always; the CPU's under bf16 products (their operands' bf16 copies).
    const int cuda = cfg->training.device == DEVICE_CUDA;
    if (cuda || bf16) {
        const LlamaModel *m = &r->model;
        OpsBounds b = llama_op_bounds(m, cfg->training.micro_batch_size, cfg->training.seq_length / p->cp,
                                      r->pipe.held[m->L + 1] != 0, bf16, kept, r->dp.piece_max);
        b.cudnn_attention = cfg->training.attention == ATTENTION_CUDNN;  // cuDNN's copies and workspace
        r->workspace = buf_take(plan_only, MEM_ACTIVATIONS, cuda ? ops_cuda_workspace(&b).total : ops_cpu_workspace_bytes(&b),
                                cuda ? "CUDA work buffers" : "bf16 operand copies");
        if (!plan_only) ops_set_workspace(r->workspace, &b);
    }
    // The pipeline's and the ring's messages over NCCL links where the collectives
    // go over NCCL (dist/comm.h); nothing otherwise.
    if (!plan_only) {
        pp_open_links(&r->pipe, &r->model);
        cp_open_links(&r->model.cp);
    }
    if (cfg->checkpoint.async && cfg->checkpoint.dir[0])
        r->snapshot = buf_take(plan_only, MEM_SNAPSHOT, sizeof(float) * dp_save_elements(&r->dp),
                               "checkpoint snapshot");
}

void rank_free(Rank *r) {
    if (r->workspace) ops_set_workspace(NULL, NULL);
    buf_free(r->workspace);
    if (r->bf16_weights) ops_keep_bf16_weights(NULL, 0, NULL);
    buf_free(r->bf16_weights);
    pp_free(&r->pipe);
    dp_free(&r->dp);
    buf_free(r->full_tokens);
    buf_free(r->full_targets);
    buf_free(r->step_scalars);
    buf_free(r->snapshot);
    llama_free(&r->model);
    memset(r, 0, sizeof *r);
}
