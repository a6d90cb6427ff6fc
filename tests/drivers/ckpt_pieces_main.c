// tests/drivers/ckpt_pieces_main.c — MPI driver for tests/shell/test_checkpoint_mpi.sh: sharded
// checkpoint writes and reads (checkpoint_save_pieces, checkpoint_load_pieces,
// load_hf_weights_pieces) on N ranks.
//
//   ckpt_pieces_main ref DIR      1 rank: checkpoint_save of the whole buffers into
//                                 DIR/untied and DIR/tied (the reference files)
//   ckpt_pieces_main save DIR     N ranks: each saves its own uneven pieces (a
//                                 different split per kind), then loads back with a
//                                 different, overlapping partition and checks every
//                                 value bit for bit; rank 0 prints PASS/FAIL lines
//   ckpt_pieces_main gap DIR      pieces that leave a gap: must die naming it
//   ckpt_pieces_main overlap DIR  pieces that overlap: must die naming it
//   ckpt_pieces_main tp T DIR FROM
//                                 tensor parallel, T | N: rank r is tp rank r % T of
//                                 model_tp_shard and, with N > T, the N / T ranks of
//                                 one tp rank split its flat order unevenly. Saves
//                                 DIR/tp_untied and DIR/tp_tied (compared with the
//                                 1-rank reference by the script), then loads FROM's
//                                 checkpoints (any tp) into tp = T with other uneven
//                                 pieces, into tp = 1, and as Hugging Face weights,
//                                 checking every value and that vocab padding is 0
//   ckpt_pieces_main tpgap DIR    2 ranks, tp = 2: tp rank 1 leaves a gap: must die
//   ckpt_pieces_main tpmix DIR    2 ranks: rank 0 runs tp = 2, rank 1 tp = 1: must die
//
// Every value is a function of (kind, GLOBAL flat index: the element's position in
// the files), so any rank can check any piece without ever seeing another rank's
// buffers, and the 1-rank reference and the N-rank save (whatever its tp) must
// produce the same bytes (compared with cmp by the script).
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "model/llama.h"

#define MAX_PIECES 16

static int g_fail = 0;

// The value of element e of a kind: distinct everywhere, and different per kind.
static float value_of(CkptKind kind, size_t e) {
    switch (kind) {
    case CKPT_PARAMS: return sinf(0.37f * (float)e + 0.1f);
    case CKPT_EXP_AVG: return cosf(0.11f * (float)e) * 1e-2f;
    default: return 1e-6f * (float)e + 1e-8f;
    }
}

static void make_config(Config *cfg, int tied) {
    config_defaults(cfg);
    ModelConfig *m = &cfg->model;
    m->hidden_size = 8;
    m->intermediate_size = 12;
    m->num_hidden_layers = tied ? 3 : 2;
    m->num_attention_heads = 2;
    m->num_key_value_heads = 1;
    m->vocab_size = tied ? 13 : 11;
    m->max_position_embeddings = 16;
    m->tie_word_embeddings = tied;
    cfg->training.seed = 4242;
}

// The tensor-parallel variants: heads, kv heads and FFN width divide by 2 and 3;
// the vocabularies (257, 131) divide by neither, so every tp > 1 has padding rows.
static void make_tp_config(Config *cfg, int tied) {
    make_config(cfg, tied);
    ModelConfig *m = &cfg->model;
    m->hidden_size = 24;
    m->intermediate_size = 30;
    m->num_hidden_layers = tied ? 1 : 2;
    m->num_attention_heads = 12;
    m->num_key_value_heads = 6;
    m->vocab_size = tied ? 131 : 257;
}

// A piece of [lo, hi) with fresh storage (filled with the expected values when
// fill, with NaN-free garbage otherwise).
static CkptPiece new_piece(CkptKind kind, size_t lo, size_t hi, int fill) {
    CkptPiece p = {kind, lo, hi, malloc((hi - lo + 1) * sizeof(float))};  // (hi - lo)
    if (!p.data) {
        fprintf(stderr, "out of memory\n");
        comm_abort(2);
    }
    for (size_t e = lo; e < hi; e++) p.data[e - lo] = fill ? value_of(kind, e) : -777.0f;
    return p;
}

