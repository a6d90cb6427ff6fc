// tests/unit/test_plan_pipeline.c — the planner's pipeline schedules against
// independent references: the textbook bubble (p-1)/(v*m) of 1F1B and interleaved
// schedules in the schedule simulator, the zero-bubble schedules (ZB-H1 and ZB-V)
// against their published bubbles and invariants, and zb-v's stage-to-rank map.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_fixture.h"
#include "engines/pipeline_schedule.h"
#include "plan/pipeline_sim.h"
#include "plan/plan.h"

static void test_bubble(void) {
    // Equal stages: forward f, backward 2f per chunk. The ideal step is M*v*(f+b)
    // per rank; the schedule adds (p-1)/(v*m) of it (Narayanan et al. 2021).
    const PpSchedule scheds[] = {PP_AFAB, PP_1F1B, PP_INTERLEAVED};
    int cases[][3] = {{2, 4, 1}, {4, 8, 1}, {4, 4, 1}, {8, 16, 1}, {4, 8, 2}, {2, 4, 2}, {4, 12, 3}};
    for (int si = 0; si < 3; si++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int P = cases[c][0], M = cases[c][1], v = si == 2 ? cases[c][2] : 1;
            if (si == 2 && v == 1) continue;
            double fwd[64], bwd[64];
            for (int k = 0; k < P * v; k++) {
                fwd[k] = 1.0 / v;
                bwd[k] = 2.0 / v;
            }
            PipeSim s = pipeline_simulate(scheds[si], P, v, M, fwd, bwd, NULL, 0.0, NULL);
            double ideal_step = M * 3.0, want = ideal_step * (1.0 + (P - 1.0) / (v * M));
            CHECK(rel_diff(s.makespan, want) < 1e-12, "bubble %s P=%d M=%d v=%d: makespan %.4f = %.4f", pp_schedule_name(scheds[si]), P,
                  M, v, s.makespan, want);
            // The event-driven replay (shared cores) at speed 1 agrees.
            double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
            PipeSim e = pipeline_simulate(scheds[si], P, v, M, fwd, bwd, NULL, 0.0, ones);
            CHECK(rel_diff(e.makespan, want) < 1e-12, "event replay at speed 1, %s P=%d M=%d v=%d: %.4f = %.4f",
                  pp_schedule_name(scheds[si]), P, M, v, e.makespan, want);
        }
    // A send adds to every hop of the critical path: 1F1B with P stages pays
    // 2*(P-1) sends at least.
    double fwd[4] = {1, 1, 1, 1}, bwd[4] = {2, 2, 2, 2};
    PipeSim a = pipeline_simulate(PP_1F1B, 4, 1, 8, fwd, bwd, NULL, 0.0, NULL), b = pipeline_simulate(PP_1F1B, 4, 1, 8, fwd, bwd, NULL, 0.1, NULL);
    CHECK(b.makespan - a.makespan >= 2 * 3 * 0.1 - 1e-12, "sends on the critical path: +%.3f s for 6 hops of 0.1 s",
          b.makespan - a.makespan);
    // Processor sharing. Speed 1 for every count of computing ranks is the plain
    // replay. AFAB, 2 ranks, 2 micro-batches, unit forward and backward, a rank
    // computing alone twice as fast as two together (speed {-, 2, 1}), by hand:
    //   rank 0 F0 alone 0-0.5; rank 0 F1 with rank 1 F0 0.5-1.5; rank 1 F1 alone
    //   1.5-2; rank 1 B alone 2-2.5; rank 0 B with rank 1 B 2.5-3.5; rank 0 B alone
    //   3.5-4: makespan 4 (6 without sharing); rank 0 computes 3 s of wall time.
    const double ones[5] = {1, 1, 1, 1, 1}, halves[3] = {1, 2, 1};
    PipeSim c = pipeline_simulate(PP_1F1B, 4, 1, 8, fwd, bwd, NULL, 0.1, ones);
    CHECK(rel_diff(c.makespan, b.makespan) < 1e-12 && c.busy_wall == c.busy_max,
          "sharing at speed 1 is the plain replay: %.6f = %.6f", c.makespan, b.makespan);
    double unit[2] = {1, 1};
    PipeSim d = pipeline_simulate(PP_AFAB, 2, 1, 2, unit, unit, NULL, 0.0, NULL);
    PipeSim e = pipeline_simulate(PP_AFAB, 2, 1, 2, unit, unit, NULL, 0.0, halves);
    CHECK(rel_diff(d.makespan, 6.0) < 1e-12 && rel_diff(e.makespan, 4.0) < 1e-12,
          "sharing, AFAB 2x2 by hand: makespan %.4f = 4 (plain %.4f = 6)", e.makespan, d.makespan);
    CHECK(rel_diff(e.busy_max, 4.0) < 1e-12 && rel_diff(e.busy_wall, 3.0) < 1e-12,
          "sharing: busiest rank computes 4 nominal s in %.4f = 3 wall s", e.busy_wall);
    // Activation slots: 1F1B keeps pp - s micro-batches, AFAB all of them.
    int slots[4];
    int ok = 1;
    for (int s = 0; s < 4; s++) {
        pipeline_slots(PP_1F1B, 4, 1, 8, s, NULL, slots);
        ok &= slots[0] == 4 - s;
    }
    CHECK(ok, "1f1b stage s holds pp - s micro-batches");
    pipeline_slots(PP_AFAB, 4, 1, 8, 2, NULL, slots);
    CHECK(slots[0] == 8, "afab holds all %d micro-batches (got %d)", 8, slots[0]);
}

