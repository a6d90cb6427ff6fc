// plan/placement.c — the placement search on a measured link matrix
// (plan/placement.h describes the cost).
#define _POSIX_C_SOURCE 200809L
#include "plan/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// The hops between node slots that a dimension's rings cross, deduplicated: the
// cost only needs, per dimension, the slowest crossing hop.
typedef struct {
    int n[DIMS];
    int *a[DIMS], *b[DIMS];  // (n[d]) slot pairs, a != b
} Hops;

static int cmp_pair(const void *x, const void *y) {
    const long long *p = x, *q = y;
    return (*p > *q) - (*p < *q);
}

static void hops_build(const PlaceProblem *p, int slots, Hops *h) {
    const int size[DIMS] = {p->tp, p->cp, p->pp, p->dp};
    const long stride[DIMS] = {1, p->tp, (long)p->tp * p->cp, (long)p->tp * p->cp * p->pp};
    const long world = (long)p->dp * p->pp * p->cp * p->tp;
    for (int d = 0; d < DIMS; d++) {
        const int g = size[d];
        // Hops: member k -> k+1 of each group, and the ring's closing hop (not for the pipeline chain).
        long cap = g > 1 ? world : 0;
        long long *pairs = xmalloc(sizeof(long long) * (size_t)(cap > 0 ? cap : 1), "placement hops");  // (cap)
        long np = 0;
        for (long r = 0; r < world && g > 1; r++) {
            long k = (r / stride[d]) % g;  // this rank's coordinate in dimension d
            if (k == g - 1 && (d == DIM_PP || g == 2)) continue;  // chain end, or the 2-ring's repeat
            long next = k == g - 1 ? r - (long)(g - 1) * stride[d] : r + stride[d];
            long sa = r / p->gpus_per_node, sb = next / p->gpus_per_node;
            if (sa == sb) continue;
            if (sa > sb) { long t = sa; sa = sb; sb = t; }  // links are priced both ways: keep one order
            pairs[np++] = sa * slots + sb;
        }
        qsort(pairs, (size_t)np, sizeof(long long), cmp_pair);
        h->a[d] = xmalloc(sizeof(int) * (size_t)(np > 0 ? np : 1), "placement hops");  // (np)
        h->b[d] = xmalloc(sizeof(int) * (size_t)(np > 0 ? np : 1), "placement hops");  // (np)
        h->n[d] = 0;
        for (long i = 0; i < np; i++) {
            if (i > 0 && pairs[i] == pairs[i - 1]) continue;
            h->a[d][h->n[d]] = (int)(pairs[i] / slots);
            h->b[d][h->n[d]] = (int)(pairs[i] % slots);
            h->n[d]++;
        }
        free(pairs);
    }
}

static void hops_free(Hops *h) {
    for (int d = 0; d < DIMS; d++) {
        free(h->a[d]);
        free(h->b[d]);
    }
}

// A hop between nodes x and y: data flows both ways around a ring (and both ways
// along the pipeline: activations forward, gradients back), so it costs the
// slower direction.
static double hop_s(const PlaceProblem *p, const LinkMatrix *m, int d, int x, int y) {
    const size_t xy = (size_t)x * m->n + y, yx = (size_t)y * m->n + x;
    double bw = fmin(m->bw[xy], m->bw[yx]), lat = fmax(m->lat[xy], m->lat[yx]);
    return p->steps[d] * lat + p->bytes[d] / bw;
}

// The cost, and (*smooth) the sum of every crossing hop's time: the cost is a
// sum of maxima, flat under most swaps, so the search breaks its ties by the sum
// (a swap that speeds up hops other than the slowest is kept: it makes room for
// the next swap to speed up the slowest).
static double cost_hops2(const PlaceProblem *p, const LinkMatrix *m, const Hops *h, const int *node, double *smooth) {
    double total = 0.0, sum = 0.0;
    for (int d = 0; d < DIMS; d++) {
        double worst = 0.0;  // a ring is as slow as its slowest hop; a dimension as its slowest ring
        for (int i = 0; i < h->n[d]; i++) {
            double t = hop_s(p, m, d, node[h->a[d][i]], node[h->b[d][i]]);
            if (t > worst) worst = t;
            sum += t;
        }
        total += worst;
    }
    if (smooth) *smooth = sum;
    return total;
}

