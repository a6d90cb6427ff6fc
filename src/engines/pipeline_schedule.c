// engines/pipeline_schedule.c — the pure half of pipeline parallelism: how the
// layers are split over stages, and each rank's list of actions for a step.
#include "engines/pipeline_schedule.h"

#include <stdlib.h>

#include "engines/pipeline_zb.h"
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
int pp_zb_h1_handcrafted(int M, int P, int s, PpAction *out) {
    ActionList list = {out, 0}, *l = &list;
    const int warm = P - s - 1 < M ? P - s - 1 : M;
    int w = 0;  // next micro-batch whose W is owed
    for (int i = 0; i < warm; i++) push(l, PP_OP_F, 0, i);
    for (int i = 0; i < M; i++) {
        if (warm + i < M) push(l, PP_OP_F, 0, warm + i);
        push(l, PP_OP_I, 0, i);
        if (i >= s) push(l, PP_OP_W, 0, w++);
    }
    while (w < M) push(l, PP_OP_W, 0, w++);
    return l->n;
}

int pp_schedule_splits(PpSchedule sched) { return sched == PP_ZB_H1 || sched == PP_ZB_V; }

int pp_virtual_of(PpSchedule sched, int P, int s, int c) {
    if (sched == PP_ZB_V) return c == 0 ? s : 2 * P - 1 - s;
    return c * P + s;
}
int pp_rank_of_virtual(PpSchedule sched, int P, int k) {
    if (sched == PP_ZB_V) return k < P ? k : 2 * P - 1 - k;
    return k % P;
}
int pp_chunk_of_virtual(PpSchedule sched, int P, int k) {
    if (sched == PP_ZB_V) return k < P ? 0 : 1;
    return k / P;
}

void pp_schedule_all(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n) {
    if (pp_schedule_splits(sched)) {
        pp_zb_build(sched, M, P, v, costs, lists, n);
        return;
    }
    for (int s = 0; s < P; s++) n[s] = pp_schedule_actions(sched, M, P, s, v, costs, lists[s]);
}

int pp_schedule_actions(PpSchedule sched, int M, int P, int s, int v, const PpCosts *costs, PpAction *out) {
    ActionList l = {out, 0};
    if (pp_schedule_splits(sched)) {
        // The zero-bubble lists of all ranks come from one build (pipeline_zb.h).
        PpAction **lists = xmalloc(sizeof(PpAction *) * (size_t)P, "schedule");  // (P)
        int *n = xmalloc(sizeof(int) * (size_t)P, "schedule");                    // (P)
        for (int r = 0; r < P; r++)
            lists[r] = r == s ? out : xmalloc(sizeof(PpAction) * (size_t)PP_MAX_ACTIONS(M, v), "schedule");
        pp_zb_build(sched, M, P, v, costs, lists, n);
        for (int r = 0; r < P; r++)
            if (r != s) free(lists[r]);
        l.n = n[s];
        free(lists);
        free(n);
    } else if (sched == PP_AFAB) {
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

int pp_count_joint_slots(const PpAction *actions, int n) {
    int live = 0, peak = 1;
    for (int k = 0; k < n; k++) {
        live += actions[k].op == PP_OP_F ? 1 : actions[k].op == PP_OP_I ? 0 : -1;
        if (live > peak) peak = live;
    }
    return peak;
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
