// util.h — small helpers shared by every file: fatal errors, checked allocation, timing.
#ifndef FEMTOTRON_UTIL_H
#define FEMTOTRON_UTIL_H

#include <stddef.h>
#include <stdint.h>

// Print "femtotron: error: <message>" to stderr and end the whole job (MPI_Abort
// when MPI is running, exit(1) otherwise). Never returns.
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Same as die() but for a failed system call: appends strerror(errno).
void die_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Print "femtotron: warning: ..." to stderr.
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// malloc/calloc that die with the requested size and purpose on failure.
// 64-byte aligned, so AVX-512 loads never straddle a cache line.
void *xmalloc(size_t bytes, const char *what);
void *xcalloc(size_t bytes, const char *what);

// Write all `bytes` of buf to fd (at offset `off` for pwrite_fully), retrying short
// writes and EINTR, in pieces of at most 1 GiB; fatal error naming `path` otherwise.
void write_fully(int fd, const void *buf, size_t bytes, const char *path);
void pwrite_fully(int fd, const void *buf, size_t bytes, uint64_t off, const char *path);

// A whole file as a NUL-terminated string (caller frees); fatal error naming `path`
// when it cannot be read.
char *read_text_file(const char *path);

// Wall-clock seconds from a monotonic clock.
double now_seconds(void);

// FNV-1a 32-bit hash of a NUL-terminated string (used to key the generators).
uint32_t fnv1a32(const char *s);

#endif