static double cost_hops(const PlaceProblem *p, const LinkMatrix *m, const Hops *h, const int *node) {
    return cost_hops2(p, m, h, node, NULL);
}

static int slots_of(const PlaceProblem *p, const LinkMatrix *m) {
    long world = (long)p->dp * p->pp * p->cp * p->tp;
    if (p->gpus_per_node < 1 || world % p->gpus_per_node != 0)
        die("placement: %ld ranks do not fill nodes of %d GPUs", world, p->gpus_per_node);
    long slots = world / p->gpus_per_node;
    if (slots != m->n)
        die("placement: the layout needs %ld nodes of %d GPUs, the link matrix has %d", slots, p->gpus_per_node, m->n);
    return (int)slots;
}

double placement_cost(const PlaceProblem *p, const LinkMatrix *m, const int *node) {
    Hops h;
    hops_build(p, slots_of(p, m), &h);
    double c = cost_hops(p, m, &h, node);
    hops_free(&h);
    return c;
}

void placement_bottlenecks(const PlaceProblem *p, const LinkMatrix *m, const int *node, double bw[DIMS],
                           double lat[DIMS]) {
    Hops h;
    hops_build(p, slots_of(p, m), &h);
    for (int d = 0; d < DIMS; d++) {
        bw[d] = lat[d] = 0.0;
        double worst = -1.0;
        for (int i = 0; i < h.n[d]; i++) {
            const int x = node[h.a[d][i]], y = node[h.b[d][i]];
            const size_t xy = (size_t)x * m->n + y, yx = (size_t)y * m->n + x;
            double b = fmin(m->bw[xy], m->bw[yx]), l = fmax(m->lat[xy], m->lat[yx]);
            // A dimension that moves nothing (bytes and steps 0) still names its slowest link.
            double t = p->bytes[d] > 0 || p->steps[d] > 0 ? hop_s(p, m, d, x, y) : 1.0 / b;
            if (t > worst) worst = t, bw[d] = b, lat[d] = l;
        }
    }
    hops_free(&h);
}

// The slowest direction of the link x <-> y (bytes/s).
static double link_bw(const LinkMatrix *m, int x, int y) {
    return fmin(m->bw[(size_t)x * m->n + y], m->bw[(size_t)y * m->n + x]);
}

// Swap two slots' nodes while that lowers (cost, then sum of hop times): all
// pairs in order up to 256 nodes, beyond that a fixed budget of random pairs per
// pass, so a pass costs O(min(n^2, budget)) evaluations. Returns the cost.
static double local_search(const PlaceProblem *p, const LinkMatrix *m, const Hops *h, int *node,
                           unsigned long long *rng) {
    const int n = m->n;
    const long pairs = (long)n * (n - 1) / 2, budget = 32768;
    double smooth, cost = cost_hops2(p, m, h, node, &smooth);
    for (int pass = 0, improved = 1; improved && pass < 64; pass++) {
        improved = 0;
        long tries = n <= 256 ? pairs : budget;
        for (long t = 0, i = 0, j = 0; t < tries; t++) {
            if (n <= 256) {  // pairs in order: (0,1), (0,2), ..., (1,2), ...
                if (t == 0) i = 0, j = 0;
                if (++j >= n) j = ++i + 1;
            } else {
                *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
                i = (long)((*rng >> 33) % (unsigned long long)n);
                j = (long)((*rng >> 13) % (unsigned long long)n);
                if (i == j) continue;
            }
            int tmp = node[i];
            node[i] = node[j];
            node[j] = tmp;
            double sm, c = cost_hops2(p, m, h, node, &sm);
            if (c < cost * (1 - 1e-12) || (c <= cost * (1 + 1e-12) && sm < smooth * (1 - 1e-12))) {
                cost = c;
                smooth = sm;
                improved = 1;
            } else {
                node[j] = node[i];
                node[i] = tmp;
            }
        }
    }
    return cost;
}

