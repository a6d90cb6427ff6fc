// tests/unit/test_plan_ep.c — the planner's expert parallelism (plan/moe_cost.h)
// against hand-written references: the bytes per parameter of the experts a rank
// stores (E/ep of them, ZeRO over dp*cp/ep), the worst-case dispatch rows of
// parallel_layers/expert_parallel.h, the alpha-beta cost of the all-to-alls on the
// link the ep group crosses, the experts' GEMMs at their own sizes, and the
// search's rules (ep only for a mixture of experts, only divisors of E that divide
// dp*cp, chosen when memory needs it).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_fixture.h"
#include "plan/moe_cost.h"
#include "plan/plan.h"


// A layout: dp x tp x pp x cp (pp = 1 unless given), ZeRO stage z, ep.
static PlanLayout layout(int dp, int tp, int cp, int z, int micro, int ep) {
    PlanLayout l = {dp, tp, 1, cp, z, 0, 1, micro, PP_1F1B, 1, RECOMPUTE_NONE, ep};
    return l;
}

// Each rank stores E/ep experts: from ep 1 to ep 2 the experts' parameters,
// gradients and (ZeRO-0) moments per rank halve, the dense part stays; under
// ZeRO-1 the moments are already sharded over dp*cp (the experts' over dp*cp/ep
// ranks that hold E/ep of them: the same share).
static void test_memory(void) {
    PlanProblem p = plan_problem("mixtral-8x7b", 8, 4096, 8, ideal_machine(1e15, 0, 1e12, 1e11));
    const PlanModel *pm = &p.model;
    const double psi = plan_total_params(pm), pe = pm->L * plan_expert_params(pm);  // all experts
    CHECK(fabs(pe / 45.1e9 - 1) < 0.01, "mixtral-8x7b: %.2fB of its %.2fB parameters are routed experts", pe / 1e9,
          psi / 1e9);
    for (int z = 0; z <= 1; z++) {
        PlanLayout l1 = layout(8, 1, 1, z, 1, 1), l2 = layout(8, 1, 1, z, 1, 2);
        PlanMemory m1 = plan_memory_mixed(&p, &l1), m2 = plan_memory_mixed(&p, &l2);
        // model states: 2 (params) + 2 (grads) + 12 (master + moments, /8 at ZeRO-1)
        CHECK(rel_diff(m1.params - m2.params, 2 * pe / 2) < 1e-12 && rel_diff(m1.grads - m2.grads, 2 * pe / 2) < 1e-12,
              "ZeRO-%d: params and grads per rank lose half the experts from ep1 to ep2 (%.2f -> %.2f GiB)", z,
              m1.params / 1073741824.0, m2.params / 1073741824.0);
        double dopt = z == 0 ? 12 * pe / 2 : 0.0;
        CHECK(fabs(m1.optimizer - m2.optimizer - dopt) <= 1e-12 * m1.optimizer,
              "ZeRO-%d: AdamW states per rank %s (%.3f -> %.3f GiB)", z,
              z == 0 ? "lose half the experts" : "unchanged (experts sharded over dp*cp/ep = 4 instead of dp*cp = 8)",
              m1.optimizer / 1073741824.0, m2.optimizer / 1073741824.0);
    }
    // ZeRO-3 over dp*cp = 8 with ep = 8: each rank holds 1 expert, unsharded
    // (dp*cp/ep = 1), plus 1/8 of the dense part: 16 bytes each.
    PlanLayout l8 = layout(8, 1, 1, 3, 1, 8);
    PlanMemory m8 = plan_memory_mixed(&p, &l8);
    double want = 16 * ((psi - pe) / 8 + pe / 8);
    CHECK(rel_diff(m8.params + m8.grads + m8.optimizer, want) < 1e-12,
          "ZeRO-3 ep8: model states %.4g = 16 x (dense/8 + experts/8) bytes",
          m8.params + m8.grads + m8.optimizer);
    // Dispatch buffers: the staging rows and the local experts' outputs (model/moe.h
    // stage, ye), R = ep * N * min(k, E/ep) rows of D, bf16, once per rank; the
    // saved activations grow by R rows of gate|up and SwiGLU (3F) and the received
    // rows (D) per layer, against k rows of 3F at ep 1.
    const double N = 4096, D = pm->D, F = pm->F;
    PlanLayout a1 = layout(8, 1, 1, 1, 1, 1);
    PlanMemory n1 = plan_memory_mixed(&p, &a1);
    for (int ep = 2; ep <= 8; ep *= 2) {
        PlanLayout a = layout(8, 1, 1, 1, 1, ep);
        PlanMemory ma = plan_memory_mixed(&p, &a);
        double R = ep * (2 < 8 / ep ? 2 : 8 / ep);  // rows per token
        CHECK(rel_diff(plan_ep_rows(pm, &a, N), R * N) < 1e-15 && rel_diff(ma.comm, 2.0 * 2 * R * N * D) < 1e-12,
              "ep%d: %.0f worst-case rows x D staged twice: comm %.3f GiB", ep, R * N, ma.comm / 1073741824.0);
        double grow = 2.0 * N * pm->L * ((R - 2) * 3 * F + R * D);
        CHECK(rel_diff(ma.activations - n1.activations, grow) < 1e-12,
              "ep%d: activations + L x (R - k) x 3F + L x R x D values (%.2f GiB more)", ep, grow / 1073741824.0);
    }
}