// ZB-H1 (Qi et al. 2023): with F, I and W seconds TF, TB, TW on every stage its
// bubble is (P-1)(TF + TB - TW), 1f1b's (P-1)(TF + TB + TW): the paper's formulas,
// for equal costs (a third), for unequal ones, and its memory: P micro-batches in
// flight on every rank (1f1b's first stage), stashes only between I and W.
static void test_zero_bubble(void) {
    const double costs[][3] = {{1, 1, 1}, {1, 1.2, 0.8}, {1, 1, 0.5}, {1.5, 1, 1}};
    const int cases[][2] = {{2, 4}, {2, 2}, {4, 4}, {4, 8}, {4, 16}, {8, 16}};
    for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int P = cases[c][0], M = cases[c][1];
            const double TF = costs[ci][0], TB = costs[ci][1], TW = costs[ci][2];
            double fwd[8], bwd[8], wgt[8];
            for (int k = 0; k < P; k++) fwd[k] = TF, bwd[k] = TB + TW, wgt[k] = TW;
            const double ideal = M * (TF + TB + TW);
            PipeSim z = pipeline_simulate(PP_ZB_H1, P, 1, M, fwd, bwd, wgt, 0.0, NULL);
            PipeSim o = pipeline_simulate(PP_1F1B, P, 1, M, fwd, bwd, wgt, 0.0, NULL);
            double want_z = (P - 1) * (TF + TB - TW), want_o = (P - 1) * (TF + TB + TW);
            CHECK(rel_diff(z.makespan - ideal, want_z) < 1e-9 && rel_diff(o.makespan - ideal, want_o) < 1e-9,
                  "zb-h1 bubble P=%d M=%d F/B/W=%g/%g/%g: %.3f = (P-1)(TF+TB-TW) = %.3f (1f1b %.3f = %.3f)", P, M,
                  TF, TB, TW, z.makespan - ideal, want_z, o.makespan - ideal, want_o);
        }
    int ok = 1, stash_ok = 1;
    for (int s = 0; s < 4; s++) {
        PpAction acts[PP_MAX_ACTIONS(8, 1)];
        int n = pp_schedule_actions(PP_ZB_H1, 8, 4, s, 1, NULL, acts), slots[1], stash[1];
        pp_count_slots(acts, n, 1, slots);
        pp_count_stash(acts, n, 1, stash);
        ok &= slots[0] == 4 && n == 3 * 8;
        stash_ok &= stash[0] == s + 1;
    }
    CHECK(ok, "zb-h1 P=4 M=8: every rank holds P = 4 micro-batches, 24 actions (F, I, W of each)");
    CHECK(stash_ok, "zb-h1 P=4 M=8: rank s keeps s + 1 weight-gradient stashes (its W passes are s late)");
    int one[1];
    PpAction acts[PP_MAX_ACTIONS(8, 1)];
    pp_count_stash(acts, pp_schedule_actions(PP_1F1B, 8, 4, 0, 1, NULL, acts), 1, one);
    CHECK(one[0] == 0, "1f1b keeps no stash (got %d)", one[0]);
    // The slots a pool shared by the chunks needs: interleaved holds Megatron's
    // warm-up + 1 = (P - s - 1)*2 + (v - 1)*P + 1 chunk-micro-batches at once.
    int joint_ok = 1;
    for (int s = 0; s < 4; s++) {
        PpAction ia[PP_MAX_ACTIONS(8, 2)];
        int n = pp_schedule_actions(PP_INTERLEAVED, 8, 4, s, 2, NULL, ia);
        joint_ok &= pp_count_joint_slots(ia, n) == (4 - s - 1) * 2 + 4 + 1;
    }
    CHECK(joint_ok, "interleaved P=4 M=8 v=2: a shared slot pool needs Megatron's warm-up + 1 (11, 9, 7, 5) slots");
}

