// engines/pipeline_zb.c — zero-bubble action lists built from per-pass costs: the
// greedy replay, the replay that compares candidates, and the costs themselves
// (parallel.pp_costs: unit, predicted from FLOPs, or given, e.g. measured).
#include "engines/pipeline_zb.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// Costs in integer ticks: the largest pass is PP_COST_TICKS, every other rounded
// to the nearest tick (at least 1). Every start and end time is then a sum of
// integers, exact in a double, so the builders' comparisons come out the same on
// every rank and every machine.
typedef struct {
    double *f, *i, *w;  // (K) each
    double send;
} Ticks;

static double tick(double x, double top) { return (double)llround(PP_COST_TICKS * x / top); }

static void ticks_of(const PpCosts *c, int K, Ticks *t) {
    t->f = xmalloc(sizeof(double) * 3 * (size_t)K, "zero-bubble costs");  // (3, K): f, i, w
    t->i = t->f + K;
    t->w = t->i + K;
    t->send = 0.0;
    double top = 0.0;
    for (int k = 0; c && k < K; k++) {
        const double x[3] = {c->f[k], c->i[k], c->w[k]};
        for (int j = 0; j < 3; j++) {
            if (!isfinite(x[j]) || x[j] <= 0.0)
                die("pipeline costs: stage %d's %s cost is %g; every F, I and W cost must be positive", k,
                    j == 0 ? "forward (F)" : j == 1 ? "input-gradient (I)" : "weight-gradient (W)", x[j]);
            if (x[j] > top) top = x[j];
        }
    }
    if (c && (!isfinite(c->send) || c->send < 0.0)) die("pipeline costs: message time %g is not >= 0", c->send);
    for (int k = 0; k < K; k++) {
        t->f[k] = c ? fmax(1.0, tick(c->f[k], top)) : PP_COST_TICKS;
        t->i[k] = c ? fmax(1.0, tick(c->i[k], top)) : PP_COST_TICKS;
        t->w[k] = c ? fmax(1.0, tick(c->w[k], top)) : PP_COST_TICKS;
    }
    if (c) t->send = tick(c->send, top);
}

static double cost_of(const Ticks *t, PpOp op, int k) {
    return op == PP_OP_F ? t->f[k] : op == PP_OP_W ? t->w[k] : t->i[k];
}

// When a message that left at `sent` (-1: not yet) is there for a rank: the same
// rank reads it at once (zb-v's turn), another after the message time.
static double arrival(double sent, int same_rank, double send) {
    return sent < 0 ? -1.0 : sent + (same_rank ? 0.0 : send);
}

// ------------------------------------------------------------------ greedy

// One rank in the greedy replay.
typedef struct {
    double free;            // when it is next idle
    int next_f[2], next_i[2];  // next micro-batch of each chunk to forward / to run I on
    int live;               // chunk-micro-batches forwarded, W not yet run (activation slots)
    int *wq, wq_head, wq_tail;  // (v*M) owed W passes, as c * M + m, oldest first
} GRank;