// The all-to-alls: on an alpha-beta link each moves (ep-1)/ep of N*k*D values in
// ep-1 steps; four per layer and micro-batch (+ the counts' exchange), exposed;
// slower across nodes than inside; the expert FLOPs per rank do not change (on a
// flat GEMM curve, the time neither).
static void test_time(void) {
    const double alpha = 2e-6, intra = 4e11, inter = 5e10;
    PlanProblem p = plan_problem("mixtral-8x7b", 16, 4096, 64, ideal_machine(1e15, alpha, intra, inter));
    const PlanModel *pm = &p.model;
    // dp 16, tp 1: ep 8 = dp indices 0..7 = ranks 0..7, one node.
    PlanLayout in = layout(16, 1, 1, 1, 4, 8);
    // dp 8, tp 2: ep 8 = dp indices 0..7 = ranks 0, 2, .., 14: two nodes.
    PlanLayout across = layout(8, 2, 1, 1, 8, 8);
    // dp 4, cp 4, tp 1: ep 4 = cp 0..3 of one dp index: ranks 0..3, one node;
    // pp-dp-cp-tp or dp-pp-cp-tp order alike.
    PlanLayout cp_in = layout(4, 1, 4, 1, 16, 4);
    CHECK(plan_ep_intra(&p, &in) && !plan_ep_intra(&p, &across) && plan_ep_intra(&p, &cp_in),
          "ep groups: dp16 ep8 inside a node, dp8 tp2 ep8 across two, dp4 cp4 ep4 inside one");
    for (int i = 0; i < 2; i++) {
        const PlanLayout *l = i ? &across : &in;
        double bw = i ? inter : intra, f, b, f2, b2, N = 4096;
        plan_ep_layer_comm(&p, l, N, &f, &b);
        plan_ep_layer_comm(&p, l, 2 * N, &f2, &b2);
        double one = 7 * alpha + 7.0 / 8 * N * pm->K * pm->D * 2 / bw, counts = 7 * alpha + 7.0 / 8 * 4 * 8 / bw;
        CHECK(rel_diff(f, counts + 2 * one) < 1e-12 && rel_diff(b, 2 * one) < 1e-12,
              "%s: forward %.4g ms = counts + dispatch + combine, backward %.4g ms = 2 all-to-alls of 7/8 x N k D",
              i ? "across nodes" : "inside a node", 1e3 * f, 1e3 * b);
        CHECK(f2 > f && b2 > b && rel_diff(b2 - b, 2 * 7.0 / 8 * N * pm->K * pm->D * 2 / bw) < 1e-12,
              "%s: twice the tokens add their bytes' time (%.4g -> %.4g ms backward)",
              i ? "across nodes" : "inside a node",
              1e3 * b, 1e3 * b2);
    }
    double fi, bi, fa, ba;
    plan_ep_layer_comm(&p, &in, 4096, &fi, &bi);
    plan_ep_layer_comm(&p, &across, 4096, &fa, &ba);
    CHECK(fa > 4 * fi && ba > 4 * bi, "the same all-to-alls cost %.1fx more across nodes (8x less bandwidth)", ba / bi);
    // In the step: M micro-batches x L layers x (forward + backward), all exposed;
    // the compute is that of ep 1 (each rank runs E/ep experts on ep x the tokens).
    PlanLayout in1 = in;
    in1.ep = 1;
    StepTime t8 = plan_step_time(&p, &in), t1 = plan_step_time(&p, &in1);
    double want = in.micro * pm->L * (fi + bi);
    CHECK(rel_diff(t8.ep_comm, want) < 1e-9 && t1.ep_comm == 0,
          "step: ep_comm %.4g s = M x L x (forward + backward) exchanges; 0 at ep 1", t8.ep_comm);
    CHECK(rel_diff(t8.compute, t1.compute) < 1e-12,
          "step, flat GEMM curve: the expert compute per rank is that of ep 1 (%.4g s)",
          t8.compute);
    double sum = t8.compute + t8.tp_comm + t8.cp_comm + t8.pp_comm + t8.bubble + t8.dp_comm + t8.optimizer + t8.ep_comm;
    CHECK(rel_diff(sum, t8.total) < 1e-9, "step: the breakdown with ep sums to the step (%.6g = %.6g)", sum, t8.total);
    // Full recomputation re-runs each forward's exchange in the backward.
    PlanLayout rc = in;
    rc.recompute = RECOMPUTE_FULL;
    StepTime tr = plan_step_time(&p, &rc);
    CHECK(rel_diff(tr.ep_comm, in.micro * pm->L * (2 * fi + bi)) < 1e-9,
          "full recompute: %.4g s = M x L x (2 forward + backward)",
          tr.ep_comm);
}

