// tests/unit/test_plan_links.c — the step time priced on measured links
// (PlanProblem.links, plan/plan_place.h): a uniform matrix at the profile's
// inter-node bandwidth and latency leaves every row of the search unchanged; one
// slow pair slows exactly the dimensions whose rings cross it, by the ring's
// alpha-beta cost on that link (a ring is as slow as its slowest hop), and not
// the others; the placement search steers the rings around it; and
// train --parallel.auto's mapping of the job's nodes onto the matrix by host name.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_fixture.h"
#include "plan/plan.h"
#include "plan/plan_auto.h"
#include "plan/plan_place.h"

static void set_link(LinkMatrix *m, int i, int j, double bw, double lat) {
    m->bw[(size_t)i * m->n + j] = m->bw[(size_t)j * m->n + i] = bw;
    m->lat[(size_t)i * m->n + j] = m->lat[(size_t)j * m->n + i] = lat;
}

static void uniform(LinkMatrix *m, double bw, double lat) {
    for (int i = 0; i < m->n; i++)
        for (int j = 0; j < m->n; j++)
            if (i != j) set_link(m, i, j, bw, lat);
}

// Every row of the search, on H100 nodes of 8: links all at the profile's
// inter-node class price exactly as the class (the search's placement, and the
// job's own order) .
static void test_uniform_unchanged(void) {
    Hardware h100;
    hardware_builtin(&h100, "h100");
    PlanProblem p = plan_problem("llama-3.1-8b", 32, 4096, 128, h100);
    LinkMatrix m;
    links_init(&m, 4);
    uniform(&m, h100.inter_bw, h100.inter_lat);
    PlanResult *a, *b, *c;
    int na = plan_search(&p, &a);
    p.links = &m;
    int nb = plan_search(&p, &b);
    int order[4] = {0, 1, 2, 3};
    p.placed = order;
    int nc = plan_search(&p, &c);
    int same = na == nb && na == nc && na > 100;
    double worst = 0.0;
    for (int i = 0; same && i < na; i++) {
        same &= memcmp(&a[i].layout, &b[i].layout, sizeof a[i].layout) == 0 &&
                memcmp(&a[i].layout, &c[i].layout, sizeof a[i].layout) == 0;
        worst = fmax(worst, fmax(rel_diff(a[i].time.total, b[i].time.total), rel_diff(a[i].time.total, c[i].time.total)));
    }
    CHECK(same && worst < 1e-12, "uniform links at the class's %.0f GB/s, %.0f us: all %d rows in the same order, "
          "step times equal (largest relative difference %.1e)", h100.inter_bw / 1e9, h100.inter_lat * 1e6, na, worst);
    free(a);
    free(b);
    free(c);
    links_free(&m);
    plan_place_forget();
}

// A machine whose kernels and node-local links are free: a step is its
// communication between nodes, each collective at bw bytes/s and no latency.
static Hardware comm_only(double bw) {
    Hardware hw;
    memset(&hw, 0, sizeof hw);
    strcpy(hw.name, "comm-only");
    hw.peak_flops = 1e30;
    hw.mem_bytes = 1e15;
    hw.mem_bw = 1e30;
    hw.bytes_per_value = 2;
    RateCurve flat = {2, {1.0, 1e30}, {1e30, 1e30}};
    hw.gemm = hw.attn_fwd = hw.attn_bwd = flat;
    hw.intra_bw = 1e30;
    hw.inter_bw = bw;
    hw.gpus_per_node = 8;
    return hw;
}

// The step of layout l with the pair 0-1 at bandwidth bw (the matrix changes in
// place, so the placement cache is dropped first).
static StepTime step_with_pair01(const PlanProblem *p, LinkMatrix *m, const PlanLayout *l, double bw) {
    set_link(m, 0, 1, bw, 0.0);
    plan_place_forget();
    return plan_step_time(p, l);
}