// The greedy of pipeline_zb.h over all P ranks with costs t; at most `limit`
// chunk-micro-batches live per rank. Events are taken in order of start time (ties:
// the lower rank); each chunk's F, I and W run in micro-batch order (the message
// order, and 1f1b's order of gradient accumulation). Returns the makespan, or -1
// when the replay stalled (possible without `reserve`, below).
static double greedy_try(PpSchedule sched, int M, int P, int v, int limit, int reserve, const Ticks *t,
                         PpAction **lists, int *n) {
    const int K = P * v;
    double *done_f = xmalloc(sizeof(double) * (size_t)K * M, "zb replay");  // (K, M) end of F, -1 before
    double *done_b = xmalloc(sizeof(double) * (size_t)K * M, "zb replay");  // (K, M) end of I
    GRank *rk = xcalloc(sizeof(GRank) * (size_t)P, "zb replay");            // (P)
    for (size_t i = 0; i < (size_t)K * M; i++) done_f[i] = done_b[i] = -1.0;
    for (int r = 0; r < P; r++) {
        rk[r].wq = xmalloc(sizeof(int) * (size_t)(v * M), "zb replay");
        n[r] = 0;
    }
#define DF(k, m) done_f[(size_t)(k) * M + (m)]
#define DB(k, m) done_b[(size_t)(k) * M + (m)]
    double makespan = 0.0;
    for (int left = 3 * M * v * P; left > 0; left--) {
        int best_r = -1, best_op = 0, best_c = 0;
        double best_t = 0.0;
        for (int r = 0; r < P; r++) {
            GRank *q = &rk[r];
            // Candidates (start time, op, chunk) in priority order: I, F, W.
            double st[5];
            int op[5], ch[5], nc = 0;
            for (int c = v - 1; c >= 0; c--) {
                int k = pp_virtual_of(sched, P, r, c), m = q->next_i[c];
                if (m >= M || DF(k, m) < 0) continue;
                double in = k == K - 1 ? DF(k, m) : arrival(DB(k + 1, m), pp_rank_of_virtual(sched, P, k + 1) == r,
                                                            t->send);
                if (in < 0) continue;
                st[nc] = in > q->free ? in : q->free, op[nc] = PP_OP_I, ch[nc++] = c;
            }
            // With `reserve`, a forward of chunk 0 (a micro-batch entering the rank)
            // leaves one slot free while the rank holds a micro-batch whose chunk-1
            // forward is still to come (pending). Without, all its slots can come to
            // hold chunk-0 micro-batches waiting for the gradients of their own
            // chunk-1 passes, which need a slot: the replay stalls. Chunk-1 forwards
            // run in micro-batch order, so the kept slot goes to the oldest
            // micro-batch in flight, which always gets through.
            const int pending = reserve && v > 1 && q->next_f[0] > q->next_f[1];
            for (int c = v - 1; c >= 0; c--) {
                int k = pp_virtual_of(sched, P, r, c), m = q->next_f[c];
                if (m >= M || q->live + 1 + (c == 0 ? pending : 0) > limit) continue;
                double in = k == 0 ? 0.0 : arrival(DF(k - 1, m), pp_rank_of_virtual(sched, P, k - 1) == r, t->send);
                if (in < 0) continue;
                st[nc] = in > q->free ? in : q->free, op[nc] = PP_OP_F, ch[nc++] = c;
            }
            if (q->wq_head < q->wq_tail) st[nc] = q->free, op[nc] = PP_OP_W, ch[nc++] = q->wq[q->wq_head] / M;
            // What this rank starts next: the first candidate that can start at once
            // (an owed W always can: it fills the wait), else the earliest.
            int pick = -1;
            for (int i = 0; i < nc && pick < 0; i++)
                if (st[i] <= q->free) pick = i;
            if (pick < 0 && nc > 0) {
                pick = 0;
                for (int i = 1; i < nc; i++)
                    if (st[i] < st[pick]) pick = i;
            }
            if (pick >= 0 && (best_r < 0 || st[pick] < best_t))
                best_r = r, best_t = st[pick], best_op = op[pick], best_c = ch[pick];
        }
        if (best_r < 0) {
            makespan = -1.0;
            break;
        }
        GRank *q = &rk[best_r];
        const int k = pp_virtual_of(sched, P, best_r, best_c);
        const double end = best_t + cost_of(t, (PpOp)best_op, k);
        int m;
        if (best_op == PP_OP_F) {
            m = q->next_f[best_c]++;
            DF(k, m) = end;
            q->live++;
        } else if (best_op == PP_OP_I) {
            m = q->next_i[best_c]++;
            DB(k, m) = end;
            q->wq[q->wq_tail++] = best_c * M + m;
        } else {
            m = q->wq[q->wq_head++] % M;
            q->live--;
        }
        q->free = end;
        if (end > makespan) makespan = end;
        lists[best_r][n[best_r]++] = (PpAction){(PpOp)best_op, best_c, m};
    }
#undef DF
#undef DB
    for (int r = 0; r < P; r++) free(rk[r].wq);
    free(rk);
    free(done_f);
    free(done_b);
    return makespan;
}

// The greedy without the reserved slot (the unit-time lists never stall there,
// and keep their shape), else with it.
static double greedy(PpSchedule sched, int M, int P, int v, int limit, const Ticks *t, PpAction **lists, int *n) {
    double span = greedy_try(sched, M, P, v, limit, 0, t, lists, n);
    if (span < 0) span = greedy_try(sched, M, P, v, limit, 1, t, lists, n);
    if (span < 0) die("%s schedule: the greedy replay stalled (P %d, M %d): a schedule bug", pp_schedule_name(sched), P, M);
    return span;
}

// ------------------------------------------------------------------ replay

