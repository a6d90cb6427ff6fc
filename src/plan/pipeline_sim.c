// plan/pipeline_sim.c — replay the trainer's pipeline action lists with costs.
#include "plan/pipeline_sim.h"

#include <math.h>
#include <stdlib.h>

#include "engines/pipeline_schedule.h"
#include "util.h"

// Time of the input of rank s's next action a (its dependency's end plus the
// message), or -1 while the dependency has not ended.
static double input_ready(PpSchedule sched, const PpAction *a, int s, int P, int K, int M,
                          const double *done_f, const double *done_b, double send_s) {
    const int k = pp_virtual_of(sched, P, s, a->chunk), mb = a->micro;
    double t;
    if (a->op == PP_OP_W) return done_b[(size_t)k * M + mb];  // its own I, earlier on this rank: no message
    if (a->op == PP_OP_F) {
        if (k == 0) return 0.0;
        t = done_f[(size_t)(k - 1) * M + mb];
        if (t >= 0 && pp_rank_of_virtual(sched, P, k - 1) == s) return t;  // same rank: no message
    } else if (k == K - 1) {
        return done_f[(size_t)k * M + mb];
    } else {
        t = done_b[(size_t)(k + 1) * M + mb];
        if (t >= 0 && pp_rank_of_virtual(sched, P, k + 1) == s) return t;
    }
    return t < 0 ? -1.0 : t + send_s;
}

// The replay's state: every rank's action list, its progress, and the end time
// of every (virtual stage, micro-batch) forward and backward.
typedef struct {
    PpSchedule sched;
    int P, v, M, K;
    const double *fwd, *bwd, *wgt;
    double send_s;
    PpAction **acts;  // (P) lists
    int *n;           // (P) actions per rank
    int *next;        // (P) next action
    double *busy;     // (P) nominal s of actions
    double *wall;     // (P) wall s computing
    double *done_f;   // (K, M) end times, -1 before
    double *done_b;   // (K, M)
    double *done_w;   // (K, M)
} Replay;

// Seconds of an action: a split backward's I is the backward less its weight
// gradients (wgt, or half the backward when not given), its W the rest.
static double action_s(const Replay *r, const PpAction *a, int s) {
    const int k = pp_virtual_of(r->sched, r->P, s, a->chunk);
    const double w = r->wgt ? r->wgt[k] : 0.5 * r->bwd[k];
    switch (a->op) {
    case PP_OP_F: return r->fwd[k];
    case PP_OP_B: return r->bwd[k];
    case PP_OP_I: return r->bwd[k] - w;
    default: return w;
    }
}
// Where an action's end time is recorded: forwards in done_f, B and I (what the
// previous stage waits for) in done_b, W in done_w (only its own rank follows it).
static double *done_slot(Replay *r, const PpAction *a, int s) {
    double *t = a->op == PP_OP_F ? r->done_f : a->op == PP_OP_W ? r->done_w : r->done_b;
    return &t[(size_t)pp_virtual_of(r->sched, r->P, s, a->chunk) * r->M + a->micro];
}
static double ready_at(const Replay *r, const PpAction *a, int s) {
    return input_ready(r->sched, a, s, r->P, r->K, r->M, r->done_f, r->done_b, r->send_s);
}

// Dedicated devices: sweep the ranks, running every action whose input is known
// at max(input, rank free), until all ran. Returns the makespan.
static double replay_dedicated(Replay *r) {
    double *free_at = xcalloc(sizeof(double) * (size_t)r->P, "pipeline replay");  // (P)
    double makespan = 0.0;
    for (int progressed = 1; progressed;) {
        progressed = 0;
        for (int s = 0; s < r->P; s++)
            while (r->next[s] < r->n[s]) {
                const PpAction *a = &r->acts[s][r->next[s]];
                double ready = ready_at(r, a, s);
                if (ready < 0) break;
                double dur = action_s(r, a, s);
                free_at[s] = (ready > free_at[s] ? ready : free_at[s]) + dur;
                r->busy[s] += dur;
                r->wall[s] += dur;
                *done_slot(r, a, s) = free_at[s];
                if (free_at[s] > makespan) makespan = free_at[s];
                r->next[s]++;
                progressed = 1;
            }
    }
    free(free_at);
    return makespan;
}

