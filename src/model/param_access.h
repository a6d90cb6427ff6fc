// model/param_access.h — how the model reaches its weights and gradients, unit by
// unit, without knowing where they live.
//
// A unit is the granule in which parameters are gathered (ZeRO-3) and gradients are
// handed over (data-parallel buckets): unit 0 = the embedding, unit 1 + l = decoder
// layer l, unit L + 1 = the final norm and (untied) the output head; unit u covers
// the flat range [unit_lo[u], unit_lo[u + 1]) of the parameter table (llama.h).
//
// This callback struct is one of the upward edges of the layering
// (docs/DESIGN.md, "Layers"): the model declares it, the engine that owns the
// buffers implements it and hands it down. The data-parallel engine
// (engines/data_parallel.c) returns pointers into its whole buffers, or under
// ZeRO-3 gathers a unit's parameters on acquire and frees them on release, and
// under ZeRO-2/3 hands out gradient windows and starts reducing a bucket as soon
// as grads_done has been called for all of its units. param_access_whole below
// serves one rank that holds everything (generation, tests).
#ifndef FEMTOTRON_PARAM_ACCESS_H
#define FEMTOTRON_PARAM_ACCESS_H

#include "model/llama.h"

// Pieces. The two row-table units, the embedding (unit 0: Vl rows of D) and the
// final unit (the final norm, one row of D, then the untied head's Vl rows), can be
// larger than everything else together (a 49,152-token vocabulary on a small
// model); an engine that gathers or reduces a unit in a window of its size
// (ZeRO-2/3) then needs windows of that size. So an engine may ask for them in
// pieces of at most piece_max elements: the embedding in runs of whole rows, the
// final unit as its norm alone, then runs of whole head rows (at least one row
// each). A layer is one piece, except a mixture-of-experts layer under expert
// parallelism: its dense part (norms, attention, router, shared experts), then its
// experts (this rank's E/ep), two pieces whatever piece_max, because the engine
// reduces them over different groups (engines/data_parallel.h). piece_max 0: every
// other unit is one piece.
// Piece k of unit u covers the flat range llama_unit_piece gives, and the model
// hands each piece's gradients over (grads_done) once per use: a tied embedding
// used by the embedding and by the head of one stage gets two calls per micro-batch.
int llama_unit_n_pieces(const LlamaModel *m, int u, size_t piece_max);
// 1 when unit u is a mixture-of-experts layer under expert parallelism: piece 0 its
// dense part, piece 1 its experts (model/llama_build.c puts them last).
int llama_unit_split_experts(const LlamaModel *m, int u);
void llama_unit_piece(const LlamaModel *m, int u, size_t piece_max, int k, size_t *lo, size_t *hi);

// Pointers returned for unit u address element unit_lo[u] of the flat order, those
// for piece k of unit u the first element of the piece. The unit calls are for
// units in one piece (layers); the row tables go through the piece calls.
typedef struct ParamAccess {
    void *ctx;
    size_t piece_max;  // elements; 0 = whole units (see above)
    const float *(*acquire_params)(void *ctx, int unit);  // unit u's weights, until released
    void (*release_params)(void *ctx, int unit);
    float *(*grads)(void *ctx, int unit);     // where unit u's gradients accumulate
    void (*grads_done)(void *ctx, int unit);  // unit u's gradients of this micro-batch are final
    const float *(*acquire_piece)(void *ctx, int unit, int piece);
    void (*release_piece)(void *ctx, int unit, int piece);
    float *(*piece_grads)(void *ctx, int unit, int piece);
    void (*piece_grads_done)(void *ctx, int unit, int piece);  // this use of the piece is done
} ParamAccess;

// Whole buffers (one rank holding everything): grads may be NULL for forward-only
// use. The struct must outlive the ParamAccess made from it.
typedef struct {
    const float *params;  // (num_elements) flat weights
    float *grads;         // (num_elements) flat gradients, or NULL
    const LlamaModel *model;
} WholeBuffers;
ParamAccess param_access_whole(WholeBuffers *wb);

#endif
