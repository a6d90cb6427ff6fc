// io/checkpoint_dir.c — the checkpoint directory protocol: a save's temporary
// directory, fsync, the one rename that publishes it, finding the newest published
// checkpoint, and the `latest` link.
//
// Atomicity comes from the file system: everything is written and fsync'd in a
// hidden temporary directory, manifest.json last, which is renamed into place in
// one step. The newest step_* directory IS the checkpoint: there is no second
// step (a `latest` file to replace) whose absence a crash could leave behind.
// `latest` is then pointed at it as a convenience; nothing reads it back.
#define _POSIX_C_SOURCE 200809L
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/prepared.h"
#include "io/checkpoint_internal.h"
#include "util.h"

// ---------------------------------------------------------------- file system helpers

void ckpt_path_join(char *out, const char *dir, const char *name) {
    int k = snprintf(out, CKPT_PATH_MAX, "%s/%s", dir, name);
    if (k < 0 || k >= CKPT_PATH_MAX)
        die("checkpoint path %s/%s is longer than %d bytes", dir, name, CKPT_PATH_MAX - 1);
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
            ckpt_path_join(child, path, e->d_name);
            remove_tree(child);
        }
        closedir(d);
        if (rmdir(path) != 0) die_errno("cannot remove directory %s", path);
    } else if (unlink(path) != 0) {
        die_errno("cannot remove %s", path);
    }
}

void ckpt_write_text_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die_errno("cannot create %s", path);
    write_fully(fd, text, strlen(text), path);
    if (fsync(fd) != 0) die_errno("fsync of %s failed", path);
    if (close(fd) != 0) die_errno("close of %s failed", path);
}

// ---------------------------------------------------------------- save protocol

// Paths of one save (SavePaths): DIR/step_NNNNNNN, DIR/.tmp_step_NNNNNNN and its files.
void ckpt_save_paths(SavePaths *sp, const char *dir, int step) {
    char tmp_name[48];
    snprintf(sp->step_name, sizeof sp->step_name, "step_%07d", step);
    snprintf(tmp_name, sizeof tmp_name, ".tmp_%s", sp->step_name);
    ckpt_path_join(sp->final_dir, dir, sp->step_name);
    ckpt_path_join(sp->tmp_dir, dir, tmp_name);
    ckpt_path_join(sp->model, sp->tmp_dir, "model.safetensors");
    ckpt_path_join(sp->optimizer, sp->tmp_dir, "optimizer.safetensors");
}

// Rank 0, before any data is written: refuse an existing step, clear a stale
// temporary, create the temporary directory and the sized files with their headers.
// data_start: (2) model, optimizer (0 when no moments are saved).
void ckpt_begin_save(const SavePaths *sp, const char *dir, const LlamaModel *model,
                     const CkptFileLayout *lay, int step, uint64_t *data_start) {
    make_dirs(dir, "checkpoint.dir");
    struct stat sb;
    if (lstat(sp->final_dir, &sb) == 0)
        die("checkpoint %s already exists; refusing to overwrite it", sp->final_dir);
    if (lstat(sp->tmp_dir, &sb) == 0) {
        warn("removing %s left by an interrupted checkpoint save", sp->tmp_dir);
        remove_tree(sp->tmp_dir);
    }
    if (mkdir(sp->tmp_dir, 0755) != 0) die_errno("cannot create directory %s", sp->tmp_dir);
    data_start[0] = ckpt_write_header(sp->model, model, &lay[0], 0, "model", step);
    data_start[1] = ckpt_write_header(sp->optimizer, model, &lay[1], 1, "adamw", step);
}

