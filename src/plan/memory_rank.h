// plan/memory_rank.h — femtotron's own runs: the memory of one rank, to the byte.
//
// Predicted from the trainer's own allocation plan (the same functions trainer_init
// runs, in plan-only mode), without MPI and without allocating the buffers;
// plan/memory_rank.c says why the prediction equals what the rank measures.
#ifndef FEMTOTRON_MEMORY_RANK_H
#define FEMTOTRON_MEMORY_RANK_H

#include "config.h"
#include "dist/grid.h"
#include "util.h"  // MemoryReport: params, grads, optimizer, activations, comm

// Bytes of each kind of planned buffer (util.h: MemKind) that the rank at grid
// coordinates `at` allocates in trainer_init (engines/rank.h), for a config
// that config_validate has accepted (grad_acc_steps derived). Pure: no MPI, no
// buffer allocated (small planning tables only, freed before it returns).
// Activations include the attention kernel's per-thread tiles, sized for the
// OpenMP thread count in effect: call ops_set_threads(training.threads) first, as
// `femtotron train` does.
MemoryReport plan_rank_memory(const Config *cfg, GridCoords at);

// Sum of the categories.
size_t plan_memory_total(const MemoryReport *r);

// The most loaded rank of the world dp*pp*cp*tp (largest total; the lowest rank on
// ties): its report, and its world rank in *rank when rank is not NULL.
MemoryReport plan_max_rank_memory(const Config *cfg, int *rank);

#endif
