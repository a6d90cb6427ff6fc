// model/moe.h — the sparse mixture-of-experts block of a Mixtral decoder layer (Hugging
// Face MixtralSparseMoeBlock), which takes the place of the dense SwiGLU MLP:
//
//   probs = softmax(x @ Wg^T)                    router, fp32, (N, E)
//   sel   = the k largest probs of each token    ties: the lower expert index wins
//   w     = probs[sel] / sum(probs[sel])         renormalised over the chosen k
//   out_t = sum_j w_tj * expert_{sel_tj}(x_t),   expert_e(x) = W2_e (silu(W1_e x) * (W3_e x))
//
// Dropless: every token reaches its k experts (no capacity, nothing dropped). The
// token slots are grouped by expert (ops/ops.h: moe_group), dispatched into one
// contiguous block of rows per expert, and each expert's products are two BLAS GEMMs
// over its block (gate|up fused, then down); the combine sums each token's k weighted
// rows in a fixed order, so the result is deterministic.
//
// The load-balancing loss (Switch Transformer; transformers' load_balancing_loss_func)
// of one sequence over its T = L*S (layer, token) pairs:
//   aux = E * sum_e (c_e / T) * (P_e / T)
// c_e: how many pairs chose expert e among their k, P_e: the sum of their router
// probabilities of e. c is a count (no gradient), so d aux / d probs_te = E c_e / T^2.
// femtotron takes it per sequence (what transformers computes for a batch of one) and
// averages over the step's sequences: a loss over a whole micro-batch would change
// with the micro-batch size, which the layout must not (docs/DESIGN.md, invariant 1).
//
// Shapes: N tokens (B sequences of S), D hidden, F expert width (intermediate_size),
// E experts, K experts per token. Weights (model/param_table.h): the router Wg (E, D),
// then per expert e, contiguous: w1 (F, D) | w3 (F, D) | w2 (D, F). The `experts`
// (and `dexperts`) pointers address the El = E/ep experts this rank holds, local
// expert 0 first (expert ep.rank * El of the model).
#ifndef FEMTOTRON_MOE_H
#define FEMTOTRON_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "parallel_layers/expert_parallel.h"

typedef struct {
    int N, B, S;       // tokens = B sequences of S
    int D, F, E, K;    // hidden, expert width, experts, experts per token
    ExpertParallel ep; // expert parallelism: this rank holds and computes experts [rank*El, (rank+1)*El)
} MoeDims;

// Expert rows: R = N*K on one rank (the token slots themselves); under expert
// parallelism R = ep_max_rows, the most rows this rank's experts can receive
// (parallel_layers/expert_parallel.h), and the rows are those received.
// What one layer's forward keeps for its backward.
typedef struct {
    float *probs;      // (N, E) router probabilities
    float *wts;        // (N, K) renormalised weights of the chosen experts
    int32_t *sel;      // (N, K) chosen experts, most probable first
    int32_t *start;    // (E+1) first grouped row of each expert
    int32_t *slot_of;  // (N*K) grouped row -> slot t*K + j
    int32_t *row_of;   // (N*K) slot -> grouped row
    float *gu;         // (R, 2F) gate|up pre-activations, rows grouped by expert
    float *h;          // (R, F) silu(gate) * up
    float *y;          // (N*K, D) expert outputs of this rank's slots before weighting
    float *xe;         // (R, D) ep > 1: the rows received, grouped by local expert
    int32_t *route;    // (ep_route_ints) ep > 1: the layer's EpRoute
} MoeSaved;

// Scratch shared by the layers (and by in-flight micro-batches).
typedef struct {
    float *xg;       // (N*K, D) dispatched inputs
    float *dy;       // (N*K, D) gradient of the expert outputs, then of their inputs
    float *dh;       // (R, F)
    float *dgu;      // (R, 2F)
    float *dlogits;  // (N, E)
    float *dwts;     // (N, K)
    float *ye;       // (R, D) ep > 1: the local experts' outputs, then their output gradient
    float *stage;    // (R, D) ep > 1: rows in source order around an all-to-all(v)
    double *ep_seconds;  // NULL, or += the wall time of the expert-parallel dispatch and combine
} MoeScratch;

// R of the dims (above).
size_t moe_expert_rows(const MoeDims *d);

// Floats of a MoeSaved / a MoeScratch (int32 cells counted as floats), and carving
// them out of `base` (64-byte aligned pieces, in the order of the struct).
size_t moe_saved_floats(const MoeDims *d);
size_t moe_scratch_floats(const MoeDims *d);
MoeSaved moe_saved_at(const MoeDims *d, float *base);
MoeScratch moe_scratch_at(const MoeDims *d, float *base);

// out(N, D) = the block applied to x(N, D) (overwritten). With out == NULL (full
// recomputation, from the backward) everything the backward reads is rebuilt and the
// combine is skipped.
void moe_forward(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *out,
                 const float *x, const float *router, const float *experts);
// dx(N, D) = gradient w.r.t. x (overwritten); drouter(E, D) and dexperts (the experts'
// layout) += the weight gradients. aux_g(B, E) (NULL: none) is the gradient of every
// router probability of a token of sequence b (the load-balancing loss). It is the
// three pieces below, then dx += dlogits @ Wg.
void moe_backward(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *dx,
                  float *drouter, float *dexperts, const float *dout, const float *x,
                  const float *router, const float *experts, const float *aux_g);

// The pieces of the backward, for tensor parallelism (model/llama.c): with the experts'
// width F split over the tp group, each rank's y, dx and the weights' gradient
// <dout, y> (sc->dwts) are partial sums over the group.
// 1) from dout(N, D): sc->dy = w * dout, sc->dwts(N, K) = <dout, y> of the y held here.
void moe_backward_combine(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc,
                          const float *dout);
// 2) dexperts += ..., dx(N, D) = the experts' share of the input gradient (overwritten).
void moe_backward_experts(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *dx,
                          float *dexperts, const float *x, const float *experts);
// 3) with sc->dwts whole (summed over the group): sc->dlogits(N, E), drouter += dlogits^T x.
void moe_backward_router(const MoeDims *d, const MoeSaved *s, const MoeScratch *sc, float *drouter,
                         const float *x, const float *aux_g);

#endif
