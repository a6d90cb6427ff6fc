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

// Pointers returned for unit u address element unit_lo[u] of the flat order.
typedef struct ParamAccess {
    void *ctx;
    const float *(*acquire_params)(void *ctx, int unit);  // unit u's weights, until released
    void (*release_params)(void *ctx, int unit);
    float *(*grads)(void *ctx, int unit);     // where unit u's gradients accumulate
    void (*grads_done)(void *ctx, int unit);  // unit u's gradients of this micro-batch are final
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
