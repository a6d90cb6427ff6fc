// util.h — small helpers shared by every file: fatal errors, checked allocation, timing.
#ifndef FEMTOTRON_UTIL_H
#define FEMTOTRON_UTIL_H

#include <stddef.h>
#include <stdint.h>

// Print "femtotron: error: <message>" to stderr (with the rank in a multi-rank job)
// and end the whole job (the communicator's abort once util_set_job has been called,
// exit(1) otherwise). Never returns.
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Same as die() but for a failed system call: appends strerror(errno).
void die_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Run fn(ctx) and return 1; if it calls die() or die_errno(), return 0 instead of
// ending the job, with die's message (without the "femtotron: error: " prefix) in
// why[size]. Nothing is printed. For checks that die on the first problem, asked a
// question instead (the planner asks the run's validation about each layout): fn
// must leave nothing behind that a die half-way would leak. Tries nest: a die
// returns to the innermost one.
int util_try(void (*fn)(void *ctx), void *ctx, char *why, size_t size);

// pi to double precision (M_PI is not C11).
#define FT_PI 3.14159265358979323846

// Print "femtotron: warning: ..." to stderr.
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The process's place in the job, for die() and warn(): set by the communicator
// (dist/comm.c, comm_init) once the world exists. end_job must end every rank with
// the exit code and not return. This callback is util's only edge upwards, so that
// util depends on nothing (docs/DESIGN.md, "Layers").
void util_set_job(int rank, int size, void (*end_job)(int code));

// malloc/calloc that die with the requested size and purpose on failure.
// 64-byte aligned, so AVX-512 loads never straddle a cache line.
void *xmalloc(size_t bytes, const char *what);
void *xcalloc(size_t bytes, const char *what);

// ---- planned buffers (docs/DESIGN.md, invariant 3): counted allocations ----
// Every buffer whose size depends on the model, the batch or the layout is
// allocated once at start-up with buf_alloc, under one of five kinds:
//   MEM_PARAMS       the flat parameter buffer (whole, or the ZeRO-3 own parts)
//   MEM_GRADS        the flat gradient buffer, or the ZeRO-2/3 reduced own parts
//   MEM_OPTIMIZER    the AdamW moments (whole, or the ZeRO-1/2/3 own parts)
//   MEM_ACTIVATIONS  the activation arenas of every pipeline slot (tensor- and
//                    context-parallel scratch included), their position tables,
//                    the token/target slots and the trainer's whole sequences;
//                    on the GPU, the backend's own work buffers (ops.h)
//   MEM_COMM         buffers that exist for communication only: the ZeRO-2/3
//                    gradient and parameter windows, the pipeline's gradient
//                    send/receive messages
//   MEM_SNAPSHOT     checkpoint.async: the copy of the rank's checkpoint pieces
//                    (own parameters and moments) a background thread writes
// The counters are per process (= per rank, a per-process singleton) and count
// requested bytes; the memory report (memory_allocated) reads them and
// plan/memory_rank.c predicts them.
// Small bookkeeping (tables, schedules, request lists, the parameter table) stays
// on xmalloc; so do transient I/O buffers (checkpoint and safetensors staging),
// the data loader's shard tables and shuffle permutation (sized by the data set),
// and what MPI allocates inside itself: none of those are planned.
typedef enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_COMM, MEM_SNAPSHOT, MEM_KINDS } MemKind;
// "params", "grads", "optimizer", "activations", "comm", "snapshot".
const char *mem_kind_name(MemKind k);
// Zeroed, 64-byte aligned, counted under k (bytes may be 0: a valid, empty buffer).
void *buf_alloc(MemKind k, size_t bytes, const char *what);
// Free a buf_alloc buffer and uncount it (its kind and size are kept with it); NULL is a no-op.
void buf_free(void *p);
// Where buf_alloc's blocks come from: by default xcalloc/free; a device backend
// (ops_init of ops/buffers_cuda.cu) installs its own before any buffer exists. The
// allocator returns zeroed, 64-byte aligned memory that the host can also address
// (buf_alloc writes its header in front of the buffer), or NULL when it is out of
// memory. Called before the first buf_alloc; fatal afterwards.
void util_set_buf_allocator(void *(*alloc_zeroed)(size_t bytes), void (*release)(void *p));
// Bytes of kind k currently allocated by this process.
size_t mem_allocated(MemKind k);
// A planner's tally of the same buffers: bytes per kind.
typedef struct {
    size_t bytes[MEM_KINDS];
} MemTally;
// Bytes of each kind, by name, for reports.
typedef struct {
    size_t params, grads, optimizer, activations, comm, snapshot;
} MemoryReport;
MemoryReport memory_report(const size_t bytes[MEM_KINDS]);
// MEASURED: what this process has allocated through buf_alloc, by kind.
MemoryReport memory_allocated(void);
// The one call through which planned buffers are made, so that allocating and
// predicting run the same code: with plan_only NULL, buf_alloc(k, bytes, what);
// otherwise add bytes to plan_only->bytes[k] and return NULL (nothing allocated).
void *buf_take(MemTally *plan_only, MemKind k, size_t bytes, const char *what);

// Write all `bytes` of buf to fd (at offset `off` for pwrite_fully), retrying short
// writes and EINTR, in pieces of at most 1 GiB; fatal error naming `path` otherwise.
void write_fully(int fd, const void *buf, size_t bytes, const char *path);
void pwrite_fully(int fd, const void *buf, size_t bytes, uint64_t off, const char *path);

// A whole file as a NUL-terminated string (caller frees); fatal error naming `path`
// when it cannot be read.
char *read_text_file(const char *path);
// Copy a file's bytes to `to` (created or replaced) and fsync it: dies naming the file.
void copy_file_durable(const char *from, const char *to);

// 1 when path is a regular file / a directory (following links), else 0.
int path_is_file(const char *path);
int path_is_dir(const char *path);
// The bytes of the regular files directly in a directory (0 when it cannot be read).
double dir_file_bytes(const char *dir);

// mkdir -p; fatal error naming `what` (e.g. "checkpoint.dir") and the directory.
void make_dirs(const char *path, const char *what);
// make_dirs, then create and remove a probe file: fatal when files cannot be made
// there (read-only file system, permissions), naming `what` and the directory.
// For outputs a run writes late (checkpoints, metrics): found before step 1.
void check_writable_dir(const char *dir, const char *what);
// The same for a file's directory, and the file itself when it exists.
void check_writable_file(const char *path, const char *what);

// Wall-clock seconds from a monotonic clock.
double now_seconds(void);

// FNV-1a 32-bit hash of a NUL-terminated string (used to key the generators).
uint32_t fnv1a32(const char *s);

#endif
