// plan/plan.c — evaluating layouts and searching for the best one.
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engines/pipeline_schedule.h"
#include "plan/moe_cost.h"
#include "util.h"

void plan_layout_name(const PlanLayout *l, char *buf, size_t n) {
    char sched[32] = "";
    if (l->pp > 1)
        snprintf(sched, sizeof sched, " %s%s", pp_schedule_name(l->sched),
                 l->v > 1 ? (l->v == 2 ? "x2" : l->v == 3 ? "x3" : "x4+") : "");
    char ep[16] = "";  // only under expert parallelism (mixture-of-experts models)
    if (plan_layout_ep(l) > 1) snprintf(ep, sizeof ep, " ep%d", l->ep);
    snprintf(buf, n, "dp%d tp%d%s pp%d%s cp%d%s z%d mbs%d M%d rc:%s", l->dp, l->tp, l->sp ? "sp" : "", l->pp,
             sched, l->cp, ep, l->zero, l->mbs, l->micro, recompute_name(l->recompute));
}

// A search asks for the same split for every layout with the same pp*v (and
// memory and step time ask again), and the split is a dynamic program of K*L^2
// steps (126 layers of Llama-3.1-405B over up to 126 stages): the last splits are
// kept, keyed by the program's inputs. Single-threaded, like the planner.
#define SPLIT_MEMO 32
typedef struct {
    int L, K, D, V;
    double layer;
    int *layers;  // (K)
} SplitMemo;
static SplitMemo split_memo[SPLIT_MEMO];
static int split_memo_next;

static void split_memoized(int L, double layer, int D, int V, int K, int *layers) {
    for (int i = 0; i < SPLIT_MEMO; i++) {
        const SplitMemo *e = &split_memo[i];
        if (e->layers && e->L == L && e->K == K && e->layer == layer && e->D == D && e->V == V) {
            memcpy(layers, e->layers, sizeof(int) * (size_t)K);
            return;
        }
    }
    pp_balanced_split(L, layer, D, V, K, layers);
    SplitMemo *e = &split_memo[split_memo_next];
    split_memo_next = (split_memo_next + 1) % SPLIT_MEMO;
    free(e->layers);
    *e = (SplitMemo){L, K, D, V, layer, xmalloc(sizeof(int) * (size_t)K, "split memo")};
    memcpy(e->layers, layers, sizeof(int) * (size_t)K);
}

void plan_split(const PlanProblem *p, const PlanLayout *l, int *layers) {
    const PlanModel *pm = &p->model;
    const int K = l->pp * l->v;
    if (p->base && p->base->parallel.pp_layers[0] && p->base->parallel.pp == l->pp &&
        p->base->parallel.pp_virtual == l->v) {
        pp_parse_layers(p->base->parallel.pp_layers, K, layers);
        return;
    }
    // The trainer's balance criterion (engines/pipeline_schedule.c).
    double layer = pp_layer_cost(pm->D, pm->H, pm->KV, plan_head_dim(pm), pm->ffn_mats, pm->F, p->seq);
    split_memoized(pm->L, layer, pm->D, pm->V, K, layers);
}

void plan_apply_layout(const PlanProblem *p, const PlanLayout *l, Config *c) {
    *c = *p->base;
    ParallelConfig *pc = &c->parallel;
    pc->dp = l->dp;
    pc->tp = l->tp;
    pc->pp = l->pp;
    pc->cp = l->cp;
    pc->zero = l->zero;
    pc->sequence_parallel = l->sp;
    pc->pp_schedule = l->sched;
    pc->pp_virtual = l->v;
    pc->ep = plan_layout_ep(l);
    if (!(p->base->parallel.pp == l->pp && p->base->parallel.pp_virtual == l->v)) pc->pp_layers[0] = '\0';
    // Per-stage costs (F:I:W triples) fit only the base config's stages and a
    // zero-bubble schedule; another layout builds its lists for the predicted ones.
    const int triples = strcmp(pc->pp_costs, "flops") && strcmp(pc->pp_costs, "unit");
    if (triples && !(p->base->parallel.pp == l->pp && p->base->parallel.pp_virtual == l->v &&
                     pp_schedule_splits(l->sched)))
        snprintf(pc->pp_costs, sizeof pc->pp_costs, "flops");
    c->training.micro_batch_size = l->mbs;
    c->training.grad_acc_steps = l->micro;
    c->training.global_batch_size = (int)p->global_seqs;
    c->training.recompute = l->recompute;
    // full recomputation keeps each layer's input alone: nothing else to keep
    if (l->recompute == RECOMPUTE_FULL) c->training.keep_bf16_inputs = 0;
}

int plan_keeps_bf16_inputs(const PlanProblem *p) { return p->base && p->base->training.keep_bf16_inputs; }

PlanMemory plan_memory(const PlanProblem *p, const PlanLayout *l) {
    if (p->base && p->hw.bytes_per_value == 4) return plan_memory_own(p, l);
    return plan_memory_mixed(p, l);
}

