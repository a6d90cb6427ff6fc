// plan/pipeline_sim.c — replay the trainer's pipeline action lists with costs.
#include "plan/pipeline_sim.h"

#include <stdlib.h>

#include "parallel/pipeline_parallel.h"
#include "util.h"

PipeSim pipeline_simulate(const char *sched, int P, int v, int M, const double *fwd,
                          const double *bwd, double send_s) {
    const int K = P * v;
    PpAction **acts = xmalloc(sizeof(PpAction *) * (size_t)P, "pipeline replay");  // (P) lists
    int *n = xmalloc(sizeof(int) * (size_t)P, "pipeline replay");                  // (P)
    int *next = xcalloc(sizeof(int) * (size_t)P, "pipeline replay");               // (P) next action
    double *free_at = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");      // (P)
    double *busy = xcalloc(sizeof(double) * (size_t)P, "pipeline replay");         // (P)
    double *done_f = xmalloc(sizeof(double) * (size_t)K * M, "pipeline replay");   // (K, M) end times
    double *done_b = xmalloc(sizeof(double) * (size_t)K * M, "pipeline replay");   // (K, M)
    for (size_t i = 0; i < (size_t)K * M; i++) done_f[i] = done_b[i] = -1.0;
    for (int s = 0; s < P; s++) {
        acts[s] = xmalloc(sizeof(PpAction) * (size_t)(2 * M * v), "pipeline replay");
        n[s] = pp_schedule_actions(sched, M, P, s, v, acts[s]);
    }
    // Sweep the ranks, running every action whose input is known, until all ran.
    for (int progressed = 1; progressed;) {
        progressed = 0;
        for (int s = 0; s < P; s++) {
            while (next[s] < n[s]) {
                const PpAction *a = &acts[s][next[s]];
                const int k = a->chunk * P + s, mb = a->micro;
                double ready;
                if (a->forward) {
                    ready = k == 0 ? 0.0 : done_f[(size_t)(k - 1) * M + mb];
                    if (ready < 0) break;
                    if (k > 0) ready += send_s;
                } else if (k == K - 1) {
                    ready = done_f[(size_t)k * M + mb];
                    if (ready < 0) break;
                } else {
                    ready = done_b[(size_t)(k + 1) * M + mb];
                    if (ready < 0) break;
                    ready += send_s;
                }
                double start = ready > free_at[s] ? ready : free_at[s];
                double dur = a->forward ? fwd[k] : bwd[k];
                free_at[s] = start + dur;
                busy[s] += dur;
                (a->forward ? done_f : done_b)[(size_t)k * M + mb] = free_at[s];
                next[s]++;
                progressed = 1;
            }
        }
    }
    PipeSim r = {0.0, 0.0, 0};
    for (int s = 0; s < P; s++) {
        if (next[s] < n[s]) die("pipeline replay: schedule %s deadlocks at rank %d", sched, s);
        if (free_at[s] > r.makespan) r.makespan = free_at[s];
        if (busy[s] > r.busy_max) {
            r.busy_max = busy[s];
            r.busiest = s;
        }
        free(acts[s]);
    }
    free(acts);
    free(n);
    free(next);
    free(free_at);
    free(busy);
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
