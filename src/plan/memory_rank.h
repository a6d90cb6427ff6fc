// plan/memory_rank.h — femtotron's own runs: the memory of one rank, to the byte.
//
// Predicted from the trainer's own allocation plan (the same functions trainer_init
// runs, in plan-only mode), without MPI and without allocating the buffers;
// plan/memory_rank.c says why the prediction equals what the rank measures.
#ifndef FEMTOTRON_MEMORY_RANK_H
#define FEMTOTRON_MEMORY_RANK_H

#include "config.h"
#include "train/trainer.h"  // MemoryReport: params, grads, optimizer, activations, comm

// Grid coordinates of world rank `rank` under p->order: the numbering of
// dist/comm.h (tp fastest; "dp-pp-cp-tp" or "pp-dp-cp-tp"), computed without MPI.
void plan_rank_coords(const ParallelConfig *p, int rank, int *dp_i, int *pp_i, int *cp_i, int *tp_i);

// Bytes of each kind of planned buffer (util.h: MemKind) that the rank at grid
// coordinates (dp_i, pp_i, cp_i, tp_i) allocates in trainer_init, for a config
// that config_validate has accepted (grad_acc_steps derived). Pure: no MPI, no
// buffer allocated (small planning tables only, freed before it returns).
// Activations include the attention kernel's per-thread tiles, sized for the
// OpenMP thread count in effect: call ops_set_threads(training.threads) first, as
// `femtotron train` does.
MemoryReport plan_rank_memory(const Config *cfg, int dp_i, int pp_i, int cp_i, int tp_i);

// Sum of the five categories.
size_t plan_memory_total(const MemoryReport *r);

// The most loaded rank of the world dp*pp*cp*tp (largest total; the lowest rank on
// ties): its report, and its world rank in *rank when rank is not NULL.
MemoryReport plan_max_rank_memory(const Config *cfg, int *rank);

#endif
