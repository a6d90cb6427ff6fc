// engines/pipeline.h — the pipeline engine: consecutive layers on consecutive pp
// ranks. It plans a rank's stage(s) (the split and the schedule come from
// engines/pipeline_schedule.h), owns every activation slot and pipeline message
// buffer, and runs a step's action list, driving the model's stage forward and
// backward (model/llama.h). Activations travel forward and their gradients backward
// by non-blocking point-to-point messages (dist/comm.h, GROUP_PP), each receive
// posted one action ahead.
// Shapes: B sequences per micro-batch, S this rank's tokens of each, Nr rows of the
// residual stream held here (B*S / tp with sequence parallel, else B*S), D hidden;
// M micro-batches per step, P pipeline ranks, v chunks per rank, ns = n_slots[c].
#ifndef FEMTOTRON_PIPELINE_PARALLEL_H
#define FEMTOTRON_PIPELINE_PARALLEL_H

#include <stdint.h>

#include "config.h"
#include "dist/comm.h"
#include "engines/pipeline_schedule.h"
#include "model/activations.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "util.h"

typedef struct {
    int pp, stage, v, n_virtual;  // ranks, this rank's index, chunks per rank, pp * v
    PpSchedule sched;             // which chunk is which virtual stage (pipeline_schedule.h)
    StageUnits *virt_units;       // (n_virtual) units of every virtual stage
    int *held;                    // (n_units) 1 for the units this rank holds, 2 for the
                                  // tied embedding held as the last stage's head copy
    int micros;                   // micro-batches per step (M)
    int B, S;                     // sequences per micro-batch, this rank's tokens of each (seq_length / cp)
    int rows;                     // Nr: rows of the residual stream held here (llama_rows of B*S)
    int n_actions;
    PpAction *actions;            // (n_actions) this rank's step
    // Zero-bubble schedules: the bubble (idle / busiest rank's pass time) of the
    // lists kept and of the unit-time lists, both replayed with parallel.pp_costs.
    double zb_bubble, zb_unit_bubble;
    PpAction *all_actions;        // (2, pp, 3*M*v): [0] every rank's list (zero-bubble schedules; rebuilt together)
    int *all_n;                   // (2, pp): [0] their lengths
    double *pass_s;               // (v, 3) seconds of this rank's F, I (or B), W passes per chunk in the last step
    int *pass_n;                  // (v, 3) how many
    // 1: the pass timers wait for the device at each pass's start and end, so that
    // on a GPU (whose ops return before they finish) they time the passes' kernels,
    // not their launches; the trainer sets it for the step parallel.pp_costs =
    // "measure" reads and while a trace is written. 0: no waits (no cost on a CPU).
    int time_passes;
    // Activation slots: chunk c has n_slots[c] micro-batches in flight at most. With
    // several chunks per rank the chunks may instead share one pool of as many slots
    // as they hold at once together (pooled; pp_init takes it when it costs fewer
    // bytes): then every n_slots[c] is the pool's size and acts[c], slot_busy[c],
    // tokens[c], targets[c], grad_send[c], grad_recv[c] are the pool's, the same for
    // every c, each slot sized for the largest chunk and shaped for the chunk that
    // takes it (activations_reshape).
    int pooled;
    int *slot_chunk;              // (n_slots[0]) pooled: the chunk each slot is shaped for
    int *n_slots;                 // (v)
    Activations **acts;           // (v) arrays of n_slots[c]
    int *slot_of;                 // (v * M) slot holding (chunk, micro), -1 when free
    int **slot_busy;              // (v) arrays of n_slots[c]
    // Weight-gradient stashes (split backwards, zero-bubble schedules): chunk c has
    // n_stash[c] micro-batches between their I and their W at most (0 otherwise).
    int *n_stash;                 // (v)
    WeightGradStash **stash;      // (v) arrays of n_stash[c]
    int *stash_of;                // (v * M) stash holding (chunk, micro), -1 when none
    int **stash_busy;             // (v) arrays of n_stash[c]
    int32_t **tokens, **targets;  // (v) arrays of (ns, B*S)
    // Token ids, written by the host here first (ops_host_alloc, not planned; NULL
    // on a rank with neither end of the model) and copied into the micro-batch's
    // slot by a queued upload (ops.h), so that the host never waits for the slot's
    // previous micro-batch to finish reading it. A training step's micro-batch m
    // uses row m, free again at the next step: every step ends with a host wait
    // (its scalars read back, train/trainer.c); validation's micro-batch m row
    // m % M, after a wait whenever it comes back to row 0.
    int32_t *stage_tokens, *stage_targets;  // (M, B*S) each
    // Gradient messages: (v) arrays of (ns, Nr, D) used, each slot at stride Nr*D, in an
    // allocation of (ns, B*S, D): tp times what is used under sequence parallelism,
    // kept as is so that every memory figure stays what it was (docs/DESIGN.md,
    // "Memory plan").
    float **grad_send;            // outgoing input-gradients (empty on virtual stage 0)
    float **grad_recv;            // incoming output-gradients (empty on the last)
    CommRequest *act_send, *grad_send_req, *recv_req;  // (v * max slots) each
    // Mixture of experts with the load-balancing loss (model/moe.h): a micro-batch's
    // (B, E) statistics follow its activations forward (tag MOE_TAG + 2k), and the
    // loss's gradient per probability follows its gradients back (MOE_TAG + 2k + 1).
    CommRequest *stats_send, *aux_send;                // (v * max slots) each
    int max_slots;
    double moe_aux;               // after pp_run_step: the sum of the training forwards' a->moe_aux
                                  // (load-balancing losses of this rank's sequences; model/moe.h)
    double moe_ep_s;              // after pp_run_step: seconds this rank spent in expert-parallel
                                  // dispatch and combine during the step
} Pipeline;

