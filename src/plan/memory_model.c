// plan/memory_model.c — per-rank memory of bf16 mixed-precision training on GPUs.
//
// Model states follow the Ultra-Scale Playbook (mixed precision with Adam, no
// separate fp32 gradient buffer): bf16 parameters 2 bytes, bf16 gradients 2,
// fp32 master weights and both moments 12 bytes per parameter; ZeRO-1 divides
// the 12 by N_d (the dp x cp group), ZeRO-2 also the gradients, ZeRO-3 also the
// parameters: 2Ψ+2Ψ+12Ψ/N_d, 2Ψ+14Ψ/N_d, 16Ψ/N_d, Ψ = this rank's parameters.
// Expert parallelism (plan/moe_cost.h) splits a mixture of experts' routed experts:
// a rank stores Ψ_e/ep of them, sharded by ZeRO over the N_d/ep ranks that hold the
// same experts, beside the dense Ψ_d sharded over N_d: e.g. ZeRO-1
// 2Ψ_d+2Ψ_d+12Ψ_d/N_d + (2+2)Ψ_e/ep + 12Ψ_e/N_d.
//
// Activations follow Korthikanti et al. 2022 (16-bit values, s tokens per
// sequence on this rank, b sequences, h width, a heads, t tensor ranks):
//  * GPT models (flash = 0, the paper's own accounting): per layer
//    s*b*h*(34 + 5*a*s/h) bytes; with TP s*b*h*(10 + 24/t + 5*a*s/(h*t)); with
//    TP + sequence parallel everything divided by t. Selective recomputation
//    drops the 5*a*s/h term (scores, softmax, dropout mask); full keeps 2*s*b*h.
//  * Llama models with a flash-style attention kernel: the same bookkeeping for
//    their layer, what its backward reads: each of the two norms keeps its
//    normalized input xhat = x*rstd (h) and rstd (fp32 per row), which is all its
//    backward needs, and the product after it rebuilds its input w*xhat from it
//    elementwise (model/activations.h: neither the norm's input x nor its output
//    is kept, as Korthikanti's and Megatron's layers keep both); q|k|v
//    (h*(1 + 2*kv/a)), the attention output (h), gate and up (2f; the SwiGLU
//    output is rebuilt from them in the backward, not kept: model/activations.h),
//    i.e. 2*s*b*(4h + 2h*kv/a + 2f) + 8*s*b bytes, plus the fp32
//    log-sum-exp per row and head (4*s*b*a). The residual stream is kept once per
//    micro-batch and chunk (2*s*b*h), not per layer: no backward reads it. Without
//    sequence parallel the h-wide xhat's, rstd's and stream are replicated over the
//    tensor group, the rest is divided by t; with it everything is divided.
//    A mixture of experts replaces 2f by k*(3f + h) + 3*Fs + E: each of a token's
//    k slots keeps its expert's gate|up, SwiGLU output and output, plus the shared
//    experts and the router's probabilities. Under expert parallelism the rows a
//    rank's experts compute are planned for the worst case, as femtotron plans them
//    (dropless, parallel_layers/expert_parallel.h): R = ep*min(k, E/ep) rows per
//    token instead of k keep gate|up and the SwiGLU output (R*3f), and the received
//    rows themselves (R*h, not split by tp) are kept too.
//    For Llama-3.1-8B (f = 3.5h, kv/a = 1/4) this is 23*s*b*h (+ 8*s*b), where a
//    layer keeping x, the norm output and the SwiGLU output would hold
//    Korthikanti's 34. Selective
//    drops the log-sum-exp (flash already stores no scores); full keeps the layer
//    input 2*s*b*h (/t with sequence parallel) and one layer's working set. A run
//    with training.keep_bf16_inputs (none or selective) keeps a dense layer's two
//    norm outputs and its SwiGLU output too (2*s*b*(2h + f), the two h-wide
//    replicated without sequence parallel), which the backward's weight gradients
//    read instead of rebuilding them (LlamaModel.inputs16_kept): 34*s*b*h for
//    Llama-3.1-8B under none, Korthikanti's figure.
//  * The last stage keeps its final norm input (2*s*b*h) and the fp32 logits of
//    its vocabulary shard (4*s*b*V/t) for the cross-entropy backward.
//  * Pipeline: a rank holds as many micro-batches of each chunk as its schedule
//    keeps in flight (the trainer's action lists: 1F1B pp - stage, AFAB all M);
//    Korthikanti's "the first stage holds p micro-batches" follows from it. Under
//    a zero-bubble schedule each micro-batch between its I and its W also keeps
//    its layers' output gradients (model/activations.h: four (s b h) per layer, /t
//    with sequence parallel, and a dense MLP's gate|up's (its gu is kept for W);
//    full recomputation adds q|k|v's, and gate|up's in a mixture of experts).
// Communication buffers: the gathered activation of TP (s*b*h), the ring
// attention's double buffer of K|V and their gradients, two pipeline message
// buffers per chunk, with ZeRO-3 two gathered units, and under expert parallelism
// the all-to-all staging rows and the local experts' outputs (model/moe.h: stage
// and ye, R*s*b rows of h each, once per rank).
#include <math.h>
#include <stdlib.h>

