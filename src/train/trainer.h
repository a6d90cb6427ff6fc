// train/trainer.h — a rank's training state and one optimizer step.
#ifndef FEMTOTRON_TRAINER_H
#define FEMTOTRON_TRAINER_H

#include <stdint.h>

#include "config.h"
#include "data/tokens.h"
#include "io/checkpoint.h"
#include "model/llama.h"

typedef struct {
    Config cfg;
    LlamaModel model;
    // DESIGN.md invariant 2: one flat buffer per kind, all with the parameter layout.
    float *params;  // (num_elements)
    float *grads;   // (num_elements)
    float *m, *v;   // (num_elements) AdamW first and second moments
    Activations act;
    int32_t *inputs, *targets;  // (B*S) the current micro-batch
    TokenDataset train_data, val_data;
    int has_val;
    TrainerState state;
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

// Bytes of each buffer kind (for the memory report and the planner).
typedef struct {
    size_t params, grads, optimizer, activations, batch;
} MemoryReport;
MemoryReport trainer_memory(const Trainer *t);

// Zero the gradients and accumulate those of optimizer step `step` (0-based) over
// its micro-batches; the loss is normalised by the global token count, so the
// gradient is that of the mean over the whole global batch. Returns that mean loss.
double trainer_compute_grads(Trainer *t, int step);

// One optimizer step: gradients, global-norm clipping, AdamW, state update.
StepResult trainer_step(Trainer *t);

// Mean validation loss over logging.val_batches micro-batches (fixed positions).
double trainer_validate(Trainer *t);

#endif