// Dedicated ranks: sweep them, running every action whose input is there at
// max(input, rank free), until all ran (the planner's plan/pipeline_sim.c does the
// same with shared cores and busy times; this one only compares candidates).
static double replay(PpSchedule sched, int M, int P, int v, const Ticks *t, PpAction *const *lists, const int *n) {
    const int K = P * v;
    double *done_f = xmalloc(sizeof(double) * (size_t)K * M, "zb replay");  // (K, M) end of F, -1 before
    double *done_b = xmalloc(sizeof(double) * (size_t)K * M, "zb replay");  // (K, M) end of I (or B)
    double *free_at = xcalloc(sizeof(double) * (size_t)P, "zb replay");     // (P)
    int *next = xcalloc(sizeof(int) * (size_t)P, "zb replay");              // (P)
    for (size_t i = 0; i < (size_t)K * M; i++) done_f[i] = done_b[i] = -1.0;
    double makespan = 0.0;
    for (int progressed = 1; progressed;) {
        progressed = 0;
        for (int s = 0; s < P; s++)
            for (; next[s] < n[s]; next[s]++) {
                const PpAction *a = &lists[s][next[s]];
                const int k = pp_virtual_of(sched, P, s, a->chunk), m = a->micro;
                double in;
                if (a->op == PP_OP_W)
                    in = done_b[(size_t)k * M + m];  // its own I, earlier on this rank
                else if (a->op == PP_OP_F)
                    in = k == 0 ? 0.0 : arrival(done_f[(size_t)(k - 1) * M + m],
                                                pp_rank_of_virtual(sched, P, k - 1) == s, t->send);
                else
                    in = k == K - 1 ? done_f[(size_t)k * M + m]
                                    : arrival(done_b[(size_t)(k + 1) * M + m], pp_rank_of_virtual(sched, P, k + 1) == s,
                                              t->send);
                if (in < 0) break;
                free_at[s] = (in > free_at[s] ? in : free_at[s]) + cost_of(t, a->op, k);
                if (a->op == PP_OP_F) done_f[(size_t)k * M + m] = free_at[s];
                if (a->op == PP_OP_I || a->op == PP_OP_B) done_b[(size_t)k * M + m] = free_at[s];
                if (free_at[s] > makespan) makespan = free_at[s];
                progressed = 1;
            }
    }
    for (int s = 0; s < P; s++)
        if (next[s] < n[s]) die("%s schedule: the action lists deadlock at rank %d", pp_schedule_name(sched), s);
    free(done_f);
    free(done_b);
    free(free_at);
    free(next);
    return makespan;
}

double pp_zb_replay(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction *const *lists,
                    const int *n, double *busiest) {
    Ticks t;
    ticks_of(costs, P * v, &t);
    double span = replay(sched, M, P, v, &t, lists, n);
    if (busiest) *busiest = 0.0;
    for (int s = 0; busiest && s < P; s++) {
        double work = 0.0;
        for (int i = 0; i < n[s]; i++) work += cost_of(&t, lists[s][i].op, pp_virtual_of(sched, P, s, lists[s][i].chunk));
        if (work > *busiest) *busiest = work;
    }
    free(t.f);
    return span;
}

// ------------------------------------------------------------------- build

// Views of the costs the greedy also runs on: it is a heuristic, and a list built
// for a simpler picture of the same costs is sometimes the shorter one under the
// real costs. VIEW_STAGES: each stage's three passes equal (its mean: the stage
// imbalance only); VIEW_PASSES: every stage the mean F, I and W over stages (the
// pass ratios only); VIEW_NO_SEND: the costs without the message time.
enum { VIEW_STAGES, VIEW_PASSES, VIEW_NO_SEND, N_VIEWS };

static void view_of(const Ticks *t, int K, int kind, Ticks *out) {
    out->f = xmalloc(sizeof(double) * 3 * (size_t)K, "zero-bubble costs");  // (3, K): f, i, w
    out->i = out->f + K;
    out->w = out->i + K;
    out->send = kind == VIEW_NO_SEND ? 0.0 : t->send;
    double mf = 0, mi = 0, mw = 0;
    for (int k = 0; k < K; k++) mf += t->f[k] / K, mi += t->i[k] / K, mw += t->w[k] / K;
    for (int k = 0; k < K; k++) {
        const double stage = (double)llround((t->f[k] + t->i[k] + t->w[k]) / 3.0);
        out->f[k] = kind == VIEW_STAGES ? stage : kind == VIEW_PASSES ? (double)llround(mf) : t->f[k];
        out->i[k] = kind == VIEW_STAGES ? stage : kind == VIEW_PASSES ? (double)llround(mi) : t->i[k];
        out->w[k] = kind == VIEW_STAGES ? stage : kind == VIEW_PASSES ? (double)llround(mw) : t->w[k];
    }
}

