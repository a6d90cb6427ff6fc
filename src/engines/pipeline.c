// engines/pipeline.c — a rank's pipeline stage(s): the split applied, the schedule
// built, the activation slots and message buffers planned, and the executor that
// runs the rank's list of forward/backward actions with non-blocking messages.
#include "engines/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "model/activation_plan.h"
#include "ops/ops.h"
#include "util.h"

// ------------------------------------------------------------------- split

static void split_model(Pipeline *pp, const LlamaModel *m, const Config *cfg) {
    const int K = pp->n_virtual;
    int *layers = xmalloc(sizeof(int) * (size_t)K, "split");  // (K) layers per virtual stage
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
    free(layers);
}

int pp_virtual_stage(const Pipeline *pp, int c) { return c * pp->pp + pp->stage; }

// ---------------------------------------------------------------- schedule

static void build_schedule(Pipeline *pp, PpSchedule sched) {
    pp->actions = xmalloc(sizeof(PpAction) * (size_t)(2 * pp->micros * pp->v), "schedule");
    pp->n_actions = pp_schedule_actions(sched, pp->micros, pp->pp, pp->stage, pp->v, pp->actions);
}

// Micro-batches of each chunk in flight at once (forwarded, not yet backwarded):
// the number of activation slots the chunk needs.
static void count_slots(Pipeline *pp) {
    pp->n_slots = xcalloc(sizeof(int) * (size_t)pp->v, "slots");
    pp_count_slots(pp->actions, pp->n_actions, pp->v, pp->n_slots);
    pp->max_slots = 1;
    for (int c = 0; c < pp->v; c++)
        if (pp->n_slots[c] > pp->max_slots) pp->max_slots = pp->n_slots[c];
}

// ------------------------------------------------------------------- setup

// The plan: split, schedule, slot counts and the bookkeeping tables (small, xmalloc).
static void plan_stage(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage) {
    memset(pp, 0, sizeof *pp);
    const TrainingConfig *tc = &cfg->training;
    pp->pp = cfg->parallel.pp;
    pp->stage = stage;
    pp->v = cfg->parallel.pp_virtual;
    pp->n_virtual = pp->pp * pp->v;
    pp->micros = tc->grad_acc_steps;
    pp->B = tc->micro_batch_size;
    pp->S = tc->seq_length / cfg->parallel.cp;  // this rank's tokens of each sequence
    pp->rows = llama_rows(m, pp->B * pp->S);
    split_model(pp, m, cfg);
    pp->held = xcalloc(sizeof(int) * (size_t)m->n_units, "held units");
    for (int c = 0; c < pp->v; c++) {
        StageUnits su = pp->virt_units[pp_virtual_stage(pp, c)];
        for (int u = su.u0; u <= su.u1; u++) pp->held[u] = 1;
    }
    // Tied embeddings over several stages: the stage with the head also holds the
    // embedding, as a copy (held 2) kept equal to the first stage's by summing the
    // two gradients over the embedding group (engines/data_parallel.h).
    if (m->cfg.tie_word_embeddings && pp->held[m->L + 1] && !pp->held[0]) pp->held[0] = 2;
    build_schedule(pp, cfg->parallel.pp_schedule);
    count_slots(pp);
    // Bookkeeping: per-chunk tables and the request lists (small, xmalloc).
    const size_t v = (size_t)pp->v, ms = (size_t)pp->max_slots;
    pp->acts = xcalloc(sizeof(Activations *) * v, "activation slots");        // (v)
    pp->slot_busy = xcalloc(sizeof(int *) * v, "activation slots");           // (v)
    pp->tokens = xcalloc(sizeof(int32_t *) * v, "token slots");               // (v)
    pp->targets = xcalloc(sizeof(int32_t *) * v, "token slots");              // (v)
    pp->grad_send = xcalloc(sizeof(float *) * v, "gradient buffers");         // (v)
    pp->grad_recv = xcalloc(sizeof(float *) * v, "gradient buffers");         // (v)
    for (int c = 0; c < pp->v; c++) {
        pp->acts[c] = xcalloc(sizeof(Activations) * (size_t)pp->n_slots[c], "activation slots");
        pp->slot_busy[c] = xcalloc(sizeof(int) * (size_t)pp->n_slots[c], "activation slots");
    }
    pp->slot_of = xmalloc(sizeof(int) * v * (size_t)pp->micros, "slot map");  // (v, M)
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
static void plan_buffers(Pipeline *pp, const LlamaModel *m, MemTally *plan_only) {
    const size_t N = (size_t)pp->B * pp->S;  // tokens of one micro-batch on this rank
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
        // with a stage after it receives output-gradients: the ends keep 0 bytes.
        const int vs = pp_virtual_stage(pp, c);
        const size_t msg = sizeof(float) * N * m->D * ns;
        pp->grad_send[c] = buf_take(plan_only, MEM_COMM, vs > 0 ? msg : 0, "gradient send");                 // (ns, N, D)
        pp->grad_recv[c] = buf_take(plan_only, MEM_COMM, vs < pp->n_virtual - 1 ? msg : 0, "gradient recv");  // (ns, N, D)
    }
}