#include "engines/pipeline_schedule.h"
#include "engines/pipeline_zb.h"
#include "plan/moe_cost.h"
#include "plan/plan.h"
#include "plan/pipeline_sim.h"
#include "util.h"

// Bytes one micro-batch leaves behind in one layer.
static double layer_activation_bytes(const PlanModel *pm, const PlanLayout *l, double s, double b, int keep16) {
    const double h = pm->D, a = pm->H, t = l->tp, sbh = s * b * h;
    const double rep = l->sp ? 1.0 / t : 1.0;  // replicated parts without sequence parallel
    if (l->recompute == RECOMPUTE_FULL) return 2.0 * sbh * rep;
    if (!pm->flash) {
        double att = l->recompute == RECOMPUTE_SELECTIVE ? 0.0 : 5.0 * a * s / h;
        return l->sp ? sbh * (34.0 + att) / t : sbh * (10.0 + 24.0 / t + att / t);
    }
    const double hd = plan_head_dim(pm), qkv = (a + 2.0 * pm->KV) * hd;  // attention output: a * hd
    // The MLP keeps gate|up (2f: the backward rebuilds the SwiGLU output from it); a
    // mixture of experts keeps gate|up and the SwiGLU output for each of its k slots
    // plus each slot's expert output (h) and the token's router probabilities (E),
    // and the shared experts' 3 * Fs.
    // Under expert parallelism gate|up and SwiGLU are kept for the worst-case rows
    // (R per token), with the received rows themselves (R*h).
    const double R = plan_ep_rows(pm, l, 1.0), recv = plan_layout_ep(l) > 1 ? R * h : 0.0;
    const double mlp = pm->E > 0 ? R * 3.0 * pm->F + pm->K * h + 3.0 * pm->Fs + pm->E : 2.0 * pm->F;
    double bytes = 2.0 * s * b * (2.0 * h * rep + (qkv + a * hd + mlp) / t + recv) + 2.0 * 4.0 * s * b * rep;
    if (l->recompute != RECOMPUTE_SELECTIVE) bytes += 4.0 * s * b * a / t;  // log-sum-exp
    if (keep16 && pm->E == 0)  // the kept bf16 norm and SwiGLU outputs (not under full: returned above)
        bytes += 2.0 * s * b * (2.0 * h * rep + pm->F / t);
    return bytes;
}

// Working set of one layer redone in backward (full recomputation).
static double layer_working_bytes(const PlanModel *pm, const PlanLayout *l, double s, double b) {
    PlanLayout none = *l;
    none.recompute = RECOMPUTE_NONE;
    return layer_activation_bytes(pm, &none, s, b, 0);  // the working set rebuilds them
}