// Rank 0, once every rank's data is durable: the small files, the manifest (the
// checksums of every file: hash[0..1] are the two safetensors files' data-section
// sums from every rank; their headers are added here), then the one rename that
// publishes the checkpoint, and `latest`.
void ckpt_finish_save(const SavePaths *sp, const char *dir, const Config *cfg,
                      const TrainerState *st, const uint64_t *data_start, const uint64_t *hash) {
    char path[CKPT_PATH_MAX];
    CkptManifest m;
    memset(&m, 0, sizeof m);
    m.step = st->step;
    const char *names[2] = {"model.safetensors", "optimizer.safetensors"};
    const char *files[2] = {sp->model, sp->optimizer};
    for (int f = 0; f < 2; f++) {
        if (!data_start[f]) continue;
        int fd = open(files[f], O_RDONLY);
        if (fd < 0) die_errno("cannot open %s", files[f]);
        struct stat sb;
        if (fstat(fd, &sb) != 0) die_errno("cannot stat %s", files[f]);
        uint64_t h = hash[f] + ckpt_hash_file_range(fd, files[f], 0, data_start[f], CKPT_HASH_UNIT);  // + the header
        close(fd);
        ckpt_manifest_add(&m, names[f], (uint64_t)sb.st_size, h);
    }
    // A checkpoint stands alone: config.json (the source config's other keys kept,
    // bos/eos from the data's tokenizer), generation_config.json and the tokenizer
    // files that made the training data (data/prepared.h).
    PreparedInfo data;
    DataSource *src = xmalloc(CFG_MAX_SOURCES * sizeof *src, "data sources");  // (CFG_MAX_SOURCES)
    // A mixture's sources share one tokenizer (data/mixture.c checks): the first's.
    const int prepared = config_data_sources(cfg->data.train, "data.train", src) > 0 &&
                         prepared_find(src[0].path, &data);
    free(src);
    ckpt_path_join(path, sp->tmp_dir, "config.json");
    config_write_hf_json(&cfg->model, path, prepared ? data.bos_id : -1, prepared ? data.eot_id : -1,
                         cfg->checkpoint.dtype);
    uint64_t bytes, h = ckpt_hash_file(path, &bytes);
    ckpt_manifest_add(&m, "config.json", bytes, h);
    char gen[CKPT_PATH_MAX];
    ckpt_path_join(gen, sp->tmp_dir, "generation_config.json");
    config_write_generation_json(&cfg->model, path, gen);
    h = ckpt_hash_file(gen, &bytes);
    ckpt_manifest_add(&m, "generation_config.json", bytes, h);
    for (int i = 0; prepared && !data.byte_level && i < PREPARED_TOKENIZER_FILES; i++) {
        char from[CKPT_PATH_MAX];
        ckpt_path_join(from, data.dir, PREPARED_TOKENIZER_FILE[i]);
        if (!path_is_file(from)) continue;
        ckpt_path_join(path, sp->tmp_dir, PREPARED_TOKENIZER_FILE[i]);
        copy_file_durable(from, path);
        h = ckpt_hash_file(path, &bytes);
        ckpt_manifest_add(&m, PREPARED_TOKENIZER_FILE[i], bytes, h);
    }
    ckpt_path_join(path, sp->tmp_dir, "trainer_state.json");
    ckpt_write_trainer_state(path, cfg, st);
    h = ckpt_hash_file(path, &bytes);
    ckpt_manifest_add(&m, "trainer_state.json", bytes, h);
    ckpt_path_join(path, sp->tmp_dir, "manifest.json");
    ckpt_write_manifest(path, &m);
    fsync_path(sp->tmp_dir);

    if (rename(sp->tmp_dir, sp->final_dir) != 0)
        die_errno("cannot rename %s to %s", sp->tmp_dir, sp->final_dir);
    fsync_path(dir);  // published
    ckpt_point_latest(dir, sp->step_name);
    checkpoint_prune(dir, cfg->checkpoint.keep, cfg->checkpoint.keep_every);
}

// `latest` -> step_NNNNNNN, replaced atomically (a new link renamed over it).
void ckpt_point_latest(const char *dir, const char *step_name) {
    char latest[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    ckpt_path_join(latest, dir, "latest");
    ckpt_path_join(tmp, dir, "latest.tmp");
    unlink(tmp);
    if (symlink(step_name, tmp) != 0) die_errno("cannot create the link %s", tmp);
    struct stat sb;
    if (lstat(latest, &sb) == 0 && S_ISDIR(sb.st_mode))
        die("%s is a directory; femtotron keeps a link to the newest checkpoint there", latest);
    if (rename(tmp, latest) != 0) die_errno("cannot rename %s to %s", tmp, latest);
    fsync_path(dir);
}

// ---------------------------------------------------------------- finding checkpoints

// The step of a directory entry named step_<digits>, or -1.
static long entry_step(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5] || strlen(name) > 16) return -1;
    long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v <= 0x7fffffff ? v : -1;
}

typedef struct {
    long step;
    char name[24];
} StepDir;

// The step_* directories of dir, highest step first: (n) into *out (caller frees).
static int list_steps(const char *dir, StepDir **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        die_errno("cannot list checkpoint directory %s", dir);
    }
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long s = entry_step(e->d_name);
        char path[CKPT_PATH_MAX];
        ckpt_path_join(path, dir, e->d_name);
        if (s < 0 || !path_is_dir(path)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *out = realloc(*out, (size_t)cap * sizeof **out);
            if (!*out) die("out of memory listing %s", dir);
        }
        (*out)[n].step = s;
        snprintf((*out)[n++].name, sizeof (*out)->name, "%.23s", e->d_name);  // <= 16 chars (entry_step)
    }
    closedir(d);
    for (int i = 1; i < n; i++)  // insertion sort, descending: a run keeps few checkpoints
        for (int j = i; j > 0 && (*out)[j].step > (*out)[j - 1].step; j--) {
            StepDir t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return n;
}

