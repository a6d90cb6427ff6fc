// io/checkpoint.c — layout-independent checkpoints and Hugging Face weight loading.
//
// A checkpoint holds global tensors under Hugging Face names, so it can be resumed
// under any parallel layout and loaded by transformers. Atomicity comes from the
// file system: everything is written and fsync'd in a hidden temporary directory,
// which is renamed into place in one step, and only then does `latest` (itself
// replaced by rename) point at it. A crash at any moment leaves either the old or
// the new checkpoint complete, never a half-written one that `latest` names.
//
// With many ranks no tensor data ever travels between them: rank 0 creates the
// files with their safetensors headers at full size, every rank pwrite()s its own
// ranges straight into them and fsyncs, and rank 0 then publishes. A rank's ranges
// are of its own flat order; with tensor parallelism that holds a slice of each
// tensor (ParamInfo), whose elements map to runs of the global tensor: contiguous
// for a row split, one per row for a column split. Loading reads the same runs by
// tensor name, so any layout can resume from a checkpoint written by any other.
#define _POSIX_C_SOURCE 200809L
#include "io/checkpoint.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/comm.h"
#include "io/safetensors.h"
#include "util.h"

#define CKPT_FORMAT "femtotron-checkpoint-v1"
#define CKPT_PATH_MAX 1024
#define CKPT_OPT_NAME_MAX (PARAM_NAME_MAX + 16)  // "NAME.exp_avg_sq"

// ---------------------------------------------------------------- file system helpers

static void path_join(char *out, const char *dir, const char *name) {
    int k = snprintf(out, CKPT_PATH_MAX, "%s/%s", dir, name);
    if (k < 0 || k >= CKPT_PATH_MAX)
        die("checkpoint path %s/%s is longer than %d bytes", dir, name, CKPT_PATH_MAX - 1);
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

// fsync a file or directory by path: a rename is only durable once the directory
// holding it is synced, and files written by other modules (config.json) are synced
// here rather than trusting their writers.
static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die_errno("cannot open %s to fsync it", path);
    if (fsync(fd) != 0) die_errno("fsync of %s failed", path);
    close(fd);
}

// mkdir -p: a run's checkpoint directory may sit under a runs/ folder not yet made.
static void mkdir_p(const char *path) {
    char tmp[CKPT_PATH_MAX];
    if (strlen(path) >= sizeof tmp) die("checkpoint directory path %s is too long", path);
    strcpy(tmp, path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) die_errno("cannot create directory %s", tmp);
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) die_errno("cannot create directory %s", tmp);
    if (!is_dir(tmp)) die("checkpoint directory %s exists but is not a directory", tmp);
}

// rm -r for a stale temporary directory left by a crashed save.
static void remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) die_errno("cannot stat %s", path);
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d) die_errno("cannot open directory %s", path);
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[CKPT_PATH_MAX];
            path_join(child, path, e->d_name);
            remove_tree(child);
        }
        closedir(d);
        if (rmdir(path) != 0) die_errno("cannot remove directory %s", path);
    } else if (unlink(path) != 0) {
        die_errno("cannot remove %s", path);
    }
}

static void write_text_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die_errno("cannot create %s", path);
    size_t n = strlen(text);
    while (n > 0) {
        ssize_t k = write(fd, text, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            die_errno("write to %s failed", path);
        }
        text += k;
        n -= (size_t)k;
    }
    if (fsync(fd) != 0) die_errno("fsync of %s failed", path);
    if (close(fd) != 0) die_errno("close of %s failed", path);
}

static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) != 0) die_errno("seek in %s failed", path);
    long sz = ftell(f);
    if (sz < 0) die_errno("ftell of %s failed", path);
    rewind(f);
    char *buf = xmalloc((size_t)sz + 1, path);  // (sz + 1) file text + NUL
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) die_errno("read of %s failed", path);
    buf[sz] = '\0';
    fclose(f);
    return buf;
}

// ---------------------------------------------------------------- pieces

static const char *const KIND_NAMES[] = {"params", "exp_avg", "exp_avg_sq"};
#define N_KINDS 3

static size_t global_numel(const ParamInfo *p) {
    return p->ndim == 1 ? (size_t)p->shape[0] : (size_t)p->shape[0] * (size_t)p->shape[1];
}

// Pieces address the rank's own flat order (the parameter table's offsets); the
// mapping to global elements below trusts every slice to lie inside its global
// tensor and the tensors to sit back to back. A table that breaks that would
// write other tensors' bytes, so it is refused, naming the tensor.
static void check_table(const LlamaModel *model, const char *where) {
    size_t off = 0;
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        const int64_t *g = p->shape, *l = p->local_shape;
        int ok = p->ndim == 2 || (p->ndim == 1 && g[1] == 1);
        if (p->split == SPLIT_NONE) ok = ok && l[0] == g[0] && l[1] == g[1];
        else if (p->split == SPLIT_ROWS)
            ok = ok && l[1] == g[1] && p->start >= 0 && p->valid >= 0 && p->valid <= l[0] &&
                 p->start + p->valid <= g[0];
        else if (p->split == SPLIT_COLS)
            ok = ok && l[0] == g[0] && p->start >= 0 && p->valid == l[1] &&
                 p->start + l[1] <= g[1];
        else ok = 0;
        if (!ok || l[0] < 0 || l[1] < 0 || p->numel != (size_t)l[0] * (size_t)l[1])
            die("%s: tensor %s: the parameter table's slice (split %d, start %lld, valid %lld, "
                "local shape [%lld, %lld], %zu elements) does not fit its global shape "
                "[%lld, %lld]", where, p->name, (int)p->split, (long long)p->start,
                (long long)p->valid, (long long)l[0], (long long)l[1], p->numel,
                (long long)g[0], (long long)g[1]);
        if (p->offset != off)
            die("%s: tensor %s sits at offset %zu of the parameter table, not %zu: the tensors "
                "are not back to back", where, p->name, p->offset, off);
        off += p->numel;
    }
    if (off != model->num_elements)
        die("%s: the parameter table's tensors hold %zu elements, but num_elements is %zu",
            where, off, model->num_elements);
}

