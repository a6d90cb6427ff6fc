// io/safetensors_internal.h — what the safetensors files share; not part of the API.
// safetensors_open.c parses headers, safetensors_read.c reads tensor data,
// safetensors_write.c writes files.
#ifndef FEMTOTRON_SAFETENSORS_INTERNAL_H
#define FEMTOTRON_SAFETENSORS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

// Tensor bytes are little-endian on disk; we copy F32 straight into memory.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/safetensors_*.c assume a little-endian host"
#endif

// pread exactly n bytes at off; a short read means the file shrank under us.
void st_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);

#endif
