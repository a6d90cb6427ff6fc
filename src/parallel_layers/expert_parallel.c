// parallel_layers/expert_parallel.c — the expert-parallel dispatch and combine
// (expert_parallel.h): counts first, then the rows, then a regrouping by expert.
#include "parallel_layers/expert_parallel.h"

#include "dist/comm.h"
#include "ops/ops.h"

size_t ep_max_rows(const ExpertParallel *ep, int N, int K, int El) {
    return (size_t)ep->size * N * (K < El ? K : El);
}

size_t ep_route_ints(const ExpertParallel *ep, int El, size_t max_rows) {
    return 2 * (size_t)ep->size * El + (size_t)(El + 1) + max_rows + 4 * (size_t)ep->size;
}

EpRoute ep_route_at(const ExpertParallel *ep, int El, size_t max_rows, int32_t *base) {
    EpRoute rt;
    rt.send = base;
    rt.recv = rt.send + (size_t)ep->size * El;
    rt.estart = rt.recv + (size_t)ep->size * El;
    rt.perm = rt.estart + El + 1;
    rt.io = rt.perm + max_rows;
    rt.rows = 0;
    rt.El = El;
    return rt;
}

void ep_route(const ExpertParallel *ep, EpRoute *rt, const int32_t *start, int El) {
    const int P = ep->size;
    for (int r = 0; r < P; r++)
        for (int e = 0; e < El; e++) rt->send[r * El + e] = start[r * El + e + 1] - start[r * El + e];
    group_alltoall_i32(GROUP_EP, rt->send, rt->recv, El);
    // Source-ordered block: source r's rows for local experts 0..El-1, then r+1's.
    // Regrouped: expert e's rows from source 0, then from source 1, ...
    int32_t total = 0;
    rt->estart[0] = 0;
    for (int e = 0; e < El; e++) {
        for (int r = 0; r < P; r++) total += rt->recv[r * El + e];
        rt->estart[e + 1] = total;
    }
    rt->rows = total;
    rt->El = El;
    // perm: regrouped row -> source-ordered row. (source r, expert e) starts in the
    // source-ordered block after every row of sources < r and r's rows of experts < e.
    int32_t next = 0;  // regrouped rows placed so far
    for (int e = 0; e < El; e++)
        for (int r = 0; r < P; r++) {
            int32_t off = 0;
            for (int q = 0; q < r; q++)
                for (int f = 0; f < El; f++) off += rt->recv[q * El + f];
            for (int f = 0; f < e; f++) off += rt->recv[r * El + f];
            for (int32_t i = 0; i < rt->recv[r * El + e]; i++) rt->perm[next++] = off + i;
        }
}

// Counts and displacements (elements) of one exchange: `out` rows per peer going
// out (rt->send summed over local experts), `in` rows per peer coming in.
static void exchange_counts(const ExpertParallel *ep, const EpRoute *rt, int El, int cols, const int32_t *out,
                            const int32_t *in) {
    const int P = ep->size;
    int32_t *sc = rt->io, *sd = sc + P, *rc = sd + P, *rd = rc + P;
    int32_t so = 0, ro = 0;
    for (int r = 0; r < P; r++) {
        int32_t s = 0, q = 0;
        for (int e = 0; e < El; e++) {
            s += out[r * El + e];
            q += in[r * El + e];
        }
        sc[r] = s * cols, sd[r] = so, rc[r] = q * cols, rd[r] = ro;
        so += sc[r], ro += rc[r];
    }
}

void ep_dispatch(const ExpertParallel *ep, const EpRoute *rt, const float *rows, float *out, float *stage,
                 int cols) {
    const int P = ep->size, El = rt->El;
    exchange_counts(ep, rt, El, cols, rt->send, rt->recv);
    const int32_t *io = rt->io;
    group_alltoallv_f32(GROUP_EP, rows, io, io + P, stage, io + 2 * P, io + 3 * P);
    gather_rows_f32(out, stage, rt->perm, (size_t)rt->rows, (size_t)cols);
}

void ep_combine(const ExpertParallel *ep, const EpRoute *rt, const float *in, float *rows, float *stage,
                int cols) {
    const int P = ep->size, El = rt->El;
    scatter_rows_f32(stage, in, rt->perm, (size_t)rt->rows, (size_t)cols);
    exchange_counts(ep, rt, El, cols, rt->recv, rt->send);
    const int32_t *io = rt->io;
    group_alltoallv_f32(GROUP_EP, stage, io, io + P, rows, io + 2 * P, io + 3 * P);
}
