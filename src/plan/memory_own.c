// plan/memory_own.c — memory of femtotron's own fp32 runs in the planner: the
// layout applied to the run config, then the trainer's allocation plan for every
// rank (plan/memory_rank.c), keeping the most loaded rank.
#include "plan/memory_rank.h"
#include "plan/plan.h"

PlanMemory plan_memory_own(const PlanProblem *p, const PlanLayout *l) {
    Config c;
    plan_apply_layout(p, l, &c);
    MemoryReport r = plan_max_rank_memory(&c, NULL);
    // checkpoint.async's snapshot has no column of its own: it is in the total.
    PlanMemory m = {(double)r.params, (double)r.grads, (double)r.optimizer, (double)r.activations,
                    (double)r.comm, (double)plan_memory_total(&r)};
    return m;
}
