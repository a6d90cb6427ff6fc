// data/decompress.c — one input of `femtotron prepare` as a FILE of its text,
// decompressed on the fly by zlib or libzstd (see data/decompress.h).
//
// The FILE is a glibc cookie stream (fopencookie) over a Decoder, so the readers
// in prepare_input.c keep using fread and getline whatever the input's format,
// and standard input (a pipe that cannot be rewound) is sniffed the same way as a
// file: the first bytes are read into the Decoder's buffer, looked at, and then
// handed out (plain) or fed to the decompressor (gzip, zstd) like the rest.
#define _GNU_SOURCE  // fopencookie
#include "data/decompress.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "util.h"

#define RAW_CHUNK (256 << 10)  // compressed (or plain) bytes read from the input at once

typedef enum { INPUT_PLAIN, INPUT_GZIP, INPUT_ZSTD } InputEncoding;

typedef struct {
    int fd;
    const char *name;       // for messages (the caller's path, or "standard input")
    InputEncoding enc;
    uint8_t *raw;           // (RAW_CHUNK) bytes read from fd, not yet handed on
    size_t raw_pos, raw_len;
    bool at_eof;            // fd has no more bytes
    // gzip: the inflate state, and whether the last member ended (so that the end
    // of the input there is a clean end, anywhere else a truncation)
    z_stream z;
    bool member_done;
    // zstd: the stream, and ZSTD_decompressStream's last return (0: a frame ended)
    ZSTD_DStream *zs;
    size_t zstd_left;
} Decoder;

size_t decompress_suffix_len(const char *name) {
    size_t n = strlen(name);
    if (n > 3 && strcmp(name + n - 3, ".gz") == 0) return 3;
    if (n > 4 && strcmp(name + n - 4, ".zst") == 0) return 4;
    return 0;
}

const char *decompress_input_name(const char *path) {
    return strcmp(path, "-") == 0 ? "standard input" : path;
}

// Read more raw bytes when the buffer is used up; false at the end of the input.
static bool fill_raw(Decoder *d) {
    if (d->raw_pos < d->raw_len) return true;
    d->raw_pos = d->raw_len = 0;
    while (!d->at_eof) {
        ssize_t got = read(d->fd, d->raw, RAW_CHUNK);
        if (got > 0) {
            d->raw_len = (size_t)got;
            return true;
        }
        if (got == 0) d->at_eof = true;
        else if (errno != EINTR) die_errno("cannot read input %s", d->name);
    }
    return false;
}

static ssize_t read_plain(Decoder *d, char *buf, size_t size) {
    if (d->raw_pos < d->raw_len) {  // the sniffed first bytes go out first
        size_t n = d->raw_len - d->raw_pos < size ? d->raw_len - d->raw_pos : size;
        memcpy(buf, d->raw + d->raw_pos, n);
        d->raw_pos += n;
        return (ssize_t)n;
    }
    for (;;) {
        ssize_t got = read(d->fd, buf, size);
        if (got >= 0 || errno != EINTR) return got;
    }
}

static ssize_t read_gzip(Decoder *d, char *buf, size_t size) {
    for (;;) {
        if (!fill_raw(d)) {
            if (!d->member_done)
                die("input %s: the gzip data ends early (truncated or corrupt file)", d->name);
            return 0;
        }
        d->z.next_in = d->raw + d->raw_pos;
        d->z.avail_in = (uInt)(d->raw_len - d->raw_pos);
        d->z.next_out = (Bytef *)buf;
        d->z.avail_out = (uInt)(size < UINT32_MAX ? size : UINT32_MAX);
        uInt out_before = d->z.avail_out;
        int rc = inflate(&d->z, Z_NO_FLUSH);
        size_t used = (d->raw_len - d->raw_pos) - d->z.avail_in;
        if (used) d->member_done = false;
        d->raw_pos += used;
        if (rc == Z_STREAM_END) {
            // A member ended; another may follow (gzip -dc reads them all).
            d->member_done = true;
            if (inflateReset(&d->z) != Z_OK) die("input %s: cannot restart zlib", d->name);
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            die("input %s: corrupt gzip data (zlib: %s)", d->name, d->z.msg ? d->z.msg : zError(rc));
        }
        size_t produced = out_before - d->z.avail_out;
        if (produced) return (ssize_t)produced;
    }
}

