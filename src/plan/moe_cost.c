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

// Seconds of a GEMM of `flops` at the curve's rate for its size; its backward (input
// and weight gradients, each as many FLOPs) as one call of twice the work, as
// step_time.c prices them.
static double gemm_s(const Hardware *hw, double flops) {
    return flops > 0 ? flops / curve_rate(&hw->gemm, flops) : 0.0;
}
static double gemm_bwd_s(const Hardware *hw, double flops) { return gemm_s(hw, 2.0 * flops); }

// One SwiGLU MLP of width f over `rows` rows: gate|up (D -> 2f) then down (f -> D).
static void swiglu_s(const Hardware *hw, double rows, double D, double f, double *fwd, double *bwd) {
    *fwd = gemm_s(hw, 2.0 * rows * D * 2.0 * f) + gemm_s(hw, 2.0 * rows * f * D);
    *bwd = gemm_bwd_s(hw, 2.0 * rows * D * 2.0 * f) + gemm_bwd_s(hw, 2.0 * rows * f * D);
}

void plan_moe_gemm_delta(const PlanProblem *p, const PlanLayout *l, double N, double *fwd_s, double *bwd_s) {
    const PlanModel *pm = &p->model;
    const Hardware *hw = &p->hw;
    *fwd_s = *bwd_s = 0.0;
    if (pm->E == 0) return;
    const double t = l->tp, D = pm->D, ep = plan_layout_ep(l), El = pm->E / ep;
    const double rows = ep * N * pm->K / pm->E;  // per local expert, balanced routing
    double charged_f, charged_b, shared_f, shared_b, expert_f, expert_b;
    swiglu_s(hw, N, D, (pm->K * (double)pm->F + pm->Fs) / t, &charged_f, &charged_b);
    swiglu_s(hw, N, D, pm->Fs / t, &shared_f, &shared_b);
    swiglu_s(hw, rows, D, pm->F / t, &expert_f, &expert_b);
    *fwd_s = shared_f + El * expert_f - charged_f;
    *bwd_s = shared_b + El * expert_b - charged_b;
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
