// engines/pipeline_exec.c — the executor of a rank's pipeline stage(s): it runs the
// rank's list of forward, backward and weight-gradient actions (built and planned by
// engines/pipeline.c) with non-blocking messages between virtual stages.
#include "engines/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "model/activation_plan.h"
#include "ops/ops.h"
#include "util.h"

// ---------------------------------------------------------------- executor

// Messages between virtual stages k and k+1 use tag 2k (activations) and 2k + 1
// (gradients); MPI keeps messages with the same source and tag in order, and both
// sides handle a chunk's micro-batches in increasing order. The load-balancing
// statistics of a mixture of experts use MOE_TAG + 2k (forward) and + 2k + 1 (back).
// Two neighbouring virtual stages on the same rank (the turn of zb-v's V) exchange
// no message: the forward reads the previous chunk's output from its slot (held
// until that chunk's backward, which comes later), and the backward writes the
// input gradient straight into the previous chunk's gradient-receive buffer (zb-v
// refuses mixtures of experts, whose statistics would need the same).
#define MOE_TAG 16384
static int rank_of_virtual(const Pipeline *pp, int vs) { return pp_rank_of_virtual(pp->sched, pp->pp, vs); }

// This rank's chunk holding virtual stage vs, or -1 when another rank holds it.
static int local_chunk(const Pipeline *pp, int vs) {
    if (vs < 0 || vs >= pp->n_virtual || rank_of_virtual(pp, vs) != pp->stage) return -1;
    return pp_chunk_of_virtual(pp->sched, pp->pp, vs);
}

// This rank's ends of the messages between virtual stages k and k+1 (the tags
// above), with `peer` holding the other one: activations and statistics go
// forward, gradients back, so the rank of stage k + 1 (downstream) receives the
// first of each pair and sends the second. Returns how many it wrote (2, or 4 with
// the statistics).
static int boundary_ends(CommLink *e, int peer, int k, int downstream, int moe) {
    int n = 0;
    for (int base = 0; base <= (moe ? MOE_TAG : 0); base += MOE_TAG) {
        e[n++] = (CommLink){peer, base + 2 * k, !downstream};
        e[n++] = (CommLink){peer, base + 2 * k + 1, downstream};
    }
    return n;
}

void pp_open_links(const Pipeline *pp, const LlamaModel *m) {
    CommLink *ends = xcalloc(sizeof(CommLink) * 8 * (size_t)pp->v, "pipeline links");  // (8 v): 4 per chunk and side
    int n = 0;
    for (int c = 0; c < pp->v; c++) {
        const int vs = pp_virtual_stage(pp, c);
        if (vs > 0 && local_chunk(pp, vs - 1) < 0)
            n += boundary_ends(ends + n, rank_of_virtual(pp, vs - 1), vs - 1, 1, m->moe_aux);
        if (vs < pp->n_virtual - 1 && local_chunk(pp, vs + 1) < 0)
            n += boundary_ends(ends + n, rank_of_virtual(pp, vs + 1), vs, 0, m->moe_aux);
    }
    group_open_links(GROUP_PP, ends, n);
    free(ends);
}

typedef struct {
    Pipeline *pp;
    const LlamaModel *m;
    const ParamAccess *pa;
    const PpCallbacks *cb;
    size_t nd;          // B*S*D elements of an activation message
    double *loss_sum;   // (1) the caller's device accumulator of the cross-entropy
} Exec;

static int *slot_ref(Pipeline *pp, int c, int micro) { return &pp->slot_of[(size_t)c * pp->micros + micro]; }

// Requests per slot: a pooled slot's are the same whichever chunk holds it.
static size_t slot_index(const Pipeline *pp, int c, int slot) {
    return (size_t)(pp->pooled ? 0 : c) * pp->max_slots + slot;
}

// The slot a chunk's validation forward uses: slot 0 of its own, or its own slot of the pool.
static int val_slot(const Pipeline *pp, int c) { return pp->pooled ? c : 0; }

