// tests/unit/test_expert_shard.c — expert parallelism stores each expert on its ep
// rank only (model/llama_build.c, engines/data_parallel.h):
//  - every ep rank's table names every tensor in the same order with the same global
//    shapes; each expert tensor is held (numel > 0) by exactly one ep rank, the one
//    whose block [r*E/ep, (r+1)*E/ep) contains it; dense tensors sit at the same
//    offsets everywhere; a rank holds the dense elements plus E/ep of the experts;
//  - a MoE layer is two pieces under ep > 1 (dense, then the experts), one otherwise,
//    and the pieces tile the layer;
//  - the data-parallel plan (dp_init, plan only) never mixes the two in a bucket,
//    gives expert buckets GROUP_EDP with |dp x cp|/ep ranks and dense ones GROUP_DPCP,
//    and its owned parts add up to dense/|dp x cp| + experts/(|dp x cp|/ep) elements.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engines/data_parallel.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "util.h"

static ModelConfig mixtral(int E, int shared) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 3;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.vocab_size = 301;
    c.initializer_range = 0.02; c.rms_norm_eps = 1e-5; c.rope_theta = 1e4;
    c.num_local_experts = E; c.num_experts_per_tok = 2; c.n_shared_experts = shared;
    return c;
}

static LlamaModel build(const ModelConfig *c, int tp, int tp_rank, int ep, int ep_rank) {
    ModelShard sh = model_tp_shard(tp, tp_rank, 0);
    sh.ep.size = ep;
    sh.ep.rank = ep_rank;
    LlamaModel m;
    llama_build(&m, c, sh);
    return m;
}

// Elements of expert tensors (held) and of the rest, in a table.
static void count(const LlamaModel *m, size_t *experts, size_t *dense) {
    *experts = *dense = 0;
    for (int i = 0; i < m->n_params; i++) *(m->params[i].expert ? experts : dense) += m->params[i].numel;
}

static void check_tables(const char *what, int E, int shared, int tp, int ep) {
    const ModelConfig c = mixtral(E, shared);
    LlamaModel whole = build(&c, tp, 0, 1, 0);
    size_t ex_all, dense_all;
    count(&whole, &ex_all, &dense_all);
    int ok_names = 1, ok_once = 1, ok_dense = 1, ok_count = 1, ok_pieces = 1;
    int *holders = xcalloc(sizeof(int) * (size_t)whole.n_params, "holders");  // (n_params)
    for (int r = 0; r < ep; r++) {
        LlamaModel m = build(&c, tp, 0, ep, r);
        if (m.n_params != whole.n_params) ok_names = 0;
        LlamaModel m0 = build(&c, tp, 0, ep, 0);
        for (int i = 0; i < m.n_params && ok_names; i++) {
            const ParamInfo *p = &m.params[i], *w = &whole.params[i];
            if (strcmp(p->name, w->name) || p->shape[0] != w->shape[0] || p->shape[1] != w->shape[1]) ok_names = 0;
            if (p->numel > 0) holders[i]++;
            if (p->expert && p->numel > 0) {  // experts.<e>. : the expert index
                int e = -1;
                const char *at = strstr(p->name, ".experts.");
                if (at) e = atoi(at + strlen(".experts."));
                if (e < r * (E / ep) || e >= (r + 1) * (E / ep) || p->numel != w->numel) ok_once = 0;
            }
            if (!p->expert && (p->offset != m0.params[i].offset || p->numel != w->numel)) ok_dense = 0;
        }
        size_t ex, dense;
        count(&m, &ex, &dense);
        if (dense != dense_all || ex * (size_t)ep != ex_all || m.num_elements != dense + ex) ok_count = 0;
        for (int u = 1; u <= m.L; u++) {
            const int n = llama_unit_n_pieces(&m, u, 0);
            size_t lo0, hi0, lo1 = 0, hi1 = 0;
            llama_unit_piece(&m, u, 0, 0, &lo0, &hi0);
            if (n == 2) llama_unit_piece(&m, u, 0, 1, &lo1, &hi1);
            const int want = ep > 1 ? 2 : 1;
            if (n != want || lo0 != m.unit_lo[u] || (n == 1 && hi0 != m.unit_lo[u + 1]) ||
                (n == 2 && (hi0 != m.layer[u - 1].experts || lo1 != hi0 || hi1 != m.unit_lo[u + 1] ||
                            hi1 - lo1 != ex / (size_t)m.L)))
                ok_pieces = 0;
        }
        llama_free(&m0);
        llama_free(&m);
    }
    for (int i = 0; i < whole.n_params; i++)
        if (holders[i] != (whole.params[i].expert ? 1 : ep)) ok_once = 0;
    CHECK(ok_names, "%s: every ep rank's table names every tensor in order with its global shape", what);
    CHECK(ok_once, "%s: each expert tensor is held whole by exactly the ep rank of its block", what);
    CHECK(ok_dense, "%s: dense tensors sit at the same offsets, whole, on every ep rank", what);
    CHECK(ok_count, "%s: a rank holds the dense elements plus 1/%d of the experts' (%zu of %zu)", what, ep,
          ex_all / (size_t)ep, ex_all);
    CHECK(ok_pieces, "%s: a layer is %s", what, ep > 1 ? "its dense piece then its experts' piece" : "one piece");
    free(holders);
    llama_free(&whole);
}

