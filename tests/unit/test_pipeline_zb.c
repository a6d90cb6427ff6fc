// tests/unit/test_pipeline_zb.c — the zero-bubble lists built from per-pass costs
// (engines/pipeline_zb.h): for any costs they are complete, keep each chunk's
// passes in micro-batch order, hold at most 1f1b's activation memory, cannot
// deadlock, never replay slower than the unit-time lists and are faster where the
// costs differ; equal numbers give equal lists (every rank builds the same), and
// so do the same numbers in another unit.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engines/pipeline_schedule.h"
#include "engines/pipeline_zb.h"

#define MAXP 8
#define MAXM 24

// Every rank's lists for (sched, P, M, costs): lists[P] of PP_MAX_ACTIONS(M, v).
typedef struct {
    PpAction a[MAXP][PP_MAX_ACTIONS(MAXM, 2)];
    PpAction *l[MAXP];
    int n[MAXP];
} Lists;

static double build(Lists *x, PpSchedule sched, int P, int M, const PpCosts *c) {
    for (int s = 0; s < P; s++) x->l[s] = x->a[s];
    return pp_zb_build(sched, M, P, sched == PP_ZB_V ? 2 : 1, c, x->l, x->n);
}

// The structural rules the executor relies on; returns 1 when all hold.
static int well_formed(const Lists *x, PpSchedule sched, int P, int M, int *peak_live) {
    const int v = sched == PP_ZB_V ? 2 : 1;
    int ok = 1;
    *peak_live = 0;
    for (int s = 0; s < P; s++) {
        int next[3][2] = {{0, 0}, {0, 0}, {0, 0}}, live = 0;  // next micro-batch of F, I, W per chunk
        ok &= x->n[s] == 3 * M * v;
        for (int i = 0; i < x->n[s]; i++) {
            const PpAction *a = &x->l[s][i];
            const int op = a->op == PP_OP_F ? 0 : a->op == PP_OP_I ? 1 : a->op == PP_OP_W ? 2 : -1;
            ok &= op >= 0 && a->chunk >= 0 && a->chunk < v;
            if (!ok) return 0;
            ok &= a->micro == next[op][a->chunk]++;  // micro-batch order per chunk and pass
            if (op == 1) ok &= next[0][a->chunk] > a->micro;  // I after its F
            if (op == 2) ok &= next[1][a->chunk] > a->micro;  // W after its I
            live += op == 0 ? 1 : op == 2 ? -1 : 0;
            if (live > *peak_live) *peak_live = live;
        }
        ok &= live == 0;
    }
    return ok;
}

static unsigned rng = 12345u;
static double uniform(double lo, double hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (rng >> 8) / 16777216.0;
}

// Random costs (stages up to 3x apart, W from a fifth to twice F, sends up to a
// pass): the lists are well formed, hold at most P whole micro-batches (v*P
// chunk-micro-batches), replay without deadlock (pp_zb_replay dies on one) and are
// never slower than the unit-time lists under the same costs.
static void test_random_costs(void) {
    int form_ok = 1, mem_ok = 1, better_ok = 1, cases = 0, faster = 0, faster_h1 = 0;
    for (int trial = 0; trial < 60; trial++)
        for (int sc = 0; sc < 2; sc++) {
            const PpSchedule sched = sc ? PP_ZB_V : PP_ZB_H1;
            const int v = sc ? 2 : 1, P = 1 + trial % MAXP, M = 1 + (trial * 7) % MAXM, K = P * v;
            double f[2 * MAXP], i[2 * MAXP], w[2 * MAXP];
            for (int k = 0; k < K; k++) {
                const double stage = uniform(1.0, 3.0);
                f[k] = stage, i[k] = stage * uniform(0.8, 1.5), w[k] = stage * uniform(0.2, 2.0);
            }
            const PpCosts c = {f, i, w, trial % 3 ? uniform(0.0, 1.0) : 0.0};
            static Lists unit, costed;
            build(&unit, sched, P, M, NULL);
            const double span = build(&costed, sched, P, M, &c), unit_span = pp_zb_replay(sched, M, P, v, &c, unit.l, unit.n, NULL);
            int peak;
            form_ok &= well_formed(&costed, sched, P, M, &peak);
            mem_ok &= peak <= v * P;
            better_ok &= span <= unit_span && span == pp_zb_replay(sched, M, P, v, &c, costed.l, costed.n, NULL);
            faster += span < unit_span;
            faster_h1 += sched == PP_ZB_H1 && span < unit_span;  // shorter than the handcrafted ZB-H1
            cases++;
        }
    CHECK(form_ok, "random costs, %d cases (zb-h1 and zb-v, P 1..8, M 1..24): 3M passes per chunk, each chunk's F, I "
          "and W in micro-batch order, I after F, W after I", cases);
    CHECK(mem_ok, "random costs: at most P micro-batches (v*P chunk-micro-batches) in flight on every rank");
    CHECK(better_ok && faster > cases / 4 && faster_h1 > 0, "random costs: the lists replay no slower than the "
          "unit-time lists under the same costs, faster in %d of %d cases (zb-h1: %d of %d shorter than the "
          "handcrafted list)", faster, cases, faster_h1, cases / 2);
}

