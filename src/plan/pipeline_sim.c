// plan/pipeline_sim.c — replay the trainer's pipeline action lists with costs.
#include "plan/pipeline_sim.h"

#include <math.h>
#include <stdlib.h>

#include "parallel/pipeline_parallel.h"
#include "util.h"

// Time of the input of rank s's next action a (its dependency's end plus the
// message), or -1 while the dependency has not ended.
static double input_ready(const PpAction *a, int s, int P, int K, int M, const double *done_f,
                          const double *done_b, double send_s) {
    const int k = a->chunk * P + s, mb = a->micro;
    double t;
    if (a->forward) {
        if (k == 0) return 0.0;
        t = done_f[(size_t)(k - 1) * M + mb];
    } else if (k == K - 1) {
        return done_f[(size_t)k * M + mb];
    } else {
        t = done_b[(size_t)(k + 1) * M + mb];
    }
    return t < 0 ? -1.0 : t + send_s;
}

// An event-driven replay: time advances to the next end of an action or arrival
// of an input. Between events the n ranks that compute each progress at speed[n]
// nominal seconds per second (processor sharing; 1 without speed).
PipeSim pipeline_simulate(const char *sched, int P, int v, int M, const double *fwd,
                          const double *bwd, double send_s, const double *speed) {
    const int K = P * v;
    PpAction **acts = xmalloc(sizeof(PpAction *) * (size_t)P, "pipeline replay");  // (P) lists
    int *n = xmalloc(sizeof(int) * (size_t)P, "pipeline replay");                  // (P)
    int *next = xcalloc(sizeof(int) * (size_t)P, "pipeline replay");               // (P) next action
    int *running = xcalloc(sizeof(int) * (size_t)P, "pipeline replay");            // (P) 0/1
    double *left = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");         // (P) nominal s left
    double *busy = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");         // (P) nominal s
    double *wall = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");         // (P) s computing
    double *done_f = xmalloc(sizeof(double) * (size_t)K * M, "pipeline replay");   // (K, M) end times
    double *done_b = xmalloc(sizeof(double) * (size_t)K * M, "pipeline replay");   // (K, M)
    for (size_t i = 0; i < (size_t)K * M; i++) done_f[i] = done_b[i] = -1.0;
    for (int s = 0; s < P; s++) {
        acts[s] = xmalloc(sizeof(PpAction) * (size_t)(2 * M * v), "pipeline replay");
        n[s] = pp_schedule_actions(sched, M, P, s, v, acts[s]);
    }
    PipeSim r = {0.0, 0.0, 0.0, 0};
    double now = 0.0;
    for (;;) {
        // Start every action whose input has arrived; note the next arrival.
        int active = 0;
        double arrival = INFINITY;
        for (int s = 0; s < P; s++) {
            if (!running[s] && next[s] < n[s]) {
                const PpAction *a = &acts[s][next[s]];
                double t = input_ready(a, s, P, K, M, done_f, done_b, send_s);
                if (t >= 0 && t <= now) {
                    running[s] = 1;
                    left[s] = a->forward ? fwd[a->chunk * P + s] : bwd[a->chunk * P + s];
                    busy[s] += left[s];
                } else if (t > now && t < arrival) {
                    arrival = t;
                }
            }
            active += running[s];
        }
        if (active == 0 && arrival == INFINITY) break;  // done, or deadlocked (checked below)
        const double sp = speed ? speed[active] : 1.0;
        double step = arrival - now;  // wall seconds to the next event
        for (int s = 0; s < P; s++)
            if (running[s] && left[s] / sp < step) step = left[s] / sp;
        now += step;
        for (int s = 0; s < P; s++) {
            if (!running[s]) continue;
            wall[s] += step;
            left[s] -= step * sp;
            if (left[s] > 1e-12 * (1.0 + now)) continue;
            const PpAction *a = &acts[s][next[s]];
            (a->forward ? done_f : done_b)[(size_t)(a->chunk * P + s) * M + a->micro] = now;
            running[s] = 0;
            next[s]++;
            if (now > r.makespan) r.makespan = now;
        }
    }
    for (int s = 0; s < P; s++) {
        if (next[s] < n[s]) die("pipeline replay: schedule %s deadlocks at rank %d", sched, s);
        if (busy[s] > r.busy_max) {
            r.busy_max = busy[s];
            r.busy_wall = wall[s];
            r.busiest = s;
        }
        free(acts[s]);
    }
    free(acts);
    free(n);
    free(next);
    free(running);
    free(left);
    free(busy);
    free(wall);
    free(done_f);
    free(done_b);
    return r;
}

void pipeline_slots(const char *sched, int P, int v, int M, int s, int *slots) {
    PpAction *acts = xmalloc(sizeof(PpAction) * (size_t)(2 * M * v), "pipeline slots");  // (2Mv)
    int na = pp_schedule_actions(sched, M, P, s, v, acts);
    pp_count_slots(acts, na, v, slots);
    free(acts);
}
