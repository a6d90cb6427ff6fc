// plan/step_time.c — predicted seconds of one optimizer step.
//
// Every cost is built bottom-up from the hardware profile:
//  * compute: each GEMM of a layer at the GEMM curve's rate for its size, the
//    attention core at the attention curves' rate, elementwise kernels (norms,
//    RoPE, SwiGLU, residual adds, loss) at the memory bandwidth;
//  * communication: each collective at its alpha-beta cost on its group and link
//    class (hardware_collective_s) or, with measured links (p->links), on the
//    slowest link its group crosses in the layout's placement (a ring is as slow
//    as its slowest hop; plan/plan_place.h), exposed except where femtotron overlaps it:
//    the input-gradient reduction of a column-parallel block runs under its weight
//    gradient GEMM, each forward ring-attention hop under the previous block's
//    compute, data-parallel buckets under the last backward (every backward with
//    ZeRO-2/3, which reduce-scatter each micro-batch);
//  * the pipeline: the trainer's own action lists replayed with these per-stage
//    costs (plan/pipeline_sim.c), which gives the bubble of the chosen schedule;
//  * expert parallelism: the all-to-alls of dispatch and combine, exposed, and the
//    experts a rank no longer stores (plan/moe_cost.h).
// The breakdown is reported for the busiest pipeline rank.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engines/pipeline_schedule.h"
#include "plan/moe_cost.h"
#include "plan/plan.h"
#include "plan/plan_place.h"
#include "plan/pipeline_sim.h"
#include "util.h"

// Costs of one micro-batch through one piece of the model, split by kind.
typedef struct {
    double compute, tp, cp, dp;  // s: kernels, exposed TP, exposed CP, exposed ZeRO-3 gathers
} Cost;

static void add(Cost *a, Cost b, double times) {
    a->compute += times * b.compute;
    a->tp += times * b.tp;
    a->cp += times * b.cp;
    a->dp += times * b.dp;
}
static double cost_sum(Cost c) { return c.compute + c.tp + c.cp + c.dp; }

// The shapes of one rank's micro-batch.
typedef struct {
    const Hardware *hw;
    const PlanModel *pm;
    const PlanLayout *l;
    double B, S, N, Nr;             // sequences, full sequence, local tokens, residual rows
    double D, hd, Hl, KVl, Fl, Vl;  // local widths
    double bpv;                     // bytes per activation value
    int rounds;                     // femtotron's bf16 run: fp32 operands rounded in passes (rounding_s)
    int att_kept;                   // ... with cuDNN's attention (the profile's "attention"): q|k|v and
                                    // the attention output kept as bf16 (LlamaModel.att_bf16)
    int kept16;                     // ... of a dense model not under full recomputation, whose run
                                    // config asks it (training.keep_bf16_inputs): the norms' and
                                    // SwiGLU's bf16 outputs kept for the backward, not rebuilt there
                                    // (LlamaModel.inputs16_kept)
    int dres16;                     // ...: the residual stream's gradient written as bf16 by the
                                    // norms' backward for the down and o products (model/llama.c:
                                    // dres16; a split backward keeps it so in its stash)
    int epilogue_add;               // ... on one tensor-parallel rank: the two residual adds in the o
                                    // and down products' epilogues (ops.h: matmul_forward_add), which
                                    // read the residual once instead of a pass reading two and writing one
    // Where each group's collectives run: LINK_INTER / LINK_INTRA (the link class,
    // hardware_collective_s's intra_node), or LINK_PLACED + d: on dimension d's
    // bottleneck link in the placement, priced by link_hw[d].
    int tp_intra, cp_intra, pp_intra, dp_intra;
    Hardware link_hw[DIMS];         // hw with the inter-node class replaced by dimension d's link
} Shape;

enum { LINK_INTER = 0, LINK_INTRA = 1, LINK_PLACED = 2 };

