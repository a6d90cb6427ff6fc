// tests/unit/test_plan.c — the planner against independent references (its
// pipeline schedules: test_plan_pipeline.c): the Ultra-Scale Playbook's bytes per parameter,
// Korthikanti et al.'s activation formulas, the 6*N*T FLOP count on an ideal
// machine, the alpha-beta ring cost of the data-parallel reduction, and the
// search's own invariants.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_fixture.h"
#include "engines/pipeline_schedule.h"
#include "plan/pipeline_sim.h"
#include "plan/plan.h"

// A machine where every kernel runs at exactly `rate` FLOP/s, memory traffic and
// (optionally) communication cost nothing: one bandwidth inside and between nodes.
static Hardware ideal(double rate, double alpha, double bw) { return ideal_machine(rate, alpha, bw, bw); }

static void test_memory_formulas(void) {
    // Model states, bf16 mixed precision (Playbook): 2 + 2 + 12 bytes per parameter
    // on one rank; ZeRO-1/2/3 over N_d ranks.
    PlanProblem p = plan_problem("llama-3.1-8b", 8, 4096, 64, ideal(1e15, 0, 1e12));
    const double psi = plan_total_params(&p.model);
    PlanLayout one = {1, 1, 1, 1, 0, 0, 1, 64, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    p.world = 1;
    PlanMemory m = plan_memory_mixed(&p, &one);
    CHECK(rel_diff(m.params, 2 * psi) < 1e-12 && rel_diff(m.grads, 2 * psi) < 1e-12 &&
              rel_diff(m.optimizer, 12 * psi) < 1e-12,
          "1 rank: params 2Ψ, grads 2Ψ, optimizer 12Ψ (Ψ = %.4g)", psi);
    p.world = 8;
    for (int z = 1; z <= 3; z++) {
        PlanLayout l = {8, 1, 1, 1, z, 0, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
        PlanMemory mz = plan_memory_mixed(&p, &l);
        double want = z == 1 ? 4 * psi + 12 * psi / 8 : z == 2 ? 2 * psi + 14 * psi / 8 : 16 * psi / 8;
        CHECK(rel_diff(mz.params + mz.grads + mz.optimizer, want) < 1e-12, "ZeRO-%d dp8: model states %.4g = %.4g", z,
              mz.params + mz.grads + mz.optimizer, want);
    }
    // Activations of a GPT model (Korthikanti's own accounting), pp = 1, one
    // micro-batch: L * s*b*h*(34 + 5as/h) + the head's 2sbh + 4sbV.
    PlanProblem g = plan_problem("gpt-22b", 8, 2048, 4, ideal(1e15, 0, 1e12));
    const double s = 2048, b = 1, h = 6144, a = 64, L = 48, V = 51200;
    struct {
        int tp, sp;
        Recompute rc;
        double per_layer;
    } rows[] = {
        {1, 0, RECOMPUTE_NONE, s * b * h * (34 + 5 * a * s / h)},
        {8, 0, RECOMPUTE_NONE, s * b * h * (10 + 24.0 / 8 + 5 * a * s / (h * 8))},
        {8, 1, RECOMPUTE_NONE, s * b * h * (34 + 5 * a * s / h) / 8},
        {8, 1, RECOMPUTE_SELECTIVE, s * b * h * 34 / 8},
        {8, 1, RECOMPUTE_FULL, 2 * s * b * h / 8},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        PlanLayout l = {8 / rows[i].tp, rows[i].tp, 1, 1, 0, rows[i].sp, 1, 4 / (8 / rows[i].tp), PP_1F1B, 1, rows[i].rc, 1};
        if (l.dp > 1) l.micro = 1;
        PlanMemory mg = plan_memory_mixed(&g, &l);
        double t = rows[i].tp, head = 2 * s * b * h * (rows[i].sp ? 1 / t : 1) + 4 * s * b * V / t;
        double full_extra = rows[i].rc == RECOMPUTE_FULL ? s * b * h * (34 + 5 * a * s / h) / 8 : 0;
        double want = L * rows[i].per_layer + head + full_extra;
        CHECK(rel_diff(mg.activations, want) < 1e-12, "Korthikanti activations tp%d%s %s: %.4g = %.4g bytes",
              rows[i].tp, rows[i].sp ? " sp" : "", rows[i].rc == RECOMPUTE_NONE ? "none" : rows[i].rc == RECOMPUTE_SELECTIVE ? "selective" : "full",
              mg.activations, want);
    }
    // Llama-3.1-8B's own layer: 23 s*b*h + the two norms' fp32 rstd (8 s*b), where
    // Korthikanti's layer (keeping each norm's input and output, and the SwiGLU
    // output: femtotron rebuilds it from gate|up) holds 34; one
    // stream (2 s*b*h) per micro-batch; all /t under sequence parallel.
    PlanLayout l8 = {1, 8, 1, 1, 0, 1, 1, 64, PP_1F1B, 1, RECOMPUTE_SELECTIVE, 1};
    PlanProblem p8 = plan_problem("llama-3.1-8b", 8, 4096, 64, ideal(1e15, 0, 1e12));
    PlanMemory m8 = plan_memory_mixed(&p8, &l8);
    double sbh = 4096.0 * 4096, head8 = 2 * sbh / 8 + 4 * 4096.0 * 128256 / 8;
    CHECK(rel_diff(m8.activations, 32 * (23 * sbh + 8 * 4096.0) / 8 + 2 * sbh / 8 + head8) < 1e-12,
          "llama-3.1-8b selective: 23 sbh/t + 8 sb/t per layer, one stream");
    // A run that keeps its bf16 norm and SwiGLU outputs (training.keep_bf16_inputs)
    // holds 2 s b (2h + f) = 11 sbh more a layer: under none, with the log-sum-exp
    // (4 s b a), Korthikanti's 34 sbh; under full nothing more.
    Config keep;
    config_defaults(&keep);
    keep.training.keep_bf16_inputs = 1;
    p8.base = &keep;
    const PlanMemory k8 = plan_memory_mixed(&p8, &l8);
    l8.recompute = RECOMPUTE_NONE;
    const PlanMemory n8 = plan_memory_mixed(&p8, &l8);
    l8.recompute = RECOMPUTE_FULL;
    const double full_keep = plan_memory_mixed(&p8, &l8).activations;
    p8.base = NULL;
    CHECK(rel_diff(k8.activations, 32 * (34 * sbh + 8 * 4096.0) / 8 + 2 * sbh / 8 + head8) < 1e-12 &&
              rel_diff(n8.activations, 32 * (34 * sbh + 8 * 4096.0 + 4 * 4096.0 * 32) / 8 + 2 * sbh / 8 + head8) <
                  1e-12 &&
              full_keep == plan_memory_mixed(&p8, &l8).activations,
          "llama-3.1-8b keeping the bf16 norm and SwiGLU outputs: 34 sbh/t a layer under selective (+ the "
          "log-sum-exp under none), nothing more under full");
}

// 8 CPU ranks on 2 cores (1 thread each), calibrated so: a pipeline's bubbles let
// the computing ranks run faster, layouts without a pipeline are unchanged, and
// so is everything when the cores are enough for every thread.
static void test_shared_cores(void) {
    Hardware hw = ideal(1e11, 1e-6, 1e10);
    hw.bytes_per_value = 4;
    hw.calib_threads = 1;
    hw.calib_ranks = 8;
    PlanProblem own = plan_problem("smollm-135m", 8, 256, 16, hw), two = own, many = own;
    two.hw.node_cores = 2;
    many.hw.node_cores = 8;
    PlanLayout pp4 = {2, 1, 4, 1, 0, 0, 1, 4, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    PlanLayout dp8 = {8, 1, 1, 1, 1, 0, 1, 2, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime a = plan_step_time(&own, &pp4), b = plan_step_time(&two, &pp4), c = plan_step_time(&many, &pp4);
    CHECK(b.total < 0.9 * a.total && c.total == a.total,
          "shared cores: dp2 x pp4 %.4f s < %.4f s unshared (8 cores: %.4f s)", b.total, a.total, c.total);
    double sum = b.compute + b.tp_comm + b.cp_comm + b.pp_comm + b.bubble + b.dp_comm + b.optimizer;
    CHECK(rel_diff(sum, b.total) < 1e-9 && b.bubble >= 0, "shared cores: breakdown %.6g = %.6g, bubble %.4g >= 0", sum,
          b.total, b.bubble);
    StepTime d = plan_step_time(&own, &dp8), e = plan_step_time(&two, &dp8);
    CHECK(d.total == e.total, "shared cores: dp8 (no pipeline) unchanged %.6f = %.6f", e.total, d.total);
}

// plan_split remembers recent splits: asked in turn for many stage counts and
// eight sequence lengths (48 inputs, more than its memo's 32), twice each, it
// always answers what the trainer's dynamic program answers for the same inputs.
// SmolLM-135M's large vocabulary makes the head worth a varying number of layers
// as the sequence grows, so the splits differ between sequence lengths.
static void test_split_memo(void) {
    PlanProblem p = plan_problem("smollm-135m", 64, 2048, 64, ideal(1e14, 0, 1e30));
    const PlanModel *pm = &p.model;
    int bad = 0, asked = 0, differ = 0;
    for (int round = 0; round < 3; round++)
        for (int pp = 2; pp <= 8; pp *= 2)
            for (int v = 1; v <= 2; v++) {
                int first[16];
                for (int si = 0; si < 8; si++) {
                    p.seq = 256 << si;
                    PlanLayout l = {1, 1, pp, 1, 0, 0, 1, 8, v > 1 ? PP_INTERLEAVED : PP_1F1B, v, RECOMPUTE_NONE, 1};
                    int got[16], again[16], want[16];
                    plan_split(&p, &l, got);    // a miss (the memo is too small for a round)
                    plan_split(&p, &l, again);  // a hit
                    double layer = pp_layer_cost(pm->D, pm->H, pm->KV, plan_head_dim(pm), pm->ffn_mats, pm->F, p.seq);
                    pp_balanced_split(pm->L, layer, pm->D, pm->V, pp * v, want);
                    const size_t n = sizeof(int) * (size_t)(pp * v);
                    bad += memcmp(got, want, n) != 0 || memcmp(again, want, n) != 0;
                    asked++;
                    if (si == 0) memcpy(first, want, n);
                    else differ += memcmp(first, want, n) != 0;
                }
            }
    CHECK(bad == 0 && differ > 0, "plan_split (memoized) = the trainer's split in %d of %d asks (%d differ by sequence)",
          asked - bad, asked, differ);
}

static void test_step_time(void) {
    // On an ideal machine (every FLOP at the peak, free memory traffic and
    // communication) one rank's step is exactly the model FLOPs: MFU = 1.
    PlanProblem p = plan_problem("smollm-360m", 1, 2048, 8, ideal(1e14, 0, 1e30));
    PlanLayout one = {1, 1, 1, 1, 0, 0, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime t = plan_step_time(&p, &one);
    // plan_flops_per_token counts the causal attention as S (not S+1) per token.
    double attn_fix = 1.0 + 1.0 / 2048 * (6.0 * 32 * 2048 * 960 / plan_flops_per_token(&p.model, 2048));
    CHECK(rel_diff(t.mfu * attn_fix, 1.0) < 1e-3, "ideal machine, 1 rank: MFU %.5f = 1", t.mfu * attn_fix);
    // Full recomputation adds one forward of every layer (not of the head) up to
    // SwiGLU (femtotron keeps the layer output, so the down projection, 2*F*D
    // FLOPs per token, is not redone): 1 + (layer forward FLOPs - down) / all FLOPs.
    one.recompute = RECOMPUTE_FULL;
    StepTime tf = plan_step_time(&p, &one);
    const double D = 960, S = 2048, F = 2560;
    double layers = 6.0 * 32 * (plan_layer_params(&p.model) - 2 * D) + 6.0 * 32 * S * D;
    double want_rc = 1.0 + (layers / 3.0 - 32 * 2.0 * F * D) / plan_flops_per_token(&p.model, 2048);
    CHECK(rel_diff(tf.total / t.total, want_rc) < 1e-3, "full recompute costs %.4f = %.4f", tf.total / t.total, want_rc);
    // Data parallel, ZeRO-0, reduction after backward: the exposed time is the ring
    // all-reduce of the fp32 gradients, 2(n-1)a + 2(n-1)/n * bytes / bw.
    const double alpha = 1e-5, bw = 1e9;
    PlanProblem q = plan_problem("smollm-135m", 4, 1024, 8, ideal(1e14, alpha, bw));
    Config base;
    config_defaults(&base);
    base.parallel.overlap = false;
    q.base = &base;  // bucket size and overlap come from the run config
    PlanLayout dp4 = {4, 1, 1, 1, 0, 0, 1, 2, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime td = plan_step_time(&q, &dp4);
    double bytes = plan_total_params(&q.model) * 4, want = 2 * 3 * alpha + 2 * 3.0 / 4 * bytes / bw;
    CHECK(rel_diff(td.dp_comm, want) < 1e-9, "dp4 all-reduce: %.6g s = ring formula %.6g s", td.dp_comm, want);
    // Per-stage zero-bubble costs fit only the base config's stages: a candidate
    // layout with other stages (or a schedule without split backwards) builds its
    // lists for the predicted costs instead (config_validate would refuse them).
    snprintf(base.parallel.pp_costs, sizeof base.parallel.pp_costs, "1:2:1,2:2:1,1:1:1,3:2:1");
    base.parallel.pp = 2, base.parallel.pp_virtual = 2, base.parallel.pp_schedule = PP_ZB_V;
    Config applied;
    PlanLayout same = {2, 1, 2, 1, 0, 0, 1, 2, PP_ZB_V, 2, RECOMPUTE_NONE, 1}, other = same;
    plan_apply_layout(&q, &same, &applied);
    int kept = !strcmp(applied.parallel.pp_costs, base.parallel.pp_costs);
    other.pp = 4;
    plan_apply_layout(&q, &other, &applied);
    int dropped = !strcmp(applied.parallel.pp_costs, "flops");
    other = same, other.sched = PP_INTERLEAVED;
    plan_apply_layout(&q, &other, &applied);
    dropped &= !strcmp(applied.parallel.pp_costs, "flops");
    CHECK(kept && dropped, "plan_apply_layout keeps parallel.pp_costs triples for the base's zb-v stages and "
          "predicts costs for pp 4 or interleaved");
    // femtotron's bf16 runs (a measured profile: 4-byte values, precision bf16)
    // round their fp32 activation operands in passes of 6 bytes a value: per layer
    // and micro-batch the forward's o input (N x A), the backward's o operands (N x
    // D, N x A); the head's input in both directions. Down reads the residual
    // stream's gradient as the first norm's backward above wrote it beside the
    // fp32 sums, 2 bytes a value (N x D) more there. The loss
    // writes the logits' gradient (N x V) as bf16, 2 bytes a value where fp32's
    // were 4, and nothing rounds it. And on one tensor-parallel rank each of a
    // layer's two residual adds is the o or down product's epilogue, reading the
    // residual (N x D, 4 bytes) where a pass read two and wrote one (12 bytes). And
    // SwiGLU moves bf16 gate|up: 6 bytes a position forward (fp32: 12), 14 backward
    // (fp32: 24).
    Hardware h4 = ideal(1e14, 0, 1e30);
    h4.bytes_per_value = 4, h4.mem_bw = 1e12;
    PlanProblem p32 = plan_problem("smollm-360m", 1, 2048, 8, h4), p16 = p32;
    snprintf(p16.hw.precision, sizeof p16.hw.precision, "bf16");
    PlanLayout mb2 = {1, 1, 1, 1, 0, 0, 2, 4, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    StepTime s32 = plan_step_time(&p32, &mb2), s16 = plan_step_time(&p16, &mb2);
    const double Nt = 2.0 * 2048, A = 15.0 * 64, V = 49152, Ls = 32;
    const double passes = 4 * (Ls * (Nt * A + Nt * D + Nt * A) + 2 * Nt * D), dres16 = 4 * Ls * Nt * D * 2;
    const double epilogue = 4 * Ls * 2 * Nt * D * (12 - 4) / h4.mem_bw;
    const double swiglu = 4 * Ls * Nt * 2560 * ((12 - 6) + (24 - 14)) / h4.mem_bw;
    const double loss16 = 4 * Nt * V * (4 - 2) / h4.mem_bw;
    const double want_bf16 = (passes * 6.0 + dres16) / h4.mem_bw - epilogue - swiglu - loss16;
    CHECK(rel_diff(s16.compute - s32.compute, want_bf16) < 1e-9 && rel_diff(s16.total - s32.total, want_bf16) < 1e-9,
          "bf16 rounding passes and the norms' bf16 residual gradient less the epilogues' adds, bf16 SwiGLU and the "
          "loss's bf16 gradient: %.6g s of compute more than fp32 = %.6g s (6 bytes per rounded value, 2 per written "
          "one; %.6g s less for the adds, %.6g s for SwiGLU, %.6g s for the loss)",
          s16.compute - s32.compute, want_bf16, epilogue, swiglu, loss16);
    // A run keeping its bf16 norm and SwiGLU outputs (training.keep_bf16_inputs) runs
    // neither norm's rebuild (xhat read, 2 bytes written: 6 bytes a value each) nor
    // SwiGLU's write of its output in the backward (2 bytes a position).
    Config keep;
    config_defaults(&keep);
    keep.training.keep_bf16_inputs = 1;
    PlanProblem k16 = p16;
    k16.base = &keep;
    const StepTime s16k = plan_step_time(&k16, &mb2);
    const double spared = 4 * Ls * Nt * (2 * 6 * D + 2 * 2560) / h4.mem_bw;
    CHECK(rel_diff(s16.total - s16k.total, spared) < 1e-9,
          "bf16 keeping the norms' and SwiGLU's outputs: %.6g s a step less (want %.6g: no rebuilds)",
          s16.total - s16k.total, spared);
    // Under full recomputation the layer's forward comes between the norm and down,
    // and a pass rounds the gradient instead (once for both of down's products): 4
    // bytes a value more, beside what the re-run forward saves in bf16 (up to
    // SwiGLU: o's input rounded, 6 bytes a value; SwiGLU's 6 bytes a position less;
    // the first residual add in o's epilogue, 8 bytes a value less).
    mb2.recompute = RECOMPUTE_FULL;
    StepTime r32 = plan_step_time(&p32, &mb2), r16 = plan_step_time(&p16, &mb2);
    const double extra = 4 * Ls * Nt * (D * (6.0 - 2.0) + 6 * A - 6 * 2560 - 8 * D) / h4.mem_bw;
    CHECK(rel_diff((r16.compute - r32.compute) - (s16.compute - s32.compute), extra) < 1e-6,
          "bf16 under full recomputation: the residual gradient rounded in a pass for down, %.6g s more than without "
          "(want %.6g)", (r16.compute - r32.compute) - (s16.compute - s32.compute), extra);
    // The breakdown adds up.
    PlanProblem r = plan_problem("llama-3.1-8b", 64, 4096, 256, ideal(5e14, 5e-6, 4e11));
    PlanLayout l = {4, 4, 4, 1, 1, 1, 1, 64, PP_INTERLEAVED, 2, RECOMPUTE_SELECTIVE, 1};
    StepTime tr = plan_step_time(&r, &l);
    double sum = tr.compute + tr.tp_comm + tr.cp_comm + tr.pp_comm + tr.bubble + tr.dp_comm + tr.optimizer + tr.ep_comm;
    CHECK(rel_diff(sum, tr.total) < 1e-9, "breakdown sums to the step: %.6g = %.6g", sum, tr.total);
    test_shared_cores();
    test_split_memo();
}

static void test_search(void) {
    Hardware h100;
    hardware_builtin(&h100, "h100");
    PlanProblem p = plan_problem("llama-3.1-8b", 64, 4096, 256, h100);
    p.mem_budget = 70e9;
    PlanResult *res;
    int n = plan_search(&p, &res);
    int ok = n > 100, sorted = 1, fits = 1, seen_nofit = 0;
    for (int i = 0; i < n; i++) {
        const PlanLayout *l = &res[i].layout;
        ok &= l->dp * l->tp * l->pp * l->cp == 64 && (long long)l->dp * l->mbs * l->micro == 256;
        fits &= res[i].fits == (res[i].mem.total <= p.mem_budget);
        if (!res[i].fits) seen_nofit = 1;
        else if (seen_nofit) sorted = 0;
        if (i > 0 && res[i].fits == res[i - 1].fits && res[i].time.total < res[i - 1].time.total) sorted = 0;
    }
    CHECK(ok, "search: %d layouts, each uses 64 ranks and the whole batch", n);
    CHECK(fits, "search: fits == total <= budget");
    CHECK(sorted, "search: fitting layouts first, each group fastest first");
    CHECK(res[0].fits && res[0].layout.tp <= 8, "search: the winner fits and keeps TP inside a node");
    free(res);
    // Nothing fits in 1 GiB: every row says so.
    p.mem_budget = 1e9;
    n = plan_search(&p, &res);
    int none = 1;
    for (int i = 0; i < n; i++) none &= !res[i].fits;
    CHECK(none, "search: 405B-class budget violations are all marked (1 GiB budget)");
    free(res);
}

// Mixture of experts: Mixtral-8x7B's published 46.7B parameters, 12.9B active per
// token (Mistral AI, "Mixtral of experts", 2024); MFU on active FLOPs: on an ideal
// machine one step's compute is 6 x active matmul parameters x tokens (+ attention),
// not the stored parameters; the activations of a top-k layer grow by k experts'
// working sets over a dense layer of the same width.
static void test_moe(void) {
    PlanProblem p = plan_problem("mixtral-8x7b", 8, 2048, 64, ideal(1e15, 0, 1e30));
    double total = plan_total_params(&p.model), active = plan_active_params(&p.model);
    CHECK(fabs(total / 46.70e9 - 1) < 0.005 && fabs(active / 12.88e9 - 1) < 0.005,
          "mixtral-8x7b: %.2fB parameters, %.2fB active (published 46.7B, 12.9B)", total / 1e9, active / 1e9);
    const PlanModel *pm = &p.model;
    double hd = plan_head_dim(pm), D = pm->D;
    double matmul = pm->L * (D * (pm->H + 2.0 * pm->KV) * hd + pm->H * hd * D + pm->E * D + pm->K * 3.0 * D * pm->F) +
                    (double)pm->V * D;
    double want = 6.0 * matmul + 6.0 * pm->L * 2048.0 * pm->H * hd;
    CHECK(fabs(plan_flops_per_token(pm, 2048) / want - 1) < 1e-12,
          "mixtral-8x7b: FLOPs per token = 6 x (attention + router + 2 experts + head) + attention core");
    PlanProblem dense = p;
    dense.model.E = dense.model.K = 0;
    PlanLayout l = {8, 1, 1, 1, 1, 0, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    double a_moe = plan_memory(&p, &l).activations, a_dense = plan_memory(&dense, &l).activations;
    // per layer, per token: k * (3F + D) + E values instead of 2F (2 bytes each)
    double extra = 2.0 * 2048 * pm->L * (pm->K * (3.0 * pm->F + D) + pm->E - 2.0 * pm->F);
    CHECK(fabs((a_moe - a_dense) / extra - 1) < 1e-9, "mixtral-8x7b: activations = a dense layer's + k experts' "
          "working sets and the router probabilities (%.2f GiB more)", (a_moe - a_dense) / 1073741824.0);
}

// femtotron's bf16 run (a 4-byte profile of bf16 products) on cuDNN's attention
// (the profile's "attention": cudnn) keeps q|k|v and the attention output in bf16:
// no pass rounds o's input in the forward, and RoPE moves 2 bytes a value in both
// directions. So against the same profile timed on femtotron's kernels, each
// layer's step is shorter by (1.5 N A + 1.5 N A + 3 N (H + KV) hd + N D) x 4 bytes
// / mem_bw: o's input rounded in neither direction, and o reads the residual
// stream's gradient as the second norm's backward wrote it in bf16 (2 bytes a
// value, where a pass of 6 rounded it).
// (SmolLM-360M, sequence 2048, 8 micro-batches, on a 4-byte profile of precision
// `precision` and 2 TB/s, over `gpus` GPUs.)
static PlanProblem smollm_4byte(int gpus, const char *precision) {
    Hardware hw = ideal(1e14, 0, 1e30);
    hw.mem_bw = 2e12;
    hw.bytes_per_value = 4;
    snprintf(hw.precision, sizeof hw.precision, "%s", precision);
    snprintf(hw.attention, sizeof hw.attention, "femtotron");
    return plan_problem("smollm-360m", gpus, 2048, 8, hw);
}

static void test_step_time_cudnn(void) {
    PlanProblem p = smollm_4byte(1, "bf16");
    PlanLayout one = {1, 1, 1, 1, 0, 0, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    const StepTime f = plan_step_time(&p, &one);
    strcpy(p.hw.attention, "cudnn");
    const StepTime c = plan_step_time(&p, &one);
    const double N = 2048, A = 15 * 64, D = 960, HKV = (15 + 5) * 64, L = 32, micro = 8;
    const double want = micro * L * (1.5 * N * A + 1.5 * N * A + 3 * N * HKV + N * D) * 4 / 2e12;
    CHECK(rel_diff(f.total - c.total, want) < 1e-9 && f.optimizer == c.optimizer,
          "cuDNN's bf16 q|k|v in the step model: %.3f ms less a step (want %.3f: no rounding of o's input nor of "
          "cuDNN's dout, RoPE on bf16, o's output gradient from the norm's bf16 copy)", 1e3 * (f.total - c.total),
          1e3 * want);
}

// The residual adds in the products' epilogues (the bf16 rounding check above: one
// tensor-parallel rank) are a one-rank thing: on two ranks the adds are passes
// after the reduction again, and a bf16 run costs an fp32 one's step plus its
// rounding passes alone (a layer's o input N A_l forward; N D + N A_l backward;
// the head's final norm output N D both ways), 1.5 values of 4 bytes each, and
// the first norm's bf16 copy of the residual gradient (N D, half a value), less
// SwiGLU's bf16 traffic (16 bytes a position of Fl less than fp32's) and the loss's
// bf16 gradient (2 bytes a logit less; read as it is by both head products).
static void test_step_time_tp_adds(void) {
    PlanProblem p = smollm_4byte(2, "fp32");
    PlanLayout tp2 = {1, 2, 1, 1, 0, 0, 1, 8, PP_1F1B, 1, RECOMPUTE_NONE, 1};
    const StepTime f2 = plan_step_time(&p, &tp2);
    strcpy(p.hw.precision, "bf16");
    const StepTime b2 = plan_step_time(&p, &tp2);
    const double N = 2048, D = 960, Al = 15 * 64 / 2, Vl = 49152 / 2, L = 32, micro = 8, bw = 2e12;
    const double rounding =
        micro * (L * 1.5 * (N * Al + N * D + N * Al) + L * 0.5 * N * D + 1.5 * (N * D + N * D)) * 4 / bw;
    const double swiglu = micro * L * N * (2560 / 2) * 16 / bw, loss16 = micro * N * Vl * 2 / bw;
    CHECK(rel_diff(b2.total - f2.total, rounding - swiglu - loss16) < 1e-9,
          "bf16 on two tensor-parallel ranks: %.3f ms a step more than fp32, the rounding passes less bf16 SwiGLU's "
          "and the loss's traffic (want %.3f; no epilogue adds)", 1e3 * (b2.total - f2.total),
          1e3 * (rounding - swiglu - loss16));
}

int main(void) {
    test_moe();
    test_memory_formulas();
    test_step_time();
    test_step_time_cudnn();
    test_step_time_tp_adds();
    test_search();
    return check_summary();
}
