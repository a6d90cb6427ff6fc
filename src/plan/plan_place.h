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

// Loads the link matrix from links_path, places l on it, prints the link time in
// node order and placed, and writes PREFIX.rankfile and PREFIX.hosts. Dies with
// a clear message when the layout does not fill the matrix's nodes.
void plan_place_print(const PlanProblem *p, const PlanLayout *l, const char *links_path, const char *prefix);

#endif
