// io/checkpoint_save.c — the collective save (checkpoint_save_begin / _write /
// _finish, checkpoint_save_pieces, checkpoint_save): sized safetensors files, each
// rank's runs pwrite()n into them and checksummed on the way.
//
// With many ranks no tensor data ever travels between them: rank 0 creates the
// files with their safetensors headers at full size, every rank pwrite()s its own
// ranges straight into them, sums the checksum of exactly those bytes
// (checkpoint_integrity.c) and fsyncs, and rank 0 then adds the sums up, writes the
// manifest and publishes (checkpoint_dir.c). A rank's ranges are of its own flat
// order, mapped to runs of the global tensors by checkpoint_pieces.c.
#define _POSIX_C_SOURCE 200809L
#include "io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"
#include "ops/bf16.h"
#include "util.h"

const char *const CKPT_OPT_SUFFIX[] = {".master", ".exp_avg", ".exp_avg_sq"};

void ckpt_file_layouts(CkptFileLayout *lay, int moments, CkptDtype dtype) {
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < CKPT_N_KINDS; k++) lay[f].slot[k] = -1;
    lay[0].slot[CKPT_PARAMS] = 0;
    lay[0].esize = dtype == CKPT_DTYPE_BF16 ? 2 : 4;
    lay[1].esize = 4;
    int n = 0;
    if (moments) {
        lay[1].slot[CKPT_EXP_AVG] = n++;
        lay[1].slot[CKPT_EXP_AVG_SQ] = n++;
    }
    if (dtype == CKPT_DTYPE_BF16) lay[1].slot[CKPT_PARAMS] = n++;
}

// Create path with the header of the model's tensors as lay places them: for each
// slot in turn, every tensor in table order (the global flat order) under its name
// plus the kind's suffix. Data pointers stay NULL: only the header is written.
uint64_t ckpt_write_header(const char *path, const LlamaModel *model, const CkptFileLayout *lay,
                           int optimizer_file, const char *meta_kind, int step) {
    int kind_of_slot[CKPT_N_KINDS], n_slots = 0;
    for (int k = 0; k < CKPT_N_KINDS; k++)
        if (lay->slot[k] >= 0) {
            kind_of_slot[lay->slot[k]] = k;
            n_slots++;
        }
    if (!n_slots) return 0;
    int n = model->n_params * n_slots;
    StWrite *w = xcalloc((size_t)n * sizeof *w, "checkpoint tensor list");  // (n)
    char (*names)[CKPT_OPT_NAME_MAX] = xmalloc((size_t)n * CKPT_OPT_NAME_MAX, "checkpoint names");  // (n, CKPT_OPT_NAME_MAX)
    for (int s = 0, j = 0; s < n_slots; s++)
        for (int i = 0; i < model->n_params; i++, j++) {
            const ParamInfo *p = &model->params[i];
            snprintf(names[j], CKPT_OPT_NAME_MAX, "%s%s", p->name,
                     optimizer_file ? CKPT_OPT_SUFFIX[kind_of_slot[s]] : "");
            w[j].name = names[j];
            w[j].ndim = p->ndim;
            w[j].shape[0] = p->shape[0];
            w[j].shape[1] = p->ndim == 2 ? p->shape[1] : 0;
            w[j].dtype = lay->esize == 2 ? ST_BF16 : ST_F32;
        }
    char step_text[16];
    snprintf(step_text, sizeof step_text, "%d", step);
    const char *keys[] = {"femtotron", "step"};  // the step: checkpoint_verify's mixed-files check
    const char *vals[] = {meta_kind, step_text};
    uint64_t data_start = st_write_header(path, w, n, keys, vals, 2);
    free(names);
    free(w);
    return data_start;
}