// Element index, in the files, of each tensor's first element: the files hold the
// global tensors back to back in table order, whatever slice this rank holds.
// Returns (n_params + 1) offsets; the last is the global total.
static size_t *global_bases(const LlamaModel *model) {
    size_t *base = xmalloc(((size_t)model->n_params + 1) * sizeof *base, "checkpoint offsets");  // (n_params + 1)
    base[0] = 0;
    for (int i = 0; i < model->n_params; i++) base[i + 1] = base[i] + global_numel(&model->params[i]);
    return base;
}

// Local elements [l + r*len, l + (r+1)*len) of one tensor (counted from its first
// local element), r < n_runs, are global elements [g + r*stride, g + r*stride + len)
// of that tensor; g < 0 marks vocab padding, which has no place in any file.
typedef struct {
    size_t l, len, n_runs;
    int64_t g, stride;
} Block;

// Map local elements [a, b) of p (a < b <= numel) to at most 3 blocks, in local
// order. Rows of a row split are whole rows of the global tensor, so the valid ones
// form one global run; a column split is one run per row, and the whole rows in the
// middle of the range are one strided block (one read for all of them).
static int map_range(const ParamInfo *p, size_t a, size_t b, Block *out) {
    int k = 0;
    size_t lc = (size_t)p->local_shape[1];
    int64_t gc = p->shape[1];
    if (p->split == SPLIT_NONE || (p->split == SPLIT_COLS && (int64_t)lc == gc)) {
        out[k++] = (Block){a, b - a, 1, (int64_t)a, 0};
    } else if (p->split == SPLIT_ROWS) {
        size_t vend = (size_t)p->valid * lc;  // padding rows come after the valid ones
        if (a < vend) out[k++] = (Block){a, (b < vend ? b : vend) - a, 1, p->start * gc + (int64_t)a, 0};
        size_t pad = a > vend ? a : vend;
        if (b > pad) out[k++] = (Block){pad, b - pad, 1, -1, 0};
    } else {  // SPLIT_COLS narrower than the tensor
        size_t i0 = a / lc, j0 = a % lc, i1 = b / lc, j1 = b % lc;  // b = (i1, j1) exclusive
#define GLOBAL_AT(i, j) ((int64_t)(i) * gc + p->start + (int64_t)(j))
        if (i0 == i1) {  // inside one row
            out[k++] = (Block){a, b - a, 1, GLOBAL_AT(i0, j0), 0};
            return k;
        }
        size_t r0 = i0;
        if (j0 > 0) {
            out[k++] = (Block){a, lc - j0, 1, GLOBAL_AT(i0, j0), 0};
            r0++;
        }
        if (i1 > r0) out[k++] = (Block){r0 * lc, lc, i1 - r0, GLOBAL_AT(r0, 0), gc};
        if (j1 > 0) out[k++] = (Block){i1 * lc, j1, 1, GLOBAL_AT(i1, 0), 0};
#undef GLOBAL_AT
    }
    return k;
}

// The part of piece pc that falls in tensor p, as local elements [*a, *b) of p;
// 0 when they do not meet.
static int piece_in_tensor(const CkptPiece *pc, const ParamInfo *p, size_t *a, size_t *b) {
    size_t begin = p->offset, end = p->offset + p->numel;
    if (end <= pc->lo || begin >= pc->hi || pc->hi == pc->lo) return 0;
    *a = (pc->lo > begin ? pc->lo : begin) - begin;
    *b = (pc->hi < end ? pc->hi : end) - begin;
    return 1;
}

// Global elements piece pc puts into the file: its elements minus vocab padding
// and minus replicas another tensor-parallel rank writes.
static size_t global_written(const CkptPiece *pc, const LlamaModel *model) {
    size_t total = 0, a, b;
    Block blk[3];
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        if (!p->replica_writer || !piece_in_tensor(pc, p, &a, &b)) continue;
        int nb = map_range(p, a, b, blk);
        for (int k = 0; k < nb; k++)
            if (blk[k].g >= 0) total += blk[k].len * blk[k].n_runs;
    }
    return total;
}

// The model tensor holding flat element e (e < num_elements), for messages.
static const char *tensor_at(const LlamaModel *model, size_t e) {
    for (int i = 0; i < model->n_params; i++)
        if (e < model->params[i].offset + model->params[i].numel) return model->params[i].name;
    return "(past the end)";
}

// This rank's own pieces: a known kind, lo <= hi <= n, storage when non-empty.
static void check_local_pieces(const CkptPiece *pieces, int n_pieces, size_t n,
                               const char *where) {
    if (n_pieces < 0 || (n_pieces > 0 && !pieces))
        die("%s: invalid piece list (%d pieces at %p)", where, n_pieces, (const void *)pieces);
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece *p = &pieces[i];
        if ((int)p->kind < 0 || (int)p->kind >= N_KINDS)
            die("%s: piece %d has unknown kind %d", where, i, (int)p->kind);
        if (p->lo > p->hi || p->hi > n)
            die("%s: piece %d (%s) covers [%zu, %zu), which is not a range inside the model's "
                "%zu elements", where, i, KIND_NAMES[p->kind], p->lo, p->hi, n);
        if (p->hi > p->lo && !p->data)
            die("%s: piece %d (%s, [%zu, %zu)) has no storage (data is NULL)", where, i,
                KIND_NAMES[p->kind], p->lo, p->hi);
    }
}

