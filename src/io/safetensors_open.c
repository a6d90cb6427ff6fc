// io/safetensors_open.c — parse and validate safetensors headers into an index:
// one file (st_open) or a sharded directory (st_open_dir); st_find, st_close.
//
// The whole header is parsed and validated up front (every dtype, shape and
// offset checked against the file size), so that a later st_read_f32 can only fail
// on an I/O error. Tensor bytes are not read here (safetensors_read.c).
#define _POSIX_C_SOURCE 200809L
#include "io/safetensors.h"

#include <cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors_internal.h"
#include "util.h"

// Largest integer a JSON number (a double) holds exactly: shapes and offsets
// beyond it cannot be represented faithfully, so we reject them.
#define ST_MAX_JSON_INT 9007199254740992.0  // 2^53

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
    st_pread_all(fd, lenbuf, 8, 0, path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
    if (hlen > fsize - 8)
        die("%s: header length %llu is beyond the file size %llu (truncated or not a "
            "safetensors file)", path, (unsigned long long)hlen, (unsigned long long)fsize);
    if (hlen < 2) die("%s: header length %llu is too small for a JSON object", path,
                      (unsigned long long)hlen);

    char *hdr = xmalloc(hlen + 1, "safetensors header");  // (hlen + 1) JSON text + NUL
    st_pread_all(fd, hdr, hlen, 8, path);
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
            for (const cJSON *kv = e->child; kv && idx->n_meta < ST_MAX_META; kv = kv->next) {
                if (!cJSON_IsString(kv) || strlen(kv->string) >= 64 || strlen(kv->valuestring) >= 64)
                    continue;  // kept: short strings only; the rest is not ours to read
                strcpy(idx->meta_key[idx->n_meta], kv->string);
                strcpy(idx->meta_value[idx->n_meta++], kv->valuestring);
            }
            continue;
        }
        parse_tensor(&idx->t[idx->n++], e, path, data_start, data_size);
    }
    cJSON_Delete(root);
    free(hdr);
    check_unique(idx, path);
}

// ---------------------------------------------------------------- directories

static void join_path(char *out, size_t size, const char *dir, const char *name) {
    int k = snprintf(out, size, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= size) die("path %s/%s is longer than %zu bytes", dir, name, size - 1);
}

void st_open_dir(StIndex *idx, const char *dir) {
    char single[1024], index[1024];
    join_path(single, sizeof single, dir, "model.safetensors");
    join_path(index, sizeof index, dir, "model.safetensors.index.json");
    if (path_is_file(single)) {
        st_open(idx, single);
        return;
    }
    if (!path_is_file(index))
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
        if (!path_is_file(sp)) die("%s: shard %s listed in the weight_map does not exist", index, sp);
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

const char *st_metadata(const StIndex *idx, const char *key) {
    for (int i = 0; i < idx->n_meta; i++)
        if (strcmp(idx->meta_key[i], key) == 0) return idx->meta_value[i];
    return NULL;
}

const StTensor *st_find(const StIndex *idx, const char *name) {
    for (int i = 0; i < idx->n; i++)
        if (strcmp(idx->t[i].name, name) == 0) return &idx->t[i];
    return NULL;
}