static double gemm_s(const Shape *s, double flops) { return flops / curve_rate(&s->hw->gemm, flops); }
// Backward of a GEMM: input and weight gradients, each as many FLOPs as the forward.
static double gemm_bwd_s(const Shape *s, double flops) {
    return 2.0 * flops / curve_rate(&s->hw->gemm, 2.0 * flops);
}
static double elementwise_s(const Shape *s, double values) { return values * s->bpv / s->hw->mem_bw; }
// femtotron's bf16 runs (a measured profile, 4-byte values, of bf16 products)
// round each fp32 activation operand of a product to bf16 in a pass of its own,
// which reads 4 bytes a value and writes 2: 1.5 values of elementwise traffic.
// The GEMM curves are the products alone (bench/calibrate_kernels.c measures them
// on operands kept as bf16), and operands a run keeps as bf16 take no pass: the
// weights (their bf16 copy), the norms' outputs, the SwiGLU output, the gate|up
// and q|k|v gradients.
static double rounding_s(const Shape *s, double values) { return s->rounds ? elementwise_s(s, 1.5 * values) : 0.0; }
static double coll(const Shape *s, CollKind k, int ranks, int intra, double bytes) {
    if (intra >= LINK_PLACED) return hardware_collective_s(&s->link_hw[intra - LINK_PLACED], k, ranks, 0, bytes);
    return hardware_collective_s(s->hw, k, ranks, intra, bytes);
}

// Measured links (p->links): each dimension whose groups cross nodes in the
// layout's placement is priced as a ring over its bottleneck link (bw, lat), the
// profile's inter-node class and fits replaced by that link; a dimension inside
// nodes keeps the intra class. A uniform matrix at the class's bandwidth and
// latency prices as the class does (when the profile has no inter-node fits).
static void place_links(const PlanProblem *p, Shape *s) {
    PlacedLinks pl;
    plan_place_links(p, s->l, &pl);
    int *intra[DIMS] = {&s->tp_intra, &s->cp_intra, &s->pp_intra, &s->dp_intra};
    for (int d = 0; d < DIMS; d++) {
        if (!(pl.bw[d] > 0)) {
            *intra[d] = LINK_INTRA;
            continue;
        }
        Hardware *h = &s->link_hw[d];
        *h = *s->hw;
        h->inter_bw = pl.bw[d];
        h->inter_lat = pl.lat[d];
        h->n_coll = 0;  // fits of the inter-node class do not describe this link
        for (int i = 0; i < s->hw->n_coll; i++)
            if (s->hw->coll[i].intra_node) h->coll[h->n_coll++] = s->hw->coll[i];
        *intra[d] = LINK_PLACED + d;
    }
}

// Causal attention of this rank's tokens: forward FLOPs 4*B*Hl*hd*S(S+1)/2 over the
// whole sequence, 1/cp of it per context rank, run as cp blocks (flash-style
// kernel) at the rate of one (sequence, head) block's work (plan/hardware.h):
// 4*hd*S(S+1)/2 / cp^2, the causal triangle of a block of S/cp queries and keys.
// Megatron-2022's unfused attention (flash = 0) multiplies the full S x S with two
// batched GEMMs and runs softmax/dropout over the S x S scores.
static double attention_block_work(const Shape *s) {
    const double cp = s->l->cp;
    return 4.0 * s->hd * s->S * (s->S + 1) / 2 / (cp * cp);
}
static double attention_fwd_s(const Shape *s) {
    if (!s->pm->flash) {
        double flops = 4.0 * s->B * s->Hl * s->hd * s->S * s->S;
        return gemm_s(s, flops / 2) * 2 + elementwise_s(s, 6.0 * s->B * s->Hl * s->S * s->S);
    }
    double total = 4.0 * s->B * s->Hl * s->hd * s->S * (s->S + 1) / 2 / s->l->cp;
    return total / curve_rate(&s->hw->attn_fwd, attention_block_work(s));
}
static double attention_bwd_s(const Shape *s) {
    if (!s->pm->flash) return 2.0 * attention_fwd_s(s);
    double total = 2.0 * 4.0 * s->B * s->Hl * s->hd * s->S * (s->S + 1) / 2 / s->l->cp;
    return total / curve_rate(&s->hw->attn_bwd, 2.0 * attention_block_work(s));
}