PlanResult plan_evaluate(const PlanProblem *p, const PlanLayout *l) {
    PlanResult r;
    r.layout = *l;
    r.mem = plan_memory(p, l);
    r.fits = r.mem.total <= p->mem_budget;
    r.time = plan_step_time(p, l);
    return r;
}

// ------------------------------------------------------------------- search

// The run's own validation asked about one layout (util_try turns its die into 0).
typedef struct {
    Config run;  // the base config with the layout applied
    int world;
} LayoutCheck;

static void check_layout(void *ctx) {
    LayoutCheck *k = ctx;
    config_validate_layout(&k->run, k->world);
}

int plan_layout_check(const PlanProblem *p, const PlanLayout *l, char *why, size_t n) {
    const PlanModel *pm = &p->model;
    if (p->base) {
        static LayoutCheck k;  // a Config is large; the planner is single-threaded
        plan_apply_layout(p, l, &k.run);
        k.world = p->world;
        return util_try(check_layout, &k, why, n);
    }
#define REFUSE(...) return snprintf(why, n, __VA_ARGS__), 0
    // Expert parallelism: the trainer's own rules (config_validate.c, validate_moe).
    const int ep = plan_layout_ep(l);
    if (ep > 1 && pm->E == 0) REFUSE("ep = %d needs a mixture-of-experts model (this one is dense)", ep);
    if (ep > 1 && (l->dp * l->cp) % ep)
        REFUSE("ep = %d does not divide dp * cp = %d * %d = %d (expert-parallel ranks are taken from within "
               "the data- and context-parallel group)", ep, l->dp, l->cp, l->dp * l->cp);
    if (ep > 1 && pm->E % ep) REFUSE("ep = %d does not divide the %d experts per layer", ep, pm->E);
    if (pm->H % l->tp) REFUSE("%d attention heads do not split over tp = %d", pm->H, l->tp);
    if (pm->F % l->tp) REFUSE("intermediate size %d does not split over tp = %d", pm->F, l->tp);
    if (pm->KV % l->tp && l->tp % pm->KV)
        REFUSE("%d key/value heads neither split over nor replicate to tp = %d", pm->KV, l->tp);
    if (l->cp > 1 && p->seq % (2 * l->cp))
        REFUSE("sequence %d is not divisible by 2 * cp = %d", p->seq, 2 * l->cp);
    if (l->pp * l->v > pm->L) REFUSE("pp * v = %d stages for %d layers", l->pp * l->v, pm->L);
    if (l->sched == PP_ZB_V && l->v != 2) REFUSE("zb-v needs v = 2 chunks per rank (got %d)", l->v);
    if (l->sched == PP_INTERLEAVED && l->micro % l->pp)
        REFUSE("interleaved needs micro-batches (%d) a multiple of pp = %d", l->micro, l->pp);
    if (l->sp && ((long long)l->mbs * (p->seq / l->cp)) % l->tp)
        REFUSE("sequence parallel: %lld tokens per micro-batch do not split over tp = %d",
               (long long)l->mbs * (p->seq / l->cp), l->tp);
    if (l->tp > p->hw.gpus_per_node)
        REFUSE("tp = %d spans nodes (%d GPUs per node)", l->tp, p->hw.gpus_per_node);
#undef REFUSE
    return 1;
}

// Layouts the search considers: the valid ones, less ZeRO with nothing to shard
// over (the same run as ZeRO-0).
static int layout_valid(const PlanProblem *p, const PlanLayout *l) {
    if (l->dp * l->cp == 1 && l->zero > 0) return 0;
    char why[512];
    return plan_layout_check(p, l, why, sizeof why);
}

static int cmp_result(const void *a, const void *b) {
    const PlanResult *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->time.total != y->time.total) return x->time.total < y->time.total ? -1 : 1;
    return x->mem.total < y->mem.total ? -1 : x->mem.total > y->mem.total;
}

int plan_search(const PlanProblem *p, PlanResult **out) {
    int cap = 1024, n = 0;
    PlanResult *res = xmalloc(sizeof(PlanResult) * (size_t)cap, "plan results");
    const int W = p->world, E = p->model.E;
    for (int tp = 1; tp <= W; tp++) {
        if (W % tp) continue;
        for (int cp = 1; cp <= W / tp; cp++) {
            if ((W / tp) % cp) continue;
            for (int pp = 1; pp <= W / tp / cp; pp++) {
                if ((W / tp / cp) % pp) continue;
                const int dp = W / tp / cp / pp;
                if (p->global_seqs % dp) continue;
                for (int mbs = 1; mbs <= 16 && (p->global_seqs / dp) % mbs == 0; mbs *= 2) {
                    const int M = (int)(p->global_seqs / dp / mbs);
                    for (int sched = 0; sched < 3; sched++) {
                        if (pp == 1 && sched != PP_1F1B) continue;
                        for (int v = 1; v <= (sched == PP_INTERLEAVED ? 4 : 1); v *= 2) {
                            if (sched == PP_INTERLEAVED && v == 1) continue;
                            // Expert parallelism (mixture of experts only): every
                            // divisor of E that divides dp x cp, where its ranks live.
                            for (int ep = 1; ep <= (E > 0 ? E : 1); ep++) {
                                if ((E > 0 && E % ep) || (dp * cp) % ep) continue;
                                for (int zero = 0; zero <= 3; zero++)
                                    for (int sp = 0; sp <= (tp > 1); sp++)
                                        for (int rc = 0; rc < 3; rc++) {
                                            PlanLayout l = {dp, tp, pp, cp, zero, sp, mbs, M,
                                                            (PpSchedule)sched, v, (Recompute)rc, ep};
                                            if (!layout_valid(p, &l)) continue;
                                            if (n == cap) {
                                                cap *= 2;
                                                res = realloc(res, sizeof(PlanResult) * (size_t)cap);
                                                if (!res) die("out of memory for %d plan results", cap);
                                            }
                                            res[n++] = plan_evaluate(p, &l);
                                        }
                            }
                        }
                    }
                }
            }
        }
    }
    qsort(res, (size_t)n, sizeof *res, cmp_result);
    *out = res;
    return n;
}

