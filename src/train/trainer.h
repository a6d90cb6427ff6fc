// train/trainer.h — a rank's training state and one optimizer step.
#ifndef FEMTOTRON_TRAINER_H
#define FEMTOTRON_TRAINER_H

#include <stdint.h>

#include "config.h"
#include "data/tokens.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "util.h"

typedef struct {
    Config cfg;
    LlamaModel model;
    // Parameters, gradients and AdamW moments: one flat buffer per kind, whole or
    // sharded by the ZeRO stage (DESIGN.md invariant 2; see data_parallel.h).
    DataParallel dp;
    CkptPiece *pieces;  // (dp_max_pieces) checkpoint pieces, planned once
    Pipeline pipe;      // this rank's stage(s), schedule and activation slots
    int batch_step;     // step whose micro-batches fill_batch serves (-1: validation)
    int32_t *full_tokens, *full_targets;  // (B*S) whole sequences before the context-parallel split
    TokenDataset train_data, val_data;
    int has_val;
    TrainerState state;
    int bad_steps;  // consecutive steps with a non-finite loss or gradient norm
} Trainer;

// Everything a step reports.
typedef struct {
    int step;          // 1-based number of the step just taken
    double loss;       // mean cross-entropy over the global batch's target tokens
    double grad_norm;  // global L2 norm before clipping
    double lr;
    int skipped;       // 1 when the update was skipped (non-finite loss or norm)
} StepResult;

// Build the model, allocate every buffer (planned once, nothing inside the step),
// initialise or load the weights (model.from), open the data.
void trainer_init(Trainer *t, const Config *cfg);
void trainer_free(Trainer *t);

// Bytes of each kind of planned buffer (util.h: MemKind), for the memory report and
// the planner (plan/memory_rank.h).
typedef struct {
    size_t params, grads, optimizer, activations, comm;
} MemoryReport;
// The report of per-kind byte counts (indexed by MemKind).
MemoryReport memory_report(const size_t bytes[MEM_KINDS]);
// MEASURED: what this process allocated through buf_alloc (util.h), by kind.
MemoryReport trainer_memory(const Trainer *t);

// What trainer_init runs before allocating, shared with the planner
// (plan/memory_rank.c) so that both size the same buffers: the model table of
// tensor-parallel rank tp_i and context-parallel rank cp_i (with sequence parallel
// and activation recomputation as configured) ...
void trainer_build_model(LlamaModel *m, const Config *cfg, int tp_i, int cp_i);
// ... and the trainer's own planned buffers, the whole sequences (B*S) each before
// the context-parallel split (MEM_ACTIVATIONS): allocated when plan_only is NULL,
// else only added up (util.h: buf_take).
void trainer_sequence_buffers(int32_t **tokens, int32_t **targets, const Config *cfg,
                              MemTally *plan_only);

// Accumulate the gradients of optimizer step `step` (0-based) over this rank's
// micro-batches and reduce them over data-parallel ranks. Every micro-batch's loss
// is normalised by the global token count, so the result is the gradient of the
// mean over the whole global batch. Returns that mean loss (same on every rank).
double trainer_compute_grads(Trainer *t, int step);

// Write a checkpoint of the current state (collective) / resume from one.
void trainer_save(Trainer *t);
void trainer_load(Trainer *t, const char *ckpt_dir);

// One optimizer step: gradients, global-norm clipping, AdamW, state update.
StepResult trainer_step(Trainer *t);

// Mean validation loss over logging.val_batches micro-batches (fixed positions).
double trainer_validate(Trainer *t);

#endif
