// tests/unit/config_fixture.h — what the run configuration's unit tests share: a
// temporary Hugging Face model directory (hf_dir) with its config.json writer, a
// small file reader, and the fork()ed child that runs one failing scenario (Case)
// and checks that the process fails and its stderr names the key and the value
// (die() exits 1 when MPI is not running). Used by test_config.c,
// test_config_hf.c and test_config_errors.c. Include after the test's feature
// macro (_POSIX_C_SOURCE) and system headers; functions are static inline so a
// program that does not use one does not warn.
#ifndef FEMTOTRON_TEST_CONFIG_FIXTURE_H
#define FEMTOTRON_TEST_CONFIG_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "run_child.h"

static char hf_dir[64];  // temporary Hugging Face model directory (mkdtemp)

static inline void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

// A small text file's contents (malloc'd; empty when unreadable).
static inline char *cfg_text(const char *path) {
    char *buf = calloc(8192, 1);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, 8191, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static inline void write_hf(const char *json) {
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    write_file(path, json);
}

// One failing scenario: starting from defaults with data.train set, load `json`
// (if any) or the file `file` (if any), apply the space-separated `args` (if
// any), then validate on `world` ranks (if world > 0).
// backend (1 cpu, 2 cuda, 0 none) and bf16_ready: then config_check_backend as
// that binary would call it.
typedef struct {
    const char *json, *file, *args;
    int world;
    int backend, bf16_ready;
} Case;

static inline void run_case(const Case *k) {
    Config c;
    config_defaults(&c);
    config_set(&c, "data.train", "train.bin");
    if (k->json) config_load_json(&c, k->json, "case.json");
    if (k->file) config_load_file(&c, k->file);
    if (k->args) {
        char buf[1024], *argv[32];
        int argc = 0;
        snprintf(buf, sizeof buf, "%s", k->args);
        for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
        config_apply_args(&c, argc, argv);
    }
    if (k->world > 0) config_validate(&c, k->world);
    if (k->backend) config_check_backend(&c, k->backend == 2 ? DEVICE_CUDA : DEVICE_CPU, k->bf16_ready);
}

static inline void run_case_void(void *arg) { run_case((const Case *)arg); }

// Case k in a child with its stderr in err (newlines kept); its exit status.
static inline int run_case_captured(Case *k, char *err, size_t err_size) {
    return run_child_capture(run_case_void, k, 2, 0, err, err_size);
}

// The case must exit non-zero with every '|'-separated needle in its stderr.
static inline void expect_fail(const char *name, Case k, const char *needles) {
    char err[4096];
    int rc = run_case_captured(&k, err, sizeof err);
    int ok = rc != 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", needles);
    for (char *t = strtok(buf, "|"); t; t = strtok(NULL, "|"))
        if (!strstr(err, t)) ok = 0;
    char *nl = strchr(err, '\n');
    if (nl) *nl = '\0';
    CHECK(ok, "error %-34s exit %d, stderr: %s", name, rc, err);
}

// Create hf_dir (mkdtemp) before the first test that uses it; exits 2 on failure.
static inline void hf_dir_create(void) {
    strcpy(hf_dir, "/tmp/femtotron_cfgXXXXXX");
    if (!mkdtemp(hf_dir)) {
        perror("mkdtemp");
        exit(2);
    }
}

// Remove hf_dir and the files the tests leave in it (config.json, run.json).
static inline void hf_dir_remove(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/run.json", hf_dir);
    unlink(path);
    rmdir(hf_dir);
}

#endif
