// util.c — fatal errors, checked allocation, timing.
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Set by the communicator (util_set_job): which rank this process is, in a world
// of how many, and how to end the whole job. Until then: a lone process.
static int job_rank = 0, job_size = 1;
static void (*job_end)(int code) = NULL;

void util_set_job(int rank, int size, void (*end_job)(int code)) {
    job_rank = rank;
    job_size = size;
    job_end = end_job;
}

__attribute__((noreturn)) static void end_job(int code) {
    fflush(stdout);
    fflush(stderr);
    if (job_end) job_end(code);
    exit(code);
}

// Build the whole line first and write it with one call, so that messages from
// several ranks sharing a terminal never interleave mid-line.
static void vreport(const char *kind, const char *fmt, va_list ap, int err) {
    char line[2048];
    size_t n = 0;
    if (job_size > 1)
        n = (size_t)snprintf(line, sizeof line, "femtotron: rank %d: %s: ", job_rank, kind);
    else
        n = (size_t)snprintf(line, sizeof line, "femtotron: %s: ", kind);
    if (n < sizeof line) n += (size_t)vsnprintf(line + n, sizeof line - n, fmt, ap);
    if (err && n < sizeof line) n += (size_t)snprintf(line + n, sizeof line - n, ": %s", strerror(err));
    if (n > sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
    fflush(stderr);
}

// util_try: where die() returns to instead of ending the job, and its message.
static jmp_buf *try_return = NULL;
static char *try_why = NULL;
static size_t try_size = 0;

// Inside util_try: keep the message and jump back (never returns).
static void try_catch(const char *fmt, va_list ap, int err) {
    jmp_buf *back = try_return;
    try_return = NULL;
    int n = vsnprintf(try_why, try_size, fmt, ap);
    if (err && n >= 0 && (size_t)n < try_size)
        snprintf(try_why + n, try_size - (size_t)n, ": %s", strerror(err));
    longjmp(*back, 1);
}

int util_try(void (*fn)(void *ctx), void *ctx, char *why, size_t size) {
    static char sink[1];
    // Nested tries (the training command's agreed configuration runs the planner,
    // which asks the validation about each layout): keep the outer one's state and
    // put it back on the way out, so a die after the inner try returns to the outer.
    jmp_buf *outer = try_return;
    char *outer_why = try_why;
    size_t outer_size = try_size;
    jmp_buf back;
    try_why = size ? why : sink;
    try_size = size ? size : sizeof sink;
    try_why[0] = '\0';
    volatile int ok = 0;  // read after a longjmp
    if (!setjmp(back)) {
        try_return = &back;
        fn(ctx);
        ok = 1;
    }  // else fn died: try_catch left the message
    try_return = outer;
    try_why = outer_why;
    try_size = outer_size;
    return ok;
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (try_return) try_catch(fmt, ap, 0);
    vreport("error", fmt, ap, 0);
    va_end(ap);
    end_job(1);
}

void die_errno(const char *fmt, ...) {
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    if (try_return) try_catch(fmt, ap, err);
    vreport("error", fmt, ap, err);
    va_end(ap);
    end_job(1);
}

void warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("warning", fmt, ap, 0);
    va_end(ap);
}

void *xmalloc(size_t bytes, const char *what) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0 || p == NULL)
        die("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *xcalloc(size_t bytes, const char *what) {
    void *p = xmalloc(bytes, what);
    memset(p, 0, bytes);
    return p;
}

// ------------------------------------------------------------ planned buffers

// Each buf_alloc block starts with this header, padded to 64 bytes so that the
// buffer after it keeps the 64-byte alignment.
#define BUF_MAGIC 0x66627566u  // "fbuf"
typedef struct {
    size_t bytes;
    int kind;
    unsigned magic;
} BufHeader;
#define BUF_HEADER 64
_Static_assert(sizeof(BufHeader) <= BUF_HEADER, "buffer header fits its padding");

static size_t mem_counter[MEM_KINDS];  // bytes per kind currently allocated (init-time only)

const char *mem_kind_name(MemKind k) {
    static const char *names[MEM_KINDS] = {"params", "grads", "optimizer", "activations", "comm", "snapshot"};
    return (unsigned)k < MEM_KINDS ? names[k] : "?";
}

// The backend's allocator for planned buffers (util_set_buf_allocator); NULL: xcalloc.
static void *(*buf_alloc_fn)(size_t bytes);
static void (*buf_free_fn)(void *p);
static int buf_allocated_any;  // a buffer exists: the allocator can no longer change

void util_set_buf_allocator(void *(*alloc_zeroed)(size_t bytes), void (*release)(void *p)) {
    if (buf_allocated_any) die("util_set_buf_allocator: called after the first buf_alloc");
    buf_alloc_fn = alloc_zeroed;
    buf_free_fn = release;
}

void *buf_alloc(MemKind k, size_t bytes, const char *what) {
    if ((unsigned)k >= MEM_KINDS) die("buf_alloc: bad memory kind %d for %s", (int)k, what);
    if (bytes > SIZE_MAX - BUF_HEADER) die("out of memory allocating %zu bytes for %s", bytes, what);
    buf_allocated_any = 1;
    char *base = buf_alloc_fn ? buf_alloc_fn(BUF_HEADER + bytes) : xcalloc(BUF_HEADER + bytes, what);
    if (!base) die("out of device memory allocating %zu bytes for %s", bytes, what);
    BufHeader h = {bytes, (int)k, BUF_MAGIC};
    memcpy(base, &h, sizeof h);
    mem_counter[k] += bytes;
    return base + BUF_HEADER;
}

void buf_free(void *p) {
    if (!p) return;
    char *base = (char *)p - BUF_HEADER;
    BufHeader h;
    memcpy(&h, base, sizeof h);
    if (h.magic != BUF_MAGIC || (unsigned)h.kind >= MEM_KINDS || mem_counter[h.kind] < h.bytes)
        die("buf_free: %p was not allocated by buf_alloc", p);
    mem_counter[h.kind] -= h.bytes;
    memset(base, 0, sizeof h);  // a second buf_free of p is caught above
    if (buf_free_fn) buf_free_fn(base);
    else free(base);
}

size_t mem_allocated(MemKind k) { return (unsigned)k < MEM_KINDS ? mem_counter[k] : 0; }

MemoryReport memory_report(const size_t bytes[MEM_KINDS]) {
    MemoryReport r = {bytes[MEM_PARAMS], bytes[MEM_GRADS], bytes[MEM_OPTIMIZER],
                      bytes[MEM_ACTIVATIONS], bytes[MEM_COMM], bytes[MEM_SNAPSHOT]};
    return r;
}

MemoryReport memory_allocated(void) {
    size_t bytes[MEM_KINDS];
    for (int k = 0; k < MEM_KINDS; k++) bytes[k] = mem_allocated((MemKind)k);
    return memory_report(bytes);
}

void *buf_take(MemTally *plan_only, MemKind k, size_t bytes, const char *what) {
    if (!plan_only) return buf_alloc(k, bytes, what);
    if ((unsigned)k >= MEM_KINDS) die("buf_take: bad memory kind %d for %s", (int)k, what);
    plan_only->bytes[k] += bytes;
    return NULL;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint32_t fnv1a32(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 16777619u;
    }
    return h;
}
