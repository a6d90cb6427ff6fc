// engines/pipeline.c — a rank's pipeline stage(s): the split applied, the schedule
// built, the activation slots and message buffers planned. The executor that runs
// the rank's list of actions is engines/pipeline_exec.c.
#include "engines/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "engines/pipeline_zb.h"
#include "model/activation_plan.h"
#include "ops/ops.h"
#include "util.h"

// ------------------------------------------------------------------- split

// layers(K): filled with the layers of each virtual stage.
static void split_model(Pipeline *pp, const LlamaModel *m, const Config *cfg, int *layers) {
    const int K = pp->n_virtual;
    if (cfg->parallel.pp_layers[0])
        pp_parse_layers(cfg->parallel.pp_layers, K, layers);
    else
        pp_balanced_split(m->L, pp_layer_cost(m->D, m->H, m->KV, m->hd, 3, m->F, cfg->training.seq_length), m->D,
                          m->V, K, layers);
    pp->virt_units = xmalloc(sizeof(StageUnits) * (size_t)K, "stage units");
    for (int k = 0, l = 0; k < K; k++) {
        pp->virt_units[k].u0 = k == 0 ? 0 : 1 + l;
        l += layers[k];
        pp->virt_units[k].u1 = k == K - 1 ? m->L + 1 : l;  // unit of the stage's last layer
    }
}

int pp_virtual_stage(const Pipeline *pp, int c) { return pp_virtual_of(pp->sched, pp->pp, pp->stage, c); }

// ---------------------------------------------------------------- schedule

// The zero-bubble lists are built for parallel.pp_costs (engines/pipeline_zb.h):
// numbers every rank reads from the same config (or computes from the same model),
// so every rank builds the same lists.
static void build_schedule(Pipeline *pp, const LlamaModel *m, const Config *cfg, const int *layers) {
    const int K = pp->n_virtual;
    double *f = xmalloc(sizeof(double) * 3 * (size_t)K, "schedule costs");  // (3, K): F, I, W per virtual stage
    const PpShape sh = {m->D, m->H, m->KV, m->hd, 3, m->F, cfg->training.seq_length, m->V};
    PpCosts costs = {f, f + K, f + 2 * K, 0.0};
    const int given = pp_costs_of_spec(cfg->parallel.pp_costs, &sh, K, layers, f, f + K, f + 2 * K);
    const int P = pp->pp, M = pp->micros, room = PP_MAX_ACTIONS(M, pp->v);
    pp->actions = xmalloc(sizeof(PpAction) * (size_t)room, "schedule");
    if (!pp_schedule_splits(pp->sched)) {
        pp->n_actions = pp_schedule_actions(pp->sched, M, P, pp->stage, pp->v, NULL, pp->actions);
        free(f);
        return;
    }
    // Every rank's lists, kept and unit-time, both replayed with the costs: the
    // bubbles the start-up line reports (train_cmd.c); this rank keeps its row.
    PpAction *all = xmalloc(sizeof(PpAction) * 2 * (size_t)room * P, "schedule");  // (2, P, room)
    PpAction **rows = xmalloc(sizeof(PpAction *) * 2 * (size_t)P, "schedule");    // (2, P)
    int *n = xmalloc(sizeof(int) * 2 * (size_t)P, "schedule");                     // (2, P)
    for (int r = 0; r < 2 * P; r++) rows[r] = all + (size_t)r * room;
    pp_schedule_all(pp->sched, M, P, pp->v, given ? &costs : NULL, rows, n);
    pp_schedule_all(pp->sched, M, P, pp->v, NULL, rows + P, n + P);
    double work;
    const double kept = pp_zb_replay(pp->sched, M, P, pp->v, given ? &costs : NULL, rows, n, &work);
    const double unit = pp_zb_replay(pp->sched, M, P, pp->v, given ? &costs : NULL, rows + P, n + P, NULL);
    pp->zb_bubble = kept / work - 1.0;
    pp->zb_unit_bubble = unit / work - 1.0;
    pp->n_actions = n[pp->stage];
    memcpy(pp->actions, rows[pp->stage], sizeof(PpAction) * (size_t)pp->n_actions);
    // Every rank's kept lists stay (pp_adopt_measured_costs rebuilds them
    // together): the first P rows of `all` and entries of n.
    pp->all_actions = all;
    pp->all_n = n;
    free(rows);
    free(f);
}

