// io/safetensors_read.c — read tensor data as fp32: dtype conversion (F16, BF16,
// F64) and strided reads of slices.
//
// Tensor bytes are read with pread on demand: a 7B model is never held twice in
// memory, and a rank that owns a slice reads only that slice. The header has been
// validated by st_open (safetensors_open.c), so a read can only fail on an I/O error.
#define _POSIX_C_SOURCE 200809L
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors_internal.h"
#include "ops/bf16.h"
#include "util.h"

// Conversion chunk: non-F32 data is read through a bounded staging buffer.
#define ST_CHUNK_BYTES (1u << 20)

// ---------------------------------------------------------------- dtypes

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
void st_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
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
            st_pread_all(fd, o_run, count * 4, off, t->file);
            continue;
        }
        for (size_t done = 0; done < count;) {
            size_t k = count - done < per ? count - done : per;
            st_pread_all(fd, buf, k * es, off + done * es, t->file);
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
