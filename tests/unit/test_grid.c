// tests/unit/test_grid.c — dist/grid.c, the one map from world ranks to grid
// coordinates that the communicator, the trainer and the planner share: for every
// grid up to 16 ranks in both rank orders, grid_coords agrees with the numbering
// written in dist/grid.h (evaluated here independently), grid_rank inverts it, the
// map is a bijection, tensor-parallel ranks are neighbours, and the dp x cp index
// numbers the ranks that hold the same parameters 0 .. dp*cp-1.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config.h"
#include "dist/grid.h"

int main(void) {
    int grids = 0, bad_formula = 0, bad_inverse = 0, bad_bijection = 0, bad_tp = 0, bad_dpcp = 0;
    for (int order = 0; order <= 1; order++)
        for (int dp = 1; dp <= 4; dp++)
            for (int pp = 1; pp <= 4; pp++)
                for (int cp = 1; cp <= 2; cp++)
                    for (int tp = 1; tp <= 4; tp++) {
                        const int world = dp * pp * cp * tp;
                        if (world > 16) continue;
                        ParallelConfig p;
                        memset(&p, 0, sizeof p);
                        p.dp = dp, p.pp = pp, p.cp = cp, p.tp = tp;
                        p.order = (RankOrder)order;
                        grids++;
                        int seen[16] = {0};
                        // ranks sharing (pp, tp): their dp x cp indices must be 0 .. dp*cp-1
                        int dpcp_seen[16][16];
                        memset(dpcp_seen, 0, sizeof dpcp_seen);
                        for (int r = 0; r < world; r++) {
                            GridCoords c = grid_coords(&p, r);
                            // dist/grid.h: rank = ((outer) * CP + cp) * TP + tp, with outer
                            // dp * PP + pp (dp-pp-cp-tp) or pp * DP + dp (pp-dp-cp-tp)
                            int outer = order == ORDER_PP_DP_CP_TP ? c.pp * dp + c.dp : c.dp * pp + c.pp;
                            bad_formula += c.dp < 0 || c.dp >= dp || c.pp < 0 || c.pp >= pp || c.cp < 0 ||
                                           c.cp >= cp || c.tp < 0 || c.tp >= tp ||
                                           (outer * cp + c.cp) * tp + c.tp != r;
                            bad_inverse += grid_rank(&p, c) != r;
                            int key = ((c.dp * pp + c.pp) * cp + c.cp) * tp + c.tp;
                            bad_bijection += seen[key]++ != 0;
                            bad_tp += c.tp != r % tp;  // tp fastest: a tp group is consecutive ranks
                            int i = grid_dpcp_index(&p, c);
                            bad_dpcp += i < 0 || i >= dp * cp || dpcp_seen[c.pp * tp + c.tp][i]++ != 0;
                        }
                    }
    CHECK(grids > 100, "%d grids of up to 16 ranks in both rank orders enumerated", grids);
    CHECK(bad_formula == 0, "grid_coords follows dist/grid.h's numbering (%d mismatches)", bad_formula);
    CHECK(bad_inverse == 0, "grid_rank inverts grid_coords (%d mismatches)", bad_inverse);
    CHECK(bad_bijection == 0, "every coordinate tuple belongs to exactly one rank (%d repeats)", bad_bijection);
    CHECK(bad_tp == 0, "tensor-parallel ranks are neighbours (tp index = rank mod tp) (%d violations)", bad_tp);
    CHECK(bad_dpcp == 0, "grid_dpcp_index numbers each dp x cp group 0 .. dp*cp-1 once (%d violations)", bad_dpcp);

    // Expert-parallel ranks: ep consecutive indices of one dp x cp group; each block
    // holds every ep rank once, and the ranks with the same ep rank (which compute
    // the same experts) are dp*cp/ep per dp x cp group.
    {
        ParallelConfig q;
        memset(&q, 0, sizeof q);
        q.dp = 4, q.cp = 2, q.pp = 1, q.tp = 2, q.ep = 4, q.order = ORDER_DP_PP_CP_TP;
        int per_rank[4] = {0}, bad = 0;
        for (int r = 0; r < 16; r++) {
            GridCoords c = grid_coords(&q, r);
            int e = grid_ep_rank(&q, c), i = grid_dpcp_index(&q, c);
            bad += e != i % 4;
            per_rank[e]++;
        }
        CHECK(!bad && per_rank[0] == 4 && per_rank[1] == 4 && per_rank[2] == 4 && per_rank[3] == 4,
              "grid_ep_rank: dp 4 x cp 2 x tp 2, ep 4: ep rank = dp x cp index mod 4, each held by 4 ranks");
    }

    // One worked example per order: 16 ranks = dp 2 x pp 2 x cp 2 x tp 2, rank 13 = 0b1101.
    ParallelConfig p;
    memset(&p, 0, sizeof p);
    p.dp = p.pp = p.cp = p.tp = 2;
    p.order = ORDER_DP_PP_CP_TP;
    GridCoords a = grid_coords(&p, 13);
    CHECK(a.dp == 1 && a.pp == 1 && a.cp == 0 && a.tp == 1, "dp-pp-cp-tp: rank 13 is dp 1, pp 1, cp 0, tp 1");
    p.order = ORDER_PP_DP_CP_TP;
    GridCoords b = grid_coords(&p, 13);
    CHECK(b.pp == 1 && b.dp == 1 && b.cp == 0 && b.tp == 1 && grid_coords(&p, 9).pp == 1 &&
              grid_coords(&p, 9).dp == 0,
          "pp-dp-cp-tp: rank 13 is pp 1, dp 1, cp 0, tp 1; rank 9 is pp 1, dp 0");
    return check_summary();
}