// The engine's plan for rank `rank` of dp x cp = n with ep, ZeRO stage zero.
static void check_buckets(const char *what, int n, int ep, int zero, double bucket_mb) {
    const ModelConfig c = mixtral(4, 1);
    const int rank = n - 1;
    LlamaModel m = build(&c, 1, 0, ep, rank % ep);
    ParallelConfig pc;
    memset(&pc, 0, sizeof pc);
    pc.dp = n; pc.pp = 1; pc.cp = 1; pc.tp = 1; pc.ep = ep; pc.zero = zero;
    pc.bucket_mb = bucket_mb; pc.overlap = 1;
    MemTally tally;
    memset(&tally, 0, sizeof tally);
    DataParallel dp;
    dp_init(&dp, &m, &pc, NULL, n, rank, &tally);
    size_t ex, dense;
    count(&m, &ex, &dense);
    int ok_pure = 1, ok_group = 1, n_expert = 0;
    size_t own_ex = 0, own_dense = 0;
    for (int k = 0; k < dp.n_buckets; k++) {
        const Bucket *b = &dp.buckets[k];
        const int e = dp.piece_expert[b->piece_first];
        for (int p = b->piece_first; p <= b->piece_last; p++)
            if (dp.piece_expert[p] != e) ok_pure = 0;
        n_expert += e;
        if (e ? (b->group != GROUP_EDP || b->gn != n / ep || b->grank != rank / ep)
              : (b->group != GROUP_DPCP || b->gn != n || b->grank != rank))
            ok_group = 0;
        *(e ? &own_ex : &own_dense) += b->own_hi - b->own_lo;
    }
    // Owned parts: about dense/n and experts/(n/ep) (uneven splits round per bucket).
    const double want_ex = (double)ex / (n / ep), want_dense = (double)dense / n;
    const int ok_share = own_ex > 0.9 * want_ex && own_ex < 1.1 * want_ex + 64 && own_dense > 0.9 * want_dense &&
                         own_dense < 1.1 * want_dense + 64 * dp.n_buckets;
    CHECK(ok_pure, "%s: no bucket mixes dense and expert pieces", what);
    CHECK(ok_group && (ep > 1 ? n_expert >= m.L : n_expert == 0),
          "%s: expert buckets (%d) over GROUP_EDP of %d ranks, dense ones over dp x cp of %d", what, n_expert,
          n / ep, n);
    CHECK(ok_share, "%s: owned experts %zu (want ~%.0f = experts/%d), owned dense %zu (want ~%.0f)", what, own_ex,
          want_ex, n / ep, own_dense, want_dense);
    dp_free(&dp);
    llama_free(&m);
}

int main(void) {
    check_tables("E 4, ep 2", 4, 0, 1, 2);
    check_tables("E 4, ep 4", 4, 0, 1, 4);
    check_tables("E 8, ep 2, tp 2, shared expert", 8, 1, 2, 2);
    check_tables("E 4, ep 1", 4, 0, 1, 1);
    check_buckets("dp 4 x ep 2, ZeRO-1", 4, 2, 1, 25.0);
    check_buckets("dp 4 x ep 2, ZeRO-3", 4, 2, 3, 25.0);
    check_buckets("dp 4 x ep 4, ZeRO-2 small buckets", 4, 4, 2, 0.001);
    return check_summary();
}
