// io/checkpoint.c — layout-independent checkpoints and Hugging Face weight loading.
//
// A checkpoint holds global tensors under Hugging Face names, so it can be resumed
// under any parallel layout and loaded by transformers. Atomicity comes from the
// file system: everything is written and fsync'd in a hidden temporary directory,
// which is renamed into place in one step, and only then does `latest` (itself
// replaced by rename) point at it. A crash at any moment leaves either the old or
// the new checkpoint complete, never a half-written one that `latest` names.
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

// ---------------------------------------------------------------- save

static size_t global_numel(const ParamInfo *p) {
    return p->ndim == 1 ? (size_t)p->shape[0] : (size_t)p->shape[0] * (size_t)p->shape[1];
}

// Tensors of the flat buffer `buf` under the model's names plus `suffix`.
// names: (n_params, CKPT_OPT_NAME_MAX) storage for the suffixed names.
static void fill_writes(StWrite *w, char (*names)[CKPT_OPT_NAME_MAX], const LlamaModel *model,
                        const float *buf, const char *suffix) {
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        // A checkpoint holds global tensors; a rank holding a slice must gather first.
        if (p->numel != global_numel(p))
            die("checkpoint_save: tensor %s holds %zu of %zu elements on this rank; saving "
                "sharded parameters is not supported here", p->name, p->numel, global_numel(p));
        snprintf(names[i], CKPT_OPT_NAME_MAX, "%s%s", p->name, suffix);
        w[i].name = names[i];
        w[i].ndim = p->ndim;
        w[i].shape[0] = p->shape[0];
        w[i].shape[1] = p->ndim == 2 ? p->shape[1] : 0;
        w[i].data = buf + p->offset;
    }
}