// ---------------------------------------------------------------- collective save

// Piece metadata of every rank, gathered so that rank 0 can check the partition.
// Only (kind, lo, hi) and a few counts travel, never tensor data. Element counts
// are exact in a double up to 2^53 elements.
#define RANK_HEAD 6  // tp, tp_rank, num_elements, global elements written per kind (3)
typedef struct {
    int world, per_rank;  // ranks; piece slots per rank (the largest n_pieces)
    double *head;         // (world, RANK_HEAD)
    double *slot;         // (world, per_rank, 3): kind + 1 (0 = unused slot), lo, hi
} PieceTable;

static void gather_pieces(PieceTable *t, const LlamaModel *model, const CkptPiece *pieces,
                          int n_pieces) {
    double most = n_pieces;
    group_allreduce_max_f64(GROUP_WORLD, &most, 1);
    t->world = comm_world_size();
    t->per_rank = (int)most;
    size_t heads = (size_t)t->world * RANK_HEAD;
    size_t len = heads + (size_t)t->world * (size_t)(t->per_rank ? t->per_rank : 1) * 3;
    // Zero-filled: each rank fills only its own rows, so the sum is a gather.
    t->head = xcalloc(len * sizeof(double), "checkpoint piece table");
    t->slot = t->head + heads;
    int r = comm_world_rank();
    double *h = t->head + (size_t)r * RANK_HEAD;
    h[0] = model->tp;
    h[1] = model->tp_rank;
    h[2] = (double)model->num_elements;
    double *mine = t->slot + (size_t)r * (size_t)t->per_rank * 3;
    for (int i = 0; i < n_pieces; i++) {
        mine[3 * i] = (double)pieces[i].kind + 1;
        mine[3 * i + 1] = (double)pieces[i].lo;
        mine[3 * i + 2] = (double)pieces[i].hi;
        h[3 + pieces[i].kind] += (double)global_written(&pieces[i], model);
    }
    group_allreduce_sum_f64(GROUP_WORLD, t->head, len);
}

// 1 when some rank passes a piece of this kind (even an empty one).
static int kind_given(const PieceTable *t, CkptKind kind) {
    size_t len = (size_t)t->world * (size_t)t->per_rank;
    for (size_t s = 0; s < len; s++)
        if (t->slot[3 * s] == (double)kind + 1) return 1;
    return 0;
}

typedef struct {
    size_t lo, hi;
    int rank;
} Range;

static int cmp_range(const void *a, const void *b) {
    const Range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : x->rank - y->rank;
}

// The non-empty pieces of one kind over the ranks of tensor-parallel rank tp_rank
// must tile that rank's flat order [0, n) exactly (`model` is its table): sort them
// by start and walk, so the first gap or overlap is named with its ranks. Without
// tensor parallelism that is every rank and the global flat order.
static void check_partition(const PieceTable *t, CkptKind kind, const LlamaModel *model,
                            int tp_rank, const char *where) {
    size_t n = model->num_elements, len = (size_t)t->world * (size_t)t->per_rank, k = 0;
    Range *r = xmalloc((len ? len : 1) * sizeof *r, "checkpoint piece ranges");  // (len)
    for (size_t s = 0; s < len; s++) {
        const double *e = t->slot + 3 * s;
        int rank = (int)(s / (size_t)t->per_rank);
        if (e[0] != (double)kind + 1 || e[1] == e[2]) continue;
        if ((int)t->head[(size_t)rank * RANK_HEAD + 1] != tp_rank) continue;
        r[k++] = (Range){(size_t)e[1], (size_t)e[2], rank};
    }
    qsort(r, k, sizeof *r, cmp_range);
    const char *kn = KIND_NAMES[kind];
    char of[64] = "";  // which flat order, when there are several
    if (model->tp > 1) snprintf(of, sizeof of, " of tensor-parallel rank %d's flat order", tp_rank);
    size_t covered = 0;  // [0, covered) is written exactly once so far
    for (size_t i = 0; i < k; i++) {
        if (r[i].lo > covered)
            die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written by no rank: the "
                "pieces leave a gap", where, kn, covered, r[i].lo, of, tensor_at(model, covered));
        if (r[i].lo < covered)
            die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written twice, by rank "
                "%d and rank %d: the pieces overlap", where, kn, r[i].lo,
                r[i].hi < covered ? r[i].hi : covered, of, tensor_at(model, r[i].lo),
                r[i - 1].rank, r[i].rank);
        covered = r[i].hi;
    }
    if (covered < n)
        die("%s: %s elements [%zu, %zu)%s (starting in tensor %s) are written by no rank: the "
            "pieces leave a gap%s", where, kn, covered, n, of, tensor_at(model, covered),
            k == 0 && kind != CKPT_PARAMS ? " (AdamW moments: give both exp_avg and "
                                             "exp_avg_sq pieces, or neither)" : "");
    free(r);
}

// The parameter table of every tensor-parallel rank, rebuilt from the shared model
// config, for rank 0 to judge the other ranks' pieces. Returns (tp) tables; without
// tensor parallelism the one table is the model's own (no rebuild).
static const LlamaModel *tp_tables(const LlamaModel *model) {
    if (model->tp == 1) return model;
    LlamaModel *tabs = xmalloc((size_t)model->tp * sizeof *tabs, "tensor-parallel tables");  // (tp)
    for (int tr = 0; tr < model->tp; tr++)
        llama_build_tp(&tabs[tr], &model->cfg, model->tp, tr, model->sp);
    return tabs;
}

static void free_tp_tables(const LlamaModel *tabs, const LlamaModel *model) {
    if (tabs == model) return;
    LlamaModel *own = (LlamaModel *)tabs;  // allocated by tp_tables
    for (int tr = 0; tr < model->tp; tr++) llama_free(&own[tr]);
    free(own);
}