static void free_pieces(CkptPiece *p, int n) {
    for (int i = 0; i < n; i++) free(p[i].data);
}

// Split point k of W of an uneven split: quadratic, so rank 0's share is tiny and
// the last rank's large; reversed it makes the first rank's share large.
static size_t split_point(size_t n, int k, int w, int reversed) {
    double f = (double)k / w;
    double s = reversed ? 1.0 - (1.0 - f) * (1.0 - f) : f * f;
    size_t b = (size_t)(s * (double)n);
    return k == w ? n : b;
}

// This rank's pieces to save: params by the quadratic split (rank 1 passes none
// at all when there are 3+ ranks, its share going to rank 2), exp_avg by the
// reversed split and in two pieces per rank, exp_avg_sq by an equal split handed
// out in reversed rank order, plus an empty piece on rank 0.
static int save_pieces(CkptPiece *out, size_t n, int r, int w) {
    int k = 0;
    size_t lo = split_point(n, r, w, 0), hi = split_point(n, r + 1, w, 0);
    if (w >= 3 && r == 2) lo = split_point(n, 1, w, 0);
    if (!(w >= 3 && r == 1)) out[k++] = new_piece(CKPT_PARAMS, lo, hi, 1);

    lo = split_point(n, r, w, 1);
    hi = split_point(n, r + 1, w, 1);
    size_t mid = lo + (hi - lo) / 3;
    out[k++] = new_piece(CKPT_EXP_AVG, mid, hi, 1);  // out of order on purpose
    out[k++] = new_piece(CKPT_EXP_AVG, lo, mid, 1);

    int q = w - 1 - r;
    out[k++] = new_piece(CKPT_EXP_AVG_SQ, n * (size_t)q / (size_t)w, n * (size_t)(q + 1) / (size_t)w, 1);
    if (r == 0) out[k++] = new_piece(CKPT_EXP_AVG_SQ, n / 2, n / 2, 1);
    return k;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

// This rank's pieces to load: nothing like the saved split. The equal-split chunk
// of the mirrored rank for every kind, plus random (overlapping, tensor-crossing)
// ranges; rank 0 also reads everything.
static int load_pieces(CkptPiece *out, size_t n, int r, int w) {
    int k = 0, q = w - 1 - r;
    uint64_t seed = 1000 + (uint64_t)r;
    for (int kind = CKPT_PARAMS; kind <= CKPT_EXP_AVG_SQ; kind++) {
        out[k++] = new_piece((CkptKind)kind, n * (size_t)q / (size_t)w,
                             n * (size_t)(q + 1) / (size_t)w, 0);
        for (int j = 0; j < 2; j++) {
            size_t a = lcg(&seed) % (n + 1), b = lcg(&seed) % (n + 1);
            out[k++] = new_piece((CkptKind)kind, a < b ? a : b, a < b ? b : a, 0);
        }
        if (r == 0) out[k++] = new_piece((CkptKind)kind, 0, n, 0);
    }
    return k;
}

// Bit-for-bit comparison of loaded pieces against the expected values; returns
// the number of wrong elements (first one reported).
static size_t count_wrong(const CkptPiece *p, int n_pieces, const char *what, int rank) {
    size_t bad = 0;
    for (int i = 0; i < n_pieces; i++)
        for (size_t e = p[i].lo; e < p[i].hi; e++) {
            float want = value_of(p[i].kind, e), got = p[i].data[e - p[i].lo];
            if (memcmp(&want, &got, sizeof want) == 0) continue;
            if (!bad)
                fprintf(stderr, "rank %d: %s: piece %d (kind %d) element %zu is %.9g, expected %.9g\n",
                        rank, what, i, (int)p[i].kind, e, got, want);
            bad++;
        }
    return bad;
}

// Sum a failure count over the ranks and let rank 0 report it.
static void report(double wrong, const char *fmt, const char *variant, int w) {
    group_allreduce_sum_f64(GROUP_WORLD, &wrong, 1);
    if (comm_world_rank() != 0) return;
    char what[256];
    snprintf(what, sizeof what, fmt, variant, w);
    printf("%s %s (%.0f wrong elements over all ranks)\n", wrong == 0 ? "PASS" : "FAIL", what, wrong);
    if (wrong != 0) g_fail = 1;
}

// report() for the tp variants: "PASS label: text (...)".
static void report_tp(double wrong, const char *label, const char *text) {
    char what[512];
    snprintf(what, sizeof what, "%s: %s", label, text);
    report(wrong, "%s", what, 0);  // the unused count argument is ignored
}

static void run_variant(const char *dir, int tied, const char *mode) {
    const char *variant = tied ? "tied" : "untied";
    Config cfg;
    make_config(&cfg, tied);
    LlamaModel model;
    llama_build(&model, &cfg.model, model_whole());
    size_t n = model.num_elements;
    int r = comm_world_rank(), w = comm_world_size();
    char out[1024];
    snprintf(out, sizeof out, "%s/%s", dir, variant);
    TrainerState st = {.step = 3, .consumed_sequences = 12345678901ull};

    if (strcmp(mode, "ref") == 0) {
        CkptPiece whole[3] = {new_piece(CKPT_PARAMS, 0, n, 1), new_piece(CKPT_EXP_AVG, 0, n, 1),
                              new_piece(CKPT_EXP_AVG_SQ, 0, n, 1)};
        checkpoint_save(out, &cfg, &model, whole[0].data, whole[1].data, whole[2].data, &st);
        free_pieces(whole, 3);
        llama_free(&model);
        return;
    }

    CkptPiece mine[MAX_PIECES];
    int k = save_pieces(mine, n, r, w);
    checkpoint_save_pieces(out, &cfg, &model, mine, k, &st);
    free_pieces(mine, k);

    char step_dir[1100];
    snprintf(step_dir, sizeof step_dir, "%s/step_0000003", out);
    CkptPiece got[MAX_PIECES];
    k = load_pieces(got, n, r, w);
    TrainerState st2 = {0};
    checkpoint_load_pieces(step_dir, &model, got, k, &st2);
    report((double)count_wrong(got, k, "checkpoint_load_pieces", r),
           "%s, %d ranks: checkpoint_load_pieces with another partition reads every "
           "params/exp_avg/exp_avg_sq element back bit for bit", variant, w);
    report(st2.step == 3 && st2.consumed_sequences == 12345678901ull ? 0 : 1,
           "%s, %d ranks: trainer state (step 3, 12345678901 sequences) loads back", variant, w);
    free_pieces(got, k);

    // The step directory holds a model.safetensors with Hugging Face names: it is
    // also a Hugging Face weights directory.
    k = load_pieces(got, n, (r + 1) % w, w);
    int n_params = 0;
    for (int i = 0; i < k; i++)
        if (got[i].kind == CKPT_PARAMS) got[n_params++] = got[i];
        else free(got[i].data);
    load_hf_weights_pieces(step_dir, &model, got, n_params);
    report((double)count_wrong(got, n_params, "load_hf_weights_pieces", r),
           "%s, %d ranks: load_hf_weights_pieces reads the saved weights back bit for bit",
           variant, w);
    free_pieces(got, n_params);
    llama_free(&model);
}

// ---------------------------------------------------------------- tensor parallel

// Global flat index (position in the files, in elements) of local element e of a
// tensor-parallel table, or -1 for vocab padding. gbase: (n_params) global offsets.
// *tensor (when not NULL): the tensor holding e.
static int64_t global_flat(const LlamaModel *m, const size_t *gbase, size_t e,
                           const ParamInfo **tensor) {
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        if (e >= p->offset + p->numel) continue;
        if (tensor) *tensor = p;
        int64_t g = param_global_index(p, e - p->offset);
        return g < 0 ? -1 : (int64_t)gbase[i] + g;
    }
    return -1;
}

