// plan/pipeline_sim.h — critical-path replay of a pipeline schedule.
//
// Each pipeline rank runs its action list (engines/pipeline_schedule.c builds
// it: the same lists the trainer executes) one action at a time; a forward of
// virtual stage k waits for the forward of stage k-1 plus the send time, a
// backward (or a split backward's input half I) for that of stage k+1 (or its own
// forward on the last stage), a split backward's weight half W for its own I.
// The replay gives the step's makespan, each rank's busy time and, from the
// action lists, the micro-batches each chunk holds at once (activation slots).
// Ranks that share processors (more ranks x threads than cores) are replayed with
// processor sharing: while n of the P ranks compute, each runs at speed[n] times
// its nominal rate, so a rank that computes alone in a bubble finishes sooner.
#ifndef FEMTOTRON_PIPELINE_SIM_H
#define FEMTOTRON_PIPELINE_SIM_H

#include "config.h"
#include "engines/pipeline_schedule.h"

typedef struct {
    double makespan;       // s from the first forward to the last backward
    double busy_max;       // busiest rank's action time (nominal)
    double busy_wall;      // wall seconds the busiest rank computed (= busy_max without sharing)
    int busiest;           // its pipeline rank
} PipeSim;

// P ranks, v chunks each, M micro-batches, schedule `sched`. fwd[k], bwd[k]: seconds of one micro-batch's forward/backward on
// virtual stage k (P*v entries; the schedule says which rank holds k); wgt[k] (or NULL: half of bwd[k]): the part of
// bwd[k] that is weight gradients, the W of a split backward (zero-bubble
// schedules: its I takes bwd[k] - wgt[k]); send_s: seconds of one activation (or gradient)
// message between neighbouring stages; speed (P+1 entries, or NULL for 1): the
// rate factor of each computing rank while speed's index of them compute. Busy
// times stay nominal (fwd/bwd sums). The zero-bubble schedules' lists are built for
// these costs (fwd, bwd - wgt, wgt, send_s: engines/pipeline_zb.h), as the trainer
// builds them for parallel.pp_costs.
PipeSim pipeline_simulate(PpSchedule sched, int P, int v, int M, const double *fwd,
                          const double *bwd, const double *wgt, double send_s, const double *speed);

// Most micro-batches chunk c of pipeline rank s holds at once under the schedule
// (what the trainer allocates activation slots for): slots[c] for c < v; costs
// (or NULL) as the trainer's (engines/pipeline_schedule.h: PpCosts).
void pipeline_slots(PpSchedule sched, int P, int v, int M, int s, const PpCosts *costs, int *slots);

#endif
