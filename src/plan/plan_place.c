// plan/plan_place.c — the chosen layout on measured links (plan/plan_place.h).
#include "plan/plan_place.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

void plan_place_problem(const PlanProblem *p, const PlanLayout *l, PlaceProblem *out) {
    const PlanModel *pm = &p->model;
    const double bpv = p->hw.bytes_per_value, M = l->micro;
    const double N = (double)l->mbs * p->seq / l->cp;        // tokens of one micro-batch on a rank
    const double Nr = l->sp ? N / l->tp : N;                 // residual rows (sequence parallel)
    const double layers = (double)pm->L / l->pp;             // per pipeline rank
    const double hd = plan_head_dim(pm), kv = 2.0 * N * pm->KV / l->tp * hd * bpv;  // K|V of the local tokens
    const double params = plan_total_params(pm) / ((double)l->tp * l->pp);         // per rank, about
    const int ndp = l->dp * l->cp;
    *out = (PlaceProblem){.dp = l->dp, .pp = l->pp, .cp = l->cp, .tp = l->tp, .gpus_per_node = p->hw.gpus_per_node};
    out->bytes[DIM_TP] = M * layers * 10.0 * (l->tp - 1.0) / l->tp * N * pm->D * bpv;
    out->steps[DIM_TP] = M * layers * 10.0 * (l->tp - 1.0);
    out->bytes[DIM_CP] = M * layers * 3.0 * (l->cp - 1.0) * kv;
    out->steps[DIM_CP] = M * layers * 2.0 * (l->cp - 1.0);
    out->bytes[DIM_PP] = 2.0 * M * l->v * Nr * pm->D * bpv;
    out->steps[DIM_PP] = 2.0 * M * l->v;
    // The dp ring is the dp x cp gradient group; priced on the dp dimension's hops.
    out->bytes[DIM_DP] = ndp > 1 ? 2.0 * (ndp - 1.0) / ndp * params * 4.0 : 0.0;
    out->steps[DIM_DP] = 2.0 * (ndp - 1.0);
}

void plan_place_print(const PlanProblem *p, const PlanLayout *l, const char *links_path, const char *prefix) {
    LinkMatrix m;
    links_load(&m, links_path);
    PlaceProblem pp;
    plan_place_problem(p, l, &pp);
    long world = (long)l->dp * l->tp * l->pp * l->cp;
    if (world % pp.gpus_per_node || world / pp.gpus_per_node != m.n)
        die("plan --links %s: the layout's %ld ranks fill %ld nodes of %d GPUs (--gpus-per-node), the link matrix "
            "has %d nodes", links_path, world, world / pp.gpus_per_node, pp.gpus_per_node, m.n);
    int *node = xmalloc(sizeof(int) * (size_t)m.n, "placement");  // (nodes) slot -> node
    for (int i = 0; i < m.n; i++) node[i] = i;
    double in_order = placement_cost(&pp, &m, node);
    double placed = placement_search(&pp, &m, node);
    char rf[1100], hosts[1100];
    snprintf(rf, sizeof rf, "%s.rankfile", prefix);
    snprintf(hosts, sizeof hosts, "%s.hosts", prefix);
    placement_write_rankfile(&pp, &m, node, rf);
    placement_write_hostlist(&pp, &m, node, hosts);
    printf("\nplacement on %d measured nodes of %d GPUs (%s): communication between nodes %.4g s per step in the "
           "profile's node order, %.4g s placed (%.0f%% less)\n  node slots:", m.n, pp.gpus_per_node, links_path,
           in_order, placed, in_order > 0 ? 100.0 * (in_order - placed) / in_order : 0.0);
    for (int s = 0; s < m.n && s < 16; s++) printf(" %s", m.names[node[s]]);
    printf("%s\n  written: %s (Open MPI), %s (Slurm)\n", m.n > 16 ? " ..." : "", rf, hosts);
    free(node);
    links_free(&m);
}
