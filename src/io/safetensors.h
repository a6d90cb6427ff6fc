// io/safetensors.h — Hugging Face safetensors files.
// Format: 8-byte little-endian header length N, N bytes of JSON
//   {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"format": "pt"}}
// then the raw little-endian tensor bytes (offsets relative to the end of the header).
#ifndef FEMTOTRON_SAFETENSORS_H
#define FEMTOTRON_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I32, ST_I64, ST_OTHER } StDtype;

typedef struct {
    char name[256];
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    uint64_t begin, end;  // byte offsets in the data section
    char file[1024];      // file that holds it (for sharded checkpoints)
    uint64_t data_start;  // byte offset of that file's data section
} StTensor;

// The tensors of one file, or of a sharded set (model.safetensors.index.json), and
// the file's string metadata (single files; the first ST_MAX_META short entries).
#define ST_MAX_META 8
typedef struct {
    int n;
    StTensor *t;  // (n)
    int n_meta;
    char meta_key[ST_MAX_META][64], meta_value[ST_MAX_META][64];
} StIndex;

// Parse a .safetensors file's header; validates offsets against the file size.
// Corrupt/truncated files are fatal errors naming the file and the problem.
void st_open(StIndex *idx, const char *path);

// Open a Hugging Face model directory: DIR/model.safetensors, or the sharded
// DIR/model.safetensors.index.json form. Missing files are fatal, naming them.
void st_open_dir(StIndex *idx, const char *dir);

void st_close(StIndex *idx);
const StTensor *st_find(const StIndex *idx, const char *name);
// The value of a __metadata__ key of a single file, or NULL.
const char *st_metadata(const StIndex *idx, const char *key);

// Read elements [elem_begin, elem_begin + count) of a tensor (in row-major
// element order of its global shape) as fp32, converting F16/BF16/F64.
void st_read_f32(const StTensor *t, uint64_t elem_begin, size_t count, float *out);

// n_runs runs of `count` elements, run r starting at element elem_begin + r * stride
// (stride >= count), read as fp32 into out (n_runs * count) back to back: a column
// slice of a row-major matrix in one call (one open, one staging buffer).
void st_read_f32_strided(const StTensor *t, uint64_t elem_begin, size_t count, uint64_t stride,
                         size_t n_runs, float *out);

// One tensor to write: a name, a shape, fp32 data. dtype ST_F32 (0, the default
// of a zeroed struct), or ST_BF16 in a header for pwrite (st_write_header).
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[8];
    const float *data;  // (product of shape) fp32 values
    StDtype dtype;
} StWrite;

// Write fp32 tensors to a new file at path (written, fsync'd; caller renames).
// Metadata: {"format":"pt"} plus the given key/value pairs (may be NULL, 0).
void st_write_f32(const char *path, const StWrite *tensors, int n,
                  const char *const *meta_keys, const char *const *meta_values, int n_meta);

// The same file as st_write_f32 with the same arguments (tensors may also be
// ST_BF16 here, 2 bytes an element), but only its header is written (the tensors' data pointers are ignored, may be NULL): the file is
// created, its size set to the full length (data section zero-filled) and fsync'd.
// Returns data_start, the byte offset of the data section: tensor i's bytes go at
// data_start + (sum of the sizes of tensors 0..i-1), to be filled by pwrite, by
// this process or by others sharing the file system.
uint64_t st_write_header(const char *path, const StWrite *tensors, int n,
                         const char *const *meta_keys, const char *const *meta_values,
                         int n_meta);

#endif
