// plan/plan_place.c — the chosen layout on measured links (plan/plan_place.h).
#include "plan/plan_place.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

// Beyond this many nodes a placement search costs seconds (plan/placement.h), too
// much for every layout of a search: the table's rows are then priced on the
// greedy chain (one placement for every layout, O(n^2) once), and only the
// chosen layout's placement line runs the search.
#define PLACE_SEARCH_MAX 64

// The placements and priced links of the last problems (a layout search asks for
// the same problem for every ZeRO stage and recompute setting, and the search is
// deterministic: the same problem gives the same placement, so the table, the
// placement line and the trainer's prediction see one placement).
// Single-threaded, like the planner.
#define PLACE_MEMO 8
typedef struct {
    const double *bw, *lat;  // the matrix, by its arrays (plan_place_forget when they change)
    int n;
    int given;               // node is PlanProblem.placed (compared by contents), else the search's
    PlaceProblem pp;
    int *node;               // (n) slot -> node
    PlacedLinks links;
} PlaceMemo;
static PlaceMemo place_memo[PLACE_MEMO];
static int place_memo_next;
static int *chain;  // (n of the matrix below) the greedy chain, beyond PLACE_SEARCH_MAX nodes
static const double *chain_bw, *chain_lat;

static int same_problem(const PlaceProblem *a, const PlaceProblem *b) {
    if (a->dp != b->dp || a->pp != b->pp || a->cp != b->cp || a->tp != b->tp || a->gpus_per_node != b->gpus_per_node)
        return 0;
    for (int d = 0; d < DIMS; d++)
        if (a->bytes[d] != b->bytes[d] || a->steps[d] != b->steps[d]) return 0;
    return 1;
}

void plan_place_forget(void) {
    for (int i = 0; i < PLACE_MEMO; i++) {
        free(place_memo[i].node);
        memset(&place_memo[i], 0, sizeof place_memo[i]);
    }
    free(chain);
    chain = NULL;
    chain_bw = chain_lat = NULL;
}

// The links layout l's collectives cross in placement node (PlacedLinks).
static void links_of(const PlaceProblem *pp, const LinkMatrix *m, const int *node, PlacedLinks *out) {
    placement_bottlenecks(pp, m, node, out->bw, out->lat);
    // The gradient group's ring runs over dp x cp ranks: it crosses the cp hops too.
    const double bw_dp = out->bw[DIM_DP], bw_cp = out->bw[DIM_CP];
    if (bw_cp > 0) {
        double t_dp = bw_dp > 0 ? pp->steps[DIM_DP] * out->lat[DIM_DP] + pp->bytes[DIM_DP] / bw_dp : -1.0;
        double t_cp = pp->steps[DIM_DP] * out->lat[DIM_CP] + pp->bytes[DIM_DP] / bw_cp;
        if (t_cp > t_dp || (t_cp == t_dp && bw_cp < bw_dp)) {
            out->bw[DIM_DP] = bw_cp;
            out->lat[DIM_DP] = out->lat[DIM_CP];
        }
    }
}