// A pooled slot taken by chunk c is carved for c's stage; when that is slot 0, the
// owner of the shared scratch, every other slot points at the moved scratch again
// (scratch holds nothing from one action to the next).
static void shape_slot(Exec *x, int c, int s) {
    Pipeline *pp = x->pp;
    if (!pp->pooled || pp->slot_chunk[s] == c) return;
    activations_reshape(&pp->acts[c][s], x->m, pp->virt_units[pp_virtual_stage(pp, c)], s ? &pp->acts[c][0] : NULL);
    pp->slot_chunk[s] = c;
    if (s == 0)
        for (int i = 1; i < pp->n_slots[c]; i++)
            activations_reshape(&pp->acts[c][i], x->m, pp->virt_units[pp_virtual_stage(pp, pp->slot_chunk[i])],
                                &pp->acts[c][0]);
}

// The clock at a pass's start or end (pp->time_passes: after the device's work).
static double pass_clock(const Exec *x) {
    if (x->pp->time_passes) ops_sync();
    return now_seconds();
}

static void trace(const Exec *x, const char *what, int c, int micro, double t0) {
    if (x->cb->trace) x->cb->trace(x->cb->ctx, what, c, micro, t0, now_seconds());
}

// A training pass of chunk c ended: its time goes to the step's pass timers
// (op 0 F, 1 I or B, 2 W; parallel.pp_costs = "measure" reads them), then the trace.
static void pass_done(const Exec *x, const char *what, int op, int c, int micro, double t0) {
    x->pp->pass_s[c * 3 + op] += pass_clock(x) - t0;
    x->pp->pass_n[c * 3 + op]++;
    trace(x, what, c, micro, t0);
}