void placement_chain(const LinkMatrix *m, int *node) {
    const int n = m->n;
    int *used = xcalloc(sizeof(int) * (size_t)n, "placement");  // (n)
    // The fastest link's two ends first, then the unplaced node with the fastest
    // link to the chain's last node.
    int x0 = 0, y0 = n > 1 ? 1 : 0;
    for (int x = 0; x < n; x++)
        for (int y = x + 1; y < n; y++)
            if (link_bw(m, x, y) > link_bw(m, x0, y0)) x0 = x, y0 = y;
    node[0] = x0;
    used[x0] = 1;
    for (int s = 1; s < n; s++) {
        int best = -1;
        for (int y = 0; y < n; y++)
            if (!used[y] && (best < 0 || link_bw(m, node[s - 1], y) > link_bw(m, node[s - 1], best))) best = y;
        if (s == 1 && !used[y0]) best = y0;
        node[s] = best;
        used[best] = 1;
    }
    free(used);
}

double placement_search(const PlaceProblem *p, const LinkMatrix *m, int *node) {
    const int n = slots_of(p, m);
    Hops h;
    hops_build(p, n, &h);
    int *cur = xmalloc(sizeof(int) * (size_t)n, "placement");   // (n) the order being improved
    placement_chain(m, cur);
    // Local search from the chain and, up to 64 nodes, from 7 random orders too
    // (cheap there, and the swap landscape has plateaus); the best result wins.
    unsigned long long rng = 0x9E3779B97F4A7C15ull;
    double best = INFINITY;
    const int starts = n <= 64 ? 8 : 1;
    for (int st = 0; st < starts; st++) {
        if (st > 0) {
            for (int i = 0; i < n; i++) cur[i] = i;
            for (int i = n - 1; i > 0; i--) {  // Fisher-Yates
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                int j = (int)((rng >> 33) % (unsigned long long)(i + 1)), t = cur[i];
                cur[i] = cur[j];
                cur[j] = t;
            }
        }
        double c = local_search(p, m, &h, cur, &rng);
        if (c < best) {
            best = c;
            memcpy(node, cur, sizeof(int) * (size_t)n);
        }
    }
    free(cur);
    hops_free(&h);
    return best;
}

// Heap's algorithm over every permutation of node (n <= 9: 362,880).
double placement_brute(const PlaceProblem *p, const LinkMatrix *m, int *node) {
    const int n = slots_of(p, m);
    if (n > 9) die("placement: brute force is for at most 9 nodes (got %d)", n);
    Hops h;
    hops_build(p, n, &h);
    int a[9] = {0}, c[9] = {0};
    for (int i = 0; i < n; i++) a[i] = node[i] = i;
    double best = cost_hops(p, m, &h, a);
    for (int i = 1; i < n;) {
        if (c[i] < i) {
            int k = i % 2 ? c[i] : 0, t = a[k];
            a[k] = a[i];
            a[i] = t;
            double cost = cost_hops(p, m, &h, a);
            if (cost < best) {
                best = cost;
                memcpy(node, a, sizeof(int) * (size_t)n);
            }
            c[i]++;
            i = 1;
        } else {
            c[i++] = 0;
        }
    }
    hops_free(&h);
    return best;
}

void placement_write_rankfile(const PlaceProblem *p, const LinkMatrix *m, const int *node, const char *path) {
    const int n = slots_of(p, m);
    FILE *f = fopen(path, "w");
    if (!f) die_errno("placement: cannot write the rankfile %s", path);
    for (int s = 0; s < n; s++)
        for (int l = 0; l < p->gpus_per_node; l++)
            fprintf(f, "rank %ld=%s slot=%d\n", (long)s * p->gpus_per_node + l, m->names[node[s]], l);
    if (fclose(f) != 0) die_errno("placement: write failed on %s", path);
}

void placement_write_hostlist(const PlaceProblem *p, const LinkMatrix *m, const int *node, const char *path) {
    const int n = slots_of(p, m);
    FILE *f = fopen(path, "w");
    if (!f) die_errno("placement: cannot write the host list %s", path);
    for (int s = 0; s < n; s++)
        for (int l = 0; l < p->gpus_per_node; l++) fprintf(f, "%s\n", m->names[node[s]]);
    if (fclose(f) != 0) die_errno("placement: write failed on %s", path);
}
