// dist/grid.c — world rank <-> grid coordinates (see grid.h for the numbering).
#include "dist/grid.h"

GridCoords grid_coords(const ParallelConfig *p, int rank) {
    GridCoords c;
    c.tp = rank % p->tp;
    c.cp = rank / p->tp % p->cp;
    const int outer = rank / (p->tp * p->cp);  // the dp and pp indices, in parallel.order
    if (p->order == ORDER_PP_DP_CP_TP) {
        c.dp = outer % p->dp;
        c.pp = outer / p->dp;
    } else {
        c.pp = outer % p->pp;
        c.dp = outer / p->pp;
    }
    return c;
}

int grid_rank(const ParallelConfig *p, GridCoords c) {
    const int outer = p->order == ORDER_PP_DP_CP_TP ? c.pp * p->dp + c.dp : c.dp * p->pp + c.pp;
    return (outer * p->cp + c.cp) * p->tp + c.tp;
}

int grid_dpcp_index(const ParallelConfig *p, GridCoords c) { return c.dp * p->cp + c.cp; }

int grid_ep_rank(const ParallelConfig *p, GridCoords c) { return grid_dpcp_index(p, c) % p->ep; }
