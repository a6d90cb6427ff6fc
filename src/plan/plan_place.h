// plan/plan_place.h — `femtotron plan --links PROFILE`: the chosen layout placed on
// the measured nodes (plan/placement.h), written as an Open MPI rankfile and a
// Slurm host list.
#ifndef FEMTOTRON_PLAN_PLACE_H
#define FEMTOTRON_PLAN_PLACE_H

#include "plan/placement.h"
#include "plan/plan.h"

// The bytes one rank moves over each ring hop per step, and the latency steps,
// for layout l (what placement_cost prices):
//  * tp: per layer and micro-batch 10 collectives of the (N, D) activation (4 in
//    forward, 6 in backward with sequence parallel; as many without), each hop
//    carrying (tp-1)/tp of it;
//  * cp: per layer and micro-batch cp-1 hops of K|V forward, and K|V plus their
//    gradients backward (3 K|V loads per hop);
//  * pp: per micro-batch and chunk an activation forward and its gradient back;
//  * dp: the gradient reduce-scatter (fp32) and the parameter all-gather, 2(n-1)/n
//    of the rank's parameters (an all-reduce without ZeRO moves the same).
void plan_place_problem(const PlanProblem *p, const PlanLayout *l, PlaceProblem *out);

// Node slot -> matrix node for layout l on p->links (node (p->links->n) out):
// p->placed when set, else placement_search's answer (the last few problems are
// memoized: a layout search asks for the same problem for every ZeRO stage and
// recompute setting). Returns the placement's cost (placement_cost). Dies with a
// clear message when the layout does not fill the matrix's nodes.
double plan_place_nodes(const PlanProblem *p, const PlanLayout *l, int *node);
// Drop the memoized placements: after changing or freeing a matrix that was
// searched (the memo knows a matrix by its arrays, not by their contents).
void plan_place_forget(void);

// The links layout l's collectives are priced on (p->links set), per dimension:
// the bottleneck of its hops between nodes in plan_place_nodes' placement
// (placement_bottlenecks), bw 0 where its groups stay inside nodes. DIM_DP is the
// gradient group (dp x cp ranks): the slower of the dp and cp bottlenecks for the
// gradient's bytes, as its ring crosses both.
typedef struct {
    double bw[DIMS], lat[DIMS];
} PlacedLinks;
void plan_place_links(const PlanProblem *p, const PlanLayout *l, PlacedLinks *out);

// Loads the link matrix from links_path, places l on it, prints the link time in
// node order and placed, and writes PREFIX.rankfile and PREFIX.hosts. Dies with
// a clear message when the layout does not fill the matrix's nodes.
void plan_place_print(const PlanProblem *p, const PlanLayout *l, const char *links_path, const char *prefix);

#endif