// The experts' GEMMs at their own sizes: E/ep experts over ep*N*k/E rows each. On a
// GEMM curve that rises with the size (small GEMMs slower), Qwen-MoE's 60 experts of
// ~273 rows each at ep 1 cost more than the dense MLP of the active width, and
// expert parallelism's taller GEMMs less; the step's compute moves by exactly M x L
// x the per-expert GEMM times (forward, and backward at twice the work per call).
static double curve_s(const Hardware *hw, double flops) { return flops / curve_rate(&hw->gemm, flops); }
static double experts_s(const Hardware *hw, const PlanModel *pm, int ep, double N) {
    const double r = ep * N * pm->K / pm->E, D = pm->D, F = pm->F, gu = 2 * r * D * 2 * F, down = 2 * r * F * D;
    return pm->E / ep * (curve_s(hw, gu) + curve_s(hw, down) + curve_s(hw, 2 * gu) + curve_s(hw, 2 * down));
}
static void test_gemm_sizes(void) {
    Hardware hw = ideal_machine(1e15, 0, 1e30, 1e30);
    RateCurve rising = {2, {1e8, 1e12}, {1e13, 1e15}};
    hw.gemm = rising;
    PlanProblem p = plan_problem("qwen-moe-a2.7b", 16, 4096, 64, hw);
    double c[3];
    for (int i = 0; i < 3; i++) {
        PlanLayout l = layout(16, 1, 1, 0, 4, 1 << i);
        c[i] = plan_step_time(&p, &l).compute;
    }
    CHECK(c[0] > c[1] && c[1] > c[2],
          "qwen-moe-a2.7b dp16, rising GEMM curve: compute %.4g > %.4g > %.4g s at ep 1, 2, 4",
          c[0], c[1], c[2]);
    const double ML = 4.0 * p.model.L;
    double want2 = ML * (experts_s(&hw, &p.model, 2, 4096) - experts_s(&hw, &p.model, 1, 4096));
    double want4 = ML * (experts_s(&hw, &p.model, 4, 4096) - experts_s(&hw, &p.model, 1, 4096));
    CHECK(rel_diff(c[1] - c[0], want2) < 1e-9 && rel_diff(c[2] - c[0], want4) < 1e-9,
          "compute(ep) - compute(ep 1) = M x L x (E/ep GEMMs of ep*N*k/E rows - E of N*k/E): %.4g, %.4g s",
          want2, want4);
}

// What --layout and the search accept.
static void test_check(void) {
    PlanProblem p = plan_problem("mixtral-8x7b", 64, 4096, 64, ideal_machine(1e15, 0, 1e12, 1e11));
    char why[512];
    PlanLayout bad_e = layout(64, 1, 1, 1, 1, 16), bad_dp = layout(2, 8, 1, 1, 32, 4), bad3 = layout(64, 1, 1, 1, 1, 3);
    bad_dp.pp = 4;
    bad_dp.tp = 8;
    CHECK(!plan_layout_check(&p, &bad_e, why, sizeof why) && strstr(why, "ep = 16 does not divide the 8 experts"),
          "ep16 with 8 experts refused: %s", why);
    CHECK(!plan_layout_check(&p, &bad_dp, why, sizeof why) && strstr(why, "ep = 4 does not divide dp * cp = 2 * 1 = 2"),
          "ep4 over dp*cp = 2 refused: %s", why);
    CHECK(!plan_layout_check(&p, &bad3, why, sizeof why) && strstr(why, "ep = 3 does not divide"),
          "ep3 refused: %s", why);
    PlanLayout ok = layout(64, 1, 1, 1, 1, 8);
    CHECK(plan_layout_check(&p, &ok, why, sizeof why), "dp64 ep8 accepted");
    PlanProblem d = plan_problem("smollm-135m", 8, 2048, 64, ideal_machine(1e15, 0, 1e12, 1e11));
    PlanLayout dense = layout(8, 1, 1, 1, 8, 2);
    CHECK(!plan_layout_check(&d, &dense, why, sizeof why) && strstr(why, "mixture-of-experts"),
          "ep2 on a dense model refused: %s", why);
}

