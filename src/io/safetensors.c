// io/safetensors.c — read and write Hugging Face safetensors files.
//
// Reading parses and validates the whole header up front (every dtype, shape and
// offset checked against the file size), so that a later st_read_f32 can only fail
// on an I/O error. Tensor bytes are read with pread on demand: a 7B model is never
// held twice in memory, and a rank that owns a slice reads only that slice.
// Writing follows the reference implementation: compact JSON header with
// "__metadata__" first, tensors in the given order with contiguous offsets, the
// header padded with spaces to a multiple of 8 bytes so the data section is aligned.
#define _POSIX_C_SOURCE 200809L
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

// Tensor bytes are little-endian on disk; we copy F32 straight into memory.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/safetensors.c assumes a little-endian host"
#endif

// Largest integer a JSON number (a double) holds exactly: shapes and offsets
// beyond it cannot be represented faithfully, so we reject them.
#define ST_MAX_JSON_INT 9007199254740992.0  // 2^53

// Conversion chunk: non-F32 data is read through a bounded staging buffer.
#define ST_CHUNK_BYTES (1u << 20)

// ---------------------------------------------------------------- dtypes

typedef struct {
    const char *name;
    StDtype dtype;
    unsigned size;  // bytes per element; 0 = sub-byte/unknown (no size check)
} DtypeInfo;

// Every dtype the format defines; only the float ones can be read as fp32, but
// the others must still parse so that a file mixing them opens.
static const DtypeInfo DTYPES[] = {
    {"F32", ST_F32, 4},    {"F16", ST_F16, 2},     {"BF16", ST_BF16, 2},
    {"F64", ST_F64, 8},    {"I32", ST_I32, 4},     {"I64", ST_I64, 8},
    {"BOOL", ST_OTHER, 1}, {"U8", ST_OTHER, 1},    {"I8", ST_OTHER, 1},
    {"I16", ST_OTHER, 2},  {"U16", ST_OTHER, 2},   {"U32", ST_OTHER, 4},
    {"U64", ST_OTHER, 8},  {"F8_E4M3", ST_OTHER, 1}, {"F8_E5M2", ST_OTHER, 1},
    {"F8_E8M0", ST_OTHER, 1},
};

static const DtypeInfo *dtype_lookup(const char *s) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, s) == 0) return &DTYPES[i];
    return NULL;
}

static unsigned dtype_size(StDtype d) {
    switch (d) {
    case ST_F32: case ST_I32: return 4;
    case ST_F16: case ST_BF16: return 2;
    case ST_F64: case ST_I64: return 8;
    default: return 0;
    }
}

static const char *dtype_name(StDtype d) {
    switch (d) {
    case ST_F32: return "F32";
    case ST_F16: return "F16";
    case ST_BF16: return "BF16";
    case ST_F64: return "F64";
    case ST_I32: return "I32";
    case ST_I64: return "I64";
    default: return "non-float";
    }
}