int pp_adopt_measured_costs(Pipeline *pp, double *costs_ms, double *bubble_before, double *bubble_after) {
    const int P = pp->pp, v = pp->v, K = P * v, M = pp->micros, room = PP_MAX_ACTIONS(M, v);
    // This rank's mean passes at its virtual stages, 0 elsewhere; the max over the
    // world gives every rank the same (K, 3) costs (the slowest replica of a stage).
    for (int i = 0; i < 3 * K; i++) costs_ms[i] = 0.0;
    for (int c = 0; c < v; c++)
        for (int op = 0; op < 3; op++) {
            const int i = c * 3 + op;
            costs_ms[op * K + pp_virtual_stage(pp, c)] = pp->pass_n[i] ? 1e3 * pp->pass_s[i] / pp->pass_n[i] : 0.0;
        }
    group_allreduce_max_f64(GROUP_WORLD, costs_ms, (size_t)3 * K);
    for (int i = 0; i < 3 * K; i++)
        if (!(costs_ms[i] > 0.0)) die("parallel.pp_costs = \"measure\": a pass was not timed (a schedule bug)");
    const PpCosts costs = {costs_ms, costs_ms + K, costs_ms + 2 * K, 0.0};
    PpAction **rows = xmalloc(sizeof(PpAction *) * (size_t)P, "schedule");  // (P)
    for (int r = 0; r < P; r++) rows[r] = pp->all_actions + (size_t)r * room;
    double work;
    *bubble_before = pp_zb_replay(pp->sched, M, P, v, &costs, rows, pp->all_n, &work) / work - 1.0;
    const int changed = pp_zb_rebuild(pp->sched, M, P, v, &costs, rows, pp->all_n);
    *bubble_after = pp_zb_replay(pp->sched, M, P, v, &costs, rows, pp->all_n, &work) / work - 1.0;
    pp->n_actions = pp->all_n[pp->stage];
    memcpy(pp->actions, rows[pp->stage], sizeof(PpAction) * (size_t)pp->n_actions);
    free(rows);
    return changed;
}

// Micro-batches of each chunk in flight at once (forwarded, not yet backwarded):
// the number of activation slots the chunk needs.
static void count_slots(Pipeline *pp) {
    pp->n_slots = xcalloc(sizeof(int) * (size_t)pp->v, "slots");
    pp_count_slots(pp->actions, pp->n_actions, pp->v, pp->n_slots);
    pp->max_slots = 1;
    for (int c = 0; c < pp->v; c++)
        if (pp->n_slots[c] > pp->max_slots) pp->max_slots = pp->n_slots[c];
    // Micro-batches between their I and their W: the weight-gradient stashes.
    pp->n_stash = xcalloc(sizeof(int) * (size_t)pp->v, "stash");
    pp_count_stash(pp->actions, pp->n_actions, pp->v, pp->n_stash);
}

// ------------------------------------------------------------------- setup

// Bytes of one chunk's slot (its activations and positions, its token and target
// rows, its gradient messages): what the per-chunk plan pays n_slots[c] times.
static size_t message_bytes(const Pipeline *pp, const LlamaModel *m) {
    return sizeof(float) * (size_t)pp->B * pp->S * m->D;
}
static int chunk_sends(const Pipeline *pp, int c) {
    const int vs = pp_virtual_stage(pp, c);
    return vs > 0 && pp_rank_of_virtual(pp->sched, pp->pp, vs - 1) != pp->stage;
}
static int chunk_receives(const Pipeline *pp, int c) { return pp_virtual_stage(pp, c) < pp->n_virtual - 1; }

