// engines/pipeline_schedule.c — the pure half of pipeline parallelism: how the
// layers are split over stages, and each rank's list of actions for a step.
#include "engines/pipeline_schedule.h"

#include <stdlib.h>

#include "util.h"

// ------------------------------------------------------------------ split

double pp_layer_cost(int D, int H, int KV, int hd, int ffn_mats, int F, int S) {
    double qkv = (double)(H + 2 * KV) * hd;
    return 6.0 * ((double)D * qkv + (double)H * hd * D + (double)ffn_mats * D * F) + 6.0 * S * D;
}

// Layers per virtual stage minimising the most expensive stage (linear partition
// by dynamic programming: best[k][i] = cheapest max cost of the first i layers in
// k stages). Stage 0 also pays the embedding, the last stage the head.
void pp_balanced_split(int L, double layer, int D, int V, int K, int *layers) {
    // Training FLOPs per token of the embedding lookup and of the head: the head of
    // a large vocabulary weighs like several layers, the lookup almost nothing.
    const double embed = 2.0 * D, head = 6.0 * (double)V * D;
    double *best = xmalloc(sizeof(double) * (size_t)(K + 1) * (L + 1), "split plan");  // (K+1, L+1)
    int *cut = xmalloc(sizeof(int) * (size_t)(K + 1) * (L + 1), "split plan");         // (K+1, L+1)
#define BEST(k, i) best[(size_t)(k) * (L + 1) + (i)]
#define CUT(k, i) cut[(size_t)(k) * (L + 1) + (i)]
    for (int k = 0; k <= K; k++)
        for (int i = 0; i <= L; i++) BEST(k, i) = 1e300;
    BEST(0, 0) = 0.0;
    for (int k = 1; k <= K; k++)
        for (int i = k; i <= L; i++)
            for (int j = k - 1; j < i; j++) {  // stage k-1 holds layers j .. i-1
                double cost = layer * (i - j) + (k == 1 ? embed : 0.0) + (k == K && i == L ? head : 0.0);
                double worst = BEST(k - 1, j) > cost ? BEST(k - 1, j) : cost;
                if (worst < BEST(k, i)) {
                    BEST(k, i) = worst;
                    CUT(k, i) = j;
                }
            }
    for (int k = K, i = L; k >= 1; k--) {
        int j = CUT(k, i);
        layers[k - 1] = i - j;
        i = j;
    }
#undef BEST
#undef CUT
    free(best);
    free(cut);
}

void pp_parse_layers(const char *spec, int K, int *layers) {
    for (int k = 0; k < K; k++) {
        char *end;
        layers[k] = (int)strtol(spec, &end, 10);
        spec = *end == ',' ? end + 1 : end;
    }
}

// ---------------------------------------------------------------- schedules

// A rank's action list: pushed in execution order into out (2*M*v entries).
typedef struct {
    PpAction *out;
    int n;
} ActionList;

static void push(ActionList *l, int forward, int chunk, int micro) {
    l->out[l->n++] = (PpAction){forward, chunk, micro};
}

int pp_schedule_actions(PpSchedule sched, int M, int P, int s, int v, PpAction *out) {
    ActionList l = {out, 0};
    if (sched == PP_AFAB) {
        for (int i = 0; i < M; i++) push(&l, 1, 0, i);
        for (int i = 0; i < M; i++) push(&l, 0, 0, i);
    } else if (sched == PP_1F1B) {
        int warm = P - s - 1 < M ? P - s - 1 : M;
        for (int i = 0; i < warm; i++) push(&l, 1, 0, i);
        for (int i = 0; i < M - warm; i++) {
            push(&l, 1, 0, warm + i);
            push(&l, 0, 0, i);
        }
        for (int i = M - warm; i < M; i++) push(&l, 0, 0, i);
    } else {  // interleaved (Narayanan et al. 2021, as scheduled by Megatron-LM)
        const int total = M * v, group = P * v;
        int warm = M == P ? total : (P - s - 1) * 2 + (v - 1) * P;
        if (warm > total) warm = total;
#define CHUNK_F(k) (((k) % group) / P)
#define MICRO(k) (((k) / group) * P + (k) % P)
        for (int k = 0; k < warm; k++) push(&l, 1, CHUNK_F(k), MICRO(k));
        for (int i = 0; i < total - warm; i++) {
            int kf = warm + i;
            push(&l, 1, CHUNK_F(kf), MICRO(kf));
            push(&l, 0, v - 1 - CHUNK_F(i), MICRO(i));
        }
        for (int k = total - warm; k < total; k++) push(&l, 0, v - 1 - CHUNK_F(k), MICRO(k));
#undef CHUNK_F
#undef MICRO
    }
    return l.n;
}

void pp_count_slots(const PpAction *actions, int n, int v, int *slots) {
    int *live = xcalloc(sizeof(int) * (size_t)v, "slots");  // (v)
    for (int c = 0; c < v; c++) slots[c] = 0;
    for (int k = 0; k < n; k++) {
        live[actions[k].chunk] += actions[k].forward ? 1 : -1;
        if (live[actions[k].chunk] > slots[actions[k].chunk]) slots[actions[k].chunk] = live[actions[k].chunk];
    }
    for (int c = 0; c < v; c++)
        if (slots[c] < 1) slots[c] = 1;  // validation needs one
    free(live);
}