// bfloat16 is the top half of an fp32: shifting the bits back is exact for every
// value, subnormals, infinities and NaN payloads included.
static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every half is exactly
// representable in fp32; half subnormals become fp32 normals after renormalising.
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {             // inf (mant 0) or NaN (payload kept)
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {         // normal: rebias 15 -> 127
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {        // signed zero
        bits = sign;
    } else {                       // subnormal: mant * 2^-24; shift the leading 1 into bit 10
        int e = -1;
        do {
            mant <<= 1;
            e++;
        } while (!(mant & 0x400));
        // e + 1 shifts: value = 1.xxx * 2^(-15 - e); fp32 biased exponent = 112 - e
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// ---------------------------------------------------------------- low-level I/O

// pread exactly n bytes at off; a short read means the file shrank under us.
static void pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    char *p = buf;
    while (n > 0) {
        size_t want = n > (1u << 30) ? (1u << 30) : n;
        ssize_t got = pread(fd, p, want, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            die_errno("%s: read of %zu bytes at offset %llu failed", path, want,
                      (unsigned long long)off);
        }
        if (got == 0)
            die("%s: unexpected end of file at offset %llu (file truncated?)", path,
                (unsigned long long)off);
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
}

static void write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n > 0) {
        size_t want = n > (1u << 30) ? (1u << 30) : n;
        ssize_t put = write(fd, p, want);
        if (put < 0) {
            if (errno == EINTR) continue;
            die_errno("%s: write failed", path);
        }
        p += put;
        n -= (size_t)put;
    }
}

// ---------------------------------------------------------------- header parsing

// A JSON number that must be a non-negative integer exactly representable.
static uint64_t json_uint(const cJSON *item, const char *path, const char *tensor,
                          const char *what) {
    if (!cJSON_IsNumber(item))
        die("%s: tensor \"%s\": %s must be a number", path, tensor, what);
    double d = item->valuedouble;
    if (!(d >= 0) || d > ST_MAX_JSON_INT || d != (double)(uint64_t)d)
        die("%s: tensor \"%s\": %s must be a non-negative integer (got %g)", path, tensor,
            what, d);
    return (uint64_t)d;
}

static void parse_tensor(StTensor *t, const cJSON *entry, const char *path,
                         uint64_t data_start, uint64_t data_size) {
    const char *name = entry->string;
    if (strlen(name) >= sizeof t->name)
        die("%s: tensor name \"%.64s...\" is longer than %zu bytes", path, name,
            sizeof t->name - 1);
    if (!cJSON_IsObject(entry))
        die("%s: tensor \"%s\": entry must be an object", path, name);
    memset(t, 0, sizeof *t);
    strcpy(t->name, name);
    if (strlen(path) >= sizeof t->file) die("%s: path longer than %zu bytes", path, sizeof t->file - 1);
    strcpy(t->file, path);
    t->data_start = data_start;

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!dt) die("%s: tensor \"%s\": missing \"dtype\"", path, name);
    if (!shape) die("%s: tensor \"%s\": missing \"shape\"", path, name);
    if (!offs) die("%s: tensor \"%s\": missing \"data_offsets\"", path, name);
    if (!cJSON_IsString(dt)) die("%s: tensor \"%s\": \"dtype\" must be a string", path, name);
    const DtypeInfo *di = dtype_lookup(dt->valuestring);
    // Unknown dtype names (future sub-byte formats) still parse: such a tensor can be
    // skipped, but st_read_f32 refuses it. Only the range check applies to it.
    t->dtype = di ? di->dtype : ST_OTHER;
    unsigned esize = di ? di->size : 0;

    if (!cJSON_IsArray(shape)) die("%s: tensor \"%s\": \"shape\" must be an array", path, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > 8) die("%s: tensor \"%s\": %d dimensions (at most 8 supported)", path, name, nd);
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < nd; i++) {
        uint64_t s = json_uint(cJSON_GetArrayItem(shape, i), path, name, "shape entry");
        t->shape[i] = (int64_t)s;
        if (s != 0 && numel > UINT64_MAX / s) overflow = 1;
        numel *= s;
    }

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        die("%s: tensor \"%s\": \"data_offsets\" must be [begin, end]", path, name);
    t->begin = json_uint(cJSON_GetArrayItem(offs, 0), path, name, "data_offsets begin");
    t->end = json_uint(cJSON_GetArrayItem(offs, 1), path, name, "data_offsets end");
    if (t->begin > t->end)
        die("%s: tensor \"%s\": data_offsets [%llu, %llu] has begin > end", path, name,
            (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_size)
        die("%s: tensor \"%s\": data_offsets end %llu is past the end of the data section "
            "(%llu bytes; file truncated?)", path, name, (unsigned long long)t->end,
            (unsigned long long)data_size);
    if (esize) {
        if (overflow || numel > UINT64_MAX / esize || numel * esize != t->end - t->begin)
            die("%s: tensor \"%s\": data_offsets cover %llu bytes but shape and dtype %s "
                "need %llu elements x %u bytes", path, name,
                (unsigned long long)(t->end - t->begin), dt->valuestring,
                (unsigned long long)numel, esize);
    }
}