// Several chunks per rank: one pool of the slots they hold at once together, each
// sized for the largest chunk, or a pool per chunk of its own peak (Megatron's
// interleaved warm-up keeps fewer chunk-micro-batches at once than the sum of the
// chunks' peaks: 11 against 12 + ... ), whichever plans fewer bytes.
static void choose_pool(Pipeline *pp, const LlamaModel *m) {
    const int joint = pp_count_joint_slots(pp->actions, pp->n_actions);
    // Mixture-of-experts slots keep their load-balancing statistics from forward to
    // backward in the slot: they keep a pool per chunk.
    if (pp->v == 1 || joint < pp->v || m->E > 0) return;
    const size_t N = (size_t)pp->B * pp->S, msg = message_bytes(pp, m), tok = 2 * sizeof(int32_t) * N;
    size_t sep = 0, own = 0, other = 0, pos = 0;
    int any_send = 0, any_recv = 0;
    for (int c = 0; c < pp->v; c++) {
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        size_t a1 = activations_bytes(m, su, pp->B, pp->S, 1), a0 = activations_bytes(m, su, pp->B, pp->S, 0);
        pos = activations_alloc_bytes(m, su, pp->B, pp->S, 0) - a0;
        sep += (size_t)(c == 0 ? a1 + (pp->n_slots[c] - 1) * a0 : pp->n_slots[c] * a0) + pp->n_slots[c] * pos;
        sep += pp->n_slots[c] * (tok + (chunk_sends(pp, c) ? msg : 0) + (chunk_receives(pp, c) ? msg : 0));
        own = a1 > own ? a1 : own;
        other = a0 > other ? a0 : other;
        any_send |= chunk_sends(pp, c);
        any_recv |= chunk_receives(pp, c);
    }
    const size_t pool = own + (size_t)(joint - 1) * other + (size_t)joint * (pos + tok + (any_send ? msg : 0) +
                                                                            (any_recv ? msg : 0));
    if (pool >= sep) return;
    pp->pooled = 1;
    for (int c = 0; c < pp->v; c++) pp->n_slots[c] = joint;
    pp->max_slots = joint;
}

// The plan: split, schedule, slot counts and the bookkeeping tables (small, xmalloc).
static void plan_stage(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage) {
    memset(pp, 0, sizeof *pp);
    const TrainingConfig *tc = &cfg->training;
    pp->pp = cfg->parallel.pp;
    pp->stage = stage;
    pp->sched = cfg->parallel.pp_schedule;
    pp->v = cfg->parallel.pp_virtual;
    pp->n_virtual = pp->pp * pp->v;
    pp->micros = tc->grad_acc_steps;
    pp->B = tc->micro_batch_size;
    pp->S = tc->seq_length / cfg->parallel.cp;  // this rank's tokens of each sequence
    pp->rows = llama_rows(m, pp->B * pp->S);
    int *layers = xmalloc(sizeof(int) * (size_t)pp->n_virtual, "split");  // (K) layers per virtual stage
    split_model(pp, m, cfg, layers);
    pp->held = xcalloc(sizeof(int) * (size_t)m->n_units, "held units");
    for (int c = 0; c < pp->v; c++) {
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        for (int u = su.u0; u <= su.u1; u++) pp->held[u] = 1;
    }
    // Tied embeddings over several stages: the stage with the head also holds the
    // embedding, as a copy (held 2) kept equal to the first stage's by summing the
    // two gradients over the embedding group (engines/data_parallel.h).
    if (m->cfg.tie_word_embeddings && pp->held[m->L + 1] && !pp->held[0]) pp->held[0] = 2;
    build_schedule(pp, m, cfg, layers);
    free(layers);
    count_slots(pp);
    choose_pool(pp, m);
    // Bookkeeping: per-chunk tables and the request lists (small, xmalloc).
    const size_t v = (size_t)pp->v, ms = (size_t)pp->max_slots;
    pp->acts = xcalloc(sizeof(Activations *) * v, "activation slots");        // (v)
    pp->slot_busy = xcalloc(sizeof(int *) * v, "activation slots");           // (v)
    pp->tokens = xcalloc(sizeof(int32_t *) * v, "token slots");               // (v)
    pp->targets = xcalloc(sizeof(int32_t *) * v, "token slots");              // (v)
    pp->grad_send = xcalloc(sizeof(float *) * v, "gradient buffers");         // (v)
    pp->grad_recv = xcalloc(sizeof(float *) * v, "gradient buffers");         // (v)
    pp->stash = xcalloc(sizeof(WeightGradStash *) * v, "stashes");            // (v)
    pp->stash_busy = xcalloc(sizeof(int *) * v, "stashes");                   // (v)
    for (int c = 0; c < pp->v; c++) {
        if (pp->pooled && c > 0) {  // the pool's tables, shared
            pp->acts[c] = pp->acts[0];
            pp->slot_busy[c] = pp->slot_busy[0];
        } else {
            pp->acts[c] = xcalloc(sizeof(Activations) * (size_t)pp->n_slots[c], "activation slots");
            pp->slot_busy[c] = xcalloc(sizeof(int) * (size_t)pp->n_slots[c], "activation slots");
        }
        pp->stash[c] = xcalloc(sizeof(WeightGradStash) * (size_t)(pp->n_stash[c] + 1), "stashes");
        pp->stash_busy[c] = xcalloc(sizeof(int) * (size_t)(pp->n_stash[c] + 1), "stashes");
    }
    pp->slot_chunk = xcalloc(sizeof(int) * ms, "slot shapes");                 // (max slots)
    pp->pass_s = xcalloc(sizeof(double) * 3 * v, "pass times");               // (v, 3)
    pp->pass_n = xcalloc(sizeof(int) * 3 * v, "pass times");                  // (v, 3)
    pp->slot_of = xmalloc(sizeof(int) * v * (size_t)pp->micros, "slot map");  // (v, M)
    pp->stash_of = xmalloc(sizeof(int) * v * (size_t)pp->micros, "stash map");  // (v, M)
    pp->act_send = xmalloc(sizeof(CommRequest) * v * ms, "requests");         // (v, max slots)
    pp->grad_send_req = xmalloc(sizeof(CommRequest) * v * ms, "requests");    // (v, max slots)
    pp->recv_req = xmalloc(sizeof(CommRequest) * 2 * v * ms, "requests");     // (2, v, max slots)
    pp->stats_send = xmalloc(sizeof(CommRequest) * v * ms, "requests");       // (v, max slots)
    pp->aux_send = xmalloc(sizeof(CommRequest) * v * ms, "requests");         // (v, max slots)
    for (size_t i = 0; i < v * ms; i++)
        pp->act_send[i] = pp->grad_send_req[i] = pp->stats_send[i] = pp->aux_send[i] = COMM_REQUEST_IDLE;
    for (size_t i = 0; i < 2 * v * ms; i++) pp->recv_req[i] = COMM_REQUEST_IDLE;
}