// Every rank must run rank 0's tensor-parallel degree, with the table its tp rank
// builds: pieces are judged against those tables.
static void check_tables_agree(const PieceTable *t, const LlamaModel *tabs, int tp,
                               const char *where) {
    for (int r = 0; r < t->world; r++) {
        const double *h = t->head + (size_t)r * RANK_HEAD;
        if ((int)h[0] != tp || h[1] < 0 || h[1] >= tp)
            die("%s: rank %d is tensor-parallel rank %.0f of %.0f, but rank 0 runs tp = %d", where,
                r, h[1], h[0], tp);
        size_t want = tabs[(int)h[1]].num_elements;
        if (h[2] != (double)want)
            die("%s: rank %d (tensor-parallel rank %.0f) holds %.0f parameter elements, but that "
                "rank of this model holds %zu: the ranks built different models", where, r, h[1],
                h[2], want);
    }
}

// Rank 0's verdict on the gathered pieces of one kind. Per tensor-parallel rank,
// the pieces must partition that rank's flat order; the tp ranks' tables hold
// disjoint slices of every tensor (replicas: tp rank 0 writes), so that makes every
// global element written exactly once, and a gap or an overlap is named with its
// range and ranks. The global count (elements put into the file over all ranks,
// padding and non-writing replicas excluded, against the sum of the global tensor
// sizes) checks the same from the other side, without trusting the tables.
static void check_coverage(const PieceTable *t, CkptKind kind, const LlamaModel *tabs, int tp,
                           size_t global_total, const char *where) {
    for (int tr = 0; tr < tp; tr++) check_partition(t, kind, &tabs[tr], tr, where);
    double written = 0;
    for (int r = 0; r < t->world; r++) written += t->head[(size_t)r * RANK_HEAD + 3 + kind];
    if (written != (double)global_total)
        die("%s: the %s pieces of all ranks put %.0f elements into the checkpoint, but the "
            "model's global tensors hold %zu: the ranks' parameter tables do not fit together",
            where, KIND_NAMES[kind], written, global_total);
}

static void write_trainer_state(const char *path, const Config *cfg, const TrainerState *st) {
    char *cfg_json = config_to_json(cfg);
    if (!cfg_json) die("config_to_json returned NULL while writing %s", path);
    cJSON *check = cJSON_Parse(cfg_json);
    if (!check) die("config_to_json produced invalid JSON while writing %s", path);
    cJSON_Delete(check);

    // 64-bit counters are written as raw integer text: a double would round them.
    char num[32];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "step", st->step);
    snprintf(num, sizeof num, "%" PRIu64, st->consumed_sequences);
    cJSON_AddRawToObject(root, "consumed_sequences", num);
    snprintf(num, sizeof num, "%" PRIu64, cfg->training.seed);
    cJSON_AddRawToObject(root, "seed", num);
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddRawToObject(root, "config", cfg_json);
    char *text = cJSON_Print(root);
    if (!text) die("out of memory printing %s", path);
    size_t len = strlen(text);
    char *with_nl = xmalloc(len + 2, "trainer state text");  // (len + 2) JSON + "\n" + NUL
    memcpy(with_nl, text, len);
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    write_text_file(path, with_nl);
    free(with_nl);
    free(text);
    cJSON_Delete(root);
    free(cfg_json);
}


// The tensor list of one safetensors file: the model's tensors under their names
// plus `suffix`, in table order (the global flat order). Data pointers stay NULL:
// only the header is written from it. names: (n_params, CKPT_OPT_NAME_MAX).
static void fill_header_list(StWrite *w, char (*names)[CKPT_OPT_NAME_MAX],
                             const LlamaModel *model, const char *suffix) {
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        snprintf(names[i], CKPT_OPT_NAME_MAX, "%s%s", p->name, suffix);
        w[i].name = names[i];
        w[i].ndim = p->ndim;
        w[i].shape[0] = p->shape[0];
        w[i].shape[1] = p->ndim == 2 ? p->shape[1] : 0;
        w[i].data = NULL;
    }
}

// Create path with the header of the model's tensors (suffix1, then suffix2 when
// not NULL), sized to hold them all; returns the data section's byte offset.
static uint64_t write_header(const char *path, const LlamaModel *model, const char *suffix1,
                             const char *suffix2, const char *meta_kind) {
    int n = model->n_params * (suffix2 ? 2 : 1);
    StWrite *w = xcalloc((size_t)n * sizeof *w, "checkpoint tensor list");  // (n)
    char (*names)[CKPT_OPT_NAME_MAX] = xmalloc((size_t)n * CKPT_OPT_NAME_MAX, "checkpoint names");  // (n, CKPT_OPT_NAME_MAX)
    fill_header_list(w, names, model, suffix1);
    if (suffix2) fill_header_list(w + model->n_params, names + model->n_params, model, suffix2);
    const char *keys[] = {"femtotron"};
    const char *vals[] = {meta_kind};
    uint64_t data_start = st_write_header(path, w, n, keys, vals, 1);
    free(names);
    free(w);
    return data_start;
}

static void pwrite_all(int fd, const void *buf, size_t bytes, uint64_t off, const char *path) {
    const char *p = buf;
    while (bytes > 0) {
        size_t want = bytes > (1u << 30) ? (1u << 30) : bytes;
        ssize_t put = pwrite(fd, p, want, (off_t)off);
        if (put < 0) {
            if (errno == EINTR) continue;
            die_errno("%s: write of %zu bytes at offset %llu failed", path, want,
                      (unsigned long long)off);
        }
        p += put;
        bytes -= (size_t)put;
        off += (uint64_t)put;
    }
}

