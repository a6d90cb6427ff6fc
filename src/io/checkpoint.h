// io/checkpoint.h — checkpoints in one global format that does not depend on the layout.
//
// CHECKPOINT_DIR/step_NNNNNNN/            (NNNNNNN = step, 7 digits)
//   model.safetensors     Hugging Face names, global shapes, fp32
//   config.json           Hugging Face LlamaConfig (loads in transformers)
//   optimizer.safetensors AdamW moments as global tensors: "NAME.exp_avg", "NAME.exp_avg_sq"
//   trainer_state.json    {"step", "consumed_sequences", "seed", "config": {...}}
// CHECKPOINT_DIR/latest   text file holding "step_NNNNNNN", replaced last.
// A save writes into CHECKPOINT_DIR/.tmp_step_NNNNNNN, fsyncs every file and the
// directory, renames it into place, then atomically replaces `latest`: a run killed
// at any moment leaves the last complete checkpoint intact.
#ifndef FEMTOTRON_CHECKPOINT_H
#define FEMTOTRON_CHECKPOINT_H

#include <stdint.h>

#include "config.h"
#include "model/llama.h"

typedef struct {
    int step;                     // optimizer steps completed
    uint64_t consumed_sequences;  // global sequences consumed (data position)
} TrainerState;

// Save params (and moments m, v when not NULL) after `st->step` steps.
// Refuses (fatal) to overwrite an existing step directory.
void checkpoint_save(const char *dir, const Config *cfg, const LlamaModel *model,
                     const float *params, const float *m, const float *v,
                     const TrainerState *st);

// 1 if DIR/latest exists (and names a complete checkpoint), else 0; path of that
// checkpoint directory written into out (size out_size).
int checkpoint_latest(const char *dir, char *out, size_t out_size);

// Load from a checkpoint directory (step_NNNNNNN): params, moments and state.
// Shapes must match the model; a mismatch or a missing tensor is fatal, naming it.
void checkpoint_load(const char *ckpt_dir, const LlamaModel *model,
                     float *params, float *m, float *v, TrainerState *st);

// Load model weights from a Hugging Face directory (model.safetensors or sharded).
// A tied model accepts a missing lm_head.weight; an untied one requires it.
void load_hf_weights(const char *dir, const LlamaModel *model, float *params);

#endif