PlanMemory plan_memory_mixed(const PlanProblem *p, const PlanLayout *l) {
    const PlanModel *pm = &p->model;
    const int K = l->pp * l->v, ndp = l->dp * l->cp, ep = plan_layout_ep(l);
    const double s = (double)p->seq / l->cp, b = l->mbs, h = pm->D, t = l->tp;
    // A layer's parameters on this rank: the dense part, and E/ep of its experts.
    const double experts = plan_expert_params(pm) / t / ep;
    const double dense = (plan_layer_params(pm) - plan_expert_params(pm)) / t;
    const double embed = (double)pm->V * pm->D / t, layer = dense + experts;
    int *layers = xmalloc(sizeof(int) * (size_t)K, "plan split");  // (K)
    int *slots = xmalloc(sizeof(int) * (size_t)l->v, "plan slots");  // (v)
    int *stash = xmalloc(sizeof(int) * (size_t)l->v, "plan slots");  // (v)
    PpAction *acts = xmalloc(sizeof(PpAction) * (size_t)PP_MAX_ACTIONS(l->micro, l->v), "plan slots");
    plan_split(p, l, layers);
    const PpSchedule sched = l->sched;
    // The zero-bubble lists for the costs the trainer's default parallel.pp_costs
    // ("flops") predicts from the model (engines/pipeline_zb.h).
    double *fiw = xmalloc(sizeof(double) * 3 * (size_t)K, "plan costs");  // (3, K): F, I, W per stage
    const PpShape sh = {pm->D, pm->H, pm->KV, plan_head_dim(pm), pm->ffn_mats, pm->F, p->seq, pm->V};
    pp_flop_costs(&sh, K, layers, fiw, fiw + K, fiw + 2 * K);
    const PpCosts costs = {fiw, fiw + K, fiw + 2 * K, 0.0};
    PlanMemory worst = {0, 0, 0, 0, 0, 0};
    for (int st = 0; st < l->pp; st++) {
        pipeline_slots(sched, l->pp, l->v, l->micro, st, &costs, slots);
        pp_count_stash(acts, pp_schedule_actions(sched, l->micro, l->pp, st, l->v, &costs, acts), l->v, stash);
        double psi = 0.0, psi_e = 0.0, act = 0.0;  // dense and expert parameters
        for (int c = 0; c < l->v; c++) {
            int k = pp_virtual_of(sched, l->pp, st, c), first = k == 0, last = k == K - 1;
            psi_e += layers[k] * experts;
            psi += layers[k] * dense + (first ? embed : 0) +
                   (last ? (pm->tied ? (first ? 0 : embed) : embed) + pm->D : 0);
            act += slots[c] * layers[k] * layer_activation_bytes(pm, l, s, b, plan_keeps_bf16_inputs(p));
            if (pm->flash && l->recompute != RECOMPUTE_FULL)  // the stream, once per micro-batch
                act += slots[c] * 2.0 * s * b * h * (l->sp ? 1 / t : 1);
            if (last) act += slots[c] * (2.0 * s * b * h * (l->sp ? 1 / t : 1) + 4.0 * s * b * pm->V / t);
            double keep = 4.0 * 2.0 * s * b * h * (l->sp ? 1 / t : 1);  // bf16 output gradients
            if (l->recompute == RECOMPUTE_FULL) keep += 2.0 * s * b * (pm->H + 2.0 * pm->KV) * plan_head_dim(pm) / t;
            if (l->recompute == RECOMPUTE_FULL || pm->E == 0) keep += 2.0 * s * b * 2.0 * pm->F / t;
            act += stash[c] * layers[k] * keep;
        }
        if (l->recompute == RECOMPUTE_FULL) act += layer_working_bytes(pm, l, s, b);
        PlanMemory m;
        const int nde = ndp / ep;  // ranks holding the same experts
        m.params = 2.0 * psi / (l->zero == 3 ? ndp : 1) + 2.0 * psi_e / (l->zero == 3 ? nde : 1);
        m.grads = 2.0 * psi / (l->zero >= 2 ? ndp : 1) + 2.0 * psi_e / (l->zero >= 2 ? nde : 1);
        m.optimizer = 12.0 * psi / (l->zero >= 1 ? ndp : 1) + 12.0 * psi_e / (l->zero >= 1 ? nde : 1);
        m.activations = act;
        m.comm = (l->tp > 1 ? 2.0 * s * b * h : 0.0) +
                 (l->cp > 1 ? 2.0 * 2.0 * (2.0 * s * b * pm->KV * h / pm->H / t) * 2.0 : 0.0) +
                 (l->pp > 1 ? 2.0 * l->v * 2.0 * s * b * h * (l->sp ? 1 / t : 1) : 0.0) +
                 (l->zero == 3 ? 2.0 * 2.0 * layer : 0.0) +
                 (ep > 1 ? 2.0 * 2.0 * plan_ep_rows(pm, l, s * b) * h : 0.0);
        m.total = m.params + m.grads + m.optimizer + m.activations + m.comm;
        if (m.total > worst.total) worst = m;
    }
    free(layers);
    free(slots);
    free(stash);
    free(acts);
    free(fiw);
    return worst;
}
