// engines/data_parallel.h — the data-parallel engine: it owns a rank's flat
// parameter, gradient and AdamW buffers (docs/DESIGN.md, invariant 2), hands the
// model its weights and gradient destinations through ParamAccess
// (model/param_access.h), reduces gradients over the dp x cp group bucket by bucket
// during backward, and applies ZeRO stages 1-3 (Rajbhandari et al. 2020).
//
// Buckets are runs of whole pieces (model/param_access.h: the units — embedding,
// each layer, final — with, under ZeRO-2/3, the embedding and the head cut into
// pieces no larger than a layer or a bucket) of about parallel.bucket_mb, formed
// from the end of the flat buffer because backward produces gradients from the
// last layer to the first (ZeRO-3: one piece per bucket, so a layer is gathered
// just before it is used). Each bucket is split into N = |dp x cp| parts
// (comm_split_chunk); rank r owns part r of every bucket. A window (ZeRO-2/3) holds
// the largest bucket, so under ZeRO-3 one layer whatever the vocabulary: one
// parameter window and two gradient windows (one filling, one reducing), or one
// gradient window when two would cost more than ZeRO-3 saves over ZeRO-1.
//
// Expert parallelism (parallel.ep > 1): a rank holds only its E/ep experts of each
// mixture-of-experts layer (model/llama_build.c), and the ranks that hold the same
// experts are the |dp x cp|/ep of its GROUP_EDP. Such a layer comes in two pieces,
// its dense part and its experts (model/param_access.h); a bucket never mixes the
// two, and each bucket is reduced, sharded and gathered over its own group (Bucket:
// group): the dense ones over dp x cp, the experts' over GROUP_EDP. The model holds
// both pieces of a layer at once, so ZeRO-2/3 keep a window more of each kind.
//
//   stage | parameters             | gradients                       | AdamW moments
//   0     | whole                  | whole, all-reduced per bucket   | whole
//   1     | whole, all-gathered    | whole, reduce-scattered         | own parts
//   2     | whole, all-gathered    | windows, reduce-scattered every | own parts
//         |                        | micro-batch, own parts kept     |
//   3     | own parts; a unit is   | as 2                            | own parts
//         | all-gathered on use    |                                 |
//
// Stages 0 and 1 reduce a bucket once per step, when its units have received the
// gradients of every micro-batch (accumulation happens in the whole gradient
// buffer); stages 2 and 3 keep no whole gradient buffer, so they reduce-scatter
// each micro-batch's gradients into the owned parts as soon as the bucket has them.
//
// A rank holds a subset of the units (a pipeline rank: its stage's units, or
// several chunks with the interleaved schedule). "Whole" above means all of the
// held units: the local flat buffer is the held units back to back, in unit order.
//
// Tied embeddings over several pipeline stages (Megatron-LM): the first stage holds
// the embedding (unit 0) and the last stage holds the same tensor again for its
// head (held[0] == 2, engines/pipeline.h), initialised or loaded identically. Unit
// 0 is then a bucket of its own on both, so their owned parts cover the same
// elements; after the data-parallel reduction the two parts are summed over the
// embedding group (dist/comm.h, GROUP_EMBED), and both copies take the same AdamW
// step from the same gradient: they stay bit-for-bit equal. The copy is counted
// once in the gradient norm and written once into checkpoints (by the first stage);
// both read it back.
#ifndef FEMTOTRON_DATA_PARALLEL_H
#define FEMTOTRON_DATA_PARALLEL_H

#include <stddef.h>

#include "config.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "util.h"

typedef struct {
    size_t lo, hi;               // LOCAL flat element range: whole pieces [piece_first, piece_last]
    size_t glo;                  // global flat offset of lo (the pieces are contiguous there too)
    int piece_first, piece_last;
    int unit_first;              // the unit of piece_first
    int uses;                    // hand-overs per micro-batch (sum over its pieces)
    GroupId group;               // the ranks it is reduced and sharded over: GROUP_DPCP, or
                                 // GROUP_EDP for experts under expert parallelism
    int gn, grank;               // that group's size and this rank's index in it
    size_t own_lo, own_hi;       // this rank's part of [lo, hi) (local offsets)
    size_t shard_off;            // where the own part starts in the shard buffers
    int done;                    // hand-overs this step (uses x micro-batches)
    int rounds;                  // reductions launched this step (stage 2-3: one per micro-batch)
    int param_refs;              // ZeRO-3: holders of the gathered parameters
    float *param_window;         // ZeRO-3: (hi - lo) gathered parameters, or NULL
    float *grad_window;          // ZeRO-2/3: (hi - lo) gradients being accumulated, or NULL
    float *flight_window;        // ZeRO-2/3: (hi - lo) gradients being reduce-scattered, or NULL
    CommRequest req;             // reduction in flight
    int reduced_into_shard;      // ZeRO-2/3: request result must be added to shard grads
} Bucket;

