// parallel/pipeline_parallel.h — consecutive layers on consecutive pp ranks.
//
// The model's units (embedding, layers, final norm + head) are cut into pp * v
// contiguous chunks ("virtual stages"); chunk c of pp rank s is virtual stage
// c * pp + s (Narayanan et al. 2021), so with v = 1 rank s simply holds stage s.
// The first virtual stage owns the embedding, the last the final norm, head and loss.
// A step is a list of actions per rank, forward or backward of (chunk, micro-batch):
//   afab        all forwards, then all backwards (GPipe)
//   1f1b        pp - s - 1 warm-up forwards, then one forward / one backward, then
//               the remaining backwards: at most pp micro-batches in flight
//   interleaved 1f1b over v chunks per rank (micro-batches a multiple of pp)
// Activations travel forward and their gradients backward by non-blocking
// point-to-point messages, each receive posted one action ahead.
#ifndef FEMTOTRON_PIPELINE_PARALLEL_H
#define FEMTOTRON_PIPELINE_PARALLEL_H

#include <stdint.h>

#include "config.h"
#include "dist/comm.h"
#include "model/llama.h"
#include "util.h"

typedef struct {
    int forward;  // 1 forward, 0 backward
    int chunk;    // local chunk index (0 .. v-1)
    int micro;    // micro-batch index in the step
} PpAction;

typedef struct {
    int pp, stage, v, n_virtual;  // ranks, this rank's index, chunks per rank, pp * v
    StageUnits *virt_units;       // (n_virtual) units of every virtual stage
    int *held;                    // (n_units) 1 for the units this rank holds
    int micros;                   // micro-batches per step (M)
    int B, S;                     // sequences per micro-batch, this rank's tokens of each (seq_length / cp)
    int n_actions;
    PpAction *actions;            // (n_actions) this rank's step
    // Activation slots: chunk c has n_slots[c] micro-batches in flight at most.
    int *n_slots;                 // (v)
    Activations **acts;           // (v) arrays of n_slots[c]
    int *slot_of;                 // (v * M) slot holding (chunk, micro), -1 when free
    int **slot_busy;              // (v) arrays of n_slots[c]
    int32_t **tokens, **targets;  // (v) arrays of n_slots[c] * (B*S)
    float **grad_send;            // (v) arrays of n_slots[c] * (B*S, D) outgoing input-gradients (empty on virtual stage 0)
    float **grad_recv;            // (v) arrays of n_slots[c] * (B*S, D) incoming output-gradients (empty on the last)
    CommRequest *act_send, *grad_send_req, *recv_req;  // (v * max slots) each
    int max_slots;
} Pipeline;

// The balance criterion of the default split: estimated training FLOPs per token
// of one decoder layer of width D, H/KV heads of hd, an MLP of ffn_mats matrices
// (3: SwiGLU, 2: GPT's fc1/fc2) of width F, at sequence length S.
double pp_layer_cost(int D, int H, int KV, int hd, int ffn_mats, int F, int S);
// Layers of each of K virtual stages, minimising the costliest stage when every
// layer costs `layer` (pp_layer_cost), stage 0 also the embedding lookup and the
// last stage also the head of a vocabulary of V.
void pp_balanced_split(int L, double layer, int D, int V, int K, int *layers);
// parallel.pp_layers ("3,1,..."; validated by config_validate) -> layers (K).
void pp_parse_layers(const char *spec, int K, int *layers);
// The action list of pipeline rank s (of P, v chunks each) for M micro-batches
// under schedule `name`, written to out (room for 2*M*v); returns its length.
int pp_schedule_actions(const char *name, int M, int P, int s, int v, PpAction *out);
// slots[c] (c < v): most micro-batches of chunk c in flight at once in `actions`
// (at least 1): the activation slots the chunk needs.
void pp_count_slots(const PpAction *actions, int n, int v, int *slots);

// Split the model over the pipeline and plan this rank's schedule and buffers:
// pp_plan for this rank's stage of the grid, then pp_buffers(pp, m, cfg, NULL).
void pp_init(Pipeline *pp, const LlamaModel *m, const Config *cfg);
void pp_free(Pipeline *pp);  // also frees a pp_plan-only pipeline

// The pure plan of pipeline rank `stage` of cfg->parallel.pp (no MPI, no planned
// buffer): split, schedule, slot counts and the bookkeeping tables.
void pp_plan(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage);
// The planned buffers of a planned pipeline: every slot's activations, token and
// target slots (MEM_ACTIVATIONS), gradient send/receive messages (MEM_COMM);
// allocated when plan_only is NULL, else only added up into *plan_only.
void pp_buffers(Pipeline *pp, const LlamaModel *m, const Config *cfg, MemTally *plan_only);

// Virtual stage of local chunk c, and whether it is the first / last of the model.
int pp_virtual_stage(const Pipeline *pp, int c);

// The per-step callbacks the executor needs from the trainer.
typedef struct {
    void *ctx;
    // Fill tokens/targets (B*S each) of micro-batch `micro` of the current step.
    void (*fill_batch)(void *ctx, int micro, int32_t *tokens, int32_t *targets);
    // Trace hook: an event [t0, t1) named `what` for (chunk, micro); may be NULL.
    void (*trace)(void *ctx, const char *what, int chunk, int micro, double t0, double t1);
} PpCallbacks;

// Run one step's forwards and backwards; returns the sum of the cross-entropy over
// this rank's last-stage micro-batches (0 elsewhere).
double pp_run_step(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa, const PpCallbacks *cb,
                   float grad_scale);
// Forward only over `micros` micro-batches (validation); returns the loss sum on
// the last stage, 0 elsewhere.
double pp_run_forward(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa,
                      const PpCallbacks *cb, int micros);

#endif
