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

// A rank's action list: pushed in execution order into out (PP_MAX_ACTIONS entries).
typedef struct {
    PpAction *out;
    int n;
} ActionList;

static void push(ActionList *l, PpOp op, int chunk, int micro) {
    l->out[l->n++] = (PpAction){op, chunk, micro};
}

// ZB-H1 (Qi et al. 2023) on rank s: 1f1b's P - s - 1 warm-up forwards, then for
// each micro-batch i its forward (while any is left), the I of micro-batch i, and
// the W of micro-batch i - s; the s W passes still owed end the list. Delaying
// rank s's W passes by s lets each I go down the pipeline as soon as it arrives
// (the later ranks no longer make the earlier ones wait a W each), and the owed W
// passes run where 1f1b's last ranks sat idle in the cool-down. In flight on rank
// s: P - s - 1 + 1 forwards before the first I, plus s whose W is owed: P.
static void zb_h1(ActionList *l, int M, int P, int s) {
    const int warm = P - s - 1 < M ? P - s - 1 : M;
    int w = 0;  // next micro-batch whose W is owed
    for (int i = 0; i < warm; i++) push(l, PP_OP_F, 0, i);
    for (int i = 0; i < M; i++) {
        if (warm + i < M) push(l, PP_OP_F, 0, warm + i);
        push(l, PP_OP_I, 0, i);
        if (i >= s) push(l, PP_OP_W, 0, w++);
    }
    while (w < M) push(l, PP_OP_W, 0, w++);
}

int pp_schedule_splits(PpSchedule sched) { return sched == PP_ZB_H1; }

int pp_schedule_actions(PpSchedule sched, int M, int P, int s, int v, PpAction *out) {
    ActionList l = {out, 0};
    if (sched == PP_AFAB) {
        for (int i = 0; i < M; i++) push(&l, PP_OP_F, 0, i);
        for (int i = 0; i < M; i++) push(&l, PP_OP_B, 0, i);
    } else if (sched == PP_1F1B) {
        int warm = P - s - 1 < M ? P - s - 1 : M;
        for (int i = 0; i < warm; i++) push(&l, PP_OP_F, 0, i);
        for (int i = 0; i < M - warm; i++) {
            push(&l, PP_OP_F, 0, warm + i);
            push(&l, PP_OP_B, 0, i);
        }
        for (int i = M - warm; i < M; i++) push(&l, PP_OP_B, 0, i);
    } else if (sched == PP_ZB_H1) {
        zb_h1(&l, M, P, s);
    } else {  // interleaved (Narayanan et al. 2021, as scheduled by Megatron-LM)
        const int total = M * v, group = P * v;
        int warm = M == P ? total : (P - s - 1) * 2 + (v - 1) * P;
        if (warm > total) warm = total;
#define CHUNK_F(k) (((k) % group) / P)
#define MICRO(k) (((k) / group) * P + (k) % P)
        for (int k = 0; k < warm; k++) push(&l, PP_OP_F, CHUNK_F(k), MICRO(k));
        for (int i = 0; i < total - warm; i++) {
            int kf = warm + i;
            push(&l, PP_OP_F, CHUNK_F(kf), MICRO(kf));
            push(&l, PP_OP_B, v - 1 - CHUNK_F(i), MICRO(i));
        }
        for (int k = total - warm; k < total; k++) push(&l, PP_OP_B, v - 1 - CHUNK_F(k), MICRO(k));
#undef CHUNK_F
#undef MICRO
    }
    return l.n;
}

void pp_count_slots(const PpAction *actions, int n, int v, int *slots) {
    int *live = xcalloc(sizeof(int) * (size_t)v, "slots");  // (v)
    for (int c = 0; c < v; c++) slots[c] = 0;
    for (int k = 0; k < n; k++) {
        const PpOp op = actions[k].op;
        live[actions[k].chunk] += op == PP_OP_F ? 1 : op == PP_OP_I ? 0 : -1;  // held until B or W
        if (live[actions[k].chunk] > slots[actions[k].chunk]) slots[actions[k].chunk] = live[actions[k].chunk];
    }
    for (int c = 0; c < v; c++)
        if (slots[c] < 1) slots[c] = 1;  // validation needs one
    free(live);
}

void pp_count_stash(const PpAction *actions, int n, int v, int *stash) {
    int *live = xcalloc(sizeof(int) * (size_t)v, "stash");  // (v)
    for (int c = 0; c < v; c++) stash[c] = 0;
    for (int k = 0; k < n; k++) {
        const PpOp op = actions[k].op;
        live[actions[k].chunk] += op == PP_OP_I ? 1 : op == PP_OP_W ? -1 : 0;
        if (live[actions[k].chunk] > stash[actions[k].chunk]) stash[actions[k].chunk] = live[actions[k].chunk];
    }
    free(live);
}