// RoPE's traffic on q and k, in values of bytes_per_value: read and write each,
// half the bytes where they are kept as bf16 (att_kept).
static double rope_values(const Shape *s) {
    return 2 * s->N * (s->Hl + s->KVl) * s->hd * (s->att_kept ? 0.5 : 1.0);
}

// The traffic of one residual add after a product, in values: a pass reading
// both and writing the sum, or only the residual read by the product's epilogue.
static double residual_values(const Shape *s) { return (s->epilogue_add ? 1 : 3) * s->Nr * s->D; }

// SwiGLU's traffic in values of bytes_per_value. fp32 (and a mixture of experts'
// rows): the forward reads gate|up and writes the output, 3 N Fl values, and the
// backward reads gate|up and the output gradient and writes gate|up's, twice that.
// A dense bf16 run (LlamaModel.mlp_bf16) keeps gate|up as bf16: the forward reads
// 4 bytes a position and writes 2; the backward reads gate|up (4) and down's input
// gradient (2, which the down product wrote as bf16: 2 more), and writes gate|up's
// gradient (4) and down's input rebuilt beside it (2, none where the forward kept
// it: kept16): 14 bytes, or 12.
static double swiglu_values(const Shape *s, int backward) {
    if (!(s->rounds && s->pm->E == 0)) return (backward ? 6 : 3) * s->N * s->Fl;
    return (backward ? (s->kept16 ? 12.0 : 14.0) : 6.0) / s->bpv * s->N * s->Fl;
}

// One decoder layer's forward.
static Cost layer_fwd(const Shape *s) {
    const PlanLayout *l = s->l;
    const double N = s->N, Nr = s->Nr, D = s->D, QKV = (s->Hl + 2 * s->KVl) * s->hd, A = s->Hl * s->hd;
    const double up = (s->pm->ffn_mats - 1) * s->Fl;  // gate|up (SwiGLU) or fc1 (GPT) width
    Cost c = {0, 0, 0, 0};
    double attn = attention_fwd_s(s);
    c.compute = gemm_s(s, 2 * N * D * QKV) + gemm_s(s, 2 * N * A * D) + gemm_s(s, 2 * N * D * up) +
                gemm_s(s, 2 * N * s->Fl * D) + attn;
    // rmsnorm x2 (read + write), residual x2, RoPE on q and k, SwiGLU
    c.compute += elementwise_s(s, 4 * Nr * D + 2 * residual_values(s) + rope_values(s) + swiglu_values(s, 0));
    // bf16: o's input, the attention output (the norms write bf16 themselves), unless
    // cuDNN wrote it as bf16 (att_kept)
    if (!s->att_kept) c.compute += rounding_s(s, N * A);
    const double act = N * D * s->bpv;  // one gathered (N, D) activation
    if (l->tp > 1) {
        if (l->sp)
            c.tp = 2 * coll(s, COLL_ALLGATHER, l->tp, s->tp_intra, act) +
                   2 * coll(s, COLL_REDUCE_SCATTER, l->tp, s->tp_intra, act);
        else
            c.tp = 2 * coll(s, COLL_ALLREDUCE, l->tp, s->tp_intra, act);
    }
    if (l->cp > 1) {  // K|V of the local tokens hop cp-1 times, each under a block's compute
        double hop = coll(s, COLL_P2P, 2, s->cp_intra, 2 * N * s->KVl * s->hd * s->bpv);
        double hidden = attn / l->cp;
        c.cp = (l->cp - 1) * (hop > hidden ? hop - hidden : 0.0);
    }
    return c;
}