// pp_costs = "measure": lists rebuilt for measured costs within the memory of
// the lists in use: well formed, no more slots (per chunk, together) or stashes
// on any rank, never slower than the lists in use under the costs; some change.
static void test_rebuild(void) {
    int form_ok = 1, mem_ok = 1, better_ok = 1, changed = 0, cases = 0;
    for (int trial = 0; trial < 60; trial++)
        for (int sc = 0; sc < 2; sc++) {
            const PpSchedule sched = sc ? PP_ZB_V : PP_ZB_H1;
            const int v = sc ? 2 : 1, P = 2 + trial % 4, M = P + (trial * 5) % 13, K = P * v;
            double f[2 * MAXP], i[2 * MAXP], w[2 * MAXP];
            for (int k = 0; k < K; k++) {
                const double stage = uniform(1.0, 2.0);
                f[k] = stage, i[k] = stage * uniform(0.8, 1.4), w[k] = stage * uniform(0.5, 1.2);
            }
            const PpCosts c = {f, i, w, 0.0};
            static Lists cur, now;
            build(&cur, sched, P, M, trial % 2 ? NULL : &c);  // the lists in use: unit-time or for these costs
            build(&now, sched, P, M, trial % 2 ? NULL : &c);
            const int ch = pp_zb_rebuild(sched, M, P, v, &c, now.l, now.n);
            int peak;
            form_ok &= well_formed(&now, sched, P, M, &peak);
            for (int r = 0; r < P; r++) {
                int a[2], b[2];
                pp_count_slots(now.l[r], now.n[r], v, a);
                pp_count_slots(cur.l[r], cur.n[r], v, b);
                for (int q = 0; q < v; q++) mem_ok &= a[q] <= b[q];
                pp_count_stash(now.l[r], now.n[r], v, a);
                pp_count_stash(cur.l[r], cur.n[r], v, b);
                for (int q = 0; q < v; q++) mem_ok &= a[q] <= b[q];
                mem_ok &= pp_count_joint_slots(now.l[r], now.n[r]) <= pp_count_joint_slots(cur.l[r], cur.n[r]);
            }
            better_ok &= pp_zb_replay(sched, M, P, v, &c, now.l, now.n, NULL) <=
                         pp_zb_replay(sched, M, P, v, &c, cur.l, cur.n, NULL);
            changed += ch;
            cases++;
        }
    CHECK(form_ok && mem_ok && better_ok && changed > 0,
          "rebuild for measured costs, %d cases: well formed, no more slots or stashes on any rank than the lists "
          "in use, never slower under the costs; %d rebuilt", cases, changed);
}

// The bench's stages (bench/results/pp_bubble.md: F, I, W of about 18, 20, 16 ms
// per chunk, a message ~1 ms): zb-v's replayed bubble roughly halves at M = 8.
static void test_measured_costs(void) {
    const int P = 2, M = 8, K = 4;
    double f[4], i[4], w[4];
    for (int k = 0; k < K; k++) f[k] = 18, i[k] = 20, w[k] = 16;
    const PpCosts c = {f, i, w, 1.0};
    static Lists unit, costed;
    build(&unit, PP_ZB_V, P, M, NULL);
    const double span = build(&costed, PP_ZB_V, P, M, &c), ideal = M * 2 * (18 + 20 + 16) * (PP_COST_TICKS / 20.0);
    const double b_unit = pp_zb_replay(PP_ZB_V, M, P, 2, &c, unit.l, unit.n, NULL) / ideal - 1, b = span / ideal - 1;
    CHECK(b < 0.6 * b_unit, "zb-v P=2 M=8 F/I/W 18/20/16 ms, send 1 ms: bubble %.3f with the costed lists, %.3f "
          "with the unit-time lists", b, b_unit);
    // Heavier end stages (rank 0 holds the embedding and the head under zb-v).
    double g[8], j[8], u[8];
    for (int k = 0; k < 8; k++) g[k] = 18, j[k] = 20, u[k] = 16;
    g[0] *= 1.3, j[0] *= 1.3, u[0] *= 1.3, g[7] *= 1.3, j[7] *= 1.3, u[7] *= 1.3;
    const PpCosts e = {g, j, u, 0.0};
    static Lists unit4, costed4;
    build(&unit4, PP_ZB_V, 4, 16, NULL);
    const double s4 = build(&costed4, PP_ZB_V, 4, 16, &e), u4 = pp_zb_replay(PP_ZB_V, 16, 4, 2, &e, unit4.l, unit4.n, NULL);
    CHECK(s4 < u4, "zb-v P=4 M=16, end stages 1.3x: costed lists %.0f ticks < unit-time lists %.0f", s4, u4);
}

