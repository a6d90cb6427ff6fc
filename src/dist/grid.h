// dist/grid.h — the process grid dp x pp x cp x tp: which coordinates a world rank
// has. Pure (no MPI, no state): the communicator (dist/comm.c) builds its groups
// from it, the trainer takes its coordinates from it, and the planner predicts
// every rank's memory from it without starting a process, so the three cannot
// disagree about who is where.
//
// Ranks are numbered with tp fastest, so tensor-parallel ranks are neighbours (one
// node) and the outermost dimension spans nodes:
//   parallel.order dp-pp-cp-tp (default): rank = ((dp * PP + pp) * CP + cp) * TP + tp
//   parallel.order pp-dp-cp-tp:           rank = ((pp * DP + dp) * CP + cp) * TP + tp
// (capitals: the group sizes parallel.dp, .pp, .cp, .tp; lower case: the indices).
#ifndef FEMTOTRON_GRID_H
#define FEMTOTRON_GRID_H

#include "config.h"

// A rank's index along each dimension of the grid.
typedef struct {
    int dp, pp, cp, tp;
} GridCoords;

// Coordinates of world rank `rank` (0 <= rank < dp*pp*cp*tp).
GridCoords grid_coords(const ParallelConfig *p, int rank);
// The world rank at coordinates c: the inverse of grid_coords.
int grid_rank(const ParallelConfig *p, GridCoords c);
// This rank's index in its dp x cp group (the ranks that hold the same parameters
// and reduce gradients together): dp * CP + cp. ZeRO shards are numbered by it.
int grid_dpcp_index(const ParallelConfig *p, GridCoords c);

// Expert parallelism (parallel.ep): the dp x cp group is cut into blocks of ep
// consecutive indices; a block is an ep group (its ranks exchange tokens), and a
// rank's expert-parallel rank is its place in the block: dpcp_index % ep.
int grid_ep_rank(const ParallelConfig *p, GridCoords c);
#endif
