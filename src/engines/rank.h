// engines/rank.h — what one rank of the grid builds before step 1: its model shard,
// its pipeline stage(s) with their activation slots, its data-parallel buffers, and
// the whole-sequence buffers a micro-batch is read into. One function builds it
// all, for the trainer (allocating) and for the planner (plan_only: counting the
// same bytes without allocating them), so the memory the planner predicts is the
// memory the rank allocates, byte for byte (docs/DESIGN.md, invariant 3: all
// memory planned). Shapes: B sequences per micro-batch, seq_length tokens each.
#ifndef FEMTOTRON_RANK_H
#define FEMTOTRON_RANK_H

#include <stdint.h>

#include "config.h"
#include "dist/grid.h"
#include "engines/data_parallel.h"
#include "engines/pipeline.h"
#include "model/llama.h"
#include "util.h"

typedef struct {
    GridCoords at;             // this rank's coordinates (dist/grid.h)
    LlamaModel model;          // its shard of the model
    Pipeline pipe;             // its stage(s), schedule and activation slots
    DataParallel dp;           // its parameters, gradients and moments (whole or ZeRO-sharded)
    int32_t *full_tokens;      // (B*seq_length) whole sequences of a micro-batch, before the
    int32_t *full_targets;     // (B*seq_length) context-parallel split (MEM_ACTIVATIONS)
    float *snapshot;           // checkpoint.async: (dp_save_elements) the checkpoint pieces'
                               // copy the background writer reads (MEM_SNAPSHOT), else NULL
    void *bf16_weights;        // bf16 products: (dp.n_elements) bf16 copy of the parameters
                               // (MEM_PARAMS, ops_keep_bf16_weights); NULL under ZeRO-3 or fp32
    void *workspace;           // training.device = cuda: the CUDA backend's own work buffers, sized
                               // from the step's widest operands (llama_op_bounds, ops_cuda_workspace;
                               // MEM_ACTIVATIONS, ops_set_workspace); NULL on the CPU
    double *step_scalars;      // (3) a step's cross-entropy sum and its gradient norm's two sums of
                               // squares (dense, experts), added up on the device and read back
                               // together, the step's one host wait (ops.h; MEM_ACTIVATIONS)
} Rank;

// Build rank `at` of the run cfg (validated by config_validate): allocating every
// planned buffer when plan_only is NULL, else only adding their bytes per kind into
// *plan_only. No MPI either way.
void rank_build(Rank *r, const Config *cfg, GridCoords at, MemTally *plan_only);
void rank_free(Rank *r);

#endif
