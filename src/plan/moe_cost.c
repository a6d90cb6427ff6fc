// plan/moe_cost.c — expert parallelism on paper (see moe_cost.h for the model).
#include "plan/moe_cost.h"

#include <string.h>

#include "dist/grid.h"

int plan_layout_ep(const PlanLayout *l) { return l->ep > 1 ? l->ep : 1; }

double plan_expert_params(const PlanModel *pm) {
    // gate (w1) and up (w3), each (F, D), and down (w2), (D, F), per expert
    return pm->E > 0 ? (double)pm->E * 3.0 * pm->D * pm->F : 0.0;
}

double plan_ep_rows(const PlanModel *pm, const PlanLayout *l, double N) {
    if (pm->E == 0) return 0.0;
    const int ep = plan_layout_ep(l), El = pm->E / ep;
    // Every token of the group's ep ranks may send min(k, El) of its k slots here
    // (a token reaches each expert once): parallel_layers/expert_parallel.h.
    return (double)ep * N * (pm->K < El ? pm->K : El);
}

int plan_ep_intra(const PlanProblem *p, const PlanLayout *l) {
    const int ep = plan_layout_ep(l), g = p->hw.gpus_per_node;
    if (ep == 1) return 1;
    ParallelConfig pc;
    memset(&pc, 0, sizeof pc);
    pc.dp = l->dp;
    pc.tp = l->tp;
    pc.pp = l->pp;
    pc.cp = l->cp;
    pc.ep = ep;
    pc.order = p->base ? p->base->parallel.order : ORDER_DP_PP_CP_TP;
    // Each group (ep consecutive dp x cp indices) of each pipeline stage, at tp
    // index 0 (the other tp indices are the neighbours of these ranks and share
    // their node as long as tp divides the node, which plan_layout_check asks).
    for (int pp = 0; pp < l->pp; pp++)
        for (int first = 0; first < l->dp * l->cp; first += ep) {
            int node = -1;
            for (int i = first; i < first + ep; i++) {
                GridCoords c = {i / l->cp, pp, i % l->cp, 0};
                int n = g > 0 ? grid_rank(&pc, c) / g : 0;
                if (node >= 0 && n != node) return 0;
                node = n;
            }
        }
    return 1;
}

double plan_ep_alltoall_s(const PlanProblem *p, const PlanLayout *l, double bytes) {
    const int ep = plan_layout_ep(l);
    if (ep == 1) return 0.0;
    return hardware_collective_s(&p->hw, COLL_ALLGATHER, ep, plan_ep_intra(p, l), bytes);
}

void plan_ep_layer_comm(const PlanProblem *p, const PlanLayout *l, double N, double *fwd_s, double *bwd_s) {
    const PlanModel *pm = &p->model;
    *fwd_s = *bwd_s = 0.0;
    if (pm->E == 0 || plan_layout_ep(l) == 1) return;
    const int ep = plan_layout_ep(l);
    // N*k rows of D values leave (and as many arrive) in every exchange: tensor
    // parallelism does not split them (each tp rank routes every gathered token).
    const double rows = N * pm->K * pm->D * p->hw.bytes_per_value;
    const double counts = 4.0 * ep * (pm->E / ep);  // (ep, E/ep) int32 row counts
    const double one = plan_ep_alltoall_s(p, l, rows);
    *fwd_s = plan_ep_alltoall_s(p, l, counts) + 2.0 * one;
    *bwd_s = 2.0 * one;
}