// Element runs bound for one file, merged while each continues the last in both the
// file and memory: with tp = 1 a piece is one pwrite however many tensors it
// crosses; a column slice is one pwrite per row. A bf16 file's runs are rounded
// into a staging buffer on the way.
#define STAGE_ELEMS ((size_t)1 << 20)
typedef struct {
    int fd;
    const char *path;
    int esize;          // bytes per element in the file: 4 (fp32) or 2 (bf16)
    uint64_t off;       // file offset of the pending run
    const float *src;   // its values
    size_t count;       // its length in elements (0: nothing pending)
    uint64_t hash;      // checksum share of every run written so far
    uint16_t *stage;    // (STAGE_ELEMS) bf16 staging, allocated on first use
} RunWriter;

static void write_hashed(RunWriter *w, const void *bytes, size_t n, uint64_t off) {
    pwrite_fully(w->fd, bytes, n, off, w->path);
    w->hash += ckpt_hash_units(bytes, n, off / CKPT_HASH_UNIT, CKPT_HASH_UNIT);  // off is even
}

static void run_flush(RunWriter *w) {
    if (!w->count) return;
    if (w->esize == 4) {
        write_hashed(w, w->src, w->count * sizeof(float), w->off);
    } else {
        if (!w->stage) w->stage = xmalloc(STAGE_ELEMS * sizeof *w->stage, "bf16 staging");
        for (size_t done = 0; done < w->count; done += STAGE_ELEMS) {
            size_t n = w->count - done < STAGE_ELEMS ? w->count - done : STAGE_ELEMS;
            for (size_t i = 0; i < n; i++) w->stage[i] = bf16_from_f32(w->src[done + i]);
            write_hashed(w, w->stage, 2 * n, w->off + 2 * done);
        }
    }
    w->count = 0;
}

static void run_add(RunWriter *w, uint64_t off, const float *src, size_t count) {
    if (w->count && off == w->off + (uint64_t)w->esize * w->count && src == w->src + w->count) {
        w->count += count;
        return;
    }
    run_flush(w);
    w->off = off;
    w->src = src;
    w->count = count;
}

// Write this rank's non-empty pieces of the kinds lay places in path (params into
// model.safetensors; both moments, and with bf16 weights the fp32 params, into
// optimizer.safetensors, each kind in its slot of G global elements) at the global
// positions of their elements (gbase: ckpt_global_bases), then fsync: every writer
// syncs its own bytes, so the file is durable once every rank has returned from
// here. Vocab padding is never written, nor a replica that another tensor-parallel
// rank writes. Returns this rank's share of the file's checksum (the sum over the
// bytes it wrote).
static uint64_t write_my_pieces(const char *path, uint64_t data_start, const CkptFileLayout *lay,
                                const CkptPiece *pieces, int n_pieces, const LlamaModel *model,
                                const size_t *gbase) {
    RunWriter w = {-1, path, lay->esize, 0, NULL, 0, 0, NULL};
    size_t G = gbase[model->n_params], a, b;
    Block blk[3];
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece *pc = &pieces[i];
        if (pc->hi == pc->lo || lay->slot[pc->kind] < 0) continue;
        if (w.fd < 0) {
            w.fd = open(path, O_WRONLY);
            if (w.fd < 0) die_errno("cannot open %s (created by rank 0) for writing", path);
        }
        size_t kind_base = (size_t)lay->slot[pc->kind] * G;
        for (int t = 0; t < model->n_params; t++) {
            const ParamInfo *p = &model->params[t];
            if (!p->replica_writer || !ckpt_piece_in_tensor(pc, p, &a, &b)) continue;
            int nb = ckpt_map_range(p, a, b, blk);
            for (int k = 0; k < nb; k++) {
                if (blk[k].g < 0) continue;  // padding
                for (size_t r = 0; r < blk[k].n_runs; r++) {
                    uint64_t e = kind_base + gbase[t] + (uint64_t)blk[k].g +
                                 (uint64_t)r * (uint64_t)blk[k].stride;
                    const float *src = pc->data + (p->offset + blk[k].l + r * blk[k].len - pc->lo);
                    run_add(&w, data_start + (uint64_t)lay->esize * e, src, blk[k].len);
                }
            }
        }
    }
    if (w.fd < 0) return 0;
    run_flush(&w);
    free(w.stage);
    if (fsync(w.fd) != 0) die_errno("fsync of %s failed", path);
    if (close(w.fd) != 0) die_errno("close of %s failed", path);
    return w.hash;
}

