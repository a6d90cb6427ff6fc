// tests/fuzz/fuzz.h — what the libFuzzer harnesses share (tests/fuzz/README.md).
//
// femtotron's parsers end the process on bad input (die(), util.h): for the fuzzer
// that clean refusal must return to the harness instead. die() ends the job through
// the hook util_set_job installs, so each harness installs one that longjmps back:
// FUZZ_TRY({...}) runs the block and comes back either way. What a refused parse
// had allocated and opened would pile up over millions of inputs (a 120 s run grew
// past 4 GiB), so the harness frees it: the fuzz binaries are linked with
// -Wl,--wrap for malloc, calloc, realloc, posix_memalign, strdup and free (Makefile),
// cJSON gets the same functions through cJSON_InitHooks, and every block made inside
// FUZZ_TRY and still live when die() lands back is freed; new descriptors are closed.
// That is safe because the parsers keep no heap memory in a static (the singletons
// of docs/DESIGN.md are fixed-size tables). What the fuzzer looks for is
// memory-safety and undefined behaviour, which ASan and UBSan turn into crashes.
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

#include <cJSON.h>

#include "util.h"

// ---------------------------------------------- allocations made inside FUZZ_TRY
// A set of live blocks, open addressing with linear probing: fuzz_live(FUZZ_CAP)
// pointers, NULL = empty. Deletion shifts the following run back (no tombstones).
// fuzz_used(FUZZ_CAP) logs every slot an insert filled, so that emptying the set
// after an input visits those slots, not the whole table (a scan of it per input
// made the fuzzers 5x slower); a slot a deletion shifts an entry into was filled
// by an insert before, so the log covers every occupied slot.
#define FUZZ_CAP (1u << 17)
static void *fuzz_live[FUZZ_CAP];
static unsigned fuzz_used[FUZZ_CAP];
static unsigned fuzz_count, fuzz_nused;
static int fuzz_tracking;  // 1 inside a FUZZ_TRY block

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void __real_free(void *p);

static inline unsigned fuzz_slot(const void *p) {
    return (unsigned)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 40) & (FUZZ_CAP - 1);
}
static inline void fuzz_remember(void *p) {
    if (!p || !fuzz_tracking || fuzz_count >= FUZZ_CAP / 4 * 3) return;  // full: let it leak
    unsigned i = fuzz_slot(p);
    while (fuzz_live[i]) i = (i + 1) & (FUZZ_CAP - 1);
    fuzz_live[i] = p;
    fuzz_count++;
    if (fuzz_nused < FUZZ_CAP) fuzz_used[fuzz_nused] = i;
    fuzz_nused++;  // past FUZZ_CAP: the log overflowed, empty by a full scan
}
static inline void fuzz_forget(void *p) {
    if (!p || fuzz_count == 0) return;
    unsigned i = fuzz_slot(p);
    while (fuzz_live[i] && fuzz_live[i] != p) i = (i + 1) & (FUZZ_CAP - 1);
    if (!fuzz_live[i]) return;  // made outside FUZZ_TRY
    fuzz_live[i] = NULL;
    fuzz_count--;
    // Move back any entry of the run after i whose home slot does not lie in (i, j].
    for (unsigned j = (i + 1) & (FUZZ_CAP - 1); fuzz_live[j]; j = (j + 1) & (FUZZ_CAP - 1)) {
        unsigned h = fuzz_slot(fuzz_live[j]);
        if ((j > i) ? (h <= i || h > j) : (h <= i && h > j)) {
            fuzz_live[i] = fuzz_live[j];
            fuzz_live[j] = NULL;
            i = j;
        }
    }
}
// Free every block still remembered (free_them) or just forget them, and empty the set.
static inline void fuzz_drop_all(int free_them) {
    const int logged = fuzz_nused <= FUZZ_CAP;
    const unsigned n = logged ? fuzz_nused : FUZZ_CAP;
    for (unsigned k = 0; fuzz_count > 0 && k < n; k++) {
        unsigned i = logged ? fuzz_used[k] : k;
        if (!fuzz_live[i]) continue;
        if (free_them) __real_free(fuzz_live[i]);
        fuzz_live[i] = NULL;
        fuzz_count--;
    }
    fuzz_nused = 0;
}

void *__wrap_malloc(size_t n) {
    void *p = __real_malloc(n);
    fuzz_remember(p);
    return p;
}
void *__wrap_calloc(size_t k, size_t n) {
    void *p = __real_calloc(k, n);
    fuzz_remember(p);
    return p;
}
void *__wrap_realloc(void *p, size_t n) {
    void *q = __real_realloc(p, n);
    if (q || n == 0) fuzz_forget(p);
    fuzz_remember(q);
    return q;
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    int rc = __real_posix_memalign(p, align, n);
    if (rc == 0) fuzz_remember(*p);
    return rc;
}
char *__wrap_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = __wrap_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
void __wrap_free(void *p) {
    fuzz_forget(p);
    __real_free(p);
}

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

static inline void fuzz_begin(void) {
    static cJSON_Hooks hooks = {__wrap_malloc, __wrap_free};
    cJSON_InitHooks(&hooks);
    fuzz_close_new_fds();
    util_set_job(0, 1, fuzz_end_job);
    fuzz_drop_all(0);
    fuzz_tracking = 1;
}
// refused: 1 when die() landed back (free what the parse left), 0 when it returned
// (what is left is the harness's or a real leak: forget it, free nothing).
static inline void fuzz_end(int refused) {
    fuzz_tracking = 0;
    fuzz_drop_all(refused);
    fuzz_close_new_fds();
}

// Run the code (a block; commas allowed); a die() inside it lands back here.
#define FUZZ_TRY(...)                                  \
    do {                                               \
        fuzz_begin();                                  \
        if (setjmp(fuzz_jump) == 0) {                  \
            __VA_ARGS__;                               \
            fuzz_end(0);                               \
        } else {                                       \
            fuzz_end(1);                               \
        }                                              \
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