// Byte runs bound for one file, merged while each continues the last in both the
// file and memory: with tp = 1 a piece is one pwrite however many tensors it
// crosses; a column slice is one pwrite per row.
typedef struct {
    int fd;
    const char *path;
    uint64_t off;     // file offset of the pending run
    const char *src;  // its bytes
    size_t bytes;     // its length (0: nothing pending)
} RunWriter;

static void run_flush(RunWriter *w) {
    if (w->bytes) pwrite_all(w->fd, w->src, w->bytes, w->off, w->path);
    w->bytes = 0;
}

static void run_add(RunWriter *w, uint64_t off, const float *src, size_t count) {
    const char *p = (const char *)src;
    if (w->bytes && off == w->off + w->bytes && p == w->src + w->bytes) {
        w->bytes += count * sizeof(float);
        return;
    }
    run_flush(w);
    *w = (RunWriter){w->fd, w->path, off, p, count * sizeof(float)};
}

// Write this rank's non-empty pieces of the kinds stored in path (params into
// model.safetensors; both moments into optimizer.safetensors, exp_avg_sq after all
// G exp_avg values, G = global elements) at the global positions of their elements
// (gbase: global_bases), then fsync: every writer syncs its own bytes, so the file
// is durable once every rank has returned from here. Vocab padding is never
// written, nor a replica that another tensor-parallel rank writes.
static void write_my_pieces(const char *path, uint64_t data_start, const CkptPiece *pieces,
                            int n_pieces, int optimizer, const LlamaModel *model,
                            const size_t *gbase) {
    RunWriter w = {-1, path, 0, NULL, 0};
    size_t G = gbase[model->n_params], a, b;
    Block blk[3];
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece *pc = &pieces[i];
        if (pc->hi == pc->lo || (pc->kind != CKPT_PARAMS) != optimizer) continue;
        if (w.fd < 0) {
            w.fd = open(path, O_WRONLY);
            if (w.fd < 0) die_errno("cannot open %s (created by rank 0) for writing", path);
        }
        size_t kind_base = pc->kind == CKPT_EXP_AVG_SQ ? G : 0;
        for (int t = 0; t < model->n_params; t++) {
            const ParamInfo *p = &model->params[t];
            if (!p->replica_writer || !piece_in_tensor(pc, p, &a, &b)) continue;
            int nb = map_range(p, a, b, blk);
            for (int k = 0; k < nb; k++) {
                if (blk[k].g < 0) continue;  // padding
                for (size_t r = 0; r < blk[k].n_runs; r++) {
                    uint64_t e = kind_base + gbase[t] + (uint64_t)blk[k].g +
                                 (uint64_t)r * (uint64_t)blk[k].stride;
                    const float *src = pc->data + (p->offset + blk[k].l + r * blk[k].len - pc->lo);
                    run_add(&w, data_start + 4 * e, src, blk[k].len);
                }
            }
        }
    }
    if (w.fd < 0) return;
    run_flush(&w);
    if (fsync(w.fd) != 0) die_errno("fsync of %s failed", path);
    if (close(w.fd) != 0) die_errno("close of %s failed", path);
}

// Paths of one save: DIR/step_NNNNNNN, DIR/.tmp_step_NNNNNNN and the files in it.
typedef struct {
    char step_name[32];
    char final_dir[CKPT_PATH_MAX], tmp_dir[CKPT_PATH_MAX];
    char model[CKPT_PATH_MAX], optimizer[CKPT_PATH_MAX];
} SavePaths;

static void save_paths(SavePaths *sp, const char *dir, int step) {
    char tmp_name[48];
    snprintf(sp->step_name, sizeof sp->step_name, "step_%07d", step);
    snprintf(tmp_name, sizeof tmp_name, ".tmp_%s", sp->step_name);
    path_join(sp->final_dir, dir, sp->step_name);
    path_join(sp->tmp_dir, dir, tmp_name);
    path_join(sp->model, sp->tmp_dir, "model.safetensors");
    path_join(sp->optimizer, sp->tmp_dir, "optimizer.safetensors");
}

// Rank 0, before any data is written: refuse an existing step, clear a stale
// temporary, create the temporary directory and the sized files with their headers.
// data_start: (2) model, optimizer (0 when no moments are saved).
static void begin_save(const SavePaths *sp, const char *dir, const LlamaModel *model,
                       int moments, uint64_t *data_start) {
    mkdir_p(dir);
    struct stat sb;
    if (lstat(sp->final_dir, &sb) == 0)
        die("checkpoint %s already exists; refusing to overwrite it", sp->final_dir);
    if (lstat(sp->tmp_dir, &sb) == 0) {
        warn("removing %s left by an interrupted checkpoint save", sp->tmp_dir);
        remove_tree(sp->tmp_dir);
    }
    if (mkdir(sp->tmp_dir, 0755) != 0) die_errno("cannot create directory %s", sp->tmp_dir);
    data_start[0] = write_header(sp->model, model, "", NULL, "model");
    data_start[1] = moments ? write_header(sp->optimizer, model, ".exp_avg", ".exp_avg_sq", "adamw") : 0;
}

