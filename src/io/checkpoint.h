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

// ---- many ranks: each writes and reads only its own pieces -------------------------
//
// Pieces are ranges of the rank's own flat order: the order of its parameter table
// (ParamInfo.offset / numel), which with tensor parallelism (model_tp_shard) holds a
// slice of each tensor. The files do not depend on that: model.safetensors stores
// the GLOBAL tensors in table order, contiguously, so global element g of tensor i
// sits at byte data_start + 4 * (G_i + g), G_i = sum of the global sizes of the
// tensors before i. optimizer.safetensors stores every "NAME.exp_avg" that way,
// then every "NAME.exp_avg_sq" (after all G global elements). A slice's elements
// map to its global positions (param_global_index): a row split is one run, a
// column split one run per row, vocab padding rows are never written and read as 0,
// and a replicated tensor (norm weights) is written only where replica_writer is set.
// Without tensor parallelism the flat order IS the global order.
typedef enum { CKPT_PARAMS, CKPT_EXP_AVG, CKPT_EXP_AVG_SQ } CkptKind;

// A range [lo, hi) of the rank's flat order, of one kind, with its local storage.
typedef struct {
    CkptKind kind;
    size_t lo, hi;
    float *data;  // (hi - lo)
} CkptPiece;

// Collective over the world. Every rank passes the pieces it writes; for each kind,
// the pieces of the ranks of each tensor-parallel rank must partition that rank's
// flat order [0, num_elements) (with tp = 1: all ranks, the global order), checked
// on rank 0, which rebuilds every tp rank's table from the shared model config: a
// gap or an overlap is a fatal error naming the range and the ranks. So is a total
// of global elements written over all ranks other than the global size (the ranks'
// tables disagree). Every rank must have built its table with the same ModelConfig
// and tp. Rank 0 writes the headers, config.json and trainer_state.json and does
// the renames; every rank pwrite()s its pieces into the shared files and fsyncs
// them. Same directory protocol and atomicity as checkpoint_save; no rank ever
// holds another rank's data.
void checkpoint_save_pieces(const char *dir, const Config *cfg, const LlamaModel *model,
                            const CkptPiece *pieces, int n_pieces, const TrainerState *st);

// Fill each piece from a checkpoint directory (any piece layout, whatever layout and
// tensor-parallel degree wrote it; pieces may overlap; vocab padding gets 0). Reads
// tensor slices by name, so it works on any safetensors file with our names. Shape
// checks (against the global shapes) as checkpoint_load. Not collective.
void checkpoint_load_pieces(const char *ckpt_dir, const LlamaModel *model,
                            CkptPiece *pieces, int n_pieces, TrainerState *st);

// Fill CKPT_PARAMS pieces from a Hugging Face directory (same rules as load_hf_weights).
void load_hf_weights_pieces(const char *dir, const LlamaModel *model, CkptPiece *pieces,
                            int n_pieces);

#endif