// What full recomputation redoes of a layer's forward lf. femtotron stops after
// SwiGLU: the down projection, its tensor-parallel reduction and the second
// residual add only make the layer output, which is kept (model/llama.c,
// layer_forward_with). Megatron-2022 (flash = 0) re-runs the whole layer.
static Cost recompute_fwd(const Shape *s, Cost lf) {
    if (!s->pm->flash) return lf;
    lf.compute -= gemm_s(s, 2 * s->N * s->Fl * s->D) + elementwise_s(s, residual_values(s));
    if (s->l->tp > 1)
        lf.tp -= coll(s, s->l->sp ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE, s->l->tp, s->tp_intra, s->N * s->D * s->bpv);
    return lf;
}

// One decoder layer's backward (without recomputation).
static Cost layer_bwd(const Shape *s) {
    const PlanLayout *l = s->l;
    const double N = s->N, Nr = s->Nr, D = s->D, QKV = (s->Hl + 2 * s->KVl) * s->hd, A = s->Hl * s->hd;
    const double up = (s->pm->ffn_mats - 1) * s->Fl;
    Cost c = {0, 0, 0, 0};
    c.compute = gemm_bwd_s(s, 2 * N * D * QKV) + gemm_bwd_s(s, 2 * N * A * D) +
                gemm_bwd_s(s, 2 * N * D * up) + gemm_bwd_s(s, 2 * N * s->Fl * D) + attention_bwd_s(s);
    // the norms' and RoPE's backward, priced as twice their forward, and SwiGLU's; the
    // norms' two rebuilds of their bf16 outputs among them (xhat read, 2 bytes
    // written: 1.5 values each) are not run where the forward kept them (kept16)
    c.compute += elementwise_s(s, 2 * (10 * Nr * D + rope_values(s)) + swiglu_values(s, 1) -
                                      (s->kept16 ? 2 * 1.5 * Nr * D : 0.0));
    // bf16: the residual stream's gradient as down and o read it, and o's input
    // unless cuDNN wrote it as bf16 (att_kept; then o writes its input gradient,
    // cuDNN's dout, as bf16 too). Under s->dres16 the norm's backward before each
    // reader writes the gradient as bf16 beside its fp32 sums (half a value a
    // position): o's under att_kept, down's in a dense model unless full
    // recomputation comes between (then a pass rounds it, once for both of down's
    // products; a split backward keeps the copy in its stash, which recomputation
    // leaves alone); elsewhere each product rounds the gathered gradient itself.
    const int recomputed_between = l->recompute == RECOMPUTE_FULL && !pp_schedule_splits(l->sched);
    const int mlp16 = s->dres16 && s->pm->E == 0;
    double rounded = (s->att_kept ? 0 : N * A) + (s->dres16 && s->att_kept ? 0 : N * D);
    double emitted = s->dres16 && s->att_kept ? Nr * D : 0;
    if (!mlp16) rounded += N * D;
    else if (recomputed_between) rounded += Nr * D;
    else emitted += Nr * D;
    c.compute += rounding_s(s, rounded) + elementwise_s(s, 0.5 * emitted);
    const double act = N * D * s->bpv;
    if (l->tp > 1) {
        // Column blocks (qkv, gate|up): the input gradient is reduced while the
        // weight gradient GEMM runs (one GEMM of the forward's size).
        CollKind red = l->sp ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE;
        double r = coll(s, red, l->tp, s->tp_intra, act);
        double w1 = gemm_s(s, 2 * N * D * QKV), w2 = gemm_s(s, 2 * N * D * up);
        c.tp = (r > w1 ? r - w1 : 0) + (r > w2 ? r - w2 : 0);
        // Sequence parallel re-gathers the two norm outputs and the two output
        // gradients of the row-parallel blocks.
        if (l->sp) c.tp += 4 * coll(s, COLL_ALLGATHER, l->tp, s->tp_intra, act);
    }
    if (l->cp > 1) {  // each hop carries K|V and their gradients after the block's compute
        double kv = 2 * N * s->KVl * s->hd * s->bpv;
        c.cp = (l->cp - 1) * coll(s, COLL_P2P, 2, s->cp_intra, 2 * kv) + coll(s, COLL_P2P, 2, s->cp_intra, kv);
    }
    return c;
}