static int cmp_tensor_ptr_name(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    return strcmp(x->name, y->name);
}

// Duplicate names would make st_find ambiguous; sort pointers and compare neighbours.
static void check_unique(const StIndex *idx, const char *where) {
    if (idx->n < 2) return;
    const StTensor **p = xmalloc((size_t)idx->n * sizeof *p, "safetensors name check");  // (n)
    for (int i = 0; i < idx->n; i++) p[i] = &idx->t[i];
    qsort(p, (size_t)idx->n, sizeof *p, cmp_tensor_ptr_name);
    for (int i = 1; i < idx->n; i++)
        if (strcmp(p[i - 1]->name, p[i]->name) == 0)
            die("%s: tensor \"%s\" appears twice (%s and %s)", where, p[i]->name,
                p[i - 1]->file, p[i]->file);
    free(p);
}

void st_open(StIndex *idx, const char *path) {
    memset(idx, 0, sizeof *idx);
    int fd = open(path, O_RDONLY);
    if (fd < 0) die_errno("cannot open safetensors file %s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) die_errno("%s: stat failed", path);
    if (!S_ISREG(sb.st_mode)) die("%s: not a regular file", path);
    uint64_t fsize = (uint64_t)sb.st_size;
    if (fsize < 8)
        die("%s: file is %llu bytes, shorter than the 8-byte header length (truncated or "
            "not a safetensors file)", path, (unsigned long long)fsize);
    unsigned char lenbuf[8];
    pread_all(fd, lenbuf, 8, 0, path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
    if (hlen > fsize - 8)
        die("%s: header length %llu is beyond the file size %llu (truncated or not a "
            "safetensors file)", path, (unsigned long long)hlen, (unsigned long long)fsize);
    if (hlen < 2) die("%s: header length %llu is too small for a JSON object", path,
                      (unsigned long long)hlen);

    char *hdr = xmalloc(hlen + 1, "safetensors header");  // (hlen + 1) JSON text + NUL
    pread_all(fd, hdr, hlen, 8, path);
    hdr[hlen] = '\0';
    close(fd);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - hdr) : 0;
        die("%s: header is not valid JSON (parse error near byte %zu of %llu)", path, at,
            (unsigned long long)hlen);
    }
    // The reference pads with spaces; anything else after the object is garbage.
    for (const char *q = end; q < hdr + hlen; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r' && *q != '\0')
            die("%s: unexpected bytes after the header JSON object", path);
    if (!cJSON_IsObject(root)) die("%s: header JSON is not an object", path);

    uint64_t data_start = 8 + hlen;
    uint64_t data_size = fsize - data_start;
    int n = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") != 0) n++;
    idx->t = xcalloc((size_t)(n ? n : 1) * sizeof(StTensor), "safetensors index");  // (n)
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) die("%s: \"__metadata__\" must be an object", path);
            continue;
        }
        parse_tensor(&idx->t[idx->n++], e, path, data_start, data_size);
    }
    cJSON_Delete(root);
    free(hdr);
    check_unique(idx, path);
}

// ---------------------------------------------------------------- directories

static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("cannot open %s", path);
    if (fseek(f, 0, SEEK_END) != 0) die_errno("%s: seek failed", path);
    long sz = ftell(f);
    if (sz < 0) die_errno("%s: ftell failed", path);
    rewind(f);
    char *buf = xmalloc((size_t)sz + 1, path);  // (sz + 1) file text + NUL
    if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) die_errno("%s: read failed", path);
    buf[sz] = '\0';
    fclose(f);
    return buf;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void join_path(char *out, size_t size, const char *dir, const char *name) {
    int k = snprintf(out, size, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= size) die("path %s/%s is longer than %zu bytes", dir, name, size - 1);
}

