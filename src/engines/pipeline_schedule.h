// engines/pipeline_schedule.h — the pure half of pipeline parallelism (no MPI, no
// buffer): how the model's layers are cut into stages and what each pipeline rank
// does, in order, during one step. The executor (engines/pipeline.c) runs these
// action lists; the planner (plan/pipeline_sim.c) replays the very same lists to
// predict the bubble, so the two cannot drift apart.
//
// The model's units (embedding, layers, final norm + head) are cut into P * v
// contiguous chunks ("virtual stages"); chunk c of pipeline rank s is virtual stage
// c * P + s (Narayanan et al. 2021), so with v = 1 rank s simply holds stage s;
// under zb-v (v = 2) rank s holds stages s and 2P - 1 - s, a V: the forward goes
// down the ranks and back up, and rank 0 holds both the embedding and the head.
// The first virtual stage owns the embedding, the last the final norm, head and loss.
// A step is a list of actions per rank on (chunk, micro-batch) for M micro-batches:
// a forward F, a backward B, or (zero-bubble schedules) the backward split in two,
// its input-gradient half I (what the previous stage waits for) and its
// weight-gradient half W (what nobody waits for; model/llama.h). The schedules
// (parallel.pp_schedule, config.h: PpSchedule):
//   afab        all forwards, then all backwards (GPipe)
//   1f1b        P - s - 1 warm-up forwards, then one forward / one backward, then
//               the remaining backwards: at most P micro-batches in flight
//   interleaved 1f1b over v chunks per rank (M a multiple of P), as Megatron-LM
//   zb-h1       1f1b with every backward split into I and W, and rank s's W passes
//               each s places late (Qi et al. 2023, "Zero Bubble Pipeline
//               Parallelism", ZB-H1): the I passes run back down the pipeline
//               without waiting for weight gradients, and the late W passes fill
//               what were 1f1b's cool-down bubbles. At most P micro-batches in
//               flight (forwarded, W not yet run) on every rank; with F, I and W
//               times TF, TB, TW per stage the bubble is (P-1)(TF + TB - TW)
//               against 1f1b's (P-1)(TF + TB + TW): a third of it when equal.
//   zb-v        two chunks per rank in a V (above), backwards split into I and W,
//               the list of every rank made by a greedy replay (Qi et al. 2023,
//               ZB-V): each rank runs, as soon as it can, an I if one is ready,
//               else a forward if it holds fewer than 2P chunk-micro-batches
//               (1f1b's first stage: P whole micro-batches), else an owed W. The
//               bubble is near zero (a few chunk passes).
// The zero-bubble lists are built for per-pass costs (PpCosts below; equal costs
// when none are given): engines/pipeline_zb.h says how.
#ifndef FEMTOTRON_PIPELINE_SCHEDULE_H
#define FEMTOTRON_PIPELINE_SCHEDULE_H

#include "config.h"

typedef enum {
    PP_OP_F,  // forward
    PP_OP_B,  // backward (fused: input and weight gradients)
    PP_OP_I,  // input-gradient half of a split backward
    PP_OP_W,  // weight-gradient half of a split backward (after its I)
} PpOp;

typedef struct {
    PpOp op;
    int chunk;    // local chunk index (0 .. v-1)
    int micro;    // micro-batch index in the step
} PpAction;

// Per-pass costs of each virtual stage k (K = P * v entries each, in any one unit:
// seconds, FLOPs, ticks), what the zero-bubble builders schedule with: f[k] a
// micro-batch's forward, i[k] its input-gradient half I (the whole backward less
// w[k]), w[k] its weight-gradient half W; send the time of one message between
// neighbouring stages on different ranks. Every rank must pass the same numbers
// (the config's or the planner's, never a rank-local timing): every rank builds
// every rank's list and keeps its own.
typedef struct {
    const double *f, *i, *w;  // (K) each
    double send;
} PpCosts;

// Room an action list needs: 3 actions per (chunk, micro-batch) at most.
#define PP_MAX_ACTIONS(M, v) (3 * (M) * (v))

// The balance criterion of the default split: estimated training FLOPs per token
// of one decoder layer of width D, H/KV heads of hd, an MLP of ffn_mats matrices
// (3: SwiGLU, 2: GPT's fc1/fc2) of width F, at sequence length S.
double pp_layer_cost(int D, int H, int KV, int hd, int ffn_mats, int F, int S);
// Layers of each of K virtual stages, minimising the costliest stage when every
// layer costs `layer` (pp_layer_cost), stage 0 also the embedding lookup and the
// last stage also the head of a vocabulary of V: layers(K).
void pp_balanced_split(int L, double layer, int D, int V, int K, int *layers);
// parallel.pp_layers ("3,1,..."; validated by config_validate) -> layers(K).
void pp_parse_layers(const char *spec, int K, int *layers);
// The action list of pipeline rank s (of P, v chunks each) for M micro-batches
// under `sched`, written to out (room for PP_MAX_ACTIONS(M, v)); returns its length.
// costs (or NULL: equal) shape the zero-bubble lists only.
int pp_schedule_actions(PpSchedule sched, int M, int P, int s, int v, const PpCosts *costs, PpAction *out);
// Every rank's list at once: lists[P] (each room for PP_MAX_ACTIONS(M, v)), n[P].
void pp_schedule_all(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n);
// ZB-H1's handcrafted list of rank s (Qi et al. 2023; engines/pipeline_zb.c may
// prefer a greedy one for unequal costs); returns its length.
int pp_zb_h1_handcrafted(int M, int P, int s, PpAction *out);
// slots(v): most micro-batches of chunk c in flight at once in actions(n) (from
// its F to its B or W; at least 1): the activation slots the chunk needs.
void pp_count_slots(const PpAction *actions, int n, int v, int *slots);
// Most chunk-micro-batches in flight at once over all chunks together (at least 1):
// the slots one pool shared by the chunks needs.
int pp_count_joint_slots(const PpAction *actions, int n);
// stash(v): most micro-batches of chunk c between their I and their W at once
// (0 without split backwards): the weight-gradient stashes the chunk needs.
void pp_count_stash(const PpAction *actions, int n, int v, int *stash);
// Whether a schedule splits its backwards into I and W.
int pp_schedule_splits(PpSchedule sched);
// Virtual stage of chunk c of pipeline rank s (of P), the pipeline rank holding
// virtual stage k, and that rank's chunk index of it.
int pp_virtual_of(PpSchedule sched, int P, int s, int c);
int pp_rank_of_virtual(PpSchedule sched, int P, int k);
int pp_chunk_of_virtual(PpSchedule sched, int P, int k);

#endif
