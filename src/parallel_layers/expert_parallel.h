// parallel_layers/expert_parallel.h — expert parallelism (parallel.ep): the E experts
// of a mixture-of-experts layer are split over the ep ranks of a group taken from
// within dp x cp (dist/grid.h), rank r computing experts [r*El, (r+1)*El), El = E/ep,
// for the tokens of every rank of its group (GShard, Lepikhin et al. 2020; as
// Megatron-LM and torchtitan place it).
//
// Dispatch (one layer, forward): a rank's token slots are already grouped by expert
// (model/moe.h), so the rows bound for rank r are one contiguous block. The per-
// (destination, local expert) row counts travel first (all-to-all), then the rows
// (all-to-all(v)); they land grouped by source, and a permutation regroups them by
// local expert, so that each expert's GEMMs read one contiguous block. Combine runs
// the same exchange backwards: the expert outputs are put back in source order and
// return to the ranks that sent the tokens, in the order they left. The backward
// sends the output gradients along the dispatch path and the input gradients back
// along the combine path, reusing the counts of the forward.
//
// Worst case planned (docs/DESIGN.md, invariant 3): every token of the ep ranks of
// the group sends min(k, El) of its k slots to this rank's experts, so at most
// ep * N * min(k, El) rows arrive (ep_max_rows); dropless, nothing is ever cut.
//
// Nothing here knows the model: the pieces take the group (ExpertParallel), the
// routing counts and the buffers. Communication goes through dist/comm.h (GROUP_EP).
#ifndef FEMTOTRON_EXPERT_PARALLEL_H
#define FEMTOTRON_EXPERT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

// This rank's place in its expert-parallel group.
typedef struct {
    int size, rank;  // ep group size and index (1, 0: no expert parallelism)
} ExpertParallel;

// The most rows a rank receives from its group: N tokens per rank, k slots each, El
// local experts.
size_t ep_max_rows(const ExpertParallel *ep, int N, int K, int El);

// One layer's routing over the group, filled by ep_route. Counts are in rows.
typedef struct {
    int32_t *send;   // (ep, El) rows this rank sends to rank r's local expert e
    int32_t *recv;   // (ep, El) rows this rank receives from rank r for its local expert e
    int32_t *estart; // (El + 1) first row of each local expert in the regrouped block
    int32_t *perm;   // (max rows) regrouped row -> row in the source-ordered block
    int32_t *io;     // (4, ep) send counts, send displacements, receive counts and
                     // displacements of the current exchange (elements)
    int rows;        // rows received (the regrouped block's length)
    int El;          // local experts
} EpRoute;

// Int32 cells of an EpRoute's arrays, and carving them out of `base` in that order.
size_t ep_route_ints(const ExpertParallel *ep, int El, size_t max_rows);
EpRoute ep_route_at(const ExpertParallel *ep, int El, size_t max_rows, int32_t *base);

// From start(E+1), the first grouped row of every expert on this rank (model/moe.h),
// exchange the counts and build the regrouping (collective over the ep group).
void ep_route(const ExpertParallel *ep, EpRoute *rt, const int32_t *start, int El);
// Forward along the dispatch path: rows(N*K, cols) grouped by expert -> out(rt->rows,
// cols) regrouped by local expert; stage(max rows, cols) is scratch.
void ep_dispatch(const ExpertParallel *ep, const EpRoute *rt, const float *rows, float *out, float *stage,
                 int cols);
// Back along the combine path: in(rt->rows, cols) by local expert -> rows(N*K, cols)
// in the order they were dispatched; stage(max rows, cols) is scratch.
void ep_combine(const ExpertParallel *ep, const EpRoute *rt, const float *in, float *rows, float *stage,
                int cols);

#endif
