// io/checkpoint_load.c — fill pieces from a checkpoint directory
// (checkpoint_load_pieces) or from Hugging Face weights (load_hf_weights_pieces),
// every tensor's presence and global shape checked before any read.
//
// Loading reads tensor slices by name, mapped by checkpoint_pieces.c, so any layout
// can resume from a checkpoint written by any other.
#include "io/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"
#include "util.h"

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
        if (!ckpt_piece_in_tensor(pc, p, &a, &b)) continue;
        int nb = ckpt_map_range(p, a, b, blk);
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
            int k = 0;
            for (; k < CKPT_N_KINDS; k++) {
                size_t sl = strlen(CKPT_OPT_SUFFIX[k]);
                if (len > sl && strcmp(name + len - sl, CKPT_OPT_SUFFIX[k]) == 0) {
                    name[len - sl] = '\0';
                    break;
                }
            }
            if (k == CKPT_N_KINDS)
                die("%s: tensor %s is neither an AdamW moment (NAME.exp_avg / NAME.exp_avg_sq) "
                    "nor a master weight (NAME.master)", where, idx->t[i].name);
        }
        if (!llama_find(model, name))
            die("%s: tensor %s is not part of this model (was the checkpoint saved with a "
                "different model config?)", where, idx->t[i].name);
    }
}

// model.safetensors into the params pieces (unless read_params is 0: the exact fp32
// master weights of a bf16 checkpoint are read instead). Checks run before any read.
static void load_model_file(const char *ckpt_dir, const LlamaModel *model, CkptPiece *pieces,
                            int n_pieces, int read_params) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, ckpt_dir, "model.safetensors");
    if (!path_is_file(path)) die("checkpoint %s has no model.safetensors (%s)", ckpt_dir, path);
    StIndex idx;
    st_open(&idx, path);
    const StTensor **t = resolve_all(&idx, model, "", path);
    reject_extras(&idx, model, path, 0);
    if (read_params) read_pieces(pieces, n_pieces, CKPT_PARAMS, model, t);
    free(t);
    st_close(&idx);
}

// optimizer.safetensors (opt, opened from path; NULL when the checkpoint has none)
// into the exp_avg and exp_avg_sq pieces (moments), and the params pieces from its
// NAME.master tensors (master).
static void load_optimizer_file(const StIndex *opt, const char *path, const char *ckpt_dir,
                                const LlamaModel *model, CkptPiece *pieces, int n_pieces,
                                int moments, int master) {
    if (!opt)
        die("checkpoint %s has no optimizer.safetensors (%s), needed to restore the AdamW "
            "moments", ckpt_dir, path);
    const StTensor **m = moments ? resolve_all(opt, model, CKPT_OPT_SUFFIX[CKPT_EXP_AVG], path) : NULL;
    const StTensor **v = moments ? resolve_all(opt, model, CKPT_OPT_SUFFIX[CKPT_EXP_AVG_SQ], path) : NULL;
    const StTensor **w = master ? resolve_all(opt, model, CKPT_OPT_SUFFIX[CKPT_PARAMS], path) : NULL;
    reject_extras(opt, model, path, 1);
    if (moments) {
        read_pieces(pieces, n_pieces, CKPT_EXP_AVG, model, m);
        read_pieces(pieces, n_pieces, CKPT_EXP_AVG_SQ, model, v);
    }
    if (master) read_pieces(pieces, n_pieces, CKPT_PARAMS, model, w);
    free(m);
    free(v);
    free(w);
}

void checkpoint_load_pieces(const char *ckpt_dir, const LlamaModel *model,
                            CkptPiece *pieces, int n_pieces, TrainerState *st) {
    const char *where = "checkpoint_load";
    if (!path_is_dir(ckpt_dir)) die("checkpoint directory %s does not exist", ckpt_dir);
    ckpt_check_table(model, where);
    ckpt_check_local_pieces(pieces, n_pieces, model->num_elements, where);
    // Every file against the manifest before anything is read into the pieces.
    if (!checkpoint_verify(ckpt_dir) && comm_world_rank() == 0)
        warn("checkpoint %s has no manifest.json (written before checksums were kept): its files "
             "cannot be verified", ckpt_dir);
    // model.safetensors is checked even when this rank loads no parameters: a
    // checkpoint of another model must fail everywhere. A bf16 checkpoint's weights
    // come from the fp32 master copy, so a resume continues exactly.
    // Saved with checkpoint.dtype bf16, optimizer.safetensors holds the master weights
    // (its first tensor is a NAME.master).
    char path[CKPT_PATH_MAX], name[CKPT_OPT_NAME_MAX];
    ckpt_path_join(path, ckpt_dir, "optimizer.safetensors");
    StIndex opt;
    const int have_opt = path_is_file(path);
    if (have_opt) st_open(&opt, path);
    int master = 0;
    if (have_opt && model->n_params > 0) {
        snprintf(name, sizeof name, "%s%s", model->params[0].name, CKPT_OPT_SUFFIX[CKPT_PARAMS]);
        master = st_find(&opt, name) != NULL;
    }
    const int moments = any_kind(pieces, n_pieces, CKPT_EXP_AVG) || any_kind(pieces, n_pieces, CKPT_EXP_AVG_SQ);
    load_model_file(ckpt_dir, model, pieces, n_pieces, !master);
    if (moments || master)
        load_optimizer_file(have_opt ? &opt : NULL, path, ckpt_dir, model, pieces, n_pieces, moments, master);
    if (have_opt) st_close(&opt);

    ckpt_path_join(path, ckpt_dir, "trainer_state.json");
    if (!path_is_file(path)) die("checkpoint %s has no trainer_state.json (%s)", ckpt_dir, path);
    TrainerState tmp;
    ckpt_read_trainer_state(path, &tmp);
    ckpt_check_finite(pieces, n_pieces, model, ckpt_dir);
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
    ckpt_check_table(model, where);
    ckpt_check_local_pieces(pieces, n_pieces, model->num_elements, where);
    for (int i = 0; i < n_pieces; i++)
        if (pieces[i].kind != CKPT_PARAMS)
            die("%s: piece %d is of kind %s; Hugging Face weights hold only params", where, i,
                CKPT_KIND_NAMES[pieces[i].kind]);
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