// Embedding lookup and, on the last stage, final norm, head and cross-entropy.
// The weight-gradient GEMMs of one decoder layer's backward (the W of a split
// backward, zero-bubble schedules): as many FLOPs as the forward's GEMMs.
static double layer_wgrad_s(const Shape *s) {
    const double N = s->N, D = s->D, QKV = (s->Hl + 2 * s->KVl) * s->hd, A = s->Hl * s->hd;
    const double up = (s->pm->ffn_mats - 1) * s->Fl;
    return gemm_s(s, 2 * N * D * QKV) + gemm_s(s, 2 * N * A * D) + gemm_s(s, 2 * N * D * up) +
           gemm_s(s, 2 * N * s->Fl * D);
}

static Cost head_fwd(const Shape *s) {
    Cost c = {0, 0, 0, 0};
    // the loss reads the logits twice and writes their gradient: fp32, or under bf16
    // products bf16 in place (half a value a logit; ops.h: cross_entropy_forward_backward_bf16)
    const double loss_values = (s->rounds ? 2.5 : 3.0) * s->N * s->Vl;
    c.compute = gemm_s(s, 2 * s->N * s->D * s->Vl) + elementwise_s(s, 2 * s->Nr * s->D + loss_values) +
                rounding_s(s, s->N * s->D);  // bf16: the final norm's output
    if (s->l->tp > 1) {
        if (s->l->sp) c.tp = coll(s, COLL_ALLGATHER, s->l->tp, s->tp_intra, s->N * s->D * s->bpv);
        c.tp += 2 * coll(s, COLL_ALLREDUCE, s->l->tp, s->tp_intra, 3 * s->N * 4);  // loss statistics
    }
    return c;
}
static Cost head_bwd(const Shape *s) {
    Cost c = {0, 0, 0, 0};
    c.compute = gemm_bwd_s(s, 2 * s->N * s->D * s->Vl) + elementwise_s(s, 4 * s->Nr * s->D + s->N * s->Vl);
    // bf16: the final norm's output (the logits' gradient is bf16 already, as the
    // loss wrote it, and read as it is: head_fwd)
    c.compute += rounding_s(s, s->N * s->D);
    if (s->l->tp > 1) {
        double act = s->N * s->D * s->bpv;
        c.tp = coll(s, s->l->sp ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE, s->l->tp, s->tp_intra, act);
        if (s->l->sp) c.tp += coll(s, COLL_ALLGATHER, s->l->tp, s->tp_intra, act);
    }
    return c;
}
static Cost embed_fwd(const Shape *s) {
    Cost c = {elementwise_s(s, 2 * s->N * s->D), 0, 0, 0};
    if (s->l->tp > 1)  // vocab-parallel lookup: partial rows summed over the group
        c.tp = coll(s, s->l->sp ? COLL_REDUCE_SCATTER : COLL_ALLREDUCE, s->l->tp, s->tp_intra,
                    s->N * s->D * s->bpv);
    return c;
}

// Parameters one rank holds for virtual stage k (tensor-parallel share; under
// expert parallelism E/ep of each layer's experts). The gradient reduction and the
// optimizer price them as one dp x cp group's, though the experts' share reduces
// over the dp*cp/ep ranks that hold them (a ring's per-byte cost hardly depends on
// its size; the optimizer's owned expert share is ep times this, a small term).
static double stage_params(const PlanProblem *p, const PlanLayout *l, int layers, int first, int last) {
    const PlanModel *pm = &p->model;
    double embed = (double)pm->V * pm->D / l->tp;
    double layer = plan_layer_params(pm) - plan_expert_params(pm) * (1.0 - 1.0 / plan_layout_ep(l));
    return layers * layer / l->tp + (first ? embed : 0) +
           (last ? (pm->tied && !first ? embed : 0) + (pm->tied ? 0 : embed) + pm->D : 0);
}