// ------------------------------------------------------------------ explain

void plan_explain(const PlanProblem *p, const PlanResult *r, int n, char *buf, size_t size) {
    int fitting = 0;
    for (int i = 0; i < n; i++) fitting += r[i].fits;
    if (fitting == 0) {
        int small = 0;
        for (int i = 1; i < n; i++)
            if (r[i].mem.total < r[small].mem.total) small = i;
        char name[128];
        plan_layout_name(&r[small].layout, name, sizeof name);
        snprintf(buf, size, "No layout fits in %.1f GiB per rank; the smallest, %s, needs %.1f GiB. Add "
                 "ranks, shorten the sequence or shrink the batch.", p->mem_budget / 1073741824.0, name,
                 r[small].mem.total / 1073741824.0);
        return;
    }
    char win[128];
    plan_layout_name(&r[0].layout, win, sizeof win);
    const StepTime *t = &r[0].time;
    // The winner's biggest overhead beyond compute, and how it compares to the
    // best layout of a different shape (another dp/tp/pp/cp/ep split).
    const char *names[] = {"tensor-parallel communication", "context-parallel communication",
                           "pipeline sends", "the pipeline bubble", "data-parallel communication",
                           "the optimizer", "expert-parallel all-to-alls"};
    double parts[] = {t->tp_comm, t->cp_comm, t->pp_comm, t->bubble, t->dp_comm, t->optimizer, t->ep_comm};
    const int nparts = (int)(sizeof parts / sizeof parts[0]);
    int worst = 0;
    for (int i = 1; i < nparts; i++)
        if (parts[i] > parts[worst]) worst = i;
    int other = -1;
    for (int i = 1; i < n; i++) {
        const PlanLayout *a = &r[i].layout, *b = &r[0].layout;
        if (r[i].fits && (a->dp != b->dp || a->tp != b->tp || a->pp != b->pp || a->cp != b->cp ||
                          plan_layout_ep(a) != plan_layout_ep(b))) {
            other = i;
            break;
        }
    }
    // An overhead that rounds to 0% is no overhead to name: say they are all small.
    char overhead[160];
    const double share = 100.0 * parts[worst] / t->total;
    if (share >= 0.5)
        snprintf(overhead, sizeof overhead, "its largest overhead is %s (%.0f%% of the step)", names[worst], share);
    else
        snprintf(overhead, sizeof overhead, "its overheads (communication, bubble, optimizer) are each under "
                 "0.5%% of the step");
    int len = snprintf(buf, size, "%s wins at %.3g s per step (%.0f%% compute, %.1f%% MFU); %s. %d of %d layouts fit.",
                       win, t->total, 100.0 * t->compute / t->total, 100.0 * t->mfu, overhead, fitting, n);
    if (other > 0 && len > 0 && (size_t)len < size) {
        char alt[128];
        plan_layout_name(&r[other].layout, alt, sizeof alt);
        const StepTime *o = &r[other].time;
        double oparts[] = {o->tp_comm, o->cp_comm, o->pp_comm, o->bubble, o->dp_comm, o->optimizer, o->ep_comm};
        int why = 0;
        double best = -1e300;
        for (int i = 0; i < nparts; i++)
            if (oparts[i] - parts[i] > best) {
                best = oparts[i] - parts[i];
                why = i;
            }
        double dc = o->compute - t->compute, slower = 100.0 * (o->total / t->total - 1);
        char by[48];  // "0% slower" says nothing: a near tie is called one
        if (slower >= 0.5) snprintf(by, sizeof by, "%.0f%% slower", slower);
        else snprintf(by, sizeof by, "less than 0.5%% slower (a near tie)");
        if (dc > best) snprintf(buf + len, size - (size_t)len,
                                " The best other split, %s, is %s, mostly in compute (smaller, "
                                "less efficient kernels or recomputation).", alt, by);
        else snprintf(buf + len, size - (size_t)len, " The best other split, %s, is %s, mostly in %s.",
                      alt, by, names[why]);
    }
}