// The memo entry of layout l on p->links, computed when missing.
static const PlaceMemo *placed_entry(const PlanProblem *p, const PlanLayout *l) {
    const LinkMatrix *m = p->links;
    PlaceProblem pp;
    plan_place_problem(p, l, &pp);
    long world = (long)l->dp * l->tp * l->pp * l->cp;
    if (world % pp.gpus_per_node || world / pp.gpus_per_node != m->n)
        die("plan: the layout's %ld ranks fill %ld nodes of %d GPUs (--gpus-per-node), the link matrix has %d "
            "nodes", world, world / pp.gpus_per_node, pp.gpus_per_node, m->n);
    for (int i = 0; i < PLACE_MEMO; i++) {
        const PlaceMemo *e = &place_memo[i];
        if (e->node && e->bw == m->bw && e->lat == m->lat && e->n == m->n && e->given == (p->placed != NULL) &&
            same_problem(&e->pp, &pp) && (!p->placed || memcmp(e->node, p->placed, sizeof(int) * (size_t)m->n) == 0))
            return e;
    }
    PlaceMemo *e = &place_memo[place_memo_next];
    place_memo_next = (place_memo_next + 1) % PLACE_MEMO;
    free(e->node);
    *e = (PlaceMemo){m->bw, m->lat, m->n, p->placed != NULL, pp, xmalloc(sizeof(int) * (size_t)m->n, "placement memo"), {{0}, {0}}};
    if (p->placed) {
        memcpy(e->node, p->placed, sizeof(int) * (size_t)m->n);
    } else if (m->n <= PLACE_SEARCH_MAX) {
        placement_search(&pp, m, e->node);
    } else {
        if (!chain || chain_bw != m->bw || chain_lat != m->lat) {
            free(chain);
            chain = xmalloc(sizeof(int) * (size_t)m->n, "placement chain");
            placement_chain(m, chain);
            chain_bw = m->bw;
            chain_lat = m->lat;
        }
        memcpy(e->node, chain, sizeof(int) * (size_t)m->n);
    }
    links_of(&pp, m, e->node, &e->links);
    return e;
}

double plan_place_nodes(const PlanProblem *p, const PlanLayout *l, int *node) {
    const PlaceMemo *e = placed_entry(p, l);
    memcpy(node, e->node, sizeof(int) * (size_t)p->links->n);
    return placement_cost(&e->pp, p->links, node);
}

void plan_place_links(const PlanProblem *p, const PlanLayout *l, PlacedLinks *out) {
    *out = placed_entry(p, l)->links;
}

void plan_place_print(const PlanProblem *p, const PlanLayout *l, const char *links_path, const char *prefix) {
    const LinkMatrix *m = p->links;
    PlaceProblem pp;
    plan_place_problem(p, l, &pp);
    int *node = xmalloc(sizeof(int) * (size_t)m->n, "placement");  // (nodes) slot -> node
    for (int i = 0; i < m->n; i++) node[i] = i;
    double in_order = placement_cost(&pp, m, node);
    // The step in node order: the same layout priced on the identity placement.
    PlanProblem q = *p;
    q.placed = node;
    double step_order = plan_step_time(&q, l).total;
    double placed = plan_place_nodes(p, l, node);
    double step_table = plan_step_time(p, l).total, step_placed = step_table;
    // Beyond PLACE_SEARCH_MAX nodes the table priced the greedy chain: the chosen
    // layout alone gets the search (its step priced on what the search found).
    const int searched = !p->placed && m->n > PLACE_SEARCH_MAX;
    if (searched) {
        placed = placement_search(&pp, m, node);
        step_placed = plan_step_time(&q, l).total;  // q.placed is node
    }
    char rf[1100], hosts[1100];
    snprintf(rf, sizeof rf, "%s.rankfile", prefix);
    snprintf(hosts, sizeof hosts, "%s.hosts", prefix);
    placement_write_rankfile(&pp, m, node, rf);
    placement_write_hostlist(&pp, m, node, hosts);
    printf("\nplacement on %d measured nodes of %d GPUs (%s): communication between nodes %.4g s per step in the "
           "profile's node order, %.4g s placed (%.0f%% less)\n  predicted step (collectives on the links they "
           "cross): %.4g s in node order, %.4g s placed\n  node slots:", m->n, pp.gpus_per_node, links_path,
           in_order, placed, in_order > 0 ? 100.0 * (in_order - placed) / in_order : 0.0, step_order, step_placed);
    for (int s = 0; s < m->n && s < 16; s++) printf(" %s", m->names[node[s]]);
    printf("%s\n  written: %s (Open MPI), %s (Slurm)\n", m->n > 16 ? " ..." : "", rf, hosts);
    if (searched)
        printf("  (over %d nodes the table prices every layout on the greedy chain of the fastest links, the start of "
               "this search: %.4g s for this layout)\n", PLACE_SEARCH_MAX, step_table);
    free(node);
}