static size_t *make_gbase(const LlamaModel *m) {
    size_t *b = malloc(((size_t)m->n_params + 1) * sizeof *b);  // (n_params + 1)
    if (!b) comm_abort(2);
    b[0] = 0;
    for (int i = 0; i < m->n_params; i++)
        b[i + 1] = b[i] + (size_t)(m->params[i].shape[0] * m->params[i].shape[1]);
    return b;
}

// A piece [lo, hi) of a tp table's flat order: filled with the global function
// when fill, with -777 garbage otherwise (so a load must zero the padding). Filled
// padding holds -555 and replicas that another tp rank writes -333: neither may
// reach the file, which the script compares with the unsharded reference.
static CkptPiece new_tp_piece(const LlamaModel *m, const size_t *gbase, CkptKind kind,
                              size_t lo, size_t hi, int fill) {
    CkptPiece p = new_piece(kind, lo, hi, 0);
    if (fill)
        for (size_t e = lo; e < hi; e++) {
            const ParamInfo *t = NULL;
            int64_t g = global_flat(m, gbase, e, &t);
            p.data[e - lo] = g < 0 ? -555.0f : !t->replica_writer ? -333.0f
                                                                : value_of(kind, (size_t)g);
        }
    return p;
}

// Loaded tp pieces against the global function, bit for bit; padding must be +0.
// Returns the wrong elements (first one reported); *padding counts padding seen.
static size_t count_wrong_tp(const LlamaModel *m, const size_t *gbase, const CkptPiece *p,
                             int n_pieces, const char *what, size_t *padding) {
    size_t bad = 0;
    for (int i = 0; i < n_pieces; i++)
        for (size_t e = p[i].lo; e < p[i].hi; e++) {
            int64_t g = global_flat(m, gbase, e, NULL);
            float want = g < 0 ? 0.0f : value_of(p[i].kind, (size_t)g), got = p[i].data[e - p[i].lo];
            if (g < 0 && padding) (*padding)++;
            if (memcmp(&want, &got, sizeof want) == 0) continue;
            if (!bad)
                fprintf(stderr, "rank %d: %s (tp %d rank %d): piece %d (kind %d) element %zu "
                        "(global %lld) is %.9g, expected %.9g\n", comm_world_rank(), what, m->tp.size,
                        m->tp.rank, i, (int)p[i].kind, e, (long long)g, got, want);
            bad++;
        }
    return bad;
}