// Shared cores: event-driven, time advancing to the next end of an action or
// arrival of an input; between events the n ranks that compute each progress at
// speed[n] nominal seconds per wall second (processor sharing). Returns the makespan.
static double replay_shared(Replay *r, const double *speed) {
    int *running = xcalloc(sizeof(int) * (size_t)r->P, "pipeline replay");     // (P) 0/1
    double *left = xcalloc(sizeof(double) * (size_t)r->P, "pipeline replay");  // (P) nominal s left
    double now = 0.0, makespan = 0.0;
    for (;;) {
        // Start every action whose input has arrived; note the next arrival.
        int active = 0;
        double arrival = INFINITY;
        for (int s = 0; s < r->P; s++) {
            if (!running[s] && r->next[s] < r->n[s]) {
                const PpAction *a = &r->acts[s][r->next[s]];
                double t = ready_at(r, a, s);
                if (t >= 0 && t <= now) {
                    running[s] = 1;
                    left[s] = action_s(r, a, s);
                    r->busy[s] += left[s];
                } else if (t > now && t < arrival) {
                    arrival = t;
                }
            }
            active += running[s];
        }
        if (active == 0 && arrival == INFINITY) break;  // done, or deadlocked (checked by the caller)
        const double sp = speed[active];
        double step = arrival - now;  // wall seconds to the next event
        for (int s = 0; s < r->P; s++)
            if (running[s] && left[s] / sp < step) step = left[s] / sp;
        now += step;
        for (int s = 0; s < r->P; s++) {
            if (!running[s]) continue;
            r->wall[s] += step;
            left[s] -= step * sp;
            if (left[s] > 1e-12 * (1.0 + now)) continue;
            *done_slot(r, &r->acts[s][r->next[s]], s) = now;
            running[s] = 0;
            r->next[s]++;
            makespan = now;
        }
    }
    free(running);
    free(left);
    return makespan;
}

PipeSim pipeline_simulate(PpSchedule sched, int P, int v, int M, const double *fwd,
                          const double *bwd, const double *wgt, double send_s, const double *speed) {
    Replay r = {sched, P, v, M, P * v, fwd, bwd, wgt, send_s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    r.acts = xmalloc(sizeof(PpAction *) * (size_t)P, "pipeline replay");
    r.n = xmalloc(sizeof(int) * (size_t)P, "pipeline replay");
    r.next = xcalloc(sizeof(int) * (size_t)P, "pipeline replay");
    r.busy = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");
    r.wall = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");
    r.done_f = xmalloc(sizeof(double) * (size_t)r.K * M, "pipeline replay");
    r.done_b = xmalloc(sizeof(double) * (size_t)r.K * M, "pipeline replay");
    r.done_w = xmalloc(sizeof(double) * (size_t)r.K * M, "pipeline replay");
    for (size_t i = 0; i < (size_t)r.K * M; i++) r.done_f[i] = r.done_b[i] = r.done_w[i] = -1.0;
    for (int s = 0; s < P; s++) r.acts[s] = xmalloc(sizeof(PpAction) * (size_t)PP_MAX_ACTIONS(M, v), "pipeline replay");
    // The zero-bubble lists are built for the costs replayed here (the planner's
    // predicted passes: what parallel.pp_costs given these numbers would run).
    double *iw = xmalloc(sizeof(double) * 2 * (size_t)r.K, "pipeline replay");  // (2, K): I and W per stage
    for (int k = 0; k < r.K; k++) {
        iw[r.K + k] = wgt ? wgt[k] : 0.5 * bwd[k];
        iw[k] = bwd[k] - iw[r.K + k];
    }
    int positive = 1;
    for (int k = 0; k < r.K; k++) positive &= fwd[k] > 0 && iw[k] > 0 && iw[r.K + k] > 0;
    const PpCosts costs = {fwd, iw, iw + r.K, send_s};
    pp_schedule_all(sched, M, P, v, positive ? &costs : NULL, r.acts, r.n);
    free(iw);
    PipeSim out = {speed ? replay_shared(&r, speed) : replay_dedicated(&r), 0.0, 0.0, 0};
    for (int s = 0; s < P; s++) {
        if (r.next[s] < r.n[s]) die("pipeline replay: schedule %s deadlocks at rank %d", pp_schedule_name(sched), s);
        if (r.busy[s] > out.busy_max) {
            out.busy_max = r.busy[s];
            out.busy_wall = r.wall[s];
            out.busiest = s;
        }
        free(r.acts[s]);
    }
    free(r.acts);
    free(r.n);
    free(r.next);
    free(r.busy);
    free(r.wall);
    free(r.done_f);
    free(r.done_b);
    free(r.done_w);
    return out;
}

void pipeline_slots(PpSchedule sched, int P, int v, int M, int s, const PpCosts *costs, int *slots) {
    PpAction *acts = xmalloc(sizeof(PpAction) * (size_t)PP_MAX_ACTIONS(M, v), "pipeline slots");  // (3Mv)
    int na = pp_schedule_actions(sched, M, P, s, v, costs, acts);
    pp_count_slots(acts, na, v, slots);
    free(acts);
}
