// tests/unit/test_placement.c — rank placement on a link matrix (plan/placement.h):
// the cost by hand (a ring is as slow as its slowest hop, a dimension as its
// slowest ring, hops inside a node free), the search against brute force on every
// small case it can enumerate, the rankfile and Slurm host list, the JSON round
// trip of the matrix, a clear death for a matrix that does not match the grid, and
// the schedule of `bench links` (every pair once, in rounds of disjoint pairs).
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "run_child.h"
#include "bench/links.h"
#include "plan/placement.h"
#include "util.h"

static char tmpdir[256];

static void set_link(LinkMatrix *m, int i, int j, double bw, double lat) {
    m->bw[(size_t)i * m->n + j] = m->bw[(size_t)j * m->n + i] = bw;
    m->lat[(size_t)i * m->n + j] = m->lat[(size_t)j * m->n + i] = lat;
}

// Every link bw 10, lat 0, except one.
static void uniform(LinkMatrix *m, double bw) {
    for (int i = 0; i < m->n; i++)
        for (int j = 0; j < m->n; j++) set_link(m, i, j, bw, 0.0);
}

static void test_cost_by_hand(void) {
    // 4 nodes of 8 GPUs, tp 8 inside each node, dp 4 across: one ring of 4 nodes.
    LinkMatrix m;
    links_init(&m, 4);
    uniform(&m, 10.0);
    set_link(&m, 0, 1, 1.0, 0.0);  // one slow link
    PlaceProblem p = {.dp = 4, .pp = 1, .cp = 1, .tp = 8, .gpus_per_node = 8};
    p.bytes[DIM_DP] = 100.0;
    p.bytes[DIM_TP] = 1e9;  // inside nodes: never priced
    int order[4] = {0, 1, 2, 3}, avoid[4] = {0, 2, 1, 3};
    double c = placement_cost(&p, &m, order), a = placement_cost(&p, &m, avoid);
    CHECK(fabs(c - 100.0 / 1.0) < 1e-12, "dp ring 0-1-2-3-0 crosses the slow link: 100 B / 1 B/s = %g s", c);
    CHECK(fabs(a - 100.0 / 10.0) < 1e-12, "dp ring 0-2-1-3-0 avoids it: %g s", a);
    int best[4];
    double s = placement_search(&p, &m, best), b = placement_brute(&p, &m, best);
    CHECK(fabs(s - 10.0) < 1e-12 && fabs(b - 10.0) < 1e-12, "search and brute force both avoid the slow link (%g, %g)", s, b);
    // Latency: steps x lat added per hop; the pipeline chain has no closing hop.
    PlaceProblem q = {.dp = 1, .pp = 4, .cp = 1, .tp = 8, .gpus_per_node = 8};
    q.bytes[DIM_PP] = 100.0;
    q.steps[DIM_PP] = 3.0;
    set_link(&m, 0, 1, 10.0, 0.0);
    set_link(&m, 3, 0, 1.0, 0.5);  // the slow link closes the ring only
    c = placement_cost(&q, &m, order);
    CHECK(fabs(c - 10.0) < 1e-12, "pp chain 0-1-2-3 never uses 3-0: %g s", c);
    int rot[4] = {3, 0, 1, 2};
    c = placement_cost(&q, &m, rot);
    CHECK(fabs(c - (3 * 0.5 + 100.0 / 1.0)) < 1e-12, "pp chain 3-0-1-2 pays 3 x 0.5 s + 100 B at 1 B/s: %g", c);
    // Two dimensions add: dp 2 x pp 2 over 4 nodes (tp 8 in a node).
    PlaceProblem r = {.dp = 2, .pp = 2, .cp = 1, .tp = 8, .gpus_per_node = 8};
    r.bytes[DIM_PP] = 10.0;
    r.bytes[DIM_DP] = 20.0;
    uniform(&m, 10.0);
    c = placement_cost(&r, &m, order);
    CHECK(fabs(c - (1.0 + 2.0)) < 1e-12, "pp and dp hops add: 10/10 + 20/10 = %g", c);
    // Asymmetric link: the slower direction prices the hop.
    m.bw[0 * 4 + 1] = 5.0;
    c = placement_cost(&r, &m, order);
    CHECK(fabs(c - (2.0 + 2.0)) < 1e-12, "a link slower one way costs its slower direction: %g", c);
    links_free(&m);
}

static double rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xFFFF) / 65536.0;
}