// ZB-V: two chunks per rank in a V (rank s holds virtual stages s and 2P-1-s),
// lists from a greedy replay. Its bubble at equal F, I, W per chunk is below
// ZB-H1's (P-1)(F+B-W) (in stage units: 2(P-1) chunk passes) and 1f1b's; every
// rank holds at most 2P chunk-micro-batches (1f1b's first stage: P whole ones); the
// lists replay without deadlock under unequal costs too.
static void test_zero_bubble_v(void) {
    const int cases[][2] = {{2, 2}, {2, 4}, {2, 8}, {4, 4}, {4, 8}, {4, 16}, {8, 16}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int P = cases[c][0], M = cases[c][1], K = 2 * P;
        double fwd[16], bwd[16], wgt[16];
        for (int k = 0; k < K; k++) fwd[k] = 1.0, bwd[k] = 2.0, wgt[k] = 1.0;  // chunk units
        PipeSim z = pipeline_simulate(PP_ZB_V, P, 2, M, fwd, bwd, wgt, 0.0, NULL);
        const double ideal = 6.0 * M, bubble = z.makespan - ideal, h1 = 2.0 * (P - 1);
        int mem_ok = 1, len_ok = 1;
        for (int s = 0; s < P; s++) {
            PpAction acts[PP_MAX_ACTIONS(16, 2)];
            int n = pp_schedule_actions(PP_ZB_V, M, P, s, 2, NULL, acts), live = 0, peak = 0;
            for (int i = 0; i < n; i++) {
                live += acts[i].op == PP_OP_F ? 1 : acts[i].op == PP_OP_W ? -1 : 0;
                if (live > peak) peak = live;
            }
            mem_ok &= peak <= 2 * P;
            len_ok &= n == 6 * M && live == 0;
        }
        CHECK(bubble < h1 && bubble <= P, "zb-v P=%d M=%d: bubble %.1f chunk passes < zb-h1's %.0f (1f1b %.0f)", P, M,
              bubble, h1, 6.0 * (P - 1));
        CHECK(mem_ok && len_ok, "zb-v P=%d M=%d: 6M actions per rank, at most 2P = %d chunk-micro-batches held", P, M,
              2 * P);
        for (int k = 0; k < K; k++) fwd[k] = 1.0 + 0.37 * (k % 3), bwd[k] = 2.0 + 0.5 * (k % 2), wgt[k] = 0.6;
        PipeSim u = pipeline_simulate(PP_ZB_V, P, 2, M, fwd, bwd, wgt, 0.1, NULL);  // dies on a deadlock
        CHECK(u.makespan > 0, "zb-v P=%d M=%d: unequal stages and sends replay without deadlock (%.2f)", P, M,
              u.makespan);
    }
    int map_ok = 1;
    for (int P = 1; P <= 8; P++)
        for (int s = 0; s < P; s++)
            for (int c = 0; c < 2; c++) {
                int k = pp_virtual_of(PP_ZB_V, P, s, c);
                map_ok &= pp_rank_of_virtual(PP_ZB_V, P, k) == s && pp_chunk_of_virtual(PP_ZB_V, P, k) == c;
            }
    CHECK(map_ok && pp_virtual_of(PP_ZB_V, 4, 0, 1) == 7 && pp_virtual_of(PP_ZB_V, 4, 3, 1) == 4,
          "zb-v's V: rank s holds stages s and 2P-1-s (rank 0 the first and the last), and back");
}

int main(void) {
    test_bubble();
    test_zero_bubble();
    test_zero_bubble_v();
    return check_summary();
}