void pp_init(Pipeline *pp, const LlamaModel *m, const Config *cfg, int stage, MemTally *plan_only) {
    plan_stage(pp, m, cfg, stage);
    plan_buffers(pp, m, plan_only);
}

void pp_free(Pipeline *pp) {
    for (int c = 0; c < pp->v; c++) {
        for (int i = 0; i < pp->n_slots[c]; i++) activations_free(&pp->acts[c][i]);
        free(pp->acts[c]);
        free(pp->slot_busy[c]);
        buf_free(pp->tokens[c]);
        buf_free(pp->targets[c]);
        buf_free(pp->grad_send[c]);
        buf_free(pp->grad_recv[c]);
    }
    free(pp->acts);
    free(pp->slot_busy);
    free(pp->tokens);
    free(pp->targets);
    free(pp->grad_send);
    free(pp->grad_recv);
    free(pp->slot_of);
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

// ---------------------------------------------------------------- executor

// Messages between virtual stages k and k+1 use tag 2k (activations) and 2k + 1
// (gradients); MPI keeps messages with the same source and tag in order, and both
// sides handle a chunk's micro-batches in increasing order. The load-balancing
// statistics of a mixture of experts use MOE_TAG + 2k (forward) and + 2k + 1 (back).
#define MOE_TAG 16384
static int rank_of_virtual(const Pipeline *pp, int vs) { return vs % pp->pp; }

typedef struct {
    Pipeline *pp;
    const LlamaModel *m;
    const ParamAccess *pa;
    const PpCallbacks *cb;
    size_t nd;  // B*S*D elements of an activation message
} Exec;

static int *slot_ref(Pipeline *pp, int c, int micro) { return &pp->slot_of[(size_t)c * pp->micros + micro]; }

static size_t slot_index(const Pipeline *pp, int c, int slot) { return (size_t)c * pp->max_slots + slot; }

static void trace(const Exec *x, const char *what, int c, int micro, double t0) {
    if (x->cb->trace) x->cb->trace(x->cb->ctx, what, c, micro, t0, now_seconds());
}

// Make sure the message an action waits for has a receive posted (and, for a
// forward, that the micro-batch has an activation slot). Looking ahead, a forward
// whose slot is still in use by the current action is left for its own turn.
static void post_input(Exec *x, const PpAction *act, int lookahead) {
    Pipeline *pp = x->pp;
    int c = act->chunk, vs = pp_virtual_stage(pp, c), *slot = slot_ref(pp, c, act->micro);
    if (act->forward && *slot < 0) {
        int s = 0;
        while (s < pp->n_slots[c] && pp->slot_busy[c][s]) s++;
        if (s == pp->n_slots[c]) {
            if (lookahead) return;
            die("pipeline: no free activation slot for chunk %d (schedule bug)", c);
        }
        pp->slot_busy[c][s] = 1;
        *slot = s;
        if (vs > 0) {
            Activations *a = &pp->acts[c][s];
            pp->recv_req[slot_index(pp, c, s)] =
                group_irecv_f32(GROUP_PP, a->resid, x->nd, rank_of_virtual(pp, vs - 1), 2 * (vs - 1));
        }
    } else if (!act->forward && vs < pp->n_virtual - 1) {
        CommRequest *r = &pp->recv_req[(size_t)pp->v * pp->max_slots + slot_index(pp, c, *slot)];
        if (r->slot < 0)
            *r = group_irecv_f32(GROUP_PP, pp->grad_recv[c] + (size_t)*slot * x->nd, x->nd,
                                 rank_of_virtual(pp, vs + 1), 2 * vs + 1);
    }
}

// Forward of (chunk c, micro-batch `micro`) in activation slot `slot`.
static double run_forward(Exec *x, int c, int micro, int slot, float grad_scale, int want_grads) {
    Pipeline *pp = x->pp;
    const int vs = pp_virtual_stage(pp, c);
    const size_t bs = (size_t)pp->acts[c][slot].B * pp->acts[c][slot].S;
    Activations *a = &pp->acts[c][slot];
    int32_t *tokens = pp->tokens[c] + (size_t)slot * bs, *targets = pp->targets[c] + (size_t)slot * bs;
    if (vs == 0 || vs == pp->n_virtual - 1) x->cb->fill_batch(x->cb->ctx, micro, tokens, targets);
    double t0 = now_seconds();
    const int stats = want_grads && x->m->moe_aux;  // the load-balancing statistics travel too
    const size_t n_stats = 2 * (size_t)a->B * x->m->E;   // (2, B, E) counts and probability sums
    if (vs > 0) {
        comm_wait(&pp->recv_req[slot_index(pp, c, slot)], "pipeline activation receive");
        if (stats) {  // sent right after the activation: already on its way
            CommRequest r = group_irecv_f32(GROUP_PP, a->moe_stats, n_stats, rank_of_virtual(pp, vs - 1),
                                            MOE_TAG + 2 * (vs - 1));
            comm_wait(&r, "pipeline load-balancing statistics receive");
        }
        trace(x, "recv", c, micro, t0);
    }
    t0 = now_seconds();
    double loss = llama_stage_forward(x->m, x->pa, a, tokens, a->resid, targets, grad_scale, want_grads);
    if (want_grads && x->m->moe_aux && vs == pp->n_virtual - 1) pp->moe_aux += a->moe_aux;
    trace(x, want_grads ? "forward" : "validation", c, micro, t0);
    if (vs < pp->n_virtual - 1) {
        pp->act_send[slot_index(pp, c, slot)] = group_isend_f32(
            GROUP_PP, llama_stage_output(x->m, a), x->nd, rank_of_virtual(pp, vs + 1), 2 * vs);
        if (stats)
            pp->stats_send[slot_index(pp, c, slot)] = group_isend_f32(
                GROUP_PP, a->moe_stats, n_stats, rank_of_virtual(pp, vs + 1), MOE_TAG + 2 * vs);
    }
    return loss;
}

static void run_backward(Exec *x, const PpAction *act) {
    Pipeline *pp = x->pp;
    const int c = act->chunk, vs = pp_virtual_stage(pp, c);
    int *slot_p = slot_ref(pp, c, act->micro), slot = *slot_p;
    const size_t si = slot_index(pp, c, slot), bs = (size_t)pp->acts[c][slot].B * pp->acts[c][slot].S;
    Activations *a = &pp->acts[c][slot];
    const float *dx_out = NULL;
    double t0 = now_seconds();
    const size_t BE = (size_t)a->B * x->m->E;
    if (vs < pp->n_virtual - 1) {
        comm_wait(&pp->recv_req[(size_t)pp->v * pp->max_slots + si], "pipeline gradient receive");
        dx_out = pp->grad_recv[c] + (size_t)slot * x->nd;
        if (x->m->moe_aux) {  // the load-balancing gradient, sent right after the gradient
            CommRequest r = group_irecv_f32(GROUP_PP, a->moe_stats + 2 * BE, BE, rank_of_virtual(pp, vs + 1),
                                            MOE_TAG + 2 * vs + 1);
            comm_wait(&r, "pipeline load-balancing gradient receive");
        }
        trace(x, "recv", c, act->micro, t0);
    }
    t0 = now_seconds();
    const float *dx_in = llama_stage_backward(x->m, x->pa, a, pp->tokens[c] + (size_t)slot * bs, dx_out);
    trace(x, "backward", c, act->micro, t0);
    if (vs > 0) {
        float *buf = pp->grad_send[c] + (size_t)slot * x->nd;
        comm_wait(&pp->grad_send_req[si], "pipeline gradient send");  // buffer free again
        copy_f32(buf, dx_in, x->nd);
        pp->grad_send_req[si] = group_isend_f32(GROUP_PP, buf, x->nd, rank_of_virtual(pp, vs - 1), 2 * (vs - 1) + 1);
        if (x->m->moe_aux) {  // its own copy (moe_stats' fourth block): the slot may be reused
            comm_wait(&pp->aux_send[si], "pipeline load-balancing gradient send");
            copy_f32(a->moe_stats + 3 * BE, a->moe_stats + 2 * BE, BE);
            pp->aux_send[si] = group_isend_f32(GROUP_PP, a->moe_stats + 3 * BE, BE, rank_of_virtual(pp, vs - 1),
                                               MOE_TAG + 2 * (vs - 1) + 1);
        }
    }
    // The activation this slot sent forward must have left before the slot is reused.
    comm_wait(&pp->act_send[si], "pipeline activation send");
    comm_wait(&pp->stats_send[si], "pipeline load-balancing statistics send");
    pp->slot_busy[c][slot] = 0;
    *slot_p = -1;
}

// Elements of one activation message: this rank's rows of the residual stream
// (a token shard under sequence parallelism) times the hidden size.
static size_t message_elems(const Pipeline *pp, const LlamaModel *m) { return (size_t)pp->rows * m->D; }

static void reset_slots(Pipeline *pp) {
    for (size_t i = 0; i < (size_t)pp->v * pp->micros; i++) pp->slot_of[i] = -1;
    for (int c = 0; c < pp->v; c++) memset(pp->slot_busy[c], 0, sizeof(int) * (size_t)pp->n_slots[c]);
}

static void drain_sends(Pipeline *pp) {
    for (size_t i = 0; i < (size_t)pp->v * pp->max_slots; i++) {
        comm_wait(&pp->act_send[i], "pipeline activation send");
        comm_wait(&pp->grad_send_req[i], "pipeline gradient send");
        comm_wait(&pp->stats_send[i], "pipeline load-balancing statistics send");
        comm_wait(&pp->aux_send[i], "pipeline load-balancing gradient send");
    }
}

double pp_run_step(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa, const PpCallbacks *cb,
                   float grad_scale) {
    Exec x = {pp, m, pa, cb, message_elems(pp, m)};
    reset_slots(pp);
    double loss = 0.0;
    pp->moe_aux = 0.0;
    for (int k = 0; k < pp->n_actions; k++) {
        post_input(&x, &pp->actions[k], 0);
        // Post the next action's receive now, so its message can land while this
        // action computes.
        if (k + 1 < pp->n_actions) post_input(&x, &pp->actions[k + 1], 1);
        const PpAction *act = &pp->actions[k];
        if (act->forward)
            loss += run_forward(&x, act->chunk, act->micro, *slot_ref(pp, act->chunk, act->micro),
                                grad_scale, 1);
        else
            run_backward(&x, &pp->actions[k]);
    }
    drain_sends(pp);
    pp->moe_ep_s = 0.0;  // every slot's expert-parallel exchange time, then reset for the next step
    for (int c = 0; c < pp->v; c++)
        for (int i = 0; i < pp->n_slots[c]; i++) {
            pp->moe_ep_s += pp->acts[c][i].moe_ep_s;
            pp->acts[c][i].moe_ep_s = 0.0;
        }
    return loss;
}

double pp_run_forward(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa,
                      const PpCallbacks *cb, int micros) {
    Exec x = {pp, m, pa, cb, message_elems(pp, m)};
    double loss = 0.0;
    // Forward only, one micro-batch at a time through every chunk in order, in
    // slot 0 of each chunk; each message is received before the next is posted.
    for (int mb = 0; mb < micros; mb++)
        for (int c = 0; c < pp->v; c++) {
            const int vs = pp_virtual_stage(pp, c);
            const size_t si = slot_index(pp, c, 0);
            if (vs > 0)
                pp->recv_req[si] = group_irecv_f32(GROUP_PP, pp->acts[c][0].resid, x.nd,
                                                   rank_of_virtual(pp, vs - 1), 2 * (vs - 1));
            loss += run_forward(&x, c, mb, 0, 0.0f, 0);
            comm_wait(&pp->act_send[si], "pipeline activation send");
        }
    return loss;
}