// The plan of pipeline rank `stage` of cfg->parallel.pp, then its planned buffers:
// every slot's activations, token and target slots (MEM_ACTIVATIONS), gradient
// send/receive messages (MEM_COMM), allocated when plan_only is NULL, else only
// added up into *plan_only (the planner: nothing allocated but bookkeeping).
void pp_init(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage, MemTally *plan_only);
void pp_free(Pipeline *pp);

// Virtual stage of local chunk c, and whether it is the first / last of the model.
int pp_virtual_stage(const Pipeline *pp, int c);

// Open the links of the messages this rank's stage(s) send and receive (dist/comm.h:
// group_open_links, over NCCL where the pp group's collectives go): an activation
// and a gradient link per pair of neighbouring virtual stages on different ranks,
// and the load-balancing statistics' when the model has them. Collective over the
// pp group, before the first step (engines/rank.c).
void pp_open_links(const Pipeline *pp, const LlamaModel *m);

// The per-step callbacks the executor needs from the trainer: the second upward
// edge of the layering (docs/DESIGN.md, "Layers"). The engine declares them, the
// trainer implements them: the engine knows when a micro-batch's tokens are needed,
// the trainer which sequences they are (invariant 1: data order by global sample index).
typedef struct {
    void *ctx;
    // Fill tokens/targets (B*S each: this rank's tokens of the micro-batch's sequences)
    // of micro-batch `micro` of the current step.
    void (*fill_batch)(void *ctx, int micro, int32_t *tokens, int32_t *targets);
    // Trace hook: an event [t0, t1) named `what` for (chunk, micro); may be NULL.
    void (*trace)(void *ctx, const char *what, int chunk, int micro, double t0, double t1);
} PpCallbacks;

// parallel.pp_costs = "measure", after a training step, on every rank at once
// (collective over the world): each virtual stage's mean F, I, W of that step,
// the largest over the ranks holding it (every rank then has the same numbers),
// and the zero-bubble lists rebuilt for them within the planned memory
// (engines/pipeline_zb.h: pp_zb_rebuild). costs_ms (3 * pp * v: F of every
// virtual stage, then I, then W) receives the agreed costs; returns 1 when the
// lists changed, and the replayed bubbles under those costs before and after.
int pp_adopt_measured_costs(Pipeline *pp, double *costs_ms, double *bubble_before, double *bubble_after);

// Run one step's actions (forwards, backwards, split backwards' halves). The
// cross-entropy of this rank's last-stage micro-batches is added to *loss_sum, a
// planned buffer of one double (ops.h: summed on the device, not read back per
// micro-batch; nothing added elsewhere); returns the part of the loss known on the
// host, their load-balancing losses (model/llama.h), 0 without. The caller reads
// *loss_sum back after the step: its token staging is free again once it has waited.
double pp_run_step(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa, const PpCallbacks *cb,
                   float grad_scale, double *loss_sum);
// Forward only over `micros` micro-batches (validation): their cross-entropy added
// to *loss_sum on the last stage, nothing elsewhere.
void pp_run_forward(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa, const PpCallbacks *cb,
                    int micros, double *loss_sum);

#endif
