// plan/plan_auto.h — parallel.auto: the planner chooses the run's layout.
#ifndef FEMTOTRON_PLAN_AUTO_H
#define FEMTOTRON_PLAN_AUTO_H

#include <stddef.h>

#include "config.h"
#include "plan/placement.h"

// Replace cfg's layout by the planner's fastest layout that fits the world size and
// the memory budget; prints the choice and the reason. Every rank computes the same
// choice from the same inputs (profile, config, hosts). When the profile holds a
// measured links matrix (`femtotron bench links --output PROFILE`) that names the
// job's nodes, every layout's collectives between nodes are priced on the links
// they cross where the ranks run now (plan/plan_place.h), and the start-up line
// says so; otherwise it says why not and prices by link class.
// hosts (world_size, 64): every rank's host name (comm_host_names).
void plan_auto_layout(Config *cfg, int world_size, int ranks_per_node, const char (*hosts)[64]);

// The job's node slots (slot s = ranks s*rpn .. s*rpn+rpn-1, the trainer's grid
// fills nodes in rank order) as nodes of m, by host name: node (world/rpn) out.
// 0 with the reason in why[n] when m does not describe this job (another node
// count, a host it does not name, one host in two slots, ranks not in node blocks).
int plan_auto_nodes(const LinkMatrix *m, const char (*hosts)[64], int world, int rpn, int *node, char *why,
                    size_t n);

#endif
