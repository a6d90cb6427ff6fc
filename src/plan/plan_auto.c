// plan/plan_auto.c — `train --parallel.auto`: the planner's search, asked for the
// fastest layout that fits this world and memory budget, applied to the run config.
#define _DEFAULT_SOURCE  // sysconf page counts
#include "plan/plan_auto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "plan/plan.h"
#include "util.h"

void plan_auto_layout(Config *cfg, int world, int ranks_per_node) {
    PlanProblem p;
    memset(&p, 0, sizeof p);
    if (cfg->parallel.profile[0]) {
        hardware_load(&p.hw, cfg->parallel.profile);
    } else {
        die("parallel.auto needs a hardware profile: run `mpirun -np %d femtotron bench calibrate --output "
            "profile.json` once and pass --parallel.profile profile.json", world);
    }
    p.hw.gpus_per_node = ranks_per_node;
    plan_model_from_config(&p.model, &cfg->model);
    p.world = world;
    p.seq = cfg->training.seq_length;
    // The global batch is fixed by the run (given, or grad_acc_steps x micro-batch x dp
    // as written); the layout decides how it splits into ranks and micro-batches.
    TrainingConfig *tc = &cfg->training;
    if (tc->global_batch_size == 0)
        tc->global_batch_size = (tc->grad_acc_steps ? tc->grad_acc_steps : 1) * tc->micro_batch_size * cfg->parallel.dp;
    p.global_seqs = tc->global_batch_size;
    double budget = cfg->parallel.memory_gb * 1073741824.0;
    if (budget <= 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
        budget = 0.9 * (double)pages * (double)page / ranks_per_node;
    }
    p.mem_budget = budget;
    p.base = cfg;
    PlanResult *res;
    int n = plan_search(&p, &res);
    if (n == 0 || !res[0].fits)
        die("parallel.auto: no layout of %d ranks fits %.2f GiB per rank (smallest needs %.2f GiB); set "
            "parallel.memory_gb or use more ranks", world, budget / 1073741824.0,
            n ? res[0].mem.total / 1073741824.0 : 0.0);
    Config chosen;
    plan_apply_layout(&p, &res[0].layout, &chosen);
    if (comm_world_rank() == 0) {
        char name[128], why[1024];
        plan_layout_name(&res[0].layout, name, sizeof name);
        plan_explain(&p, res, n, why, sizeof why);
        printf("parallel.auto: %s (predicted %.4g s per step, %.2f GiB per rank)\n%s\n", name,
               res[0].time.total, res[0].mem.total / 1073741824.0, why);
    }
    *cfg = chosen;
    free(res);
}
