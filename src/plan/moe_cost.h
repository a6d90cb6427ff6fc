// plan/moe_cost.h — what expert parallelism (parallel.ep) costs on paper: which
// experts and rows a rank holds, and the all-to-all exchanges of dispatch and
// combine, priced on the link the ep group crosses.
//
// Expert parallelism takes its ep ranks from within dp x cp (dist/grid.h: ep
// consecutive dp x cp indices form a group); rank r of a group computes experts
// [r*E/ep, (r+1)*E/ep) for the token slots of the whole group
// (parallel_layers/expert_parallel.h). Per rank and per mixture-of-experts layer:
//  * stored: E/ep experts (their weights, gradients and AdamW moments; ZeRO shards
//    the experts over the dp*cp/ep ranks that hold the same experts, the dense
//    part over dp*cp);
//  * computed: E/ep experts for ep times the tokens, load balanced on average, so
//    the expert FLOPs of a rank are those of its own N tokens' k slots whatever ep,
//    in fewer, taller GEMMs (ep*N*k/E rows each);
//  * exchanged: 4 all-to-all(v) per micro-batch (dispatch and combine, forward and
//    backward), each sending and receiving (ep-1)/ep of N*k rows of D values, plus
//    one small exchange of the row counts per forward;
//  * planned for the worst case: ep * N * min(k, E/ep) rows received (ep_max_rows).
#ifndef FEMTOTRON_MOE_COST_H
#define FEMTOTRON_MOE_COST_H

#include "plan/plan.h"

// The layout's expert-parallel group size: l->ep, or 1 when unset (0) or 1.
int plan_layout_ep(const PlanLayout *l);

// Parameters of one layer's routed experts (E * 3 * D * F; 0 for a dense model):
// the part of plan_layer_params that expert parallelism splits.
double plan_expert_params(const PlanModel *pm);

// Worst-case rows one rank's experts receive per layer for N tokens per rank:
// ep * N * min(k, E/ep), which at ep = 1 is the N*k token slots themselves.
double plan_ep_rows(const PlanModel *pm, const PlanLayout *l, double N);

// 1 when every ep group of the layout sits inside one node (the grid's rank order,
// p->base's parallel.order or dp-pp-cp-tp, ranks filling nodes of gpus_per_node),
// else 0: the all-to-all then crosses the slower link between nodes.
int plan_ep_intra(const PlanProblem *p, const PlanLayout *l);

// Seconds of one all-to-all(v) in which each rank holds `bytes` (what it sends, and
// as much received): (ep-1)/ep of them cross the group in ep-1 pairwise steps, the
// traffic and step count of a ring all-gather whose output is `bytes`, so it is
// priced as one (hardware_collective_s, measured fits first) on the group's link.
// 0 at ep = 1.
double plan_ep_alltoall_s(const PlanProblem *p, const PlanLayout *l, double bytes);

// The experts' GEMMs of one layer at their own sizes, for N tokens per rank.
// step_time.c prices a mixture of experts' MLP as one dense SwiGLU MLP of the active
// width (k*F + Fs)/tp; what runs is the shared experts' SwiGLU over the N tokens and,
// for each of the rank's E/ep experts, gate|up and down over its rows: ep*N*k/E on
// average (balanced routing), so expert parallelism makes fewer, taller GEMMs of the
// same total FLOPs. *fwd_s and *bwd_s get (what runs) - (what the dense MLP of the
// active width costs), each GEMM at the GEMM curve's rate for its own size: 0 on a
// flat curve, negative when bigger GEMMs run faster. 0 for dense models.
void plan_moe_gemm_delta(const PlanProblem *p, const PlanLayout *l, double N, double *fwd_s, double *bwd_s);

// Exposed expert-parallel communication of one mixture-of-experts layer for one
// micro-batch of N tokens per rank: forward = the counts' exchange + dispatch +
// combine, backward = the output gradients' dispatch + the input gradients' combine.
// Nothing overlaps them (femtotron waits for each exchange). 0 for dense models
// and at ep = 1.
void plan_ep_layer_comm(const PlanProblem *p, const PlanLayout *l, double N, double *fwd_s, double *bwd_s);

#endif
