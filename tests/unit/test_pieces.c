// tests/unit/test_pieces.c — how units are cut into pieces (model/param_access.h):
// every unit's pieces tile it exactly, in order; the row tables are cut at whole
// rows of D, no piece exceeds piece_max unless it is one row, the final unit's
// first piece is its norm alone; layers and small units stay whole; piece_max 0
// leaves everything whole; and tp shards (local vocab rows) cut the same way.
#include <string.h>

#include "check.h"
#include "model/llama.h"
#include "model/param_access.h"
#include "util.h"

static void check_model(const char *what, int tied, int tp, size_t piece_max) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 3;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.vocab_size = 1001;
    c.initializer_range = 0.02; c.rms_norm_eps = 1e-5; c.rope_theta = 1e4;
    c.tie_word_embeddings = tied;
    LlamaModel m;
    llama_build(&m, &c, model_tp_shard(tp, tp - 1, 0));
    const size_t D = (size_t)m.D;
    int ok_tile = 1, ok_rows = 1, ok_size = 1, ok_whole = 1, split = 0;
    for (int u = 0; u < m.n_units; u++) {
        const int n = llama_unit_n_pieces(&m, u, piece_max);
        const size_t size = m.unit_lo[u + 1] - m.unit_lo[u];
        const int row_table = u == 0 || u == m.L + 1;
        if ((!row_table || piece_max == 0 || size <= piece_max) && n != 1) ok_whole = 0;
        if (n > 1) split++;
        size_t at = m.unit_lo[u];
        for (int k = 0; k < n; k++) {
            size_t lo, hi;
            llama_unit_piece(&m, u, piece_max, k, &lo, &hi);
            if (lo != at || hi <= lo) ok_tile = 0;
            at = hi;
            if (n > 1 && ((lo - m.unit_lo[u]) % D || (hi - lo) % D)) ok_rows = 0;
            if (n > 1 && hi - lo > piece_max && hi - lo != D) ok_size = 0;
            if (n > 1 && u == m.L + 1 && k == 0 && !(lo == m.final_norm && hi == m.final_norm + D)) ok_rows = 0;
        }
        if (at != m.unit_lo[u + 1]) ok_tile = 0;
    }
    CHECK(ok_tile, "%s: every unit's pieces tile it exactly, in order", what);
    CHECK(ok_rows, "%s: pieces are whole rows of D; the final unit's first is its norm alone", what);
    CHECK(ok_size, "%s: no piece exceeds piece_max %zu (unless one row)", what, piece_max);
    CHECK(ok_whole, "%s: layers, units within piece_max and piece_max 0 stay whole", what);
    const int big = piece_max > 0 && (m.unit_lo[1] - m.unit_lo[0]) > piece_max;
    CHECK(!big || split >= (tied ? 1 : 2), "%s: the row tables larger than piece_max are split (%d units)", what,
          split);
    llama_free(&m);
}

int main(void) {
    check_model("untied, piece_max 0", 0, 1, 0);
    check_model("untied, piece_max 1000", 0, 1, 1000);
    check_model("tied, piece_max 1000", 1, 1, 1000);
    check_model("untied, piece_max 31 (below one row)", 0, 1, 31);
    check_model("untied, piece_max one row", 0, 1, 32);
    check_model("untied tp 2 (local rows), piece_max 4096", 0, 2, 4096);
    check_model("untied, piece_max above every unit", 0, 1, 1u << 30);
    // Exact counts for one case: vocab 1001 rows of 32, 1000 elements = 31 rows a piece.
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 1;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.vocab_size = 1001;
    LlamaModel m;
    llama_build(&m, &c, model_whole());
    CHECK(llama_unit_n_pieces(&m, 0, 1000) == 33, "embedding 1001 rows / 31 = 33 pieces (got %d)",
          llama_unit_n_pieces(&m, 0, 1000));
    CHECK(llama_unit_n_pieces(&m, 2, 1000) == 34, "final unit: the norm + 33 head pieces (got %d)",
          llama_unit_n_pieces(&m, 2, 1000));
    size_t lo, hi;
    llama_unit_piece(&m, 0, 1000, 32, &lo, &hi);
    CHECK(lo == 32 * 31 * 32 && hi == 1001 * 32, "the last embedding piece is rows 992..1000");
    llama_free(&m);
    return check_summary();
}
