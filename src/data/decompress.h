// data/decompress.h — reading one input of `femtotron prepare` as its text: plain,
// gzip or zstd, told apart by the first bytes (the formats' magic numbers), and
// decompressed as a stream (zlib's inflate, libzstd's ZSTD_decompressStream), so
// an input of any size takes a fixed amount of memory.
#ifndef FEMTOTRON_DECOMPRESS_H
#define FEMTOTRON_DECOMPRESS_H

#include <stddef.h>
#include <stdio.h>

// Open `path` ("-": standard input) for reading its text: the FILE yields the
// decompressed bytes. Gzip (1f 8b) and zstd (28 b5 2f fd) data are recognised by
// their magic numbers whatever the name; a name ending in .gz or .zst must hold
// that format. Concatenated gzip members and zstd frames are read one after the
// other, as `gzip -dc` and `zstd -dc` do. A file that cannot be opened, a corrupt
// or truncated compressed stream, or a misnamed one is a fatal error naming the
// input.
FILE *decompress_open(const char *path);

// Close what decompress_open returned; a read error is fatal, naming `path`.
void decompress_close(FILE *f, const char *path);

// Length of a compression suffix ending `name` (".gz": 3, ".zst": 4), else 0:
// the name without it says what the text is (notes.md.gz is Markdown).
size_t decompress_suffix_len(const char *name);

// How an input is called in messages: its path, or "standard input" for "-".
const char *decompress_input_name(const char *path);

#endif