// The search: ep in {divisors of E that divide dp*cp}, shown in the layout's name;
// a dense model never gets one.
static void test_search(void) {
    Hardware h100;
    hardware_builtin(&h100, "h100");
    PlanProblem p = plan_problem("mixtral-8x7b", 64, 4096, 64, h100);
    PlanResult *res;
    int n = plan_search(&p, &res), seen[9] = {0}, rule = 1, named = 1;
    for (int i = 0; i < n; i++) {
        const PlanLayout *l = &res[i].layout;
        int ep = plan_layout_ep(l);
        char name[128];
        plan_layout_name(l, name, sizeof name);
        if (ep <= 8) seen[ep] = 1;
        rule &= ep <= 8 && 8 % ep == 0 && (l->dp * l->cp) % ep == 0;
        char tag[16];
        snprintf(tag, sizeof tag, " ep%d ", ep);
        named &= ep > 1 ? strstr(name, tag) != NULL : strstr(name, " ep") == NULL;
    }
    CHECK(seen[1] && seen[2] && seen[4] && seen[8],
          "mixtral-8x7b on 64 GPUs: the search tries ep 1, 2, 4 and 8 (%d layouts)", n);
    CHECK(rule, "every ep divides E = 8 and dp*cp");
    CHECK(named, "layout names carry \"epN\" exactly when ep > 1");
    // Pure data parallelism (dp 64): the fastest fitting layout takes ep 8, which
    // leaves each rank 1/8 of the experts' gradients to reduce (results are sorted).
    int best = -1;
    for (int i = 0; i < n && best < 0; i++)
        if (res[i].fits && res[i].layout.dp == 64) best = i;
    char w[128] = "none";
    if (best >= 0) plan_layout_name(&res[best].layout, w, sizeof w);
    CHECK(best >= 0 && plan_layout_ep(&res[best].layout) == 8, "mixtral-8x7b on 64 H100s, dp 64: the fastest layout "
          "is %s (%.3g s)", w, best >= 0 ? res[best].time.total : 0.0);
    free(res);
    PlanProblem d = plan_problem("smollm-135m", 8, 2048, 64, h100);
    n = plan_search(&d, &res);
    int none = n > 0;
    for (int i = 0; i < n; i++) none &= plan_layout_ep(&res[i].layout) == 1;
    CHECK(none, "smollm-135m (dense): none of its %d layouts has ep", n);
    free(res);
}

// Memory forces expert parallelism: one big mixture-of-experts layer whose grid
// cannot change (1 layer: pp 1; 1 head: tp 1; an odd sequence: cp 1), so every
// layout is dp 8; a budget between the smallest layout with ep 1 and the smallest
// with ep > 1 leaves only ep > 1, and the search picks one.
static void test_forced(void) {
    Hardware h100;
    hardware_builtin(&h100, "h100");
    PlanProblem p = plan_problem("mixtral-8x7b", 8, 1023, 8, h100);
    PlanModel *pm = &p.model;
    pm->L = 1;
    pm->H = pm->KV = 1;
    pm->hd = 128;
    pm->V = 1024;
    pm->F = 65536;  // 8 experts of 0.8B parameters: 6.4B in the layer
    p.mem_budget = 1e15;
    PlanResult *res;
    int n = plan_search(&p, &res);
    double m1 = 1e300, m2 = 1e300;
    for (int i = 0; i < n; i++) {
        double m = res[i].mem.total;
        if (plan_layout_ep(&res[i].layout) == 1) m1 = fmin(m1, m);
        else m2 = fmin(m2, m);
    }
    free(res);
    CHECK(m2 < m1, "one layer of 6.4B expert parameters on 8 ranks: smallest layout %.1f GiB with ep, %.1f GiB without",
          m2 / 1073741824.0, m1 / 1073741824.0);
    p.mem_budget = (m1 + m2) / 2;
    n = plan_search(&p, &res);
    int fit_ep = 1, fits = 0;
    for (int i = 0; i < n; i++)
        if (res[i].fits) {
            fits++;
            fit_ep &= plan_layout_ep(&res[i].layout) > 1;
        }
    char w[128];
    plan_layout_name(&res[0].layout, w, sizeof w);
    CHECK(fits > 0 && fit_ep && res[0].fits, "budget %.1f GiB: all %d fitting layouts use ep, the winner is %s",
          p.mem_budget / 1073741824.0, fits, w);
    free(res);
}

int main(void) {
    test_memory();
    test_time();
    test_gemm_sizes();
    test_check();
    test_search();
    test_forced();
    return check_summary();
}
