// plan/plan_auto.h — parallel.auto: the planner chooses the run's layout.
#ifndef FEMTOTRON_PLAN_AUTO_H
#define FEMTOTRON_PLAN_AUTO_H

#include "config.h"

// Replace cfg's layout by the planner's fastest layout that fits the world size and
// the memory budget; prints the choice and the reason. Every rank computes the same
// choice from the same inputs (profile, config).
void plan_auto_layout(Config *cfg, int world_size, int ranks_per_node);

#endif