// Uneven cut points of [0, n) into 3 pieces, different per rank and per call:
// cuts fall inside tensors and inside the rows of column-split tensors.
static int uneven_pieces(CkptPiece *out, const LlamaModel *m, const size_t *gbase, CkptKind kind,
                         size_t lo, size_t hi, unsigned salt, int fill) {
    size_t n = hi - lo, c1 = lo + n * (3 + salt % 5) / 17, c2 = lo + n * (11 + salt % 3) / 16 + 1;
    if (c2 > hi) c2 = hi;
    out[0] = new_tp_piece(m, gbase, kind, c2, hi, fill);  // out of order on purpose
    out[1] = new_tp_piece(m, gbase, kind, lo, c1, fill);
    out[2] = new_tp_piece(m, gbase, kind, c1, c2, fill);
    return 3;
}

static void run_tp_variant(int T, const char *dir, const char *from, int tied) {
    const char *variant = tied ? "tp_tied" : "tp_untied";
    int r = comm_world_rank(), w = comm_world_size(), q = w / T, d = r / T;
    Config cfg;
    make_tp_config(&cfg, tied);
    LlamaModel model;
    llama_build(&model, &cfg.model, model_tp_shard(T, r % T, 0));
    size_t n = model.num_elements, *gbase = make_gbase(&model);
    char out[1024], src[1100], label[64];
    snprintf(label, sizeof label, "%s, %d ranks, tp %d", variant, w, T);

    // Save: the q ranks of this tp rank split its flat order, each kind differently.
    CkptPiece mine[MAX_PIECES];
    int k = 0;
    for (int kind = CKPT_PARAMS; kind <= CKPT_EXP_AVG_SQ; kind++) {
        int part = kind == CKPT_EXP_AVG ? q - 1 - d : d;
        int rev = kind == CKPT_EXP_AVG_SQ;
        k += uneven_pieces(mine + k, &model, gbase, (CkptKind)kind, split_point(n, part, q, rev),
                           split_point(n, part + 1, q, rev), (unsigned)(r + kind), 1);
    }
    snprintf(out, sizeof out, "%s/%s", dir, variant);
    TrainerState st = {.step = 3, .consumed_sequences = 12345678901ull};
    checkpoint_save_pieces(out, &cfg, &model, mine, k, &st);
    free_pieces(mine, k);

    // Load FROM's checkpoint (written at any tp) into this tp, in other pieces.
    snprintf(src, sizeof src, "%s/%s/step_0000003", from, variant);
    CkptPiece got[MAX_PIECES];
    k = 0;
    for (int kind = CKPT_PARAMS; kind <= CKPT_EXP_AVG_SQ; kind++)
        k += uneven_pieces(got + k, &model, gbase, (CkptKind)kind, 0, n, (unsigned)(7 * r + 2 * kind + 1), 0);
    got[k++] = new_tp_piece(&model, gbase, CKPT_EXP_AVG, n / 3, n, 0);  // overlapping
    TrainerState st2 = {0};
    checkpoint_load_pieces(src, &model, got, k, &st2);
    size_t padding = 0;
    double wrong = (double)count_wrong_tp(&model, gbase, got, k, "checkpoint_load_pieces", &padding);
    double pad = (double)padding;
    group_allreduce_sum_f64(GROUP_WORLD, &pad, 1);
    const char *base = strrchr(from, '/') ? strrchr(from, '/') + 1 : from;
    char text[256];
    snprintf(text, sizeof text, "checkpoint_load_pieces of %s's checkpoint fills every params/"
             "exp_avg/exp_avg_sq element of uneven tp pieces bit for bit, %.0f padding "
             "elements 0", base, pad);
    report_tp(wrong, label, text);
    if (T > 1) report_tp(pad == 0, label, "the loaded tp pieces include vocab padding rows");
    report_tp(st2.step == 3 && st2.consumed_sequences == 12345678901ull ? 0 : 1, label,
              "trainer state loads back");
    free_pieces(got, k);

    // The same checkpoint as Hugging Face weights, into this tp.
    k = uneven_pieces(got, &model, gbase, CKPT_PARAMS, 0, n, (unsigned)(r + 5), 0);
    load_hf_weights_pieces(src, &model, got, k);
    report_tp((double)count_wrong_tp(&model, gbase, got, k, "load_hf_weights_pieces", NULL),
              label, "load_hf_weights_pieces fills uneven tp pieces bit for bit, padding 0");
    free_pieces(got, k);
    llama_free(&model);
    free(gbase);

    // And into the unsharded model (tp = 1), in random overlapping pieces.
    llama_build(&model, &cfg.model, model_whole());
    k = load_pieces(got, model.num_elements, r, w);
    checkpoint_load_pieces(src, &model, got, k, NULL);
    report_tp((double)count_wrong(got, k, "checkpoint_load_pieces into tp 1", r), label,
              "the checkpoint loads into tp = 1 (random overlapping pieces) bit for bit");
    free_pieces(got, k);
    llama_free(&model);
}