// Published by this femtotron (manifest.json) or by an older one (model and state).
static int is_checkpoint(const char *ckpt) {
    char f[CKPT_PATH_MAX];
    ckpt_path_join(f, ckpt, "manifest.json");
    if (path_is_file(f)) return 1;
    ckpt_path_join(f, ckpt, "model.safetensors");
    char g[CKPT_PATH_MAX];
    ckpt_path_join(g, ckpt, "trainer_state.json");
    return path_is_file(f) && path_is_file(g);
}

int checkpoint_latest(const char *dir, char *out, size_t out_size) {
    StepDir *steps;
    int n = list_steps(dir, &steps);
    if (n == 0) {
        free(steps);
        return 0;
    }
    char ckpt[CKPT_PATH_MAX];
    ckpt_path_join(ckpt, dir, steps[0].name);
    free(steps);
    if (!is_checkpoint(ckpt))
        die("%s is not a complete checkpoint (no manifest.json, and no model.safetensors with "
            "trainer_state.json): femtotron never publishes one like it, so it was changed by hand; "
            "move it out of %s to resume from the one before", ckpt, dir);
    if (strlen(ckpt) + 1 > out_size) die("checkpoint path %s does not fit in %zu bytes", ckpt, out_size);
    strcpy(out, ckpt);
    return 1;
}

int checkpoint_newest_finite(const char *dir, char *out, size_t out_size) {
    StepDir *steps;
    int n = list_steps(dir, &steps), found = 0;
    for (int i = 0; i < n && !found; i++) {
        char ckpt[CKPT_PATH_MAX], f[CKPT_PATH_MAX];
        ckpt_path_join(ckpt, dir, steps[i].name);
        ckpt_path_join(f, ckpt, "trainer_state.json");
        if (!path_is_file(f)) continue;
        TrainerState ts;
        ckpt_read_trainer_state(f, &ts);
        if (ts.loss == ts.loss && strlen(ckpt) < out_size) {  // not NaN
            strcpy(out, ckpt);
            found = 1;
        }
    }
    free(steps);
    return found;
}

void checkpoint_prune(const char *dir, int keep, int keep_every) {
    if (keep <= 0) return;
    char finite[CKPT_PATH_MAX] = "";
    if (!checkpoint_newest_finite(dir, finite, sizeof finite)) finite[0] = '\0';
    StepDir *steps;
    int n = list_steps(dir, &steps);
    for (int i = keep; i < n; i++) {  // steps[] is newest first
        char path[CKPT_PATH_MAX], doomed[CKPT_PATH_MAX];
        ckpt_path_join(path, dir, steps[i].name);
        if (keep_every > 0 && steps[i].step % keep_every == 0) continue;
        if (strcmp(path, finite) == 0) continue;  // what max_bad_steps would tell the user to resume from
        // Renamed first (atomic), then removed: a kill half-way leaves a .old_step_*
        // directory that checkpoint_prepare_dir removes, never a half step_*.
        char old_name[40];
        snprintf(old_name, sizeof old_name, ".old_%s", steps[i].name);
        ckpt_path_join(doomed, dir, old_name);
        if (rename(path, doomed) != 0) die_errno("checkpoint.keep: cannot rename %s to %s", path, doomed);
        remove_tree(doomed);
    }
    if (n > keep) fsync_path(dir);
    free(steps);
}

void checkpoint_prepare_dir(const char *dir) {
    check_writable_dir(dir, "checkpoint.dir");
    DIR *d = opendir(dir);
    if (!d) die_errno("cannot list checkpoint directory %s", dir);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const int pruning = strncmp(e->d_name, ".old_step_", 10) == 0;
        if (strncmp(e->d_name, ".tmp_step_", 10) != 0 && strcmp(e->d_name, "latest.tmp") != 0 && !pruning)
            continue;
        char path[CKPT_PATH_MAX];
        ckpt_path_join(path, dir, e->d_name);
        printf("checkpoint.dir: removing %s, left by an interrupted %s\n", path,
               pruning ? "deletion (checkpoint.keep)" : "save");
        remove_tree(path);
    }
    closedir(d);
    fflush(stdout);
    // A job killed between publishing a step and pointing `latest` at it left the
    // link one behind: point it at the newest checkpoint again.
    char newest[CKPT_PATH_MAX];
    if (checkpoint_latest(dir, newest, sizeof newest)) ckpt_point_latest(dir, strrchr(newest, '/') + 1);
}
