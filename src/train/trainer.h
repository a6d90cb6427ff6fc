// train/trainer.h — a rank's training state and one optimizer step.
#ifndef FEMTOTRON_TRAINER_H
#define FEMTOTRON_TRAINER_H

#include <stdint.h>

#include "config.h"
#include "data/mixture.h"
#include "dist/grid.h"
#include "engines/rank.h"
#include "io/checkpoint.h"
#include "train/checkpointer.h"

typedef struct Trainer {
    Config cfg;
    // The rank's model shard, pipeline and data-parallel engine (engines/rank.h):
    // parameters, gradients and AdamW moments live in rank.dp, one flat buffer per
    // kind, whole or sharded by the ZeRO stage (docs/DESIGN.md, invariant 2).
    Rank rank;
    CkptPiece *pieces;  // (dp_max_pieces) pieces to load into, planned once
    Checkpointer ckpt;  // saves (train/checkpointer.h)
    int batch_step;     // step whose micro-batches fill_batch serves (-1: validation)
    DataMixture train_data, val_data;  // data.train, data.val (one source or a mixture)
    int has_val;
    int val_source;     // validation: the data.val source fill_batch serves
    double *val_loss_by_source;  // (val_data.n) after trainer_validate
    TrainerState state;
    int bad_steps;  // consecutive steps with a non-finite loss or gradient norm
    double aux_loss;  // after trainer_compute_grads: the mean load-balancing loss of the step's
                      // sequences (mixture of experts with model.output_router_logits), else 0
    double grad_sumsq[2];  // after trainer_compute_grads: this rank's sums of squares of the
                           // reduced gradient (dp_grad_sumsq), read back with the loss
} Trainer;

// Everything a step reports.
typedef struct {
    int step;          // 1-based number of the step just taken
    double loss;       // mean cross-entropy over the global batch's target tokens (+ the
                       // load-balancing loss times router_aux_loss_coef, when on)
    double grad_norm;  // global L2 norm before clipping
    double aux_loss;   // the step's load-balancing loss (Trainer.aux_loss), included in loss
    double ep_ms;      // this rank's milliseconds in expert-parallel dispatch and combine
    double lr;
    int skipped;       // 1 when the update was skipped (non-finite loss or norm)
} StepResult;

// Build the rank at grid coordinates `at` (engines/rank.h: every buffer planned
// once, nothing allocated inside the step), initialise or load the weights
// (model.from), open the data.
void trainer_init(Trainer *t, const Config *cfg, GridCoords at);
void trainer_free(Trainer *t);

// Accumulate the gradients of optimizer step `step` (0-based) over this rank's
// micro-batches and reduce them over data-parallel ranks. Every micro-batch's loss
// is normalised by the global token count, so the result is the gradient of the
// mean over the whole global batch. Returns that mean loss (same on every rank).
// The loss and the gradient norm's sums of squares are added up on the device and
// read back together at the end: the step's one host wait (ops.h; a collective
// over MPI waits too).
double trainer_compute_grads(Trainer *t, int step);

// Resume from a checkpoint (collective). Saves: train/checkpointer.h.
void trainer_load(Trainer *t, const char *ckpt_dir);

// One optimizer step: gradients, global-norm clipping, AdamW, state update.
StepResult trainer_step(Trainer *t);

// Validation: each data.val source scored on its own first logging.val_batches
// micro-batches (fixed positions) into t->val_loss_by_source; returns their mean
// weighted by the sources' weights (with one source, its loss).
double trainer_validate(Trainer *t);

#endif