// Bad tensor-parallel saves on 2 ranks: tp rank 1 leaves the first element of its
// flat order (the embedding's) unwritten (tpgap), or the ranks run different tp degrees (tpmix).
static void run_tp_bad(const char *dir, const char *mode) {
    Config cfg;
    make_tp_config(&cfg, 0);
    LlamaModel model;
    int r = comm_world_rank(), mix = strcmp(mode, "tpmix") == 0;
    if (mix && r == 1) llama_build(&model, &cfg.model, model_whole());
    else llama_build(&model, &cfg.model, model_tp_shard(2, r % 2, 0));
    size_t *gbase = make_gbase(&model), n = model.num_elements;
    CkptPiece p = new_tp_piece(&model, gbase, CKPT_PARAMS, !mix && r == 1 ? 1 : 0, n, 1);
    if (mix && r == 1) p.hi = p.lo;  // its part would be written by tp rank 1 of 2
    TrainerState st = {.step = 1, .consumed_sequences = 0};
    char out[1024];
    snprintf(out, sizeof out, "%s/bad", dir);
    checkpoint_save_pieces(out, &cfg, &model, &p, 1, &st);
    free(p.data);
    free(gbase);
    llama_free(&model);
    if (r == 0) printf("FAIL %s: checkpoint_save_pieces accepted it\n", mode);
    g_fail = 1;
}