// handcrafted zb-h1 + the greedy at unit cost, at the costs, and at each view;
// pp_zb_rebuild adds the lists in use.
#define CANDIDATES (4 + N_VIEWS)

// The candidate lists for costs t (pp_zb_build says which) into row[j*P + s],
// len[j*P + s] from candidate j = 0 on; returns how many.
static int candidates(PpSchedule sched, int M, int P, int v, const PpCosts *costs, const Ticks *t, PpAction **row,
                      int *len) {
    // At most v*P chunk-micro-batches in flight per rank: P whole micro-batches,
    // 1f1b's first stage (zb-h1: P, zb-v: 2P chunks of half a stage each).
    const int K = P * v, limit = v * P;
    Ticks unit;
    ticks_of(NULL, K, &unit);
    // Equal costs keep the unit-time lists (the first candidate); other costs add
    // the greedy for them and for their views.
    int nc = 0;
    if (sched == PP_ZB_H1) {
        for (int s = 0; s < P; s++) len[s] = pp_zb_h1_handcrafted(M, P, s, row[s]);
        nc++;
    }
    if (sched == PP_ZB_V || costs) greedy(sched, M, P, v, limit, &unit, row + nc * P, len + nc * P), nc++;
    if (costs) {
        greedy(sched, M, P, v, limit, t, row + nc * P, len + nc * P), nc++;
        for (int kind = 0; kind < N_VIEWS; kind++) {
            if (kind == VIEW_NO_SEND && t->send == 0) continue;
            Ticks view;
            view_of(t, K, kind, &view);
            greedy(sched, M, P, v, limit, &view, row + nc * P, len + nc * P), nc++;
            free(view.f);
        }
    }
    free(unit.f);
    return nc;
}

// Room for CANDIDATES candidates of P lists each: cand (CANDIDATES, P, room) actions,
// row (CANDIDATES, P) pointers into it, len (CANDIDATES, P).
typedef struct {
    PpAction *cand;
    PpAction **row;
    int *len;
} Pool;

static Pool pool_new(int P, int room) {
    Pool q;
    q.cand = xmalloc(sizeof(PpAction) * (size_t)CANDIDATES * P * room, "zb candidates");  // (CANDIDATES, P, room)
    q.row = xmalloc(sizeof(PpAction *) * (size_t)CANDIDATES * P, "zb candidates");        // (CANDIDATES, P)
    q.len = xmalloc(sizeof(int) * (size_t)CANDIDATES * P, "zb candidates");               // (CANDIDATES, P)
    for (int j = 0; j < CANDIDATES * P; j++) q.row[j] = q.cand + (size_t)j * room;
    return q;
}
static void pool_free(Pool *q) {
    free(q->cand);
    free(q->row);
    free(q->len);
}

// Whether candidate lists need no more memory than `cur` on any rank: no more
// activation slots per chunk or together, no more weight-gradient stashes per chunk.
static int within(PpAction *const *cand, const int *cn, PpAction *const *cur, const int *n, int P, int v) {
    int a[2], b[2], ok = 1;
    for (int s = 0; s < P && ok; s++) {
        pp_count_slots(cand[s], cn[s], v, a);
        pp_count_slots(cur[s], n[s], v, b);
        for (int c = 0; c < v; c++) ok &= a[c] <= b[c];
        pp_count_stash(cand[s], cn[s], v, a);
        pp_count_stash(cur[s], n[s], v, b);
        for (int c = 0; c < v; c++) ok &= a[c] <= b[c];
        ok &= pp_count_joint_slots(cand[s], cn[s]) <= pp_count_joint_slots(cur[s], n[s]);
    }
    return ok;
}

// The shortest of candidates 0..nc-1 under t (ties: the lower index) that, when
// `cap` is given, fits within cap's memory; copied into lists/n. Returns its step.
static double keep_best(PpSchedule sched, int M, int P, int v, const Ticks *t, const Pool *q, int nc,
                        PpAction *const *cap, const int *cap_n, PpAction **lists, int *n) {
    int best = -1;
    double span = 0.0;
    for (int j = 0; j < nc; j++) {
        if (cap && !within(q->row + j * P, q->len + j * P, cap, cap_n, P, v)) continue;
        double sj = replay(sched, M, P, v, t, q->row + j * P, q->len + j * P);
        if (best < 0 || sj < span) span = sj, best = j;
    }
    for (int s = 0; s < P; s++) {
        n[s] = q->len[best * P + s];
        memcpy(lists[s], q->row[best * P + s], sizeof(PpAction) * (size_t)n[s]);
    }
    return span;
}