// Every rank builds every rank's list: the same numbers give the same lists, and
// the numbers in another unit (ms against s) too, since costs become ticks of the
// largest pass; pp_schedule_actions hands rank s its row of the same build.
static void test_deterministic(void) {
    const int P = 4, M = 12, K = 8;
    double f[8], i[8], w[8], fs[8], is[8], ws[8];
    for (int k = 0; k < K; k++) {
        f[k] = 10 + 3 * (k % 3), i[k] = 12 + (k % 2), w[k] = 7 + k;
        fs[k] = f[k] / 1000, is[k] = i[k] / 1000, ws[k] = w[k] / 1000;
    }
    const PpCosts ms = {f, i, w, 0.5}, sec = {fs, is, ws, 0.0005};
    static Lists a, b;
    build(&a, PP_ZB_V, P, M, &ms);
    build(&b, PP_ZB_V, P, M, &sec);
    int same = 1, rows = 1;
    for (int s = 0; s < P; s++) {
        same &= a.n[s] == b.n[s] && !memcmp(a.l[s], b.l[s], sizeof(PpAction) * (size_t)a.n[s]);
        PpAction one[PP_MAX_ACTIONS(MAXM, 2)];
        int n = pp_schedule_actions(PP_ZB_V, M, P, s, 2, &ms, one);
        rows &= n == a.n[s] && !memcmp(one, a.l[s], sizeof(PpAction) * (size_t)n);
    }
    CHECK(same, "zb-v P=4 M=12: costs in ms and in s give the same lists");
    CHECK(rows, "zb-v P=4 M=12: pp_schedule_actions(rank s) is row s of the all-rank build");
}

// The FLOP prediction: a layer's W has its matrix products only, I adds twice the
// attention, so W < F < I; the head weighs on the last stage, the lookup on none.
static void test_flop_costs(void) {
    const PpShape sh = {256, 4, 2, 64, 3, 768, 128, 50000};
    const int layers[4] = {2, 2, 2, 2};
    double f[4], i[4], w[4];
    pp_flop_costs(&sh, 4, layers, f, i, w);
    const double mm = 2.0 * (256.0 * 512 + 256.0 * 256 + 3.0 * 256 * 768), attn = 2.0 * 128 * 256;
    CHECK(fabs(f[1] - 2 * (mm + attn)) < 1e-6 && fabs(i[1] - 2 * (mm + 2 * attn)) < 1e-6 &&
              fabs(w[1] - 2 * mm) < 1e-6, "flop costs of a middle stage: F %.4g, I %.4g, W %.4g", f[1], i[1], w[1]);
    CHECK(w[1] < f[1] && f[1] < i[1] && f[3] > 1.5 * f[1] && f[0] - f[1] < 1e3,
          "flop costs: W < F < I, the head (vocab 50000) on the last stage, the lookup negligible");
    double g[4], j[4], u[4];
    CHECK(pp_costs_of_spec("unit", &sh, 4, layers, g, j, u) == 0, "pp_costs \"unit\": no costs (unit-time lists)");
    CHECK(pp_costs_of_spec("1:2:3,4:5:6,7:8:9,1.5:2.5:0.5", &sh, 4, layers, g, j, u) == 1 && g[1] == 4 &&
              j[2] == 8 && u[3] == 0.5, "pp_costs \"f:i:w,...\" read per stage");
}

int main(void) {
    test_random_costs();
    test_measured_costs();
    test_rebuild();
    test_deterministic();
    test_flop_costs();
    return check_summary();
}