typedef struct {
    const LlamaModel *model;
    int zero, n, rank;           // stage, |dp x cp|, rank in dp x cp
    int edp_n, edp_rank;         // expert parallelism: |dp x cp| / ep ranks hold the same
                                 // experts (GROUP_EDP), this rank's index among them
    int overlap;                 // reduce during backward (else after it)
    int embed_shared;            // holds a tied embedding another stage holds too (see above)
    int embed_copy;              // ... as the last stage's copy: not saved, not in the norm
    // Pieces (model/param_access.h): the held units, the row tables cut into
    // pieces of at most piece_max elements under ZeRO-2/3 (0: whole units).
    size_t piece_max;
    int n_pieces;
    int *unit_piece0;            // (n_units) index of each unit's first piece, -1 when not held
    int *piece_unit;             // (n_pieces) the unit of each piece
    int *piece_expert;           // (n_pieces) 1: the experts of a layer under expert parallelism
    int *piece_uses;             // (n_pieces) hand-overs per micro-batch (2: a tied embedding
                                 // used by this rank's embedding and head)
    size_t *piece_local;         // (n_pieces) local flat offset of each piece
    size_t *piece_glo;           // (n_pieces) global flat offset of each piece
    size_t *piece_len;           // (n_pieces) elements of each piece
    int *bucket_of_piece;        // (n_pieces)
    int n_buckets;
    Bucket *buckets;             // (n_buckets) in flat order
    size_t n_elements;           // local flat elements (the held units)
    size_t shard_n;              // elements this rank owns (sum of own parts)
    // Buffers (docs/DESIGN.md, invariant 2: one flat buffer per kind):
    float *params;       // stage 0-2: (n_elements) whole; stage 3: (shard_n) own parts
    float *grads;        // stage 0-1: (n_elements) whole; stage 2-3: NULL
    float *shard_grads;  // stage 1-3: (shard_n) reduced own parts; stage 0: NULL
    float *m, *v;        // stage 0: (n_elements); stage 1-3: (shard_n)
    // Window pools (stage 2-3 gradients, stage 3 parameters), allocated once.
    int n_grad_windows, n_param_windows;
    float **param_pool, **grad_pool;  // (n_param_windows), (n_grad_windows) each (max bucket)
    int *param_pool_used, *grad_pool_used;
    int micros;                  // micro-batches per step (each held unit sees each once)
    ParamAccess access;          // what the model calls
} DataParallel;

// Plan the engine for rank `rank` of a dp x cp group of n ranks (dist/grid.h:
// grid_dpcp_index) holding the units with held[u] != 0 (NULL: all of them; 2 marks
// the tied embedding's copy on the last stage):
// buckets, owned parts, window counts, then the planned buffers (parameters,
// gradients, moments: MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER; ZeRO-2/3 windows:
// MEM_COMM), allocated when plan_only is NULL, else only added up into *plan_only
// (the planner: nothing allocated but bookkeeping).
void dp_init(DataParallel *dp, const LlamaModel *model, const ParallelConfig *pc, const int *held,
             int n, int rank, MemTally *plan_only);
void dp_free(DataParallel *dp);

// Elements of one ZeRO-2/3 window: the largest bucket (ZeRO-3: the largest layer,
// since the row tables come in pieces no larger than a layer).
size_t dp_window_elements(const DataParallel *dp);

// Bucket b is the last stage's copy of a tied embedding (unit 0 held as held[0] == 2):
// another stage counts it in the gradient norm and writes it into checkpoints.
static inline int dp_bucket_is_copy(const DataParallel *dp, const Bucket *b) {
    return dp->embed_copy && b->unit_first == 0;
}

// Where this rank's reduced gradient part of bucket b lives: stage 1 keeps it in
// place inside the whole gradient buffer, stages 2-3 in the shard buffer.
float *dp_owned_grads(const DataParallel *dp, const Bucket *b);

// Before the first micro-batch of a step of `micros` micro-batches.
void dp_begin_step(DataParallel *dp, int micros);
// After the last backward of the step: wait for every reduction, then sum a shared
// tied embedding's gradient over the embedding group.
void dp_finish_grads(DataParallel *dp);

// The global L2 norm of the reduced gradient (before clipping), in two halves, so
// that the step reads its scalars back at once (train/trainer.c):
// dp_grad_sumsq adds this rank's sums of squares of what it counts (a replicated
// tensor on one tensor-parallel rank, a tied copy not at all) to sums[0] (dense
// tensors) and sums[1] (experts held whole under ZeRO-0), a planned buffer of two
// doubles (ops.h: summed on the device); dp_grad_norm takes them read back and
// returns the norm, the same on every rank (summed over the groups that hold
// different parts). Collective (host scalars).
void dp_grad_sumsq(const DataParallel *dp, double *sums);
double dp_grad_norm(const DataParallel *dp, const double local[2]);
// Scale the reduced gradient, AdamW on what this rank owns, all-gather parameters.
void dp_clip_and_update(DataParallel *dp, double clip_coef, float lr, const TrainingConfig *tc,
                        int step);

// Initialise parameters (counter-based by global index) or load them (model.from).
void dp_init_params(DataParallel *dp, uint64_t seed, const char *hf_dir);

// Pieces this rank writes into a checkpoint / fills when resuming (any layout).
// pieces must hold at least dp_max_pieces(dp) entries.
int dp_max_pieces(const DataParallel *dp);
// Elements of all the pieces dp_save_pieces gives (its parameters and moments).
size_t dp_save_elements(const DataParallel *dp);
int dp_save_pieces(const DataParallel *dp, CkptPiece *pieces);
int dp_load_pieces(DataParallel *dp, CkptPiece *pieces);

#endif