// Rank 0, once every rank's data is durable: the small files, then the renames
// that publish the checkpoint (step directory first, `latest` last).
static void finish_save(const SavePaths *sp, const char *dir, const Config *cfg,
                        const TrainerState *st) {
    char path[CKPT_PATH_MAX];
    path_join(path, sp->tmp_dir, "config.json");
    config_write_hf_json(&cfg->model, path);
    fsync_path(path);
    path_join(path, sp->tmp_dir, "trainer_state.json");
    write_trainer_state(path, cfg, st);
    fsync_path(sp->tmp_dir);

    if (rename(sp->tmp_dir, sp->final_dir) != 0)
        die_errno("cannot rename %s to %s", sp->tmp_dir, sp->final_dir);
    fsync_path(dir);

    char latest[CKPT_PATH_MAX], latest_tmp[CKPT_PATH_MAX], line[48];
    path_join(latest, dir, "latest");
    path_join(latest_tmp, dir, "latest.tmp");
    snprintf(line, sizeof line, "%s\n", sp->step_name);
    write_text_file(latest_tmp, line);
    if (rename(latest_tmp, latest) != 0) die_errno("cannot rename %s to %s", latest_tmp, latest);
    fsync_path(dir);
}

void checkpoint_save_pieces(const char *dir, const Config *cfg, const LlamaModel *model,
                            const CkptPiece *pieces, int n_pieces, const TrainerState *st) {
    const char *where = "checkpoint_save";
    if (!dir || !dir[0]) die("%s: empty checkpoint directory", where);
    if (st->step < 0) die("%s: negative step %d", where, st->step);
    check_table(model, where);
    check_local_pieces(pieces, n_pieces, model->num_elements, where);
    size_t *gbase = global_bases(model);

    PieceTable table;
    gather_pieces(&table, model, pieces, n_pieces);
    int moments = kind_given(&table, CKPT_EXP_AVG) || kind_given(&table, CKPT_EXP_AVG_SQ);
    int rank = comm_world_rank();
    SavePaths sp;
    save_paths(&sp, dir, st->step);
    uint64_t data_start[2] = {0, 0};  // model, optimizer
    if (rank == 0) {
        // Rank 0 alone judges the partition: one clear message, not one per rank
        // (its die() ends every rank).
        const LlamaModel *tabs = tp_tables(model);
        check_tables_agree(&table, tabs, model->tp, where);
        size_t G = gbase[model->n_params];
        check_coverage(&table, CKPT_PARAMS, tabs, model->tp, G, where);
        if (moments) {
            check_coverage(&table, CKPT_EXP_AVG, tabs, model->tp, G, where);
            check_coverage(&table, CKPT_EXP_AVG_SQ, tabs, model->tp, G, where);
        }
        free_tp_tables(tabs, model);
        begin_save(&sp, dir, model, moments, data_start);
    }
    free(table.head);
    // The broadcast doubles as the barrier "the sized files exist".
    group_broadcast_bytes(GROUP_WORLD, data_start, sizeof data_start, 0);

    write_my_pieces(sp.model, data_start[0], pieces, n_pieces, 0, model, gbase);
    if (moments) write_my_pieces(sp.optimizer, data_start[1], pieces, n_pieces, 1, model, gbase);
    free(gbase);
    group_barrier(GROUP_WORLD);  // every rank's bytes are written and fsync'd

    if (rank == 0) finish_save(&sp, dir, cfg, st);
    // Nobody returns (and, say, deletes its buffers or starts the next save)
    // before the checkpoint is published.
    group_barrier(GROUP_WORLD);
}

void checkpoint_save(const char *dir, const Config *cfg, const LlamaModel *model,
                     const float *params, const float *m, const float *v,
                     const TrainerState *st) {
    if ((m == NULL) != (v == NULL))
        die("checkpoint_save: both AdamW moments (m and v) or neither must be given");
    if (comm_world_size() > 1)
        die("checkpoint_save: it takes whole buffers from one rank, but %d ranks are running; "
            "each rank must pass its own pieces to checkpoint_save_pieces", comm_world_size());
    size_t n = model->num_elements;
    // The save only reads the pieces' data; CkptPiece's pointer is non-const because
    // the same struct carries the destinations of a load.
    CkptPiece pieces[3] = {
        {CKPT_PARAMS, 0, n, (float *)params},
        {CKPT_EXP_AVG, 0, n, (float *)m},
        {CKPT_EXP_AVG_SQ, 0, n, (float *)v},
    };
    checkpoint_save_pieces(dir, cfg, model, pieces, m ? 3 : 1, st);
}

// ---------------------------------------------------------------- latest

int checkpoint_latest(const char *dir, char *out, size_t out_size) {
    char latest[CKPT_PATH_MAX];
    path_join(latest, dir, "latest");
    struct stat sb;
    if (stat(latest, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        die_errno("cannot stat %s", latest);
    }
    char *text = read_text_file(latest);
    size_t len = strlen(text);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
        text[--len] = '\0';
    // Only a bare "step_<digits>" is valid: anything else (a path, garbage) is corruption.
    int ok = strncmp(text, "step_", 5) == 0 && len > 5 && len < 32;
    for (size_t i = 5; ok && i < len; i++) ok = text[i] >= '0' && text[i] <= '9';
    if (!ok)
        die("%s is corrupt: expected \"step_NNNNNNN\", found \"%.40s\"", latest, text);

    char ckpt[CKPT_PATH_MAX], f[CKPT_PATH_MAX];
    path_join(ckpt, dir, text);
    if (!is_dir(ckpt))
        die("%s names %s, but directory %s does not exist: the checkpoint directory is "
            "corrupt", latest, text, ckpt);
    const char *needed[] = {"model.safetensors", "trainer_state.json"};
    for (int i = 0; i < 2; i++) {
        path_join(f, ckpt, needed[i]);
        if (!is_file(f))
            die("%s names %s, but %s is missing: the checkpoint directory is corrupt", latest,
                text, f);
    }
    if (strlen(ckpt) + 1 > out_size)
        die("checkpoint path %s does not fit in %zu bytes", ckpt, out_size);
    strcpy(out, ckpt);
    free(text);
    return 1;
}

// ---------------------------------------------------------------- load

static void format_shape(char *out, size_t size, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, size, "[");
    for (int d = 0; d < ndim && k < size; d++)
        k += (size_t)snprintf(out + k, size - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < size) snprintf(out + k, size - k, "]");
}


