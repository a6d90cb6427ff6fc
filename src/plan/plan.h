// plan/plan.h — the planner: a layout's per-rank memory and step time, and the
// search for the fastest layout that fits (Pipette's question, answered with the
// Ultra-Scale Playbook's and Korthikanti et al.'s formulas and a critical-path
// model of the pipeline schedule).
#ifndef FEMTOTRON_PLAN_H
#define FEMTOTRON_PLAN_H

#include "model/llama.h"
#include "plan/hardware.h"
#include "plan/placement.h"
#include "plan/plan_model.h"

// One candidate layout. Micro-batches per step = global sequences / (dp * mbs).
typedef struct {
    int dp, tp, pp, cp;
    int zero;             // ZeRO stage 0..3, sharded over the dp x cp group
    int sp;               // sequence parallel (tp > 1)
    int mbs;              // sequences per micro-batch per data-parallel rank
    int micro;            // micro-batches per step (M)
    PpSchedule sched;     // parallel.pp_schedule (config.h)
    int v;                // model chunks per pipeline rank (interleaved), else 1
    Recompute recompute;  // training.recompute (config.h)
    int ep;               // expert parallelism (parallel.ep): ep ranks from within dp x cp
                          // share a layer's experts, E/ep each (mixture of experts only;
                          // 0 or 1: none; plan/moe_cost.h)
} PlanLayout;

// What the planner is asked about.
typedef struct {
    PlanModel model;
    Hardware hw;
    int world;            // ranks (GPUs)
    int seq;              // tokens per sequence
    long long global_seqs;  // sequences per optimizer step
    double mem_budget;    // bytes per rank a layout may use
    // femtotron's own runs (hw.bytes_per_value == 4): the run config the layouts
    // are applied to, so memory comes from the trainer's own allocation plan.
    const Config *base;
    // Measured links between the job's nodes (plan --links; a profile's "links"
    // under train --parallel.auto), or NULL: collectives between nodes are then
    // priced by link class (hardware.h). With links, a layout's collectives are
    // priced on the links its groups cross (plan/plan_place.h): in placed when
    // given (slot -> matrix node: where the job's ranks already run), else in the
    // placement the search finds for that layout.
    const LinkMatrix *links;
    const int *placed;    // (links->n) or NULL
} PlanProblem;

// Whether femtotron's run keeps its dense layers' bf16 norm and SwiGLU outputs
// (p->base's training.keep_bf16_inputs; 0 without a run config).
int plan_keeps_bf16_inputs(const PlanProblem *p);

// Per-rank memory of the most loaded rank, by category (bytes).
typedef struct {
    double params, grads, optimizer, activations, comm;
    double total;
} PlanMemory;

// Predicted seconds of one optimizer step, split so that
//   total = compute + tp_comm + cp_comm + pp_comm + bubble + dp_comm + optimizer + ep_comm.
typedef struct {
    double compute;   // forward + backward (+ recompute) kernels on the busiest pipeline rank
    double tp_comm;   // exposed tensor-parallel collectives
    double cp_comm;   // exposed ring-attention hops
    double pp_comm;   // exposed pipeline sends on the critical path
    double bubble;    // pipeline idle time of the busiest rank
    double dp_comm;   // exposed gradient reduction and ZeRO gathers
    double optimizer; // AdamW, clipping, norm
    double ep_comm;   // expert-parallel all-to-alls (dispatch, combine), exposed
    double total;
    double tokens_per_s_per_rank, mfu;
} StepTime;

typedef struct {
    PlanLayout layout;
    PlanMemory mem;
    StepTime time;
    int fits;
} PlanResult;

// Human name of a layout, e.g. "dp2 tp2 sp pp2 1f1b cp1 z1 mbs1 M8 sel".
void plan_layout_name(const PlanLayout *l, char *buf, size_t n);

// Memory of the most loaded rank: femtotron's own fp32 allocation plan when
// p->hw.bytes_per_value == 4 (exact, plan/memory_rank.c), else the bf16
// mixed-precision model (plan/memory_model.c).
PlanMemory plan_memory(const PlanProblem *p, const PlanLayout *l);
// femtotron's own fp32 runs: the trainer's allocation plan, most loaded rank.
PlanMemory plan_memory_own(const PlanProblem *p, const PlanLayout *l);
// bf16 mixed precision (GPU) memory model; documented in memory_model.c.
PlanMemory plan_memory_mixed(const PlanProblem *p, const PlanLayout *l);
// Predicted step time (plan/step_time.c).
StepTime plan_step_time(const PlanProblem *p, const PlanLayout *l);
// Evaluate one layout.
PlanResult plan_evaluate(const PlanProblem *p, const PlanLayout *l);

// Every valid layout for the problem, evaluated and sorted: fitting ones first,
// fastest first. Returns the count; *out is malloc'ed (free it).
int plan_search(const PlanProblem *p, PlanResult **out);
// A sentence on why results[0] won (against the runner-up and the alternatives).
void plan_explain(const PlanProblem *p, const PlanResult *results, int n, char *buf, size_t size);

// Can layout l run? 1 if so; else 0 with the reason in why[n]. femtotron's own
// runs (p->base) are asked of the trainer's own validation (config_validate_layout,
// so plan never offers what train refuses, and its message is train's); GPU
// layouts obey Megatron's rules (kv heads may be replicated, tp within a node).
int plan_layout_check(const PlanProblem *p, const PlanLayout *l, char *why, size_t n);

// Config of femtotron's own run with layout l applied (p->base plus the layout's keys).
void plan_apply_layout(const PlanProblem *p, const PlanLayout *l, Config *out);

// Layers of each of the pp*v virtual stages, the split the trainer uses
// (balanced estimated cost, the first stage also paying the embedding, the last
// the head; engines/pipeline_schedule.c).
void plan_split(const PlanProblem *p, const PlanLayout *l, int *layers);

#endif
