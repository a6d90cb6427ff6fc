// tests/unit/plan_fixture.h — the ideal machine and the planning problem the planner's
// unit tests (test_plan.c, test_plan_ep.c) price layouts on.
#ifndef FEMTOTRON_TEST_PLAN_FIXTURE_H
#define FEMTOTRON_TEST_PLAN_FIXTURE_H

#include <string.h>

#include "plan/plan.h"

// Every kernel at exactly `rate` FLOP/s, free memory traffic; collectives at latency
// alpha and bandwidth intra_bw inside a node of 8 GPUs, inter_bw between nodes.
static inline Hardware ideal_machine(double rate, double alpha, double intra_bw, double inter_bw) {
    Hardware hw;
    memset(&hw, 0, sizeof hw);
    strcpy(hw.name, "ideal");
    hw.peak_flops = rate;
    hw.mem_bytes = 1e15;
    hw.mem_bw = 1e30;
    hw.bytes_per_value = 2;
    RateCurve flat = {2, {1.0, 1e30}, {rate, rate}};
    hw.gemm = hw.attn_fwd = hw.attn_bwd = flat;
    hw.intra_bw = intra_bw;
    hw.inter_bw = inter_bw;
    hw.intra_lat = hw.inter_lat = alpha;
    hw.gpus_per_node = 8;
    return hw;
}

// A preset model on `world` GPUs of hw, seqs sequences of seq tokens per step, 80 GB each.
static inline PlanProblem plan_problem(const char *preset, int world, int seq, long long seqs, Hardware hw) {
    PlanProblem p;
    memset(&p, 0, sizeof p);
    plan_model_resolve(&p.model, preset);
    p.hw = hw;
    p.world = world;
    p.seq = seq;
    p.global_seqs = seqs;
    p.mem_budget = 80e9;
    return p;
}

#endif