// The planned buffers (pipeline.h: pp_init), allocated or only added up.
// The pool (pipeline.h): slot 0 owns the scratch; every slot is sized for the
// largest chunk and first shaped for chunk 0.
static void plan_pool(Pipeline *pp, const LlamaModel *m, MemTally *plan_only) {
    const size_t N = (size_t)pp->B * pp->S, msg = message_bytes(pp, m);
    const int ns = pp->n_slots[0];
    size_t own = 0, other = 0;
    int any_send = 0, any_recv = 0;
    for (int c = 0; c < pp->v; c++) {
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        size_t a1 = activations_bytes(m, su, pp->B, pp->S, 1), a0 = activations_bytes(m, su, pp->B, pp->S, 0);
        own = a1 > own ? a1 : own;
        other = a0 > other ? a0 : other;
        any_send |= chunk_sends(pp, c);
        any_recv |= chunk_receives(pp, c);
    }
    StageUnits su0 = pp->virt_units[pp_virtual_stage(pp, 0)];
    const size_t pos = activations_alloc_bytes(m, su0, pp->B, pp->S, 0) - activations_bytes(m, su0, pp->B, pp->S, 0);
    for (int i = 0; i < ns; i++) {
        if (plan_only)
            plan_only->bytes[MEM_ACTIVATIONS] += (i == 0 ? own : other) + pos;
        else
            activations_alloc_pool(&pp->acts[0][i], m, su0, pp->B, pp->S, i == 0 ? NULL : &pp->acts[0][0],
                                   i == 0 ? own : other);
        pp->slot_chunk[i] = 0;
    }
    pp->tokens[0] = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * N * ns, "token slots");   // (ns, B*S)
    pp->targets[0] = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * N * ns, "token slots");  // (ns, B*S)
    pp->grad_send[0] = buf_take(plan_only, MEM_COMM, any_send ? msg * ns : 0, "gradient send");     // (ns, N, D)
    pp->grad_recv[0] = buf_take(plan_only, MEM_COMM, any_recv ? msg * ns : 0, "gradient recv");     // (ns, N, D)
    for (int c = 1; c < pp->v; c++) {
        pp->tokens[c] = pp->tokens[0];
        pp->targets[c] = pp->targets[0];
        pp->grad_send[c] = pp->grad_send[0];
        pp->grad_recv[c] = pp->grad_recv[0];
    }
}