// The file's tensor for model tensor p (under name), checked: present, with the
// model's global shape exactly.
static const StTensor *find_checked(const StIndex *idx, const ParamInfo *p, const char *name,
                                    const char *where) {
    const StTensor *t = st_find(idx, name);
    if (!t) die("%s: tensor %s is missing", where, name);
    int64_t want[2] = {p->shape[0], p->shape[1]};
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == want[d];
    if (!same) {
        char a[128], b[128];
        format_shape(a, sizeof a, p->ndim, want);
        format_shape(b, sizeof b, t->ndim, t->shape);
        die("%s: tensor %s has shape %s in the file, the model expects %s", where, t->name, b, a);
    }
    return t;
}

// Every model tensor (name + suffix) of idx, checked up front whether or not this
// rank's pieces touch it, so a wrong file fails on every rank alike.
// Returns (n_params) file tensors in table order.
static const StTensor **resolve_all(const StIndex *idx, const LlamaModel *model,
                                    const char *suffix, const char *where) {
    const StTensor **t = xmalloc((size_t)model->n_params * sizeof *t, "checkpoint tensor map");  // (n_params)
    char name[CKPT_OPT_NAME_MAX];
    for (int i = 0; i < model->n_params; i++) {
        snprintf(name, sizeof name, "%s%s", model->params[i].name, suffix);
        t[i] = find_checked(idx, &model->params[i], name, where);
    }
    return t;
}

// Fill one piece: every tensor overlapping [lo, hi) of the local flat order
// contributes the elements in the overlap, read from the global positions they
// map to in the file's tensor (file: (n_params) in table order); vocab padding
// is set to 0.
static void read_piece(const CkptPiece *pc, const LlamaModel *model, const StTensor **file) {
    size_t a, b;
    Block blk[3];
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        if (!piece_in_tensor(pc, p, &a, &b)) continue;
        int nb = map_range(p, a, b, blk);
        for (int k = 0; k < nb; k++) {
            float *dst = pc->data + (p->offset + blk[k].l - pc->lo);  // runs lie back to back
            if (blk[k].g < 0)
                memset(dst, 0, blk[k].len * blk[k].n_runs * sizeof(float));
            else
                st_read_f32_strided(file[i], (uint64_t)blk[k].g, blk[k].len,
                                    (uint64_t)blk[k].stride, blk[k].n_runs, dst);
        }
    }
}

static void read_pieces(CkptPiece *pieces, int n_pieces, CkptKind kind,
                        const LlamaModel *model, const StTensor **file) {
    for (int i = 0; i < n_pieces; i++)
        if (pieces[i].kind == kind && pieces[i].hi > pieces[i].lo)
            read_piece(&pieces[i], model, file);
}

static int any_kind(const CkptPiece *pieces, int n_pieces, CkptKind kind) {
    for (int i = 0; i < n_pieces; i++)
        if (pieces[i].kind == kind) return 1;
    return 0;
}
static void reject_extras(const StIndex *idx, const LlamaModel *model, const char *where,
                          int with_moments) {
    char name[sizeof idx->t[0].name];
    for (int i = 0; i < idx->n; i++) {
        snprintf(name, sizeof name, "%s", idx->t[i].name);
        if (with_moments) {
            size_t len = strlen(name);
            if (len > 11 && strcmp(name + len - 11, ".exp_avg_sq") == 0) name[len - 11] = '\0';
            else if (len > 8 && strcmp(name + len - 8, ".exp_avg") == 0) name[len - 8] = '\0';
            else die("%s: tensor %s is not an AdamW moment (NAME.exp_avg / NAME.exp_avg_sq)",
                     where, idx->t[i].name);
        }
        if (!llama_find(model, name))
            die("%s: tensor %s is not part of this model (was the checkpoint saved with a "
                "different model config?)", where, idx->t[i].name);
    }
}

static uint64_t json_count(const cJSON *root, const char *key, const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it) die("%s: missing \"%s\"", path, key);
    if (!cJSON_IsNumber(it)) die("%s: \"%s\" must be a number", path, key);
    double d = it->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d)
        die("%s: \"%s\" must be a non-negative integer (got %g)", path, key, d);
    return (uint64_t)d;
}

static void read_trainer_state(const char *path, TrainerState *st) {
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) die("%s: not a valid JSON object", path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT) != 0)
        die("%s: \"format\" is not \"%s\" (not a femtotron checkpoint, or a newer version)",
            path, CKPT_FORMAT);
    uint64_t step = json_count(root, "step", path);
    if (step > 0x7fffffff) die("%s: \"step\" %llu is out of range", path, (unsigned long long)step);
    st->step = (int)step;
    st->consumed_sequences = json_count(root, "consumed_sequences", path);
    cJSON_Delete(root);
    free(text);
}


// model.safetensors into the params pieces. Checks run before any read.
static void load_model_file(const char *ckpt_dir, const LlamaModel *model, CkptPiece *pieces,
                            int n_pieces) {
    char path[CKPT_PATH_MAX];
    path_join(path, ckpt_dir, "model.safetensors");
    if (!is_file(path)) die("checkpoint %s has no model.safetensors (%s)", ckpt_dir, path);
    StIndex idx;
    st_open(&idx, path);
    const StTensor **t = resolve_all(&idx, model, "", path);
    reject_extras(&idx, model, path, 0);
    read_pieces(pieces, n_pieces, CKPT_PARAMS, model, t);
    free(t);
    st_close(&idx);
}