static int fits_node(const Hardware *hw, long span) { return span <= hw->gpus_per_node; }

// Processor sharing on a CPU node (hw->node_cores > 0) whose ranks x threads
// exceed its cores: the profile's rates are what each of its calib ranks got
// while all computed, min(T, C/R) cores each (T threads per rank, C cores, R
// ranks on the node). In a pipeline bubble only some ranks compute (the other
// dimensions' replicas run the same schedule in step, so n computing pipeline
// ranks are n*Rn/pp computing ranks of the node's Rn) and each gets
// min(T, C/(n*Rn/pp)) cores: speed[n] is that over the calibrated share.
// NULL when nothing is shared (GPUs, or cores enough for every thread).
static double *shared_speed(const PlanProblem *p, const PlanLayout *l) {
    const Hardware *hw = &p->hw;
    const double C = hw->node_cores, T = hw->calib_threads > 0 ? hw->calib_threads : 1;
    // Ranks on the node during calibration: calibration runs on one node, so all
    // of its ranks (train --parallel.auto replaces gpus_per_node by the job's).
    const int Rc = hw->calib_ranks > 0 ? hw->calib_ranks : hw->gpus_per_node;
    const int Rn = p->world < hw->gpus_per_node ? p->world : hw->gpus_per_node;
    if (C <= 0 || Rn * T <= C) return NULL;
    const double calibrated = fmin(T, C / Rc);
    double *speed = xmalloc(sizeof(double) * (size_t)(l->pp + 1), "plan processor sharing");  // (pp+1)
    speed[0] = 1.0;
    for (int n = 1; n <= l->pp; n++) speed[n] = fmin(T, C / fmax(1.0, (double)n * Rn / l->pp)) / calibrated;
    return speed;
}

