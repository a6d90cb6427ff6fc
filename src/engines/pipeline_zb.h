// engines/pipeline_zb.h — the action lists of the zero-bubble schedules (zb-h1,
// zb-v) built from per-pass costs (Qi et al. 2023 schedule from profiled F, B, W
// times and the message time). Pure: no MPI, no buffer; engines/pipeline_schedule.c
// calls it for pp_schedule_actions, the planner through it.
//
// Determinism: every rank builds every rank's list from the same numbers (the
// config's parallel.pp_costs, or what the planner predicts) and keeps its own; the
// costs are first rounded to integer ticks (the largest pass = PP_COST_TICKS), so
// every time the builders compare is an exact integer in double arithmetic and no
// rounding can order two events differently on two ranks.
#ifndef FEMTOTRON_PIPELINE_ZB_H
#define FEMTOTRON_PIPELINE_ZB_H

#include "engines/pipeline_schedule.h"

#define PP_COST_TICKS 1000

// Every rank's list at once (lists[P], each room for PP_MAX_ACTIONS(M, v); n[P]
// lengths) under zb-h1 (v = 1) or zb-v (v = 2), scheduled for `costs` (NULL: equal
// F, I and W, no message time: the lists of the unit-time builders). Candidates,
// each replayed with the costs, the one with the shortest step kept (ties: the
// first listed, so unit costs keep the unit-time lists):
//   zb-h1: the handcrafted ZB-H1 list (pipeline_schedule.h), the greedy at unit
//          cost, at the given costs and at views of them (each stage's passes
//          equal; every stage the mean passes; no message time), with at most P
//          micro-batches in flight per rank (ZB-H1's and 1f1b's first stage's
//          activation memory);
//   zb-v:  the same greedies, at most 2P chunk-micro-batches per rank (the same
//          memory: P whole micro-batches).
// The greedy replays all ranks in time: a rank that can start something takes an
// I whose gradient has arrived (the chunk nearer the loss first), else a forward
// whose input has arrived while it holds fewer than the limit, else its oldest
// owed W (so W passes fill the waits); ties in time go to the lower rank. It only
// starts an action whose inputs exist in the replay, so the lists cannot deadlock
// whatever the real times. Returns the kept lists' replayed step in ticks.
double pp_zb_build(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n);

// lists[P], n[P] in: every rank's lists in use; out: the shortest under `costs`
// among them and pp_zb_build's candidates for `costs` that need no more memory on
// any rank (activation slots per chunk and together, weight-gradient stashes per
// chunk) than the lists in use, which win ties. Returns 1 when the lists changed.
// What parallel.pp_costs = "measure" runs once the passes are timed: the memory
// was planned for the lists in use and stays as it is.
int pp_zb_rebuild(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n);

// Step of lists[P] (n[P] long) replayed with `costs` (NULL: unit) on dedicated
// ranks, in ticks (the costs rounded as above); dies when the lists deadlock.
// busiest (or NULL): the largest rank's pass time in ticks (the step without a bubble).
double pp_zb_replay(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction *const *lists,
                    const int *n, double *busiest);

// The shape the FLOP-predicted costs need: hidden D, H query and KV key/value heads
// of hd, MLP of ffn_mats matrices (SwiGLU: 3) of width F, S tokens per sequence,
// vocabulary V.
typedef struct {
    int D, H, KV, hd, ffn_mats, F, S, V;
} PpShape;

// Predicted F, I, W FLOPs per token of each of K virtual stages holding layers[k]
// layers (stage 0 also the embedding, stage K-1 also the head): a layer's matrix
// products cost 2·params each way (forward, input gradient, weight gradient), its
// causal attention 2·S·H·hd forward and twice that backward, in I only (attention
// has no weights); the head 2·V·D each way. f, i, w: (K).
void pp_flop_costs(const PpShape *sh, int K, const int *layers, double *f, double *i, double *w);

// The costs `spec` (parallel.pp_costs, validated by config_validate) asks for:
// "unit" -> 0 (use NULL), "flops" or "measure" (its first lists) -> pp_flop_costs,
// else K triples "f:i:w" in any one unit (e.g. measured milliseconds) -> f, i, w
// (K each); returns 1 then.
int pp_costs_of_spec(const char *spec, const PpShape *sh, int K, const int *layers, double *f, double *i,
                     double *w);

#endif
