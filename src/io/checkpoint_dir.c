// io/checkpoint_dir.c — the checkpoint directory protocol: a save's temporary
// directory, fsync, the renames that publish it, and reading `latest` back.
//
// Atomicity comes from the file system: everything is written and fsync'd in a
// hidden temporary directory, which is renamed into place in one step, and only
// then does `latest` (itself replaced by rename) point at it. A crash at any moment
// leaves either the old or the new checkpoint complete, never a half-written one
// that `latest` names.
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

#include "io/checkpoint_internal.h"
#include "util.h"

// ---------------------------------------------------------------- file system helpers

void ckpt_path_join(char *out, const char *dir, const char *name) {
    int k = snprintf(out, CKPT_PATH_MAX, "%s/%s", dir, name);
    if (k < 0 || k >= CKPT_PATH_MAX)
        die("checkpoint path %s/%s is longer than %d bytes", dir, name, CKPT_PATH_MAX - 1);
}

int ckpt_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int ckpt_is_file(const char *path) {
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
    if (!ckpt_is_dir(tmp)) die("checkpoint directory %s exists but is not a directory", tmp);
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
    data_start[0] = ckpt_write_header(sp->model, model, "", NULL, "model");
    data_start[1] = moments ? ckpt_write_header(sp->optimizer, model, ".exp_avg", ".exp_avg_sq", "adamw") : 0;
}

// Rank 0, once every rank's data is durable: the small files, then the renames
// that publish the checkpoint (step directory first, `latest` last).
void ckpt_finish_save(const SavePaths *sp, const char *dir, const Config *cfg,
                      const TrainerState *st) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sp->tmp_dir, "config.json");
    config_write_hf_json(&cfg->model, path);
    fsync_path(path);
    ckpt_path_join(path, sp->tmp_dir, "trainer_state.json");
    ckpt_write_trainer_state(path, cfg, st);
    fsync_path(sp->tmp_dir);

    if (rename(sp->tmp_dir, sp->final_dir) != 0)
        die_errno("cannot rename %s to %s", sp->tmp_dir, sp->final_dir);
    fsync_path(dir);

    char latest[CKPT_PATH_MAX], latest_tmp[CKPT_PATH_MAX], line[48];
    ckpt_path_join(latest, dir, "latest");
    ckpt_path_join(latest_tmp, dir, "latest.tmp");
    snprintf(line, sizeof line, "%s\n", sp->step_name);
    ckpt_write_text_file(latest_tmp, line);
    if (rename(latest_tmp, latest) != 0) die_errno("cannot rename %s to %s", latest_tmp, latest);
    fsync_path(dir);
}

// ---------------------------------------------------------------- latest

int checkpoint_latest(const char *dir, char *out, size_t out_size) {
    char latest[CKPT_PATH_MAX];
    ckpt_path_join(latest, dir, "latest");
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
    ckpt_path_join(ckpt, dir, text);
    if (!ckpt_is_dir(ckpt))
        die("%s names %s, but directory %s does not exist: the checkpoint directory is "
            "corrupt", latest, text, ckpt);
    const char *needed[] = {"model.safetensors", "trainer_state.json"};
    for (int i = 0; i < 2; i++) {
        ckpt_path_join(f, ckpt, needed[i]);
        if (!ckpt_is_file(f))
            die("%s names %s, but %s is missing: the checkpoint directory is corrupt", latest,
                text, f);
    }
    if (strlen(ckpt) + 1 > out_size)
        die("checkpoint path %s does not fit in %zu bytes", ckpt, out_size);
    strcpy(out, ckpt);
    free(text);
    return 1;
}