static void test_slow_pair(void) {
    const double bw = 1e10, slow = 1e9;  // the pair 0-1 at a tenth of the others
    PlanProblem p = plan_problem("llama-3.1-8b", 32, 4096, 32, comm_only(bw));
    LinkMatrix m;
    links_init(&m, 4);
    uniform(&m, bw, 0.0);
    p.links = &m;
    int order[4] = {0, 1, 2, 3}, around[4] = {0, 2, 1, 3}, node[4];
    p.placed = order;
    // dp 4 x tp 8, ZeRO-0: one all-reduce ring over the 4 nodes, 0-1-2-3-0; with
    // free kernels nothing hides it, so it costs 2*3/4 * B / bw: 10x at 1/10 bw.
    PlanLayout dp4 = {4, 8, 1, 1, 0, 1, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime u = plan_step_time(&p, &dp4);
    set_link(&m, 0, 1, slow, 0.0);
    plan_place_forget();  // the matrix changed in place
    StepTime s = plan_step_time(&p, &dp4);
    double want = u.dp_comm * (bw / slow - 1);
    CHECK(u.dp_comm > 0 && fabs((s.total - u.total) / want - 1) < 1e-9,
          "dp 4 ring over the slow pair: step %.4g -> %.4g s, grown by 9 x the all-reduce's %.4g s (expected %.4g)",
          u.total, s.total, u.dp_comm, want);
    p.placed = around;  // the ring 0-2-1-3-0 never uses 0-1
    StepTime r = plan_step_time(&p, &dp4);
    CHECK(rel_diff(r.total, u.total) < 1e-12, "the ring placed around the slow pair costs what uniform links do");
    p.placed = NULL;  // plan --links: the search's placement
    double cost = plan_place_nodes(&p, &dp4, node);
    StepTime f = plan_step_time(&p, &dp4);
    int uses01 = 0;
    for (int k = 0; k < 4; k++) uses01 |= (node[k] == 0 && node[(k + 1) % 4] == 1) || (node[k] == 1 && node[(k + 1) % 4] == 0);
    CHECK(!uses01 && rel_diff(f.total, u.total) < 1e-12 && cost > 0,
          "the search places the ring around it (slots %d %d %d %d) and the row prices that placement", node[0],
          node[1], node[2], node[3]);
    // dp 2 x pp 2 x tp 8: dp pairs are slots {0,2} and {1,3}, pipeline chains {0,1}
    // and {2,3}: in node order the slow pair carries the pipeline, not the gradients.
    p.placed = order;
    PlanLayout dp2pp2 = {2, 8, 2, 1, 0, 1, 1, 16, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime u2 = step_with_pair01(&p, &m, &dp2pp2, bw);
    StepTime s2 = step_with_pair01(&p, &m, &dp2pp2, slow);
    CHECK(rel_diff(s2.dp_comm, u2.dp_comm) < 1e-12 && s2.pp_comm > 2 * u2.pp_comm && u2.pp_comm > 0,
          "dp 2 x pp 2: the slow pair slows the pipeline sends (%.4g -> %.4g s), not the gradients (%.4g s)",
          u2.pp_comm, s2.pp_comm, s2.dp_comm);
    // cp 4 x tp 8 (dp 1): the gradient group is the cp ring, 0-1-2-3-0.
    PlanLayout cp4 = {1, 8, 1, 4, 0, 1, 1, 32, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime u3 = step_with_pair01(&p, &m, &cp4, bw);
    StepTime s3 = step_with_pair01(&p, &m, &cp4, slow);
    CHECK(u3.dp_comm > 0 && fabs(s3.dp_comm / u3.dp_comm - bw / slow) < 1e-9 && s3.cp_comm > u3.cp_comm,
          "cp 4: the gradient ring over dp x cp crosses the slow pair too (%.4g -> %.4g s), and the K|V hops",
          u3.dp_comm, s3.dp_comm);
    links_free(&m);
}

// Over 64 nodes a search per layout would cost seconds each: every row is priced
// on the greedy chain (placement_chain), one placement for all layouts.
static void test_many_nodes(void) {
    Hardware h100;
    hardware_builtin(&h100, "h100");
    PlanProblem p = plan_problem("llama-3.1-8b", 8 * 80, 4096, 640, h100);
    LinkMatrix m;
    links_init(&m, 80);
    for (int i = 0; i < 80; i++)  // two racks, interleaved in node order
        for (int j = 0; j < 80; j++)
            if (i != j) set_link(&m, i, j, i % 2 == j % 2 ? 45e9 : 6e9, 1e-5);
    p.links = &m;
    int node[80], chain[80];
    PlanLayout dp80 = {80, 8, 1, 1, 1, 1, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    plan_place_nodes(&p, &dp80, node);
    placement_chain(&m, chain);
    CHECK(memcmp(node, chain, sizeof node) == 0, "80 nodes: the row's placement is the greedy chain");
    links_free(&m);
    plan_place_forget();
}

// train --parallel.auto: the job's node slots (ranks in blocks of ranks_per_node)
// mapped onto the matrix's nodes by host name.
static void test_auto_nodes(void) {
    LinkMatrix m;
    links_init(&m, 3);
    strcpy(m.names[0], "a");
    strcpy(m.names[1], "b");
    strcpy(m.names[2], "c");
    char hosts[6][64] = {"c", "c", "a", "a", "b", "b"};
    int node[3];
    char why[256];
    int ok = plan_auto_nodes(&m, (const char (*)[64])hosts, 6, 2, node, why, sizeof why);
    CHECK(ok && node[0] == 2 && node[1] == 0 && node[2] == 1, "ranks on c, a, b: slots 0..2 are matrix nodes 2 0 1");
    strcpy(hosts[3], "b");
    ok = plan_auto_nodes(&m, (const char (*)[64])hosts, 6, 2, node, why, sizeof why);
    CHECK(!ok && strstr(why, "rank 3"), "ranks not in node blocks: %s", why);
    char one[4][64] = {"z", "z", "z", "z"};
    ok = plan_auto_nodes(&m, (const char (*)[64])one, 4, 4, node, why, sizeof why);
    CHECK(!ok && strstr(why, "3 nodes") && strstr(why, "1 node"), "one node, a 3-node matrix: %s", why);
    char other[3][64] = {"a", "b", "x"};
    ok = plan_auto_nodes(&m, (const char (*)[64])other, 3, 1, node, why, sizeof why);
    CHECK(!ok && strstr(why, "x"), "a host the matrix does not name: %s", why);
    char twice[3][64] = {"a", "b", "a"};
    ok = plan_auto_nodes(&m, (const char (*)[64])twice, 3, 1, node, why, sizeof why);
    CHECK(!ok && strstr(why, "a"), "a host in two node slots: %s", why);
    links_free(&m);
}

int main(void) {
    test_uniform_unchanged();
    test_slow_pair();
    test_many_nodes();
    test_auto_nodes();
    return check_summary();
}
