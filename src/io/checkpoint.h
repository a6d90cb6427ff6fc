// io/checkpoint.h — checkpoints in one global format that does not depend on the layout.
//
// CHECKPOINT_DIR/step_NNNNNNN/            (NNNNNNN = step, 7 digits)
//   model.safetensors     Hugging Face names, global shapes, fp32 or bf16
//                         (checkpoint.dtype; metadata "step")
//   config.json           Hugging Face LlamaConfig (loads in transformers)
//   optimizer.safetensors AdamW moments as global tensors: "NAME.exp_avg", "NAME.exp_avg_sq",
//                         and with bf16 weights the fp32 master weights "NAME.master"
//                         (a resume reads the weights from these, so it stays exact)
//   trainer_state.json    {"step", "consumed_sequences", "loss", "seed", "config": {...}}
//   manifest.json         the step, and every file's size and checksum (written last)
// CHECKPOINT_DIR/latest   a symbolic link to the newest step directory, for people
//                         and tools (from_pretrained("DIR/latest")); not consulted.
// Publishing is one rename: a save writes everything into
// CHECKPOINT_DIR/.tmp_step_NNNNNNN, fsyncs every file and the directory, and renames
// it to step_NNNNNNN. THE CHECKPOINT IS THE NEWEST step_* DIRECTORY: whatever moment
// a rank or the job dies at, the next resume finds either the new step directory,
// complete, or only the older ones (leftover temporaries are removed at the next
// start). Before a resume touches any state, every file is checked against the
// manifest (checkpoint_verify) and every loaded value must be finite.
#ifndef FEMTOTRON_CHECKPOINT_H
#define FEMTOTRON_CHECKPOINT_H

#include <stdint.h>

#include "config.h"
#include "model/llama.h"

typedef struct {
    int step;                     // optimizer steps completed
    uint64_t consumed_sequences;  // global sequences consumed (data position)
    double loss;                  // training loss of step `step` (NaN: skipped as non-finite, or unknown)
} TrainerState;

// Save params (and moments m, v when not NULL) after `st->step` steps.
// Refuses (fatal) to overwrite an existing step directory.
void checkpoint_save(const char *dir, const Config *cfg, const LlamaModel *model,
                     const float *params, const float *m, const float *v,
                     const TrainerState *st);

// 1 when DIR holds a published checkpoint, else 0; the path of the newest one (the
// step_* directory with the highest step) written into out (size out_size). A
// step_* directory that is neither complete (manifest.json) nor an older
// femtotron's checkpoint (model.safetensors and trainer_state.json) is fatal.
int checkpoint_latest(const char *dir, char *out, size_t out_size);

// checkpoint.keep: delete all but the newest `keep` checkpoints of DIR, sparing those
// whose step is a multiple of keep_every (> 0) and the newest one of a good step
// (checkpoint_newest_finite). keep 0 keeps everything. Rank 0, after publishing.
void checkpoint_prune(const char *dir, int keep, int keep_every);

// The newest checkpoint in DIR whose step was not skipped (recorded loss finite), or 0.
int checkpoint_newest_finite(const char *dir, char *out, size_t out_size);

// Rank 0 at start-up: create DIR, check it is writable, remove what an interrupted
// save left (.tmp_step_* directories, latest.tmp), saying so, and point `latest`
// at the newest checkpoint.
void checkpoint_prepare_dir(const char *dir);

// Collective over the world: check every file of a checkpoint against its
// manifest (size, checksum — each rank reads a share) and that every file belongs
// to the manifest's step; fatal, naming the file, on any mismatch. Returns 1 when
// verified, 0 for a checkpoint without a manifest (written by an older femtotron).
int checkpoint_verify(const char *ckpt_dir);


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
// tensors before i (2 * (G_i + g) with checkpoint.dtype bf16). optimizer.safetensors
// stores every "NAME.exp_avg" that way, then every "NAME.exp_avg_sq" (after all G
// global elements), then with bf16 weights every fp32 "NAME.master". A slice's elements
// map to its global positions (param_global_index): a row split is one run, a
// column split one run per row, vocab padding rows are never written and read as 0,
// and a replicated tensor (norm weights) is written only where replica_writer is set.
// Without tensor parallelism the flat order IS the global order.
typedef enum { CKPT_PARAMS, CKPT_EXP_AVG, CKPT_EXP_AVG_SQ } CkptKind;
#define CKPT_N_KINDS 3

// Where each kind goes in one safetensors file of a save: kind k's global tensors
// fill slot[k] (the slot-th block of G global elements, G = every tensor's global
// size summed; -1: not in this file), esize bytes an element (4 fp32, 2 bf16).
typedef struct {
    int slot[CKPT_N_KINDS];
    int esize;
} CkptFileLayout;

// A range [lo, hi) of the rank's flat order, of one kind, with its local storage.
typedef struct {
    CkptKind kind;
    size_t lo, hi;
    float *data;  // (hi - lo)
} CkptPiece;

// A save in three phases, so that the write can run in a background thread while
// training goes on (checkpoint.async): begin (collective: checks, the temporary
// directory and the sized files), write (this rank's pieces, checksummed and
// fsync'd; no communication, any thread; the pieces' data must stay unchanged
// until it returns), finish (collective: the checksums summed, manifest.json, the
// rename that publishes, `latest`). checkpoint_save_pieces runs the three in turn.
typedef struct {
    char dir[1024], final_dir[1024], tmp_dir[1024];
    char files[2][1024];          // model.safetensors, optimizer.safetensors (in tmp_dir)
    uint64_t data_start[2];       // their data sections' offsets (0: not written)
    CkptFileLayout layout[2];     // what each holds where
    uint64_t hash[2];             // this rank's checksum share of each (after write)
    const Config *cfg;
    const LlamaModel *model;
    const CkptPiece *pieces;
    int n_pieces;
    TrainerState st;
    size_t *gbase;                // (n_params + 1) global element bases
} CkptSave;

void checkpoint_save_begin(CkptSave *s, const char *dir, const Config *cfg,
                           const LlamaModel *model, const CkptPiece *pieces, int n_pieces,
                           const TrainerState *st);
void checkpoint_save_write(CkptSave *s);
void checkpoint_save_finish(CkptSave *s);

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
// checks (against the global shapes) as checkpoint_load. Collective over the world:
// checkpoint_verify runs first (every file against the manifest), and a loaded value
// that is not finite is fatal.
void checkpoint_load_pieces(const char *ckpt_dir, const LlamaModel *model,
                            CkptPiece *pieces, int n_pieces, TrainerState *st);

// The run configuration a checkpoint was written with (trainer_state.json's "config"),
// over the defaults; model.from is dropped (its directory may be gone), so the
// model keys are those the run trained with. For comparing a resumed run's keys.
void checkpoint_read_config(const char *ckpt_dir, Config *out);

// Fill CKPT_PARAMS pieces from a Hugging Face directory (same rules as load_hf_weights).
void load_hf_weights_pieces(const char *dir, const LlamaModel *model, CkptPiece *pieces,
                            int n_pieces);

#endif