// optimizer.safetensors into the exp_avg and exp_avg_sq pieces.
static void load_optimizer_file(const char *ckpt_dir, const LlamaModel *model,
                                CkptPiece *pieces, int n_pieces) {
    char path[CKPT_PATH_MAX];
    path_join(path, ckpt_dir, "optimizer.safetensors");
    if (!is_file(path))
        die("checkpoint %s has no optimizer.safetensors (%s), needed to restore the AdamW "
            "moments", ckpt_dir, path);
    StIndex idx;
    st_open(&idx, path);
    const StTensor **m = resolve_all(&idx, model, ".exp_avg", path);
    const StTensor **v = resolve_all(&idx, model, ".exp_avg_sq", path);
    reject_extras(&idx, model, path, 1);
    read_pieces(pieces, n_pieces, CKPT_EXP_AVG, model, m);
    read_pieces(pieces, n_pieces, CKPT_EXP_AVG_SQ, model, v);
    free(m);
    free(v);
    st_close(&idx);
}

void checkpoint_load_pieces(const char *ckpt_dir, const LlamaModel *model,
                            CkptPiece *pieces, int n_pieces, TrainerState *st) {
    const char *where = "checkpoint_load";
    if (!is_dir(ckpt_dir)) die("checkpoint directory %s does not exist", ckpt_dir);
    check_table(model, where);
    check_local_pieces(pieces, n_pieces, model->num_elements, where);
    // model.safetensors is checked even when this rank loads no parameters: a
    // checkpoint of another model must fail everywhere.
    load_model_file(ckpt_dir, model, pieces, n_pieces);
    if (any_kind(pieces, n_pieces, CKPT_EXP_AVG) || any_kind(pieces, n_pieces, CKPT_EXP_AVG_SQ))
        load_optimizer_file(ckpt_dir, model, pieces, n_pieces);

    char path[CKPT_PATH_MAX];
    path_join(path, ckpt_dir, "trainer_state.json");
    if (!is_file(path)) die("checkpoint %s has no trainer_state.json (%s)", ckpt_dir, path);
    TrainerState tmp;
    read_trainer_state(path, &tmp);
    if (st) *st = tmp;
}

void checkpoint_load(const char *ckpt_dir, const LlamaModel *model,
                     float *params, float *m, float *v, TrainerState *st) {
    if ((m == NULL) != (v == NULL))
        die("checkpoint_load: both AdamW moments (m and v) or neither must be given");
    size_t n = model->num_elements;
    CkptPiece pieces[3] = {
        {CKPT_PARAMS, 0, n, params},
        {CKPT_EXP_AVG, 0, n, m},
        {CKPT_EXP_AVG_SQ, 0, n, v},
    };
    checkpoint_load_pieces(ckpt_dir, model, pieces, m ? 3 : 1, st);
}
// ---------------------------------------------------------------- Hugging Face weights

// Layer number of "model.layers.N.<rest>", or -1 for any other name.
static long layer_index(const char *name) {
    const char *pre = "model.layers.";
    size_t n = strlen(pre);
    if (strncmp(name, pre, n) != 0) return -1;
    const char *p = name + n;
    if (*p < '0' || *p > '9') return -1;
    char *end;
    long l = strtol(p, &end, 10);
    return *end == '.' ? l : -1;
}


// A Hugging Face file's tensor for every model tensor, in table order; an untied
// model's missing lm_head.weight gets its own message. Returns (n_params).
static const StTensor **resolve_hf(const StIndex *idx, const LlamaModel *model, const char *dir) {
    for (int i = 0; i < model->n_params; i++)
        if (strcmp(model->params[i].name, "lm_head.weight") == 0 &&
            !st_find(idx, "lm_head.weight"))
            die("%s: lm_head.weight is missing, but the model is untied "
                "(tie_word_embeddings = false) and needs it", dir);
    return resolve_all(idx, model, "", dir);
}

// Extra tensors: rotary inv_freq buffers, a tied model's redundant lm_head copy.
// Harmless, except whole extra layers, which mean the config has too few.
static void check_hf_extras(const StIndex *idx, const LlamaModel *model, const char *dir) {
    int extra = 0;
    const char *first = NULL;
    for (int i = 0; i < idx->n; i++) {
        const char *name = idx->t[i].name;
        if (llama_find(model, name)) continue;
        long l = layer_index(name);
        if (l >= model->L)
            die("%s: tensor %s belongs to layer %ld, but the config has num_hidden_layers = %d "
                "(config does not match the weights)", dir, name, l, model->L);
        if (!first) first = name;
        extra++;
    }
    // Every rank loads, one warns: the message is the same everywhere.
    if (extra && comm_world_rank() == 0)
        warn("%s: ignoring %d tensor%s the model does not use (first: %s)", dir, extra,
             extra == 1 ? "" : "s", first);
}

void load_hf_weights_pieces(const char *dir, const LlamaModel *model, CkptPiece *pieces,
                            int n_pieces) {
    const char *where = "load_hf_weights";
    check_table(model, where);
    check_local_pieces(pieces, n_pieces, model->num_elements, where);
    for (int i = 0; i < n_pieces; i++)
        if (pieces[i].kind != CKPT_PARAMS)
            die("%s: piece %d is of kind %s; Hugging Face weights hold only params", where, i,
                KIND_NAMES[pieces[i].kind]);
    StIndex idx;
    st_open_dir(&idx, dir);
    const StTensor **t = resolve_hf(&idx, model, dir);
    check_hf_extras(&idx, model, dir);
    read_pieces(pieces, n_pieces, CKPT_PARAMS, model, t);
    free(t);
    st_close(&idx);
}

void load_hf_weights(const char *dir, const LlamaModel *model, float *params) {
    CkptPiece piece = {CKPT_PARAMS, 0, model->num_elements, params};
    load_hf_weights_pieces(dir, model, &piece, 1);
}
