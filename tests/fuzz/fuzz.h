// tests/fuzz/fuzz.h — what the libFuzzer harnesses share (tests/fuzz/README.md).
//
// femtotron's parsers end the process on bad input (die(), util.h): for the fuzzer
// that clean refusal must return to the harness instead. die() ends the job through
// the hook util_set_job installs, so each harness installs one that longjmps back:
// FUZZ_TRY({...}) runs the block and comes back either way. Memory a refused parse
// had allocated is not freed (run with -detect_leaks=0; its open files are closed);
// what the fuzzer looks for is memory-safety and undefined behaviour, which ASan and
// UBSan turn into crashes.
#ifndef FEMTOTRON_FUZZ_H
#define FEMTOTRON_FUZZ_H

#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

static jmp_buf fuzz_jump;

static inline void fuzz_end_job(int code) {
    (void)code;
    longjmp(fuzz_jump, 1);
}

// A refused parse also leaves its open files behind (die() would have exited):
// close every descriptor opened since the first input (libFuzzer's own are older).
static inline void fuzz_close_new_fds(void) {
    static int known[1024], first = 1;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return;
    int mine = dirfd(d), open_fds[1024], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 1024) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd != mine && fd < 1024) open_fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        if (first) known[open_fds[i]] = 1;
        else if (!known[open_fds[i]]) close(open_fds[i]);
    }
    first = 0;
}

// Run the code (a block; commas allowed); a die() inside it lands back here.
#define FUZZ_TRY(...)                                  \
    do {                                               \
        fuzz_close_new_fds();                          \
        util_set_job(0, 1, fuzz_end_job);              \
        if (setjmp(fuzz_jump) == 0) { __VA_ARGS__; }   \
        fuzz_close_new_fds();                          \
    } while (0)

// A private directory for this process's files, made once.
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/femtotron_fuzz_XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

// data(n) written to fuzz_dir()/name; returns the path (static storage).
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) abort();
    fclose(f);
    return path;
}

// data(n) as a NUL-terminated string (caller frees).
static inline char *fuzz_text(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

#endif
