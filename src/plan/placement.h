// plan/placement.h — which node holds which block of the rank grid, chosen on a
// measured link matrix (Pipette's placement half, issue 22 item 2).
//
// Ranks are numbered dp-pp-cp-tp (tp fastest) and fill nodes in blocks of
// gpus_per_node: node slot s holds ranks s*g .. s*g + g-1. A placement is a
// permutation slot -> node. It changes only the links that collectives between
// nodes cross, so it is priced by them alone:
//  * every group of a dimension (tp, cp, pp, dp) runs its collective as a ring
//    over its ranks in rank order (pp: the chain of stages); a hop between two
//    ranks on different nodes costs steps*lat + bytes/bw on that pair's link, a
//    hop inside a node costs nothing here (the same whatever the placement);
//  * a ring is as slow as its slowest hop (every hop carries the same bytes in
//    lock step), and a dimension as slow as its slowest group (all groups of a
//    dimension run at once, and the step waits for the last);
//  * the placement's cost is the sum over dimensions.
#ifndef FEMTOTRON_PLACEMENT_H
#define FEMTOTRON_PLACEMENT_H

enum { DIM_TP, DIM_CP, DIM_PP, DIM_DP, DIMS };

// Measured links between n nodes (`femtotron bench links`).
typedef struct {
    int n;
    char (*names)[64];  // (n) host names
    double *bw;         // (n, n) bytes/s of one message stream i -> j (diagonal unused)
    double *lat;        // (n, n) s per message i -> j
} LinkMatrix;

typedef struct {
    int dp, pp, cp, tp;
    int gpus_per_node;      // must divide dp*pp*cp*tp
    double bytes[DIMS];     // bytes one rank moves over each ring hop per step, by dimension
    double steps[DIMS];     // latency steps per step, by dimension
} PlaceProblem;

// Allocate an n-node matrix (bandwidths 0, latencies 0, names "node<i>").
void links_init(LinkMatrix *m, int n);
void links_free(LinkMatrix *m);
// JSON: {"links": {"nodes": [..], "bw": [[..]..], "lat": [[..]..]}} inside a
// hardware profile. Load dies naming the file and the problem.
void links_load(LinkMatrix *m, const char *path);
// 1 when the profile at path holds a "links" object (0 when it has none, or is
// missing or not JSON: hardware_load reports those).
int links_present(const char *path);
// Writes the "links" object into the profile at path (created when missing,
// other keys kept).
void links_save(const LinkMatrix *m, const char *path);

// Cost in seconds of placement slot -> node[slot] (n = number of slots = nodes).
double placement_cost(const PlaceProblem *p, const LinkMatrix *m, const int *node);
// The search: a greedy chain (start on the fastest link, append the node with
// the fastest link to the chain's end: consecutive slots share the innermost
// groups that cross nodes), then pairwise swaps while any lowers the cost (all
// pairs up to 256 nodes; beyond, a fixed budget of random pairs, so the search
// is O(n^2) at most). node(n) out; returns its cost.
double placement_search(const PlaceProblem *p, const LinkMatrix *m, int *node);
// The link each dimension's collectives are priced on in placement node[]: the
// slowest of its hops between nodes (by that dimension's steps*lat + bytes/bw,
// the slower direction of each link; by bandwidth alone when the dimension moves
// nothing). bw[d] = 0 and lat[d] = 0 when no hop of dimension d leaves a node.
// Which dimensions cross nodes depends on the grid alone, not on node[].
void placement_bottlenecks(const PlaceProblem *p, const LinkMatrix *m, const int *node, double bw[DIMS],
                           double lat[DIMS]);
// The search's start, which depends on the links alone: the greedy chain
// (node (m->n) out).
void placement_chain(const LinkMatrix *m, int *node);
// Every permutation (n <= 9); node(n) out; returns the optimum.
double placement_brute(const PlaceProblem *p, const LinkMatrix *m, int *node);

// Open MPI rankfile ("rank R=HOST slot=L") and a Slurm host list (one host per
// rank, for SLURM_HOSTFILE with srun --distribution=arbitrary).
void placement_write_rankfile(const PlaceProblem *p, const LinkMatrix *m, const int *node, const char *path);
void placement_write_hostlist(const PlaceProblem *p, const LinkMatrix *m, const int *node, const char *path);

#endif
