// io/checkpoint_internal.h — what the checkpoint files share; not part of the API
// (that is io/checkpoint.h). A checkpoint holds global tensors under Hugging Face
// names, so it can be resumed under any parallel layout and loaded by transformers.
// One job each:
//   checkpoint_dir.c       directory protocol: temporary directory, fsync, the publishing
//                          rename, the newest checkpoint, `latest`
//   checkpoint_pieces.c    pieces of a rank's flat order -> runs of the global tensors
//   checkpoint_coverage.c  rank 0's check that the ranks' pieces write every element once
//   checkpoint_save.c      the collective save: sized files, each rank pwrite()s its runs
//   checkpoint_load.c      filling pieces from a checkpoint or Hugging Face weights
//   checkpoint_state.c     trainer_state.json
//   checkpoint_integrity.c checksums, manifest.json, verification, finite values
#ifndef FEMTOTRON_CHECKPOINT_INTERNAL_H
#define FEMTOTRON_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "io/checkpoint.h"
#include "model/llama.h"

#define CKPT_FORMAT "femtotron-checkpoint-v1"
#define CKPT_PATH_MAX 1024
#define CKPT_OPT_NAME_MAX (PARAM_NAME_MAX + 16)  // "NAME.exp_avg_sq"

// ---------------------------------------------------------------- checkpoint_dir.c

// out = dir/name (out: CKPT_PATH_MAX bytes); too long is fatal.
void ckpt_path_join(char *out, const char *dir, const char *name);
// Create (truncate) path with text, fsync'd.
void ckpt_write_text_file(const char *path, const char *text);

// Paths of one save: DIR/step_NNNNNNN, DIR/.tmp_step_NNNNNNN and the files in it.
typedef struct {
    char step_name[32];
    char final_dir[CKPT_PATH_MAX], tmp_dir[CKPT_PATH_MAX];
    char model[CKPT_PATH_MAX], optimizer[CKPT_PATH_MAX];
} SavePaths;

void ckpt_save_paths(SavePaths *sp, const char *dir, int step);
// Rank 0, before any data is written: the temporary directory and the sized files
// with their headers, laid out as lay (2): model, optimizer. data_start: (2) their
// data sections' offsets (0 for a file that holds nothing).
void ckpt_begin_save(const SavePaths *sp, const char *dir, const LlamaModel *model,
                     const CkptFileLayout *lay, int step, uint64_t *data_start);
// Rank 0, once every rank's data is durable: the small files, manifest.json (the
// safetensors checksums: hash[f], every rank's data-section sums, plus the headers),
// the rename that publishes, `latest`.
void ckpt_finish_save(const SavePaths *sp, const char *dir, const Config *cfg,
                      const TrainerState *st, const uint64_t *data_start, const uint64_t *hash);
// `latest` -> step_name, replaced atomically.
void ckpt_point_latest(const char *dir, const char *step_name);

// ---------------------------------------------------------------- checkpoint_pieces.c

extern const char *const CKPT_KIND_NAMES[];  // indexed by CkptKind

// The parameter table must hold slices inside their global tensors, back to back.
void ckpt_check_table(const LlamaModel *model, const char *where);
// File element index of each tensor's first element: (n_params + 1), caller frees.
size_t *ckpt_global_bases(const LlamaModel *model);

// Local elements [l + r*len, l + (r+1)*len) of one tensor (counted from its first
// local element), r < n_runs, are global elements [g + r*stride, g + r*stride + len)
// of that tensor; g < 0 marks vocab padding, which has no place in any file.
typedef struct {
    size_t l, len, n_runs;
    int64_t g, stride;
} Block;

// Local elements [a, b) of p as at most 3 blocks (out: 3); returns how many.
int ckpt_map_range(const ParamInfo *p, size_t a, size_t b, Block *out);
// The part of piece pc in tensor p, as local elements [*a, *b) of p; 0 if none.
int ckpt_piece_in_tensor(const CkptPiece *pc, const ParamInfo *p, size_t *a, size_t *b);
// This rank's own pieces: a known kind, lo <= hi <= n, storage when non-empty.
void ckpt_check_local_pieces(const CkptPiece *pieces, int n_pieces, size_t n,
                             const char *where);

// ---------------------------------------------------------------- checkpoint_coverage.c

