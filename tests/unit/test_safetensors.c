// tests/unit/test_safetensors.c — safetensors reader/writer: bit-exact round trips,
// F16/BF16/F64 conversion against hand-computed values, every kind of corrupt
// file rejected with a message naming the problem (checked in a fork()ed child,
// since die() ends the process), and sharded model directories.
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "run_child.h"
#include "io/safetensors.h"

static char tmpdir[256];

// ---------------------------------------------------------------- helpers

static void path_in(char *out, const char *name) { snprintf(out, 512, "%s/%s", tmpdir, name); }

// Write a safetensors file by hand: 8-byte length, header text as given, raw data.
static void write_raw(const char *path, const char *header, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    uint64_t len = strlen(header);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(len >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, len, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static uint32_t bits_of(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

// ---------------------------------------------------------------- round trip

static void test_round_trip(void) {
    char path[512];
    path_in(path, "rt.safetensors");
    // Values with awkward bit patterns: -0, inf, NaN, subnormals, the largest finite.
    float a[5] = {1.5f, -0.0f, INFINITY, 1e-42f, 3.4028235e38f};  // (5)
    float b[3 * 4];                                                // (3, 4)
    float c[2 * 3 * 2];                                            // (2, 3, 2)
    for (int i = 0; i < 12; i++) b[i] = (float)i * 0.37f - 2.0f;
    for (int i = 0; i < 12; i++) c[i] = sinf((float)i) * 1e3f;
    b[7] = NAN;
    StWrite w[4] = {
        {.name = "layer.a", .ndim = 1, .shape = {5}, .data = a},
        {.name = "layer.b", .ndim = 2, .shape = {3, 4}, .data = b},
        {.name = "empty", .ndim = 1, .shape = {0}, .data = NULL},
        {.name = "c \"quoted\"", .ndim = 3, .shape = {2, 3, 2}, .data = c},
    };
    const char *keys[] = {"step"}, *vals[] = {"3"};
    st_write_f32(path, w, 4, keys, vals, 1);

    StIndex idx;
    st_open(&idx, path);
    CHECK(idx.n == 4, "round trip: 4 tensors in the index (got %d)", idx.n);
    int order = idx.n == 4;
    for (int i = 0; i < idx.n && order; i++) order = strcmp(idx.t[i].name, w[i].name) == 0;
    CHECK(order, "round trip: tensors keep the given order and names (incl. escaped quotes)");
    int shapes = 1;
    for (int i = 0; i < idx.n && i < 4; i++) {
        shapes &= idx.t[i].ndim == w[i].ndim && idx.t[i].dtype == ST_F32;
        for (int d = 0; d < w[i].ndim; d++) shapes &= idx.t[i].shape[d] == w[i].shape[d];
    }
    CHECK(shapes, "round trip: shapes and F32 dtype preserved");
    int contiguous = idx.n == 4 && idx.t[0].begin == 0;
    for (int i = 1; i < idx.n; i++) contiguous &= idx.t[i].begin == idx.t[i - 1].end;
    CHECK(contiguous, "round trip: data offsets are contiguous from 0");
    CHECK(idx.n > 0 && idx.t[0].data_start % 8 == 0,
          "round trip: data section starts 8-byte aligned (data_start %llu)",
          idx.n ? (unsigned long long)idx.t[0].data_start : 0ull);
    CHECK(file_size(path) == (long)(idx.t[0].data_start + 4 * (5 + 12 + 0 + 12)),
          "round trip: file size = header + exactly the tensor bytes");

    float ra[5], rb[12], rc[12];
    const StTensor *ta = st_find(&idx, "layer.a"), *tb = st_find(&idx, "layer.b");
    const StTensor *tc = st_find(&idx, "c \"quoted\""), *te = st_find(&idx, "empty");
    CHECK(ta && tb && tc && te && !st_find(&idx, "layer"), "st_find finds each name, and only exact names");
    if (ta && tb && tc) {
        st_read_f32(ta, 0, 5, ra);
        st_read_f32(tb, 0, 12, rb);
        st_read_f32(tc, 0, 12, rc);
        CHECK(memcmp(ra, a, sizeof a) == 0, "round trip: 1-D tensor bit-exact (-0, inf, subnormal, max)");
        CHECK(memcmp(rb, b, sizeof b) == 0, "round trip: 2-D tensor bit-exact (NaN included)");
        CHECK(memcmp(rc, c, sizeof c) == 0, "round trip: 3-D tensor bit-exact");
        float part[3];
        st_read_f32(tb, 5, 3, part);
        CHECK(memcmp(part, b + 5, sizeof part) == 0, "partial read of elements [5, 8) of a 2-D tensor");
    }
    st_close(&idx);

    // Raw header text: metadata first with format pt, spaces as padding.
    FILE *f = fopen(path, "rb");
    unsigned char lb[8];
    uint64_t hlen = 0;
    if (f && fread(lb, 1, 8, f) == 8)
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lb[i];
    char *hdr = calloc(1, hlen + 1);
    size_t got = f && hdr ? fread(hdr, 1, hlen, f) : 0;
    if (f) fclose(f);
    CHECK(got == hlen && hlen % 8 == 0, "header length %llu is a multiple of 8", (unsigned long long)hlen);
    CHECK(hdr && strncmp(hdr, "{\"__metadata__\":{\"format\":\"pt\",\"step\":\"3\"}", 42) == 0,
          "header starts with __metadata__ {format: pt, step: 3}: %.60s", hdr ? hdr : "");
    char *close_brace = hdr ? strrchr(hdr, '}') : NULL;
    int pad_ok = close_brace != NULL;
    for (char *q = close_brace ? close_brace + 1 : NULL; q && *q; q++) pad_ok &= *q == ' ';
    CHECK(pad_ok, "header is padded with spaces only");
    free(hdr);
}

// ---------------------------------------------------------------- conversions

static void test_conversions(void) {
    char path[512];
    path_in(path, "conv.safetensors");
    // F16 bit patterns and their values worked out by hand from the IEEE half layout.
    const uint16_t h16[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x0200,
                            0x8000, 0x7c00, 0xfc00, 0x7e00, 0x3555, 0x8001};  // (13)
    const float e16[] = {1.0f, -2.0f, 65504.0f,
                         5.9604644775390625e-08f,   // 2^-24, smallest subnormal
                         6.0975551605224609e-05f,   // 1023 * 2^-24, largest subnormal
                         6.103515625e-05f,          // 2^-14, smallest normal
                         3.0517578125e-05f,         // 2^-15 = 0x200 * 2^-24
                         -0.0f, INFINITY, -INFINITY, NAN,
                         0.333251953125f,           // 0x155 = 341: (1 + 341/1024) / 4
                         -5.9604644775390625e-08f};
    // BF16: the top 16 bits of an fp32.
    const uint16_t hb[] = {0x3f80, 0xc040, 0x4049, 0x7f7f, 0x0001, 0x8000, 0x7f80, 0xff80,
                           0x7fc0};  // (9)
    const float eb[] = {1.0f, -3.0f, 3.140625f, 3.3895313892515355e38f,
                        9.183549615799121e-41f,  // 2^-133: fp32 subnormal 0x00010000
                        -0.0f, INFINITY, -INFINITY, NAN};
    const double d64[] = {1.0 / 3.0, -1e300, 1e-50, 2.5};  // (4)
    const float e64[] = {(float)(1.0 / 3.0), -INFINITY, 0.0f, 2.5f};
    const int32_t i32[] = {7, -7};  // (2)
    unsigned char data[26 + 18 + 32 + 8];
    memcpy(data, h16, 26);  // little-endian host: uint16 bytes are the file bytes
    memcpy(data + 26, hb, 18);
    memcpy(data + 44, d64, 32);
    memcpy(data + 76, i32, 8);
    write_raw(path,
              "{\"h\":{\"dtype\":\"F16\",\"shape\":[13],\"data_offsets\":[0,26]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[3,3],\"data_offsets\":[26,44]},"
              "\"d\":{\"dtype\":\"F64\",\"shape\":[2,2],\"data_offsets\":[44,76]},"
              "\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[76,84]}}",
              data, sizeof data);
    StIndex idx;
    st_open(&idx, path);
    const StTensor *th = st_find(&idx, "h"), *tb = st_find(&idx, "b"), *td = st_find(&idx, "d");
    const StTensor *ti = st_find(&idx, "i");
    CHECK(th && tb && td && ti && th->dtype == ST_F16 && tb->dtype == ST_BF16 &&
              td->dtype == ST_F64 && ti->dtype == ST_I32,
          "hand-written file with F16, BF16, F64, I32 tensors parses with those dtypes");
    if (!(th && tb && td && ti)) return;
    float out[13];
    st_read_f32(th, 0, 13, out);
    for (int i = 0; i < 13; i++) {
        int ok = isnan(e16[i]) ? bits_of(out[i]) == 0x7fc00000u : bits_of(out[i]) == bits_of(e16[i]);
        CHECK(ok, "F16 0x%04x -> %.10g (expected %.10g, bits %08x)", h16[i], out[i], e16[i],
              bits_of(out[i]));
    }
    st_read_f32(tb, 0, 9, out);
    for (int i = 0; i < 9; i++) {
        int ok = bits_of(out[i]) == ((uint32_t)hb[i] << 16) &&
                 (isnan(eb[i]) ? isnan(out[i]) : out[i] == eb[i] && signbit(out[i]) == signbit(eb[i]));
        CHECK(ok, "BF16 0x%04x -> %.10g (expected %.10g)", hb[i], out[i], eb[i]);
    }
    st_read_f32(td, 0, 4, out);
    CHECK(memcmp(out, e64, sizeof e64) == 0, "F64 -> fp32 rounds to nearest (1/3, -1e300 -> -inf, 1e-50 -> 0)");
    st_read_f32(th, 11, 2, out);
    CHECK(bits_of(out[0]) == bits_of(e16[11]) && bits_of(out[1]) == bits_of(e16[12]),
          "partial F16 read at element 11 converts the right elements");
    st_close(&idx);
}

// ---------------------------------------------------------------- corrupt files

typedef struct {
    const char *path;
    const char *tensor;  // for read errors
    uint64_t begin;
    size_t count;
} OpenCtx;

static void child_open(void *p) {
    StIndex idx;
    st_open(&idx, ((OpenCtx *)p)->path);
}

static void child_open_dir(void *p) {
    StIndex idx;
    st_open_dir(&idx, ((OpenCtx *)p)->path);
}

static void child_read(void *p) {
    OpenCtx *c = p;
    StIndex idx;
    st_open(&idx, c->path);
    const StTensor *t = st_find(&idx, c->tensor);
    float *buf = malloc(c->count * sizeof(float) + 4);
    if (t) st_read_f32(t, c->begin, c->count, buf);
}

// Expect `fn` to die: non-zero exit and stderr containing the path and `needle`.
static void expect_death(const char *what, void (*fn)(void *), OpenCtx *ctx, const char *needle) {
    char err[4096];
    int rc = run_child(fn, ctx, err, sizeof err);
    int ok = rc != 0 && strstr(err, needle) && strstr(err, ctx->path);
    CHECK(ok, "%s: child exits %d with \"%s\" naming the file (stderr: %.200s)", what, rc,
          needle, err);
}

static void corrupt_case(const char *what, const char *name, const char *header,
                         size_t data_bytes, const char *needle) {
    char path[512];
    path_in(path, name);
    unsigned char data[64] = {0};
    write_raw(path, header, data, data_bytes);
    OpenCtx c = {.path = path};
    expect_death(what, child_open, &c, needle);
}

static void test_corrupt(void) {
    char path[512];
    OpenCtx c = {.path = path};

    path_in(path, "short.safetensors");
    FILE *f = fopen(path, "wb");
    fwrite("\x10\0\0\0\0", 1, 5, f);
    fclose(f);
    expect_death("5-byte file", child_open, &c, "shorter than the 8-byte header length");

    path_in(path, "biglen.safetensors");
    f = fopen(path, "wb");
    unsigned char lb[8] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0};  // 1000
    fwrite(lb, 1, 8, f);
    fwrite("{\"a\":{}}", 1, 8, f);
    fclose(f);
    expect_death("header length beyond file", child_open, &c, "beyond the file size");

    path_in(path, "huge_len.safetensors");
    f = fopen(path, "wb");
    unsigned char lb2[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    fwrite(lb2, 1, 8, f);
    fwrite("{}      ", 1, 8, f);
    fclose(f);
    expect_death("header length 2^64-1", child_open, &c, "beyond the file size");

    path_in(path, "missing.safetensors");
    expect_death("missing file", child_open, &c, "cannot open");

    corrupt_case("garbage JSON", "garbage.safetensors", "{\"a\": {\"dtype\": F32", 0,
                 "not valid JSON");
    corrupt_case("JSON array header", "array.safetensors", "[1, 2, 3]   ", 0, "not an object");
    corrupt_case("junk after the header object", "junk.safetensors", "{}  xx", 0,
                 "unexpected bytes after");
    corrupt_case("data_offsets past the end", "pastend.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[100],\"data_offsets\":[0,400]}}", 16,
                 "past the end of the data section");
    corrupt_case("wrong byte count for shape", "count.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 24,
                 "need 6 elements x 4 bytes");
    corrupt_case("BF16 byte count", "count16.safetensors",
                 "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                 "need 4 elements x 2 bytes");
    corrupt_case("begin > end", "order.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 16,
                 "begin > end");
    corrupt_case("missing dtype", "nodtype.safetensors",
                 "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing \"dtype\"");
    corrupt_case("missing shape", "noshape.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing \"shape\"");
    corrupt_case("missing data_offsets", "nooffs.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing \"data_offsets\"");
    corrupt_case("negative shape entry", "negshape.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                 "non-negative integer");
    corrupt_case("shape entry beyond 2^53", "hugeshape.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e30],\"data_offsets\":[0,4]}}", 4,
                 "non-negative integer");
    corrupt_case("fractional offset", "fracoff.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", 8,
                 "non-negative integer");
    corrupt_case("duplicate tensor name", "dup.safetensors",
                 "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                 "appears twice");

    // A valid file cut short by a crash: the offsets now point past the end.
    float v[16] = {0};  // (16)
    StWrite w = {.name = "t", .ndim = 2, .shape = {4, 4}, .data = v};
    path_in(path, "cut.safetensors");
    st_write_f32(path, &w, 1, NULL, NULL, 0);
    if (truncate(path, file_size(path) - 3) != 0) perror("truncate");
    expect_death("valid file truncated by 3 bytes", child_open, &c, "past the end");

    // Read errors: an integer tensor as fp32, a range past the tensor.
    path_in(path, "conv.safetensors");
    OpenCtx r = {.path = path, .tensor = "i", .begin = 0, .count = 2};
    expect_death("I32 tensor read as fp32", child_read, &r, "cannot be read as fp32");
    OpenCtx r2 = {.path = path, .tensor = "h", .begin = 10, .count = 4};
    expect_death("read past the tensor's elements", child_read, &r2, "past its 13 elements");
}

// ---------------------------------------------------------------- sharded directories

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

static void test_sharded(void) {
    char dir[512], path[1024];
    path_in(dir, "sharded");
    mkdir(dir, 0755);
    float a[6], b[4], c[3];  // (2, 3), (4), (3)
    for (int i = 0; i < 6; i++) a[i] = 10.0f + (float)i;
    for (int i = 0; i < 4; i++) b[i] = -1.0f - (float)i;
    for (int i = 0; i < 3; i++) c[i] = 0.25f * (float)i;
    StWrite s1[2] = {{.name = "model.embed_tokens.weight", .ndim = 2, .shape = {2, 3}, .data = a},
                     {.name = "model.norm.weight", .ndim = 1, .shape = {4}, .data = b}};
    StWrite s2[1] = {{.name = "lm_head.weight", .ndim = 1, .shape = {3}, .data = c}};
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    st_write_f32(path, s1, 2, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    st_write_f32(path, s2, 1, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"metadata\": {\"total_size\": 52}, \"weight_map\": {"
                     "\"lm_head.weight\": \"model-00002-of-00002.safetensors\","
                     "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                     "\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}");
    StIndex idx;
    st_open_dir(&idx, dir);
    CHECK(idx.n == 3, "sharded dir: 3 tensors from 2 shards (got %d)", idx.n);
    const StTensor *ta = st_find(&idx, "model.embed_tokens.weight");
    const StTensor *tb = st_find(&idx, "model.norm.weight");
    const StTensor *tc = st_find(&idx, "lm_head.weight");
    CHECK(ta && tb && tc && strstr(ta->file, "model-00001-of-00002") &&
              strstr(tc->file, "model-00002-of-00002"),
          "sharded dir: each tensor records the shard that holds it");
    if (ta && tb && tc) {
        float ra[6], rb[4], rc[3];
        st_read_f32(ta, 0, 6, ra);
        st_read_f32(tb, 0, 4, rb);
        st_read_f32(tc, 0, 3, rc);
        CHECK(memcmp(ra, a, sizeof a) == 0 && memcmp(rb, b, sizeof b) == 0 &&
                  memcmp(rc, c, sizeof c) == 0,
              "sharded dir: values read back from both shards bit-exactly");
    }
    st_close(&idx);

    // A single-file directory takes model.safetensors.
    char dir1[512];
    path_in(dir1, "single");
    mkdir(dir1, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir1);
    st_write_f32(path, s2, 1, NULL, NULL, 0);
    st_open_dir(&idx, dir1);
    CHECK(idx.n == 1 && strcmp(idx.t[0].name, "lm_head.weight") == 0,
          "directory with model.safetensors opens it");
    st_close(&idx);

    char empty[512];
    path_in(empty, "empty_dir");
    mkdir(empty, 0755);
    OpenCtx c0 = {.path = empty};
    char err[4096];
    int rc = run_child(child_open_dir, &c0, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "model.safetensors") && strstr(err, "model.safetensors.index.json"),
          "directory without weights: error lists both names tried (%.200s)", err);

    // Index mapping a tensor to a shard that lacks it, and to a missing shard.
    char bad[512];
    path_in(bad, "bad_index");
    mkdir(bad, 0755);
    snprintf(path, sizeof path, "%s/a.safetensors", bad);
    st_write_f32(path, s1, 2, NULL, NULL, 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", bad);
    write_text(path, "{\"weight_map\": {\"lm_head.weight\": \"a.safetensors\"}}");
    OpenCtx c1 = {.path = bad};
    expect_death("index maps a tensor to a shard without it", child_open_dir, &c1,
                 "does not contain it");
    write_text(path, "{\"weight_map\": {\"lm_head.weight\": \"gone.safetensors\"}}");
    expect_death("index names a missing shard", child_open_dir, &c1, "does not exist");
    write_text(path, "{\"weight_map\": [1, 2]}");
    expect_death("index without a weight_map object", child_open_dir, &c1, "weight_map");
}

// ---------------------------------------------------------------- writer errors

static void child_write_bad_dir(void *p) {
    (void)p;
    float x = 1;
    StWrite w = {.name = "x", .ndim = 1, .shape = {1}, .data = &x};
    st_write_f32("/nonexistent_dir_femtotron/x.safetensors", &w, 1, NULL, NULL, 0);
}

static void test_write_errors(void) {
    char err[4096];
    int rc = run_child(child_write_bad_dir, NULL, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "/nonexistent_dir_femtotron/x.safetensors") &&
              strstr(err, "No such file"),
          "write into a missing directory dies naming the path and errno (%.200s)", err);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/femtotron_st_XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    test_round_trip();
    test_conversions();
    test_corrupt();
    test_sharded();
    test_write_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