static ssize_t read_zstd(Decoder *d, char *buf, size_t size) {
    for (;;) {
        bool more = fill_raw(d);
        if (!more && d->zstd_left == 0) return 0;  // the last frame ended: a clean end
        ZSTD_inBuffer in = {d->raw + d->raw_pos, d->raw_len - d->raw_pos, 0};
        ZSTD_outBuffer out = {buf, size, 0};
        size_t rc = ZSTD_decompressStream(d->zs, &out, &in);
        if (ZSTD_isError(rc)) die("input %s: corrupt zstd data (libzstd: %s)", d->name, ZSTD_getErrorName(rc));
        d->raw_pos += in.pos;
        d->zstd_left = rc;
        if (out.pos) return (ssize_t)out.pos;
        // Nothing came out although the input is exhausted: the frame is cut short.
        if (!more) die("input %s: the zstd data ends early (truncated or corrupt file)", d->name);
    }
}

static ssize_t decoder_read(void *cookie, char *buf, size_t size) {
    Decoder *d = cookie;
    switch (d->enc) {
    case INPUT_GZIP: return read_gzip(d, buf, size);
    case INPUT_ZSTD: return read_zstd(d, buf, size);
    default: return read_plain(d, buf, size);
    }
}

static int decoder_close(void *cookie) {
    Decoder *d = cookie;
    if (d->enc == INPUT_GZIP) inflateEnd(&d->z);
    if (d->zs) ZSTD_freeDStream(d->zs);
    int rc = d->fd == STDIN_FILENO ? 0 : close(d->fd);
    free(d->raw);
    free(d);
    return rc;
}

// Read until the magic numbers can be seen (a pipe may deliver a byte at a time).
static void sniff(Decoder *d) {
    while (!d->at_eof && d->raw_len < 4) {
        ssize_t got = read(d->fd, d->raw + d->raw_len, RAW_CHUNK - d->raw_len);
        if (got > 0) d->raw_len += (size_t)got;
        else if (got == 0) d->at_eof = true;
        else if (errno != EINTR) die_errno("cannot read input %s", d->name);
    }
    static const uint8_t gzip_magic[2] = {0x1f, 0x8b}, zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    if (d->raw_len >= 2 && memcmp(d->raw, gzip_magic, 2) == 0) d->enc = INPUT_GZIP;
    else if (d->raw_len >= 4 && memcmp(d->raw, zstd_magic, 4) == 0) d->enc = INPUT_ZSTD;
    else d->enc = INPUT_PLAIN;
}

FILE *decompress_open(const char *path) {
    Decoder *d = xcalloc(sizeof(Decoder), "input decoder");
    d->name = decompress_input_name(path);
    d->fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY);
    if (d->fd < 0) die_errno("cannot open input %s", path);
    d->raw = xmalloc(RAW_CHUNK, "input read buffer");
    sniff(d);
    size_t suffix = decompress_suffix_len(path);
    if (suffix == 3 && d->enc != INPUT_GZIP)
        die("input %s: named .gz but is not gzip data (it does not start with 1f 8b)", d->name);
    if (suffix == 4 && d->enc != INPUT_ZSTD)
        die("input %s: named .zst but is not zstd data (it does not start with 28 b5 2f fd)", d->name);
    if (d->enc == INPUT_GZIP) {
        // 15 + 16: the largest window, gzip wrapping only.
        if (inflateInit2(&d->z, 15 + 16) != Z_OK) die("input %s: cannot start zlib", d->name);
    } else if (d->enc == INPUT_ZSTD) {
        d->zs = ZSTD_createDStream();
        if (!d->zs || ZSTD_isError(ZSTD_initDStream(d->zs))) die("input %s: cannot start libzstd", d->name);
        d->zstd_left = 1;  // inside a frame until one ends
    }
    FILE *f = fopencookie(d, "rb", (cookie_io_functions_t){.read = decoder_read, .close = decoder_close});
    if (!f) die_errno("cannot read input %s", d->name);
    return f;
}

void decompress_close(FILE *f, const char *path) {
    if (ferror(f)) die_errno("cannot read input %s", decompress_input_name(path));
    if (fclose(f) != 0) die_errno("cannot close input %s", decompress_input_name(path));
}