void st_open_dir(StIndex *idx, const char *dir) {
    char single[1024], index[1024];
    join_path(single, sizeof single, dir, "model.safetensors");
    join_path(index, sizeof index, dir, "model.safetensors.index.json");
    if (file_exists(single)) {
        st_open(idx, single);
        return;
    }
    if (!file_exists(index))
        die("no weights in %s: neither %s nor %s exists", dir, single, index);

    char *text = read_text_file(index);
    cJSON *root = cJSON_Parse(text);
    if (!root) die("%s: not valid JSON", index);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) die("%s: missing \"weight_map\" object", index);

    // Distinct shard names in first-seen order: each shard's header is parsed once.
    int n_map = cJSON_GetArraySize(wm), n_shards = 0;
    const char **shards = xmalloc((size_t)(n_map ? n_map : 1) * sizeof *shards, "shard list");  // (n_map)
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            die("%s: weight_map entry \"%s\" must be a file name string", index, e->string);
        if (e->valuestring[0] == '\0' || e->valuestring[0] == '/' || strstr(e->valuestring, ".."))
            die("%s: weight_map entry \"%s\" names an invalid shard \"%s\"", index, e->string,
                e->valuestring);
        int seen = 0;
        for (int i = 0; i < n_shards && !seen; i++) seen = strcmp(shards[i], e->valuestring) == 0;
        if (!seen) shards[n_shards++] = e->valuestring;
    }
    if (n_shards == 0) die("%s: weight_map is empty", index);

    StIndex *parts = xcalloc((size_t)n_shards * sizeof *parts, "shard indexes");  // (n_shards)
    int total = 0;
    for (int i = 0; i < n_shards; i++) {
        char sp[1024];
        join_path(sp, sizeof sp, dir, shards[i]);
        if (!file_exists(sp)) die("%s: shard %s listed in the weight_map does not exist", index, sp);
        st_open(&parts[i], sp);
        total += parts[i].n;
    }
    // Every weight_map entry must really be in the shard it names.
    for (const cJSON *e = wm->child; e; e = e->next) {
        int s = 0;
        while (strcmp(shards[s], e->valuestring) != 0) s++;
        if (!st_find(&parts[s], e->string))
            die("%s: tensor \"%s\" is mapped to %s, which does not contain it", index, e->string,
                e->valuestring);
    }
    memset(idx, 0, sizeof *idx);
    idx->t = xmalloc((size_t)(total ? total : 1) * sizeof(StTensor), "safetensors index");  // (total)
    for (int i = 0; i < n_shards; i++) {
        memcpy(idx->t + idx->n, parts[i].t, (size_t)parts[i].n * sizeof(StTensor));
        idx->n += parts[i].n;
        st_close(&parts[i]);
    }
    free(parts);
    free(shards);
    cJSON_Delete(root);
    free(text);
    check_unique(idx, index);
}

void st_close(StIndex *idx) {
    free(idx->t);
    idx->t = NULL;
    idx->n = 0;
}

const StTensor *st_find(const StIndex *idx, const char *name) {
    for (int i = 0; i < idx->n; i++)
        if (strcmp(idx->t[i].name, name) == 0) return &idx->t[i];
    return NULL;
}

// ---------------------------------------------------------------- reading data

void st_read_f32(const StTensor *t, uint64_t elem_begin, size_t count, float *out) {
    st_read_f32_strided(t, elem_begin, count, count, 1, out);
}