static void test_against_brute_force(void) {
    // Grids over 4 to 8 nodes of 4 GPUs, random links 1-10 GB/s and 2-20 us.
    const int grids[][4] = {{2, 2, 1, 4}, {4, 1, 1, 4}, {2, 3, 1, 4}, {3, 2, 1, 4}, {2, 2, 2, 4},
                            {1, 8, 1, 4}, {8, 1, 1, 4}, {2, 4, 1, 4}, {4, 2, 1, 4}, {2, 2, 4, 2}};
    int cases = 0, optimal = 0, within = 0, beats_default = 1;
    double worst_gap = 0.0, gap_sum = 0.0;
    unsigned seed = 7;
    for (int g = 0; g < (int)(sizeof grids / sizeof grids[0]); g++)
        for (int trial = 0; trial < 6; trial++) {
            PlaceProblem p = {.dp = grids[g][0], .pp = grids[g][1], .cp = grids[g][2], .tp = grids[g][3], .gpus_per_node = 4};
            p.bytes[DIM_DP] = 4e9 * (1 + rnd(&seed));
            p.bytes[DIM_PP] = 1e9 * (1 + rnd(&seed));
            p.bytes[DIM_CP] = 2e9 * (1 + rnd(&seed));
            p.steps[DIM_DP] = 2.0 * (p.dp - 1);
            p.steps[DIM_PP] = 64;
            p.steps[DIM_CP] = p.cp - 1;
            int n = p.dp * p.pp * p.cp * p.tp / p.gpus_per_node;
            LinkMatrix m;
            links_init(&m, n);
            for (int i = 0; i < n; i++)
                for (int j = i + 1; j < n; j++) set_link(&m, i, j, 1e9 * (1 + 9 * rnd(&seed)), 2e-6 * (1 + 9 * rnd(&seed)));
            int *a = xmalloc(sizeof(int) * (size_t)n, "test"), *b = xmalloc(sizeof(int) * (size_t)n, "test");
            double s = placement_search(&p, &m, a), opt = placement_brute(&p, &m, b);
            for (int i = 0; i < n; i++) b[i] = i;
            double def = placement_cost(&p, &m, b);
            double gap = s / opt - 1;
            cases++;
            optimal += gap < 1e-9;
            within += gap <= 0.10;
            gap_sum += gap;
            if (gap > worst_gap) worst_gap = gap;
            if (s > def * (1 + 1e-12) || s < opt * (1 - 1e-12)) beats_default = 0;
            free(a);
            free(b);
            links_free(&m);
        }
    CHECK(beats_default, "the search is never worse than the default order nor better than brute force (%d cases)", cases);
    CHECK(optimal * 10 >= cases * 7 && gap_sum / cases <= 0.03 && worst_gap <= 0.20,
          "search vs brute force on %d cases of 4-8 nodes: %d optimal, %d within 10%%, mean gap %.2f%%, worst %.1f%%",
          cases, optimal, within, 100 * gap_sum / cases, 100 * worst_gap);
}

static void test_scales(void) {
    // 1,024 nodes (dp 64 x pp 16, tp 8 per node): two racks, slow between them.
    LinkMatrix m;
    links_init(&m, 1024);
    for (int i = 0; i < 1024; i++)
        for (int j = 0; j < 1024; j++) {
            int same = ((i * 7919) % 1024 < 512) == ((j * 7919) % 1024 < 512);  // racks interleaved in node order
            m.bw[(size_t)i * 1024 + j] = same ? 50e9 : 5e9;
            m.lat[(size_t)i * 1024 + j] = same ? 5e-6 : 2e-5;
        }
    PlaceProblem p = {.dp = 64, .pp = 16, .cp = 1, .tp = 8, .gpus_per_node = 8};
    p.bytes[DIM_PP] = 32e6 * 64;
    p.steps[DIM_PP] = 64;
    p.bytes[DIM_DP] = 12e9;
    p.steps[DIM_DP] = 126;
    int *node = xmalloc(sizeof(int) * 1024, "test");
    for (int i = 0; i < 1024; i++) node[i] = i;
    double def = placement_cost(&p, &m, node);
    double s = placement_search(&p, &m, node);
    int seen = 0;
    int *hit = xcalloc(sizeof(int) * 1024, "test");
    for (int i = 0; i < 1024; i++) seen += !hit[node[i]]++;
    CHECK(seen == 1024 && s < def, "1,024 nodes: a permutation, %.3g s of link time vs %.3g s in node order", s, def);
    // Each pipeline (16 nodes) inside one rack: only the dp rings cross racks.
    double want = 64 * 2e-5 * 0 + (126 * 2e-5 + 12e9 / 5e9) + (64 * 5e-6 + 32e6 * 64 / 50e9);
    CHECK(fabs(s - want) / want < 1e-9, "the pipelines stay inside racks, only dp crosses: %g s = %g", s, want);
    free(hit);
    free(node);
    links_free(&m);
}

