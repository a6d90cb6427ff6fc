// plan/plan_legend.h — the words under `femtotron plan`'s table: what each label
// of a layout means, and the command that trains the chosen one.
#ifndef FEMTOTRON_PLAN_LEGEND_H
#define FEMTOTRON_PLAN_LEGEND_H

#include "plan/plan.h"

// The legend of the table's layout labels (plan_layout_name) and columns; moe: the
// model is a mixture of experts (the ep label and column are explained).
void plan_print_legend(int moe);

// The exact `mpirun` and `srun` commands that train layout l on p->world ranks:
// every layout key the planner chose (dp, tp, pp, cp, ZeRO stage, sequence
// parallelism, micro-batch, micro-batches per step, schedule, chunks, recompute,
// and parallel.ep when expert parallelism is on),
// after `--config CONFIG` (run.json when the plan had no config). With placed (a
// file prefix, else NULL) the commands start the ranks on the placement's nodes:
// mpirun --rankfile PLACED.rankfile, srun with SLURM_HOSTFILE=PLACED.hosts.
void plan_print_train_command(const PlanProblem *p, const PlanLayout *l, const char *config, const char *placed);

#endif