// Two ranks whose params pieces do not tile [0, n): rank 0 ends short of rank 1's
// start (gap) or past it (overlap). checkpoint_save_pieces must die.
static void run_bad(const char *dir, const char *mode) {
    Config cfg;
    make_config(&cfg, 0);
    LlamaModel model;
    llama_build(&model, &cfg.model, model_whole());
    size_t n = model.num_elements, half = n / 2;
    int r = comm_world_rank();
    int gap = strcmp(mode, "gap") == 0;
    CkptPiece p = r == 0 ? new_piece(CKPT_PARAMS, 0, gap ? half - 5 : half + 3, 1)
                         : new_piece(CKPT_PARAMS, half, n, 1);
    if (r > 1) p.lo = p.hi = n;  // more ranks: the rest pass empty pieces
    TrainerState st = {.step = 1, .consumed_sequences = 0};
    char out[1024];
    snprintf(out, sizeof out, "%s/bad", dir);
    checkpoint_save_pieces(out, &cfg, &model, &p, 1, &st);
    free(p.data);
    llama_free(&model);
    if (r == 0) printf("FAIL %s: checkpoint_save_pieces accepted pieces with a %s\n", mode, mode);
    g_fail = 1;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    if (argc != 3 && !(argc == 5 && strcmp(argv[1], "tp") == 0)) {
        fprintf(stderr, "usage: %s ref|save|gap|overlap|tpgap|tpmix DIR | tp T DIR FROM\n", argv[0]);
        comm_abort(2);
    }
    const char *mode = argv[1], *dir = argv[2];
    if (strcmp(mode, "ref") == 0 || strcmp(mode, "save") == 0) {
        if (strcmp(mode, "ref") == 0 && comm_world_size() != 1) {
            fprintf(stderr, "ref mode runs on 1 rank (checkpoint_save takes whole buffers)\n");
            comm_abort(2);
        }
        run_variant(dir, 0, mode);
        run_variant(dir, 1, mode);
        if (strcmp(mode, "ref") == 0) {  // the unsharded reference of the tp variants
            for (int tied = 0; tied < 2; tied++) {
                Config cfg;
                make_tp_config(&cfg, tied);
                LlamaModel model;
                llama_build(&model, &cfg.model, model_whole());
                size_t n = model.num_elements;
                CkptPiece whole[3] = {new_piece(CKPT_PARAMS, 0, n, 1), new_piece(CKPT_EXP_AVG, 0, n, 1),
                                      new_piece(CKPT_EXP_AVG_SQ, 0, n, 1)};
                char out[1024];
                snprintf(out, sizeof out, "%s/%s", dir, tied ? "tp_tied" : "tp_untied");
                TrainerState st = {.step = 3, .consumed_sequences = 12345678901ull};
                checkpoint_save(out, &cfg, &model, whole[0].data, whole[1].data, whole[2].data, &st);
                free_pieces(whole, 3);
                llama_free(&model);
            }
        }
    } else if (strcmp(mode, "tp") == 0) {
        int T = argc == 5 ? atoi(argv[2]) : 0;
        if (T < 1 || comm_world_size() % T != 0) {
            fprintf(stderr, "usage: %s tp T DIR FROM (T must divide the number of ranks)\n", argv[0]);
            comm_abort(2);
        }
        run_tp_variant(T, argv[3], argv[4], 0);
        run_tp_variant(T, argv[3], argv[4], 1);
    } else if (strcmp(mode, "tpgap") == 0 || strcmp(mode, "tpmix") == 0) {
        run_tp_bad(dir, mode);
    } else if (strcmp(mode, "gap") == 0 || strcmp(mode, "overlap") == 0) {
        run_bad(dir, mode);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        comm_abort(2);
    }
    fflush(stdout);
    comm_finalize();
    return g_fail;
}