static void test_files(void) {
    LinkMatrix m;
    links_init(&m, 2);
    snprintf(m.names[0], 64, "alpha");
    snprintf(m.names[1], 64, "beta");
    set_link(&m, 0, 1, 3e9, 1.5e-5);
    PlaceProblem p = {.dp = 2, .pp = 1, .cp = 1, .tp = 2, .gpus_per_node = 2};
    int node[2] = {1, 0};
    char rf[512], hl[512], js[512];
    snprintf(rf, sizeof rf, "%s/rankfile", tmpdir);
    snprintf(hl, sizeof hl, "%s/hosts", tmpdir);
    snprintf(js, sizeof js, "%s/prof.json", tmpdir);
    placement_write_rankfile(&p, &m, node, rf);
    placement_write_hostlist(&p, &m, node, hl);
    char *r = read_text_file(rf), *h = read_text_file(hl);
    CHECK(strcmp(r, "rank 0=beta slot=0\nrank 1=beta slot=1\nrank 2=alpha slot=0\nrank 3=alpha slot=1\n") == 0,
          "rankfile puts slot 0's ranks on the node placed there: %s", r);
    CHECK(strcmp(h, "beta\nbeta\nalpha\nalpha\n") == 0, "Slurm host list: one host per rank in rank order");
    free(r);
    free(h);
    FILE *f = fopen(js, "w");
    fputs("{\"name\": \"this\", \"peak_flops\": 1}\n", f);
    fclose(f);
    links_save(&m, js);
    LinkMatrix back;
    links_load(&back, js);
    char *text = read_text_file(js);
    CHECK(back.n == 2 && strcmp(back.names[1], "beta") == 0 && back.bw[1] == 3e9 && back.lat[2] == 1.5e-5 &&
              strstr(text, "\"peak_flops\"") != NULL,
          "links round trip through the profile, other keys kept");
    free(text);
    links_free(&back);
    links_free(&m);
}


static void test_link_schedule(void) {
    int ok = 1, max_rounds_ok = 1;
    for (int n = 2; n <= 41 && ok; n++) {
        const int rounds = n + (n & 1) - 1;
        int *met = xcalloc(sizeof(int) * (size_t)n * n, "test");  // (n, n)
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < n; i++) {
                int j = links_partner(n, r, i);
                if (j < 0) continue;
                if (j >= n || j == i || links_partner(n, r, j) != i) ok = 0;  // disjoint, symmetric pairs
                met[(size_t)i * n + j]++;
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (i != j && met[(size_t)i * n + j] != 1) ok = 0;  // every pair exactly once
        if (rounds > n) max_rounds_ok = 0;
        free(met);
    }
    CHECK(ok && max_rounds_ok, "bench links schedule: for 2..41 ranks every pair meets once, in at most n rounds of disjoint pairs");
}

static void child_mismatch(void *ctx) {
    (void)ctx;
    LinkMatrix m;
    links_init(&m, 3);
    uniform(&m, 1.0);
    PlaceProblem p = {.dp = 2, .pp = 1, .cp = 1, .tp = 8, .gpus_per_node = 8};
    int node[3] = {0, 1, 2};
    placement_cost(&p, &m, node);
}

static void child_bad_json(void *ctx) {
    LinkMatrix m;
    links_load(&m, (const char *)ctx);
}

static void test_errors(void) {
    char err[1024];
    int rc = run_child(child_mismatch, NULL, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "needs 2 nodes of 8 GPUs, the link matrix has 3"), "grid/matrix mismatch dies: %s", err);
    char js[512];
    snprintf(js, sizeof js, "%s/bad.json", tmpdir);
    FILE *f = fopen(js, "w");
    fputs("{\"links\": {\"nodes\": [\"a\", \"b\"], \"bw\": [[0, 1], [0, 0]], \"lat\": [[0, 0], [0, 0]]}}\n", f);
    fclose(f);
    rc = run_child(child_bad_json, js, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "links.bw[1][0] must be a positive number"), "a zero bandwidth is refused naming the entry: %s", err);
    f = fopen(js, "w");
    fputs("{\"name\": \"x\"}\n", f);
    fclose(f);
    rc = run_child(child_bad_json, js, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "no \"links\" object") && strstr(err, "bench links"), "a profile without links says how to measure them");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/femtotron_place_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_errors();
    test_link_schedule();
    test_cost_by_hand();
    test_against_brute_force();
    test_scales();
    test_files();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