void st_read_f32_strided(const StTensor *t, uint64_t elem_begin, size_t count, uint64_t stride,
                         size_t n_runs, float *out) {
    unsigned es = dtype_size(t->dtype);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_F64)
        die("%s: tensor \"%s\" has dtype %s, which cannot be read as fp32", t->file, t->name,
            dtype_name(t->dtype));
    uint64_t numel = (t->end - t->begin) / es;
    if (count == 0 || n_runs == 0) {
        if (elem_begin > numel)
            die("%s: tensor \"%s\": read at element %llu is past its %llu elements", t->file,
                t->name, (unsigned long long)elem_begin, (unsigned long long)numel);
        return;
    }
    // The last run must end inside the tensor; written without overflow, as a
    // corrupt caller's stride could be anything.
    uint64_t span = (uint64_t)n_runs - 1;
    if (n_runs > 1 && stride < count)
        die("%s: tensor \"%s\": strided read with stride %llu shorter than its runs of %zu "
            "elements", t->file, t->name, (unsigned long long)stride, count);
    if (elem_begin > numel || count > numel - elem_begin ||
        (span && stride > (numel - elem_begin - count) / span)) {
        if (n_runs == 1)
            die("%s: tensor \"%s\": read of elements [%llu, %llu) is past its %llu elements",
                t->file, t->name, (unsigned long long)elem_begin,
                (unsigned long long)(elem_begin + count), (unsigned long long)numel);
        die("%s: tensor \"%s\": read of %zu runs of %zu elements from element %llu (stride "
            "%llu) is past its %llu elements", t->file, t->name, n_runs, count,
            (unsigned long long)elem_begin, (unsigned long long)stride, (unsigned long long)numel);
    }
    // One open for all the runs: a column slice of a row-parallel weight is one run
    // per row, thousands of them for a real model.
    int fd = open(t->file, O_RDONLY);
    if (fd < 0) die_errno("cannot open safetensors file %s", t->file);
    unsigned char *buf = NULL;  // (staging) raw bytes of a non-F32 tensor
    size_t per = ST_CHUNK_BYTES / es, staging = 0;
    if (t->dtype != ST_F32) {
        // Sized to what one run needs, so that many small reads stay cheap.
        staging = (count < per ? count : per) * es;
        buf = xmalloc(staging, "safetensors read buffer");
    }
    for (size_t r = 0; r < n_runs; r++) {
        uint64_t off = t->data_start + t->begin + (elem_begin + r * stride) * es;
        float *o_run = out + r * count;
        if (t->dtype == ST_F32) {
            pread_all(fd, o_run, count * 4, off, t->file);
            continue;
        }
        for (size_t done = 0; done < count;) {
            size_t k = count - done < per ? count - done : per;
            pread_all(fd, buf, k * es, off + done * es, t->file);
            float *o = o_run + done;
            if (t->dtype == ST_F64) {
                for (size_t i = 0; i < k; i++) {
                    double d;
                    memcpy(&d, buf + 8 * i, 8);
                    o[i] = (float)d;  // round to nearest even, as torch's .float()
                }
            } else {
                for (size_t i = 0; i < k; i++) {
                    uint16_t h = (uint16_t)(buf[2 * i] | (buf[2 * i + 1] << 8));
                    o[i] = t->dtype == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
                }
            }
            done += k;
        }
    }
    free(buf);
    close(fd);
}

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
        uint64_t numel = 1;
        buf_str(h, ",");
        buf_json_string(h, w->name);
        buf_str(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < w->ndim; d++) {
            if (w->shape[d] < 0) die("%s: tensor \"%s\": negative dimension", path, w->name);
            numel *= (uint64_t)w->shape[d];
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)w->shape[d]);
            buf_str(h, num);
        }
        if (need_data && numel > 0 && !w->data) die("%s: tensor \"%s\": data is NULL", path, w->name);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                 (unsigned long long)(offset + 4 * numel));
        buf_str(h, num);
        offset += 4 * numel;
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
    write_all(fd, lenbuf, 8, path);
    write_all(fd, h->s, h->len, path);
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
        if (numel) write_all(fd, tensors[i].data, 4 * numel, path);
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