// Piece metadata of every rank, gathered so that rank 0 can check the partition.
// Only (kind, lo, hi) and a few counts travel, never tensor data. Element counts
// are exact in a double up to 2^53 elements.
#define RANK_HEAD 8  // tp, tp_rank, num_elements, global elements written per kind (3), ep, ep_rank
typedef struct {
    int world, per_rank;  // ranks; piece slots per rank (the largest n_pieces)
    double *head;         // (world, RANK_HEAD)
    double *slot;         // (world, per_rank, 3): kind + 1 (0 = unused slot), lo, hi
} PieceTable;

// Collective: every rank's piece metadata into t (caller frees t->head).
void ckpt_gather_pieces(PieceTable *t, const LlamaModel *model, const CkptPiece *pieces,
                        int n_pieces);
// 1 when some rank passes a piece of this kind (even an empty one).
int ckpt_kind_given(const PieceTable *t, CkptKind kind);
// The table of every shard of the model: tensor-parallel rank tr with expert-
// parallel rank er is tabs[tr * ep + er]; (tp * ep), freed by ckpt_free_tp_tables.
const LlamaModel *ckpt_tp_tables(const LlamaModel *model);
void ckpt_free_tp_tables(const LlamaModel *tabs, const LlamaModel *model);
// Every rank runs rank 0's tp and ep degrees, with the table its shard builds.
void ckpt_check_tables_agree(const PieceTable *t, const LlamaModel *tabs, const LlamaModel *model,
                             const char *where);
// Rank 0: the pieces of one kind write every global element exactly once.
void ckpt_check_coverage(const PieceTable *t, CkptKind kind, const LlamaModel *tabs,
                         const LlamaModel *model, size_t global_total, const char *where);

// ---------------------------------------------------------------- checkpoint_save.c

// The two files' layouts of a save: params in model.safetensors (bf16 or fp32),
// the moments (when saved) in optimizer.safetensors, and with bf16 weights the fp32
// params there too, as "NAME.master". lay: (2) model, optimizer.
void ckpt_file_layouts(CkptFileLayout *lay, int moments, CkptDtype dtype);
// Create path with the safetensors header of the model's tensors as lay places them
// (names + the kind's suffix in optimizer.safetensors), sized to hold them all;
// returns the data section's offset, or 0 (no file) when lay holds nothing.
uint64_t ckpt_write_header(const char *path, const LlamaModel *model, const CkptFileLayout *lay,
                           int optimizer_file, const char *meta_kind, int step);
// Tensor name suffix of each kind in optimizer.safetensors: ".master", ".exp_avg",
// ".exp_avg_sq".
extern const char *const CKPT_OPT_SUFFIX[];

// ---------------------------------------------------------------- checkpoint_integrity.c
// The position-keyed unit-sum checksum (checkpoint_integrity.c): bytes(nbytes)
// starting at unit index first_unit of their file, in units of `unit` bytes (2 for
// what this femtotron writes, CKPT_HASH_UNIT; 4 in older manifests); sums of
// disjoint ranges add up.
#define CKPT_HASH_UNIT 2
uint64_t ckpt_hash_units(const void *bytes, size_t nbytes, uint64_t first_unit, int unit);
// Bytes [lo, hi) of an open file (lo a multiple of unit), read in chunks.
uint64_t ckpt_hash_file_range(int fd, const char *path, uint64_t lo, uint64_t hi, int unit);
// A whole file (CKPT_HASH_UNIT); its size in *bytes.
uint64_t ckpt_hash_file(const char *path, uint64_t *bytes);
#define CKPT_MAX_FILES 8
typedef struct {
    char name[32];
    uint64_t bytes, hash;
} CkptFileSum;
// manifest.json: the step and every file's size and checksum.
typedef struct {
    int step;
    int unit;  // checksum unit in bytes (CKPT_HASH_UNIT, or 4 in older manifests)
    int n;
    CkptFileSum f[CKPT_MAX_FILES];
} CkptManifest;
void ckpt_manifest_add(CkptManifest *m, const char *name, uint64_t bytes, uint64_t hash);
void ckpt_write_manifest(const char *path, const CkptManifest *m);
// Read and check the format; fatal, naming the file, when it is malformed.
void ckpt_read_manifest(const char *path, CkptManifest *m);
// Refuse (fatal) loaded pieces holding a NaN or an infinity, naming the tensor.
void ckpt_check_finite(const CkptPiece *pieces, int n_pieces, const LlamaModel *model,
                       const char *ckpt_dir);

// ---------------------------------------------------------------- checkpoint_state.c

void ckpt_write_trainer_state(const char *path, const Config *cfg, const TrainerState *st);
void ckpt_read_trainer_state(const char *path, TrainerState *st);

#endif