static void write_tensors(const char *path, const LlamaModel *model, const float *buf,
                          const char *suffix1, const float *buf2, const char *suffix2,
                          const char *meta_kind) {
    int n = model->n_params * (buf2 ? 2 : 1);
    StWrite *w = xcalloc((size_t)n * sizeof *w, "checkpoint tensor list");  // (n)
    char (*names)[CKPT_OPT_NAME_MAX] = xmalloc((size_t)n * CKPT_OPT_NAME_MAX, "checkpoint names");  // (n, CKPT_OPT_NAME_MAX)
    fill_writes(w, names, model, buf, suffix1);
    if (buf2) fill_writes(w + model->n_params, names + model->n_params, model, buf2, suffix2);
    const char *keys[] = {"femtotron"};
    const char *vals[] = {meta_kind};
    st_write_f32(path, w, n, keys, vals, 1);
    free(names);
    free(w);
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

void checkpoint_save(const char *dir, const Config *cfg, const LlamaModel *model,
                     const float *params, const float *m, const float *v,
                     const TrainerState *st) {
    if (!dir || !dir[0]) die("checkpoint_save: empty checkpoint directory");
    if (st->step < 0) die("checkpoint_save: negative step %d", st->step);
    if ((m == NULL) != (v == NULL))
        die("checkpoint_save: both AdamW moments (m and v) or neither must be given");
    mkdir_p(dir);

    char step_name[32], tmp_name[40];
    snprintf(step_name, sizeof step_name, "step_%07d", st->step);
    snprintf(tmp_name, sizeof tmp_name, ".tmp_%s", step_name);
    char final_dir[CKPT_PATH_MAX], tmp_dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    path_join(final_dir, dir, step_name);
    path_join(tmp_dir, dir, tmp_name);
    struct stat sb;
    if (lstat(final_dir, &sb) == 0)
        die("checkpoint %s already exists; refusing to overwrite it", final_dir);
    if (lstat(tmp_dir, &sb) == 0) {
        warn("removing %s left by an interrupted checkpoint save", tmp_dir);
        remove_tree(tmp_dir);
    }
    if (mkdir(tmp_dir, 0755) != 0) die_errno("cannot create directory %s", tmp_dir);

    path_join(path, tmp_dir, "model.safetensors");
    write_tensors(path, model, params, "", NULL, NULL, "model");
    path_join(path, tmp_dir, "config.json");
    config_write_hf_json(&cfg->model, path);
    fsync_path(path);
    if (m) {
        path_join(path, tmp_dir, "optimizer.safetensors");
        write_tensors(path, model, m, ".exp_avg", v, ".exp_avg_sq", "adamw");
    }
    path_join(path, tmp_dir, "trainer_state.json");
    write_trainer_state(path, cfg, st);
    fsync_path(tmp_dir);

    if (rename(tmp_dir, final_dir) != 0) die_errno("cannot rename %s to %s", tmp_dir, final_dir);
    fsync_path(dir);

    char latest[CKPT_PATH_MAX], latest_tmp[CKPT_PATH_MAX], line[48];
    path_join(latest, dir, "latest");
    path_join(latest_tmp, dir, "latest.tmp");
    snprintf(line, sizeof line, "%s\n", step_name);
    write_text_file(latest_tmp, line);
    if (rename(latest_tmp, latest) != 0) die_errno("cannot rename %s to %s", latest_tmp, latest);
    fsync_path(dir);
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

// Copy one model tensor from the file into buf (at the tensor's offset, numel
// elements); the file's shape must equal the model's global shape exactly.
static void copy_tensor(const StTensor *t, const ParamInfo *p, float *buf, const char *where) {
    int64_t want[2] = {p->shape[0], p->shape[1]};
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == want[d];
    if (!same) {
        char a[128], b[128];
        format_shape(a, sizeof a, p->ndim, want);
        format_shape(b, sizeof b, t->ndim, t->shape);
        die("%s: tensor %s has shape %s in the file, the model expects %s", where, t->name, b, a);
    }
    if (p->numel > global_numel(p))
        die("%s: tensor %s: parameter table holds %zu elements, more than its global %zu",
            where, p->name, p->numel, global_numel(p));
    // Today every rank holds whole tensors (slice start 0); sliced ownership will pass
    // its element offset here.
    st_read_f32(t, 0, p->numel, buf + p->offset);
}

// Load every model tensor (name + suffix) from idx into buf; all must be present.
static void load_all(const StIndex *idx, const LlamaModel *model, float *buf,
                     const char *suffix, const char *where) {
    char name[CKPT_OPT_NAME_MAX];
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        snprintf(name, sizeof name, "%s%s", p->name, suffix);
        const StTensor *t = st_find(idx, name);
        if (!t) die("%s: tensor %s is missing", where, name);
        copy_tensor(t, p, buf, where);
    }
}

// Tensors in a checkpoint file that the model lacks mean a different model config.
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

void checkpoint_load(const char *ckpt_dir, const LlamaModel *model,
                     float *params, float *m, float *v, TrainerState *st) {
    char path[CKPT_PATH_MAX];
    if (!is_dir(ckpt_dir)) die("checkpoint directory %s does not exist", ckpt_dir);
    if ((m == NULL) != (v == NULL))
        die("checkpoint_load: both AdamW moments (m and v) or neither must be given");

    StIndex idx;
    path_join(path, ckpt_dir, "model.safetensors");
    if (!is_file(path)) die("checkpoint %s has no model.safetensors (%s)", ckpt_dir, path);
    st_open(&idx, path);
    load_all(&idx, model, params, "", path);
    reject_extras(&idx, model, path, 0);
    st_close(&idx);

    if (m) {
        path_join(path, ckpt_dir, "optimizer.safetensors");
        if (!is_file(path))
            die("checkpoint %s has no optimizer.safetensors (%s), needed to restore the AdamW "
                "moments", ckpt_dir, path);
        st_open(&idx, path);
        load_all(&idx, model, m, ".exp_avg", path);
        load_all(&idx, model, v, ".exp_avg_sq", path);
        reject_extras(&idx, model, path, 1);
        st_close(&idx);
    }

    path_join(path, ckpt_dir, "trainer_state.json");
    if (!is_file(path)) die("checkpoint %s has no trainer_state.json (%s)", ckpt_dir, path);
    TrainerState tmp;
    read_trainer_state(path, &tmp);
    if (st) *st = tmp;
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

void load_hf_weights(const char *dir, const LlamaModel *model, float *params) {
    StIndex idx;
    st_open_dir(&idx, dir);
    for (int i = 0; i < model->n_params; i++) {
        const ParamInfo *p = &model->params[i];
        const StTensor *t = st_find(&idx, p->name);
        if (!t) {
            if (strcmp(p->name, "lm_head.weight") == 0)
                die("%s: lm_head.weight is missing, but the model is untied "
                    "(tie_word_embeddings = false) and needs it", dir);
            die("%s: tensor %s is missing", dir, p->name);
        }
        copy_tensor(t, p, params, dir);
    }
    // Extra tensors: rotary inv_freq buffers, a tied model's redundant lm_head copy.
    // Harmless, except whole extra layers, which mean the config has too few.
    int extra = 0;
    const char *first = NULL;
    for (int i = 0; i < idx.n; i++) {
        const char *name = idx.t[i].name;
        if (llama_find(model, name)) continue;
        long l = layer_index(name);
        if (l >= model->L)
            die("%s: tensor %s belongs to layer %ld, but the config has num_hidden_layers = %d "
                "(config does not match the weights)", dir, name, l, model->L);
        if (!first) first = name;
        extra++;
    }
    if (extra)
        warn("%s: ignoring %d tensor%s the model does not use (first: %s)", dir, extra,
             extra == 1 ? "" : "s", first);
    st_close(&idx);
}
