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

// ZB-V (Qi et al. 2023): every rank's list from one greedy replay of all P ranks
// in unit time (F, I and W of a chunk 1 each), so that every rank derives the same
// lists. Events are taken in order of start time (ties: the lower rank); a rank,
// when it can start something, takes by priority an I whose output gradient has
// arrived (chunk 1 first: it is the one nearer the loss), else a forward whose
// input has arrived while it holds fewer than 2P chunk-micro-batches (chunk 1
// first), else its oldest owed W. An action waits only for what the executor's
// messages make it wait for, so the lists run without deadlock whatever the real
// times; each chunk's forwards, I and W run in micro-batch order (the message
// order, and 1f1b's order of gradient accumulation).
typedef struct {
    double free;          // when the rank is next idle
    int next_f[2], next_i[2];
    int live;             // chunk-micro-batches forwarded, W not yet run
    int *wq, wq_head, wq_tail;  // (2M) owed W passes, as c * M + m, oldest first
} VRank;

static void zb_v(ActionList *l, int M, int P, int s) {
    const int K = 2 * P, limit = 2 * P;
    double *done_f = xmalloc(sizeof(double) * (size_t)K * M, "zb-v replay");  // (K, M) end times, -1 before
    double *done_b = xmalloc(sizeof(double) * (size_t)K * M, "zb-v replay");  // (K, M) end of B/I
    VRank *rk = xcalloc(sizeof(VRank) * (size_t)P, "zb-v replay");            // (P)
    for (size_t i = 0; i < (size_t)K * M; i++) done_f[i] = done_b[i] = -1.0;
    for (int r = 0; r < P; r++) rk[r].wq = xmalloc(sizeof(int) * (size_t)(2 * M), "zb-v replay");
#define DF(k, m) done_f[(size_t)(k) * M + (m)]
#define DB(k, m) done_b[(size_t)(k) * M + (m)]
    for (int left = 6 * M * P; left > 0; left--) {
        int best_r = -1, best_op = 0, best_c = 0;
        double best_t = 0.0;
        for (int r = 0; r < P; r++) {
            VRank *q = &rk[r];
            // Candidates (start time, op, chunk) in priority order: I, F, W.
            double t[5];
            int op[5], ch[5], n = 0;
            for (int c = 1; c >= 0; c--) {
                int k = pp_virtual_of(PP_ZB_V, P, r, c), m = q->next_i[c];
                if (m >= M || DF(k, m) < 0) continue;
                double in = k == K - 1 ? DF(k, m) : DB(k + 1, m);
                if (in < 0) continue;
                t[n] = in > q->free ? in : q->free, op[n] = PP_OP_I, ch[n++] = c;
            }
            for (int c = 1; c >= 0; c--) {
                int k = pp_virtual_of(PP_ZB_V, P, r, c), m = q->next_f[c];
                if (m >= M || q->live >= limit) continue;
                double in = k == 0 ? 0.0 : DF(k - 1, m);
                if (in < 0) continue;
                t[n] = in > q->free ? in : q->free, op[n] = PP_OP_F, ch[n++] = c;
            }
            if (q->wq_head < q->wq_tail) t[n] = q->free, op[n] = PP_OP_W, ch[n++] = q->wq[q->wq_head] / M;
            // What this rank starts next: the first candidate that can start at once,
            // else the earliest.
            int pick = -1;
            for (int i = 0; i < n && pick < 0; i++)
                if (t[i] <= q->free) pick = i;
            if (pick < 0 && n > 0) {
                pick = 0;
                for (int i = 1; i < n; i++)
                    if (t[i] < t[pick]) pick = i;
            }
            if (pick >= 0 && (best_r < 0 || t[pick] < best_t))
                best_r = r, best_t = t[pick], best_op = op[pick], best_c = ch[pick];
        }
        if (best_r < 0) die("zb-v schedule: the replay stalled (P %d, M %d): a schedule bug", P, M);
        VRank *q = &rk[best_r];
        const int k = pp_virtual_of(PP_ZB_V, P, best_r, best_c);
        int m;
        if (best_op == PP_OP_F) {
            m = q->next_f[best_c]++;
            DF(k, m) = best_t + 1.0;
            q->live++;
        } else if (best_op == PP_OP_I) {
            m = q->next_i[best_c]++;
            DB(k, m) = best_t + 1.0;
            q->wq[q->wq_tail++] = best_c * M + m;
        } else {
            m = q->wq[q->wq_head++] % M;
            q->live--;
        }
        q->free = best_t + 1.0;
        if (best_r == s) push(l, (PpOp)best_op, best_c, m);
    }
#undef DF
#undef DB
    for (int r = 0; r < P; r++) free(rk[r].wq);
    free(rk);
    free(done_f);
    free(done_b);
}

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
    } else if (sched == PP_ZB_V) {
        zb_v(&l, M, P, s);
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
