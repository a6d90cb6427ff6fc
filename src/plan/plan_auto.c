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
#include "plan/plan_place.h"
#include "util.h"

int plan_auto_nodes(const LinkMatrix *m, const char (*hosts)[64], int world, int rpn, int *node, char *why,
                    size_t n) {
#define REFUSE(...) return snprintf(why, n, __VA_ARGS__), 0
    if (rpn < 1 || world % rpn) REFUSE("%d ranks per node do not divide the %d ranks", rpn, world);
    const int nodes = world / rpn;
    if (nodes != m->n)
        REFUSE("the profile's links matrix describes %d nodes, this job runs on %d node%s", m->n, nodes,
               nodes == 1 ? "" : "s");
    for (int r = 0; r < world; r++)
        if (strcmp(hosts[r], hosts[r / rpn * rpn]) != 0)
            REFUSE("rank %d runs on %.63s but rank %d, of the same node slot, on %.63s: the ranks are not in blocks of "
                   "%d per node (launch with --map-by slot or the placement's rankfile)", r, hosts[r], r / rpn * rpn,
                   hosts[r / rpn * rpn], rpn);
    for (int s = 0; s < nodes; s++) {
        const char *h = hosts[s * rpn];
        node[s] = -1;
        for (int i = 0; i < m->n && node[s] < 0; i++)
            if (strcmp(m->names[i], h) == 0) node[s] = i;
        if (node[s] < 0) REFUSE("host %.63s (node slot %d) is not among the profile's measured nodes", h, s);
        for (int t = 0; t < s; t++)
            if (node[t] == node[s]) REFUSE("host %.63s holds node slots %d and %d", h, t, s);
    }
#undef REFUSE
    return 1;
}

void plan_auto_layout(Config *cfg, int world, int ranks_per_node, const char (*hosts)[64]) {
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
    // Measured links (bench links wrote them into the profile): price every layout
    // where the ranks run now, slot s on the node of rank s*ranks_per_node.
    LinkMatrix links;
    int *node = NULL;  // (nodes) node slot -> matrix node
    char links_note[512] = "";
    if (links_present(cfg->parallel.profile)) {
        links_load(&links, cfg->parallel.profile);
        node = xmalloc(sizeof(int) * (size_t)(world / (ranks_per_node > 0 ? ranks_per_node : 1) + 1), "placement");
        char why[400];
        if (plan_auto_nodes(&links, hosts, world, ranks_per_node, node, why, sizeof why)) {
            p.links = &links;
            p.placed = node;
            int len = snprintf(links_note, sizeof links_note, ", collectives on the measured links of nodes");
            for (int s = 0; s < links.n && s < 8 && len < (int)sizeof links_note; s++)
                len += snprintf(links_note + len, sizeof links_note - (size_t)len, " %s", links.names[node[s]]);
            if (links.n > 8 && len < (int)sizeof links_note) snprintf(links_note + len, sizeof links_note - (size_t)len, " ...");
        } else {
            snprintf(links_note, sizeof links_note, ", by link class: the profile's measured links are not used (%s)", why);
        }
    }
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
        printf("parallel.auto: %s (predicted %.4g s per step, %.2f GiB per rank%s)\n%s\n", name,
               res[0].time.total, res[0].mem.total / 1073741824.0, links_note, why);
    }
    *cfg = chosen;
    free(res);
    if (node) {
        free(node);
        links_free(&links);
        plan_place_forget();
    }
}