double pp_zb_build(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n) {
    if (!pp_schedule_splits(sched)) die("pp_zb_build: %s is not a zero-bubble schedule", pp_schedule_name(sched));
    Ticks t;
    ticks_of(costs, P * v, &t);
    Pool q = pool_new(P, PP_MAX_ACTIONS(M, v));
    const int nc = candidates(sched, M, P, v, costs, &t, q.row, q.len);
    const double span = keep_best(sched, M, P, v, &t, &q, nc, NULL, NULL, lists, n);
    pool_free(&q);
    free(t.f);
    return span;
}

int pp_zb_rebuild(PpSchedule sched, int M, int P, int v, const PpCosts *costs, PpAction **lists, int *n) {
    Ticks t;
    ticks_of(costs, P * v, &t);
    Pool q = pool_new(P, PP_MAX_ACTIONS(M, v));
    for (int s = 0; s < P; s++) {  // candidate 0: the lists in use (always fits, wins ties)
        q.len[s] = n[s];
        memcpy(q.row[s], lists[s], sizeof(PpAction) * (size_t)n[s]);
    }
    const int nc = 1 + candidates(sched, M, P, v, costs, &t, q.row + P, q.len + P);
    PpAction **cur = xmalloc(sizeof(PpAction *) * (size_t)P, "zb rebuild");  // (P) the lists in use, kept aside
    int *cur_n = xmalloc(sizeof(int) * (size_t)P, "zb rebuild");              // (P)
    for (int s = 0; s < P; s++) {
        cur[s] = xmalloc(sizeof(PpAction) * (size_t)PP_MAX_ACTIONS(M, v), "zb rebuild");
        cur_n[s] = n[s];
        memcpy(cur[s], lists[s], sizeof(PpAction) * (size_t)n[s]);
    }
    keep_best(sched, M, P, v, &t, &q, nc, cur, cur_n, lists, n);
    int changed = 0;
    for (int s = 0; s < P; s++) {
        changed |= n[s] != cur_n[s] || memcmp(lists[s], cur[s], sizeof(PpAction) * (size_t)n[s]);
        free(cur[s]);
    }
    free(cur);
    free(cur_n);
    pool_free(&q);
    free(t.f);
    return changed;
}

// ------------------------------------------------------------------- costs

void pp_flop_costs(const PpShape *sh, int K, const int *layers, double *f, double *i, double *w) {
    const double D = sh->D, qkv = (double)(sh->H + 2 * sh->KV) * sh->hd;
    const double mm = 2.0 * (D * qkv + (double)sh->H * sh->hd * D + (double)sh->ffn_mats * D * sh->F);  // one way, per token
    const double attn = 2.0 * sh->S * sh->H * sh->hd;  // causal QK^T and PV: 2 products x 2 flops x S/2 keys
    const double head = 2.0 * (double)sh->V * D;
    for (int k = 0; k < K; k++) {
        f[k] = layers[k] * (mm + attn);
        i[k] = layers[k] * (mm + 2.0 * attn);
        w[k] = layers[k] * mm;
        if (k == 0) f[k] += D, i[k] += D, w[k] += D;  // lookup, its gradient rows, their sum
        if (k == K - 1) f[k] += head, i[k] += head, w[k] += head;
    }
}

int pp_costs_of_spec(const char *spec, const PpShape *sh, int K, const int *layers, double *f, double *i,
                     double *w) {
    if (!strcmp(spec, "unit")) return 0;
    if (!strcmp(spec, "flops") || !strcmp(spec, "measure")) {
        pp_flop_costs(sh, K, layers, f, i, w);
        return 1;
    }
    // "f:i:w,f:i:w,..." one triple per virtual stage (config_validate checked it).
    for (int k = 0; k < K; k++) {
        char *end;
        f[k] = strtod(spec, &end);
        i[k] = strtod(end + 1, &end);
        w[k] = strtod(end + 1, &end);
        spec = *end == ',' ? end + 1 : end;
    }
    return 1;
}