static void plan_buffers(Pipeline *pp, const LlamaModel *m, MemTally *plan_only) {
    const size_t N = (size_t)pp->B * pp->S;  // tokens of one micro-batch on this rank
    int ends = 0;  // a chunk here is the first or the last virtual stage: it reads token ids
    for (int c = 0; c < pp->v; c++)
        ends |= pp_virtual_stage(pp, c) == 0 || pp_virtual_stage(pp, c) == pp->n_virtual - 1;
    if (ends && !plan_only) {
        const size_t bytes = sizeof(int32_t) * N * (size_t)pp->micros;
        pp->stage_tokens = ops_host_alloc(bytes, "token staging");   // (M, B*S)
        pp->stage_targets = ops_host_alloc(bytes, "token staging");  // (M, B*S)
    }
    if (pp->pooled) plan_pool(pp, m, plan_only);
    for (int c = 0; c < pp->v; c++) {
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        // What each split backward's I keeps for its W (model/activations.h).
        for (int i = 0; i < pp->n_stash[c]; i++) {
            if (plan_only)
                plan_only->bytes[MEM_ACTIVATIONS] += wstash_bytes(m, su, pp->B, pp->S);
            else
                wstash_alloc(&pp->stash[c][i], m, su, pp->B, pp->S);
        }
    }
    if (pp->pooled) return;
    for (int c = 0; c < pp->v; c++) {
        const int ns = pp->n_slots[c];
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        for (int i = 0; i < ns; i++) {
            // Slot 0 of chunk 0 allocates the backward scratch; every other slot shares it.
            const int owns_scratch = c == 0 && i == 0;
            if (plan_only)
                plan_only->bytes[MEM_ACTIVATIONS] += activations_alloc_bytes(m, su, pp->B, pp->S, owns_scratch);
            else
                activations_alloc(&pp->acts[c][i], m, su, pp->B, pp->S,
                                  owns_scratch ? NULL : &pp->acts[0][0]);
        }
        pp->tokens[c] = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * N * ns, "token slots");   // (ns, B*S)
        pp->targets[c] = buf_take(plan_only, MEM_ACTIVATIONS, sizeof(int32_t) * N * ns, "token slots");  // (ns, B*S)
        // Only a chunk with a stage before it sends input-gradients back, only one
        // with a stage after it receives output-gradients: the ends keep 0 bytes, and
        // so does the send of a chunk whose previous stage is on this rank (zb-v's
        // turn: the gradient goes straight into that chunk's receive buffer).
        const size_t msg = message_bytes(pp, m) * ns;
        pp->grad_send[c] = buf_take(plan_only, MEM_COMM, chunk_sends(pp, c) ? msg : 0, "gradient send");     // (ns, N, D)
        pp->grad_recv[c] = buf_take(plan_only, MEM_COMM, chunk_receives(pp, c) ? msg : 0, "gradient recv");  // (ns, N, D)
    }
}

void pp_init(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage, MemTally *plan_only) {
    plan_stage(pp, m, cfg, stage);
    plan_buffers(pp, m, plan_only);
}

void pp_free(Pipeline *pp) {
    for (int c = 0; c < pp->v; c++) {
        for (int i = 0; i < pp->n_stash[c]; i++) wstash_free(&pp->stash[c][i]);
        free(pp->stash[c]);
        free(pp->stash_busy[c]);
        if (pp->pooled && c > 0) continue;  // the pool's, freed with chunk 0's
        for (int i = 0; i < pp->n_slots[c]; i++) activations_free(&pp->acts[c][i]);
        free(pp->acts[c]);
        free(pp->slot_busy[c]);
        buf_free(pp->tokens[c]);
        buf_free(pp->targets[c]);
        buf_free(pp->grad_send[c]);
        buf_free(pp->grad_recv[c]);
    }
    if (pp->stage_tokens) ops_host_free(pp->stage_tokens);
    if (pp->stage_targets) ops_host_free(pp->stage_targets);
    free(pp->slot_chunk);
    free(pp->pass_s);
    free(pp->pass_n);
    free(pp->all_actions);
    free(pp->all_n);
    free(pp->acts);
    free(pp->slot_busy);
    free(pp->tokens);
    free(pp->targets);
    free(pp->grad_send);
    free(pp->grad_recv);
    free(pp->slot_of);
    free(pp->stash);
    free(pp->stash_busy);
    free(pp->stash_of);
    free(pp->n_stash);
    free(pp->act_send);
    free(pp->grad_send_req);
    free(pp->stats_send);
    free(pp->aux_send);
    free(pp->recv_req);
    free(pp->n_slots);
    free(pp->actions);
    free(pp->held);
    free(pp->virt_units);
    memset(pp, 0, sizeof *pp);
}