// Make sure the message an action waits for has a receive posted (and, for a
// forward, that the micro-batch has an activation slot). Looking ahead, a forward
// whose slot is still in use by the current action is left for its own turn.
static void post_input(Exec *x, const PpAction *act, int lookahead) {
    Pipeline *pp = x->pp;
    int c = act->chunk, vs = pp_virtual_stage(pp, c), *slot = slot_ref(pp, c, act->micro);
    if (act->op == PP_OP_F && *slot < 0) {
        int s = 0;
        while (s < pp->n_slots[c] && pp->slot_busy[c][s]) s++;
        if (s == pp->n_slots[c]) {
            if (lookahead) return;
            die("pipeline: no free activation slot for chunk %d (schedule bug)", c);
        }
        pp->slot_busy[c][s] = 1;
        *slot = s;
        shape_slot(x, c, s);
        if (vs > 0 && local_chunk(pp, vs - 1) < 0) {
            Activations *a = &pp->acts[c][s];
            pp->recv_req[slot_index(pp, c, s)] =
                group_irecv_f32(GROUP_PP, a->resid, x->nd, rank_of_virtual(pp, vs - 1), 2 * (vs - 1));
        }
    } else if ((act->op == PP_OP_B || act->op == PP_OP_I) && vs < pp->n_virtual - 1 &&
               local_chunk(pp, vs + 1) < 0) {
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
    if (vs == 0 || vs == pp->n_virtual - 1) {
        // The host writes the ids into a staging row and queues their copies into the
        // slot behind the ops of the micro-batch that used the slot before (the
        // embedding's backward reads its ids): no wait. A step's micro-batches each
        // have a row, free again at the next step (every step ends with a wait);
        // validation's micro-batches run past M and reuse the rows after a wait each
        // time round. (A rank with both ends, zb-v's first, writes a row twice with
        // the same ids.)
        const int row = micro % pp->micros;
        if (!want_grads && row == 0 && micro > 0) ops_sync();
        int32_t *st = pp->stage_tokens + (size_t)row * bs, *sg = pp->stage_targets + (size_t)row * bs;
        x->cb->fill_batch(x->cb->ctx, micro, st, sg);
        ops_upload_queued(tokens, st, sizeof(int32_t) * bs);
        ops_upload_queued(targets, sg, sizeof(int32_t) * bs);
    }
    double t0 = now_seconds();
    const int stats = want_grads && x->m->moe_aux;  // the load-balancing statistics travel too
    const size_t n_stats = 2 * (size_t)a->B * x->m->E;   // (2, B, E) counts and probability sums
    const float *x_in = a->resid;
    const int prev = vs > 0 ? local_chunk(pp, vs - 1) : -1;
    if (prev >= 0) {  // the previous virtual stage is here: its output, in its slot
        const int ps = want_grads ? *slot_ref(pp, prev, micro) : val_slot(pp, prev);
        x_in = llama_stage_output(x->m, &pp->acts[prev][ps]);
    } else if (vs > 0) {
        comm_wait(&pp->recv_req[slot_index(pp, c, slot)], "pipeline activation receive");
        if (stats) {  // sent right after the activation: already on its way
            CommRequest r = group_irecv_f32(GROUP_PP, a->moe_stats, n_stats, rank_of_virtual(pp, vs - 1),
                                            MOE_TAG + 2 * (vs - 1));
            comm_wait(&r, "pipeline load-balancing statistics receive");
        }
        trace(x, "recv", c, micro, t0);
    }
    t0 = pass_clock(x);
    double loss = llama_stage_forward(x->m, x->pa, a, tokens, x_in, targets, grad_scale, want_grads, x->loss_sum);
    if (want_grads && x->m->moe_aux && vs == pp->n_virtual - 1) pp->moe_aux += a->moe_aux;
    if (want_grads)
        pass_done(x, "forward", 0, c, micro, t0);
    else
        trace(x, "validation", c, micro, t0);
    if (vs < pp->n_virtual - 1 && local_chunk(pp, vs + 1) < 0) {
        pp->act_send[slot_index(pp, c, slot)] = group_isend_f32(
            GROUP_PP, llama_stage_output(x->m, a), x->nd, rank_of_virtual(pp, vs + 1), 2 * vs);
        if (stats)
            pp->stats_send[slot_index(pp, c, slot)] = group_isend_f32(
                GROUP_PP, a->moe_stats, n_stats, rank_of_virtual(pp, vs + 1), MOE_TAG + 2 * vs);
    }
    return loss;
}

// The activation slot of (c, micro) is free again once its backward is complete
// (B, or the W of a split one); the activation it sent forward must have left first.
static void free_slot(Pipeline *pp, int c, int micro) {
    int *slot_p = slot_ref(pp, c, micro);
    comm_wait(&pp->act_send[slot_index(pp, c, *slot_p)], "pipeline activation send");
    comm_wait(&pp->stats_send[slot_index(pp, c, *slot_p)], "pipeline load-balancing statistics send");
    pp->slot_busy[c][*slot_p] = 0;
    *slot_p = -1;
}

// A free weight-gradient stash of chunk c for micro-batch `micro` (an I).
static WeightGradStash *take_stash(Pipeline *pp, int c, int micro) {
    int i = 0;
    while (i < pp->n_stash[c] && pp->stash_busy[c][i]) i++;
    if (i == pp->n_stash[c]) die("pipeline: no free weight-gradient stash for chunk %d (schedule bug)", c);
    pp->stash_busy[c][i] = 1;
    pp->stash_of[(size_t)c * pp->micros + micro] = i;
    return &pp->stash[c][i];
}

// A backward (B) or the input-gradient half of a split one (I): both wait for the
// output gradient (or start from the loss) and send the input gradient back.
static void run_backward(Exec *x, const PpAction *act) {
    Pipeline *pp = x->pp;
    const int c = act->chunk, vs = pp_virtual_stage(pp, c);
    const int slot = *slot_ref(pp, c, act->micro);
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
    t0 = pass_clock(x);
    const float *dx_in;
    if (act->op == PP_OP_I) {
        dx_in = llama_stage_backward_input(x->m, x->pa, a, dx_out, take_stash(pp, c, act->micro));
        pass_done(x, "backward-input", 1, c, act->micro, t0);
    } else {
        dx_in = llama_stage_backward(x->m, x->pa, a, pp->tokens[c] + (size_t)slot * bs, dx_out);
        pass_done(x, "backward", 1, c, act->micro, t0);
    }
    const int prev = vs > 0 ? local_chunk(pp, vs - 1) : -1;
    if (prev >= 0) {  // the previous virtual stage is here: where its receive would land
        copy_f32(pp->grad_recv[prev] + (size_t)*slot_ref(pp, prev, act->micro) * x->nd, dx_in, x->nd);
    } else if (vs > 0) {
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
    if (act->op == PP_OP_B) free_slot(pp, c, act->micro);
}

// The weight-gradient half of a split backward (W): no message, then the
// micro-batch's slot and stash are free.
static void run_weight(Exec *x, const PpAction *act) {
    Pipeline *pp = x->pp;
    const int c = act->chunk, slot = *slot_ref(pp, c, act->micro);
    int *stash_p = &pp->stash_of[(size_t)c * pp->micros + act->micro];
    const size_t bs = (size_t)pp->acts[c][slot].B * pp->acts[c][slot].S;
    double t0 = pass_clock(x);
    llama_stage_backward_weight(x->m, x->pa, &pp->acts[c][slot], pp->tokens[c] + (size_t)slot * bs,
                                &pp->stash[c][*stash_p]);
    pass_done(x, "backward-weight", 2, c, act->micro, t0);
    pp->stash_busy[c][*stash_p] = 0;
    *stash_p = -1;
    free_slot(pp, c, act->micro);
}

// Elements of one activation message: this rank's rows of the residual stream
// (a token shard under sequence parallelism) times the hidden size.
static size_t message_elems(const Pipeline *pp, const LlamaModel *m) { return (size_t)pp->rows * m->D; }

static void reset_slots(Pipeline *pp) {
    for (size_t i = 0; i < (size_t)pp->v * pp->micros; i++) pp->slot_of[i] = pp->stash_of[i] = -1;
    for (int c = 0; c < pp->v; c++) {
        memset(pp->slot_busy[c], 0, sizeof(int) * (size_t)pp->n_slots[c]);
        memset(pp->stash_busy[c], 0, sizeof(int) * (size_t)pp->n_stash[c]);
    }
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
                   float grad_scale, double *loss_sum) {
    Exec x = {pp, m, pa, cb, message_elems(pp, m), loss_sum};
    reset_slots(pp);
    for (int i = 0; i < 3 * pp->v; i++) pp->pass_s[i] = 0.0, pp->pass_n[i] = 0;
    double loss = 0.0;  // the part known on the host (load-balancing losses)
    pp->moe_aux = 0.0;
    for (int k = 0; k < pp->n_actions; k++) {
        post_input(&x, &pp->actions[k], 0);
        // Post the next receiving action's receive now, so its message can land
        // while this action computes (a W receives nothing: look past it).
        int next = k + 1;
        while (next < pp->n_actions && pp->actions[next].op == PP_OP_W) next++;
        if (next < pp->n_actions) post_input(&x, &pp->actions[next], 1);
        const PpAction *act = &pp->actions[k];
        if (act->op == PP_OP_F)
            loss += run_forward(&x, act->chunk, act->micro, *slot_ref(pp, act->chunk, act->micro),
                                grad_scale, 1);
        else if (act->op == PP_OP_W)
            run_weight(&x, act);
        else
            run_backward(&x, act);
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

void pp_run_forward(Pipeline *pp, const LlamaModel *m, const ParamAccess *pa, const PpCallbacks *cb,
                    int micros, double *loss_sum) {
    Exec x = {pp, m, pa, cb, message_elems(pp, m), loss_sum};
    // Forward only, one micro-batch at a time through every chunk in order, in
    // slot 0 of each chunk (of a pool: slot c); each message is received before the
    // next is posted.
    for (int mb = 0; mb < micros; mb++)
        for (int c = 0; c < pp->v; c++) {
            const int vs = pp_virtual_stage(pp, c), s = val_slot(pp, c);
            const size_t si = slot_index(pp, c, s);
            shape_slot(&x, c, s);
            if (vs > 0 && local_chunk(pp, vs - 1) < 0)
                pp->recv_req[si] = group_irecv_f32(GROUP_PP, pp->acts[c][s].resid, x.nd,
                                                   rank_of_virtual(pp, vs - 1), 2 * (vs - 1));
            run_forward(&x, c, mb, s, 0.0f, 0);  // no load-balancing loss: nothing on the host
            comm_wait(&pp->act_send[si], "pipeline activation send");
        }
}
