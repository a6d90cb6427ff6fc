// engines/pipeline_schedule.h — the pure half of pipeline parallelism (no MPI, no
// buffer): how the model's layers are cut into stages and what each pipeline rank
// does, in order, during one step. The executor (engines/pipeline.c) runs these
// action lists; the planner (plan/pipeline_sim.c) replays the very same lists to
// predict the bubble, so the two cannot drift apart.
//
// The model's units (embedding, layers, final norm + head) are cut into P * v
// contiguous chunks ("virtual stages"); chunk c of pipeline rank s is virtual stage
// c * P + s (Narayanan et al. 2021), so with v = 1 rank s simply holds stage s.
// The first virtual stage owns the embedding, the last the final norm, head and loss.
// A step is a list of actions per rank, forward or backward of (chunk, micro-batch)
// for M micro-batches (parallel.pp_schedule, config.h: PpSchedule):
//   afab        all forwards, then all backwards (GPipe)
//   1f1b        P - s - 1 warm-up forwards, then one forward / one backward, then
//               the remaining backwards: at most P micro-batches in flight
//   interleaved 1f1b over v chunks per rank (M a multiple of P), as Megatron-LM
#ifndef FEMTOTRON_PIPELINE_SCHEDULE_H
#define FEMTOTRON_PIPELINE_SCHEDULE_H

#include "config.h"

typedef struct {
    int forward;  // 1 forward, 0 backward
    int chunk;    // local chunk index (0 .. v-1)
    int micro;    // micro-batch index in the step
} PpAction;

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
// under `sched`, written to out (room for 2*M*v); returns its length.
int pp_schedule_actions(PpSchedule sched, int M, int P, int s, int v, PpAction *out);
// slots(v): most micro-batches of chunk c in flight at once in actions(n) (at
// least 1): the activation slots the chunk needs.
void pp_count_slots(const PpAction *actions, int n, int v, int *slots);

#endif