StepTime plan_step_time(const PlanProblem *p, const PlanLayout *l) {
    const PlanModel *pm = &p->model;
    const Hardware *hw = &p->hw;
    Shape s;
    memset(&s, 0, sizeof s);
    s.hw = hw;
    s.pm = pm;
    s.l = l;
    s.B = l->mbs;
    s.S = p->seq;
    s.N = s.B * s.S / l->cp;
    s.Nr = l->sp ? s.N / l->tp : s.N;
    s.D = pm->D;
    s.hd = plan_head_dim(pm);
    s.Hl = (double)pm->H / l->tp;
    s.KVl = (double)pm->KV / l->tp;
    // A mixture of experts multiplies k experts and the shared ones per token: as a
    // dense MLP of that active width (the router's N x E GEMM is left out).
    s.Fl = (pm->E > 0 ? (double)pm->K * pm->F + pm->Fs : (double)pm->F) / l->tp;
    s.Vl = ceil((double)pm->V / l->tp);
    s.bpv = hw->bytes_per_value;
    s.rounds = hw->bytes_per_value == 4 && !strcmp(hw->precision, "bf16");
    s.att_kept = s.rounds && !strcmp(hw->attention, "cudnn");
    s.epilogue_add = s.rounds && l->tp == 1;
    s.dres16 = s.rounds;
    s.kept16 = s.rounds && pm->E == 0 && l->recompute != RECOMPUTE_FULL && plan_keeps_bf16_inputs(p);
    // Rank order dp-pp-cp-tp (tp fastest): a group is inside one node when the
    // ranks it spans fit in one.
    s.tp_intra = fits_node(hw, l->tp);
    s.cp_intra = fits_node(hw, (long)l->tp * l->cp);
    s.pp_intra = fits_node(hw, (long)l->tp * l->cp * l->pp);
    // The gradient group (dp x cp): inside a node when the whole grid fits, or
    // when it is only the cp group (dp = 1).
    s.dp_intra = fits_node(hw, (long)l->tp * l->cp * l->pp * l->dp) || (l->dp == 1 && s.cp_intra);
    if (p->links) place_links(p, &s);

    const int K = l->pp * l->v, M = l->micro;
    int *layers = xmalloc(sizeof(int) * (size_t)K, "plan split");  // (K) layers per virtual stage
    plan_split(p, l, layers);
    Cost lf = layer_fwd(&s), lb = layer_bwd(&s);
    // A mixture of experts' GEMMs at their own sizes (plan/moe_cost.h).
    double gemm_f, gemm_b;
    plan_moe_gemm_delta(p, l, s.N, &gemm_f, &gemm_b);
    lf.compute += gemm_f;
    lb.compute += gemm_b;
    // Expert parallelism's all-to-alls per layer and micro-batch; a re-run forward
    // repeats them.
    double ep_f, ep_b;
    plan_ep_layer_comm(p, l, s.N, &ep_f, &ep_b);
    if (l->recompute == RECOMPUTE_FULL) ep_b += ep_f * (pp_schedule_splits(l->sched) ? 2 : 1);
    // Recomputation redoes part of the forward inside the backward.
    if (l->recompute == RECOMPUTE_FULL) {
        add(&lb, recompute_fwd(&s, lf), 1.0);
    } else if (l->recompute == RECOMPUTE_SELECTIVE) {
        Cost again = {attention_fwd_s(&s), 0, lf.cp, 0};
        if (!pm->flash) again.compute = attention_fwd_s(&s);
        add(&lb, again, 1.0);
    }
    double *fwd = xmalloc(sizeof(double) * (size_t)K, "plan stage costs");  // (K) s per micro-batch
    double *bwd = xmalloc(sizeof(double) * (size_t)K, "plan stage costs");  // (K)
    double *wgt = xmalloc(sizeof(double) * (size_t)K, "plan stage costs");  // (K) W part of bwd
    Cost *cf = xcalloc(sizeof(Cost) * (size_t)K, "plan stage costs");       // (K)
    Cost *cb = xcalloc(sizeof(Cost) * (size_t)K, "plan stage costs");       // (K)
    for (int k = 0; k < K; k++) {
        int first = k == 0, last = k == K - 1;
        add(&cf[k], lf, layers[k]);
        add(&cb[k], lb, layers[k]);
        wgt[k] = layers[k] * layer_wgrad_s(&s);
        // A split backward under full recomputation rebuilds each layer in W too.
        if (pp_schedule_splits(l->sched) && l->recompute == RECOMPUTE_FULL) {
            Cost again = recompute_fwd(&s, lf);
            add(&cb[k], again, layers[k]);
            wgt[k] += layers[k] * cost_sum(again);
        }
        if (first) add(&cf[k], embed_fwd(&s), 1.0);
        if (last) {
            add(&cf[k], head_fwd(&s), 1.0);
            add(&cb[k], head_bwd(&s), 1.0);
            wgt[k] += gemm_s(&s, 2 * s.N * s.D * s.Vl);
        }
    }
    // Per pipeline rank: its v chunks' parameters (ZeRO-3 gathers them per use).
    double rank_params = 0.0;
    for (int st = 0; st < l->pp; st++) {
        double par = 0.0;
        for (int c = 0; c < l->v; c++) {
            int k = pp_virtual_of(l->sched, l->pp, st, c);
            par += stage_params(p, l, layers[k], k == 0, k == K - 1);
        }
        if (par > rank_params) rank_params = par;
    }
    const int ndp = l->dp * l->cp;
    const double gbytes = 4.0;  // gradients are reduced in fp32 (femtotron; Megatron's default)
    if (l->zero == 3 && ndp > 1)
        for (int k = 0; k < K; k++) {
            // Each unit is gathered before its forward and again before its backward.
            double g = coll(&s, COLL_ALLGATHER, ndp, s.dp_intra, stage_params(p, l, layers[k], k == 0, k == K - 1) * s.bpv);
            cf[k].dp += g;
            cb[k].dp += g;
        }
    for (int k = 0; k < K; k++) {
        fwd[k] = cost_sum(cf[k]) + layers[k] * ep_f;
        bwd[k] = cost_sum(cb[k]) + layers[k] * ep_b;
    }
    const PpSchedule sched = l->sched;
    double send = l->pp > 1 ? coll(&s, COLL_P2P, 2, s.pp_intra, s.Nr * s.D * s.bpv) : 0.0;
    double *speed = shared_speed(p, l);
    PipeSim with = pipeline_simulate(sched, l->pp, l->v, M, fwd, bwd, wgt, send, speed);
    PipeSim without = pipeline_simulate(sched, l->pp, l->v, M, fwd, bwd, wgt, 0.0, speed);
    free(speed);

    StepTime t;
    memset(&t, 0, sizeof t);
    // Breakdown of the busiest rank's actions.
    Cost busy = {0, 0, 0, 0};
    double last_bwd = 0.0, busy_ep = 0.0;
    for (int c = 0; c < l->v; c++) {
        int k = pp_virtual_of(l->sched, l->pp, without.busiest, c);
        add(&busy, cf[k], M);
        add(&busy, cb[k], M);
        busy_ep += M * layers[k] * (ep_f + ep_b);
        last_bwd += bwd[k];
    }
    // With processor sharing the busiest rank's actions take busy_wall wall seconds
    // for busy_max nominal ones: its breakdown is scaled to wall time.
    const double wall = without.busy_max > 0 ? without.busy_wall / without.busy_max : 1.0;
    t.compute = busy.compute * wall;
    t.tp_comm = busy.tp * wall;
    t.cp_comm = busy.cp * wall;
    t.dp_comm = busy.dp * wall;
    t.ep_comm = busy_ep * wall;
    t.bubble = without.makespan - without.busy_wall;
    t.pp_comm = with.makespan - without.makespan;
    // Gradient reduction over dp x cp: buckets of bucket_mb reduce under the last
    // backward (ZeRO-2/3: under every backward, one reduce-scatter per micro-batch).
    if (ndp > 1) {
        double bytes = rank_params * gbytes;
        double bucket = p->base ? p->base->parallel.bucket_mb * 1048576.0 : 25.0 * 1048576.0;
        double nb = ceil(bytes / bucket);
        double red = coll(&s, l->zero == 0 ? COLL_ALLREDUCE : COLL_REDUCE_SCATTER, ndp, s.dp_intra, bytes);
        int overlap = p->base ? p->base->parallel.overlap : 1;
        double exposed = overlap ? fmax(red / nb, red - last_bwd) : red;
        t.dp_comm += (l->zero >= 2 ? M : 1) * exposed;
        // ZeRO-1/2: the updated shards are all-gathered into whole parameters.
        if (l->zero == 1 || l->zero == 2) t.dp_comm += coll(&s, COLL_ALLGATHER, ndp, s.dp_intra, rank_params * s.bpv);
    }
    // AdamW reads parameters, gradients and both moments and writes three of them
    // (fp32), plus the gradient norm's pass: about 40 bytes per owned element.
    double owned = rank_params / (l->zero >= 1 ? ndp : 1);
    t.optimizer = owned * 40.0 / hw->mem_bw + rank_params * 4.0 / hw->mem_bw;
    // ZeRO-3 gathers (busy.dp) run inside the actions, so inside the makespan.
    t.total = with.makespan + (t.dp_comm - busy.dp * wall) + t.optimizer;
    double tokens = (double)p->global_seqs * p->seq;
    t.tokens_per_s_per_rank = tokens / t.total / p->world;
    t.mfu = t.tokens_per_s_per_rank * plan_flops_per_token(pm, p->seq) / hw->peak_flops;
    free(layers);
    free(fwd);
    free(bwd);
    free(wgt);
    free(cf);
    free(cb);
    return t;
}