void checkpoint_save_begin(CkptSave *s, const char *dir, const Config *cfg,
                           const LlamaModel *model, const CkptPiece *pieces, int n_pieces,
                           const TrainerState *st) {
    const char *where = "checkpoint_save";
    if (!dir || !dir[0]) die("%s: empty checkpoint directory", where);
    if (st->step < 0) die("%s: negative step %d", where, st->step);
    ckpt_check_table(model, where);
    ckpt_check_local_pieces(pieces, n_pieces, model->num_elements, where);
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->model = model;
    s->pieces = pieces;
    s->n_pieces = n_pieces;
    s->st = *st;
    s->gbase = ckpt_global_bases(model);
    snprintf(s->dir, sizeof s->dir, "%s", dir);

    PieceTable table;
    ckpt_gather_pieces(&table, model, pieces, n_pieces);
    int moments = ckpt_kind_given(&table, CKPT_EXP_AVG) || ckpt_kind_given(&table, CKPT_EXP_AVG_SQ);
    ckpt_file_layouts(s->layout, moments, cfg->checkpoint.dtype);
    SavePaths sp;
    ckpt_save_paths(&sp, dir, st->step);
    if (comm_world_rank() == 0) {
        // Rank 0 alone judges the partition: one clear message, not one per rank
        // (its die() ends every rank).
        const LlamaModel *tabs = ckpt_tp_tables(model);
        ckpt_check_tables_agree(&table, tabs, model, where);
        size_t G = s->gbase[model->n_params];
        ckpt_check_coverage(&table, CKPT_PARAMS, tabs, model, G, where);
        if (moments) {
            ckpt_check_coverage(&table, CKPT_EXP_AVG, tabs, model, G, where);
            ckpt_check_coverage(&table, CKPT_EXP_AVG_SQ, tabs, model, G, where);
        }
        ckpt_free_tp_tables(tabs, model);
        ckpt_begin_save(&sp, dir, model, s->layout, st->step, s->data_start);
    }
    free(table.head);
    // The broadcast doubles as the barrier "the sized files exist".
    group_broadcast_bytes(GROUP_WORLD, s->data_start, sizeof s->data_start, 0);
    snprintf(s->final_dir, sizeof s->final_dir, "%s", sp.final_dir);
    snprintf(s->tmp_dir, sizeof s->tmp_dir, "%s", sp.tmp_dir);
    snprintf(s->files[0], sizeof s->files[0], "%s", sp.model);
    snprintf(s->files[1], sizeof s->files[1], "%s", sp.optimizer);
}

void checkpoint_save_write(CkptSave *s) {
    for (int f = 0; f < 2; f++)
        if (s->data_start[f])
            s->hash[f] = write_my_pieces(s->files[f], s->data_start[f], &s->layout[f], s->pieces,
                                         s->n_pieces, s->model, s->gbase);
}

void checkpoint_save_finish(CkptSave *s) {
    // Every rank's bytes are written and fsync'd once it enters this sum.
    group_allreduce_sum_u64(GROUP_WORLD, s->hash, 2);
    if (comm_world_rank() == 0) {
        SavePaths sp;
        ckpt_save_paths(&sp, s->dir, s->st.step);
        ckpt_finish_save(&sp, s->dir, s->cfg, &s->st, s->data_start, s->hash);
    }
    free(s->gbase);
    s->gbase = NULL;
    // Nobody returns (and, say, deletes its buffers or starts the next save)
    // before the checkpoint is published.
    group_barrier(GROUP_WORLD);
}

void checkpoint_save_pieces(const char *dir, const Config *cfg, const LlamaModel *model,
                            const CkptPiece *pieces, int n_pieces, const TrainerState *st) {
    CkptSave s;
    checkpoint_save_begin(&s, dir, cfg, model, pieces, n_pieces, st);
    checkpoint_save_write(&s);
    checkpoint_save_finish(&s);
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
