// io/safetensors_write.c — write safetensors files (st_write_f32) and sized files
// holding only the header, for ranks to pwrite into (st_write_header).
//
// Writing follows the reference implementation: compact JSON header with
// "__metadata__" first, tensors in the given order with contiguous offsets, the
// header padded with spaces to a multiple of 8 bytes so the data section is aligned.
#define _POSIX_C_SOURCE 200809L
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors_internal.h"
#include "util.h"

// ---------------------------------------------------------------- writing

typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) die("out of memory building a safetensors header (%zu bytes)", cap);
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

// A JSON string literal with the escapes JSON requires.
static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            buf_put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            buf_put(b, esc, 6);
        } else {
            buf_put(b, (const char *)&c, 1);
        }
    }
    buf_put(b, "\"", 1);
}

// The header JSON for these tensors, padded with spaces to a multiple of 8 bytes
// (as the reference does) so the data section starts aligned; *data_bytes gets the
// size of the data section. need_data: tensors must carry their data pointers.
static void build_header(Buf *h, const char *path, const StWrite *tensors, int n,
                         const char *const *meta_keys, const char *const *meta_values,
                         int n_meta, int need_data, uint64_t *data_bytes) {
    if (n < 0 || n_meta < 0) die("%s: negative tensor or metadata count", path);
    char num[64];
    buf_str(h, "{\"__metadata__\":{\"format\":\"pt\"");
    for (int i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i]) die("%s: metadata entry %d is NULL", path, i);
        if (strcmp(meta_keys[i], "format") == 0)
            die("%s: metadata key \"format\" is reserved (always \"pt\")", path);
        buf_str(h, ",");
        buf_json_string(h, meta_keys[i]);
        buf_str(h, ":");
        buf_json_string(h, meta_values[i]);
    }
    buf_str(h, "}");
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const StWrite *w = &tensors[i];
        if (!w->name || !w->name[0] || strlen(w->name) >= sizeof(((StTensor *)0)->name))
            die("%s: tensor %d has an empty or over-long name", path, i);
        if (strcmp(w->name, "__metadata__") == 0) die("%s: tensor name \"__metadata__\" is reserved", path);
        for (int j = 0; j < i; j++)
            if (strcmp(tensors[j].name, w->name) == 0)
                die("%s: tensor \"%s\" given twice", path, w->name);
        if (w->ndim < 0 || w->ndim > 8) die("%s: tensor \"%s\": ndim %d out of range 0..8", path, w->name, w->ndim);
        if (w->dtype != ST_F32 && (w->dtype != ST_BF16 || need_data))
            die("%s: tensor \"%s\": only F32 (and BF16 in a header for pwrite) can be written",
                path, w->name);
        const uint64_t esize = w->dtype == ST_BF16 ? 2 : 4;
        uint64_t numel = 1;
        buf_str(h, ",");
        buf_json_string(h, w->name);
        buf_str(h, w->dtype == ST_BF16 ? ":{\"dtype\":\"BF16\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < w->ndim; d++) {
            if (w->shape[d] < 0) die("%s: tensor \"%s\": negative dimension", path, w->name);
            numel *= (uint64_t)w->shape[d];
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)w->shape[d]);
            buf_str(h, num);
        }
        if (need_data && numel > 0 && !w->data) die("%s: tensor \"%s\": data is NULL", path, w->name);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + esize * numel));
        buf_str(h, num);
        offset += esize * numel;
    }
    buf_str(h, "}");
    while (h->len % 8) buf_str(h, " ");
    *data_bytes = offset;
}

// Create path (truncating) and write the 8-byte length and the header; returns the fd.
static int create_with_header(const char *path, const Buf *h) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die_errno("cannot create %s", path);
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    write_fully(fd, lenbuf, 8, path);
    write_fully(fd, h->s, h->len, path);
    return fd;
}

static void sync_and_close(int fd, const char *path) {
    if (fsync(fd) != 0) die_errno("%s: fsync failed", path);
    if (close(fd) != 0) die_errno("%s: close failed", path);
}

void st_write_f32(const char *path, const StWrite *tensors, int n,
                  const char *const *meta_keys, const char *const *meta_values, int n_meta) {
    Buf h = {0};
    uint64_t data_bytes;
    build_header(&h, path, tensors, n, meta_keys, meta_values, n_meta, 1, &data_bytes);
    int fd = create_with_header(path, &h);
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= (uint64_t)tensors[i].shape[d];
        if (numel) write_fully(fd, tensors[i].data, 4 * numel, path);
    }
    sync_and_close(fd, path);
    free(h.s);
}

uint64_t st_write_header(const char *path, const StWrite *tensors, int n,
                         const char *const *meta_keys, const char *const *meta_values,
                         int n_meta) {
    Buf h = {0};
    uint64_t data_bytes;
    build_header(&h, path, tensors, n, meta_keys, meta_values, n_meta, 0, &data_bytes);
    int fd = create_with_header(path, &h);
    uint64_t data_start = 8 + (uint64_t)h.len;
    // Full size now, so that every writer's pwrite lands inside the file and a reader
    // never sees a short file; the data section reads as zeros until written.
    if (ftruncate(fd, (off_t)(data_start + data_bytes)) != 0)
        die_errno("%s: cannot set the file size to %llu bytes", path,
                  (unsigned long long)(data_start + data_bytes));
    sync_and_close(fd, path);
    free(h.s);
    return data_start;
}
