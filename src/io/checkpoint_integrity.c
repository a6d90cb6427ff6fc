// io/checkpoint_integrity.c — what makes a checkpoint trustworthy: a checksum of
// every file and the step it belongs to, written in the checkpoint's manifest.json
// when it is published, and verified before a resume touches any state.
//
// The checksum is a position-keyed sum over the file's 2-byte little-endian units:
//   H = sum over units i of fmix64(i * 0x9E3779B97F4A7C15 ^ u_i)   (mod 2^64)
// (fmix64: MurmurHash3's 64-bit finaliser, a bijection; a short last unit is
// zero-padded). Changing any one unit changes its term and so H; moving a unit
// changes its key. Because H is a sum of independent terms, every rank hashes
// exactly the units it writes, wherever the layout put them, and the ranks' sums
// add up to the file's hash — no rank ever reads another rank's data, and the
// result does not depend on the layout that wrote the file. The unit is 2 bytes,
// the size of a bf16 value, because a bf16 weights file (checkpoint.dtype) is
// split between ranks at any element. Verification splits the units of each file
// evenly over the ranks and sums again. Manifests written before bf16 checkpoints
// ("word-sum-64") used 4-byte units; they still verify.
#define _POSIX_C_SOURCE 200809L
#include "io/checkpoint.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/comm.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"
#include "util.h"

#define MANIFEST_FORMAT "femtotron-manifest-v1"
#define HASH_NAME "halfword-sum-64"  // 2-byte units
#define HASH_NAME_V1 "word-sum-64"   // 4-byte units, manifests of older femtotrons
#define HASH_CHUNK ((size_t)4 << 20)  // bytes read per pread when hashing a file

// ---------------------------------------------------------------- the hash

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

uint64_t ckpt_hash_units(const void *bytes, size_t nbytes, uint64_t first_unit, int unit) {
    const uint8_t *b = bytes;
    const size_t whole = nbytes / (size_t)unit, rest = nbytes % (size_t)unit;
    uint64_t h = 0;
#pragma omp parallel for reduction(+ : h) schedule(static) if (whole > 65536)
    for (size_t i = 0; i < whole; i++) {
        uint32_t u = 0;
        memcpy(&u, b + (size_t)unit * i, (size_t)unit);  // little-endian host (safetensors_internal.h)
        h += fmix64((first_unit + i) * 0x9E3779B97F4A7C15ULL ^ u);
    }
    if (rest) {  // the zero-padded last unit
        uint32_t u = 0;
        memcpy(&u, b + (size_t)unit * whole, rest);
        h += fmix64((first_unit + whole) * 0x9E3779B97F4A7C15ULL ^ u);
    }
    return h;
}

uint64_t ckpt_hash_file_range(int fd, const char *path, uint64_t lo, uint64_t hi, int unit) {
    if (lo % (uint64_t)unit)
        die("%s: hash range must start at a %d-byte unit (byte %llu)", path, unit, (unsigned long long)lo);
    uint64_t h = 0;
    char *buf = NULL;
    for (uint64_t off = lo; off < hi; off += HASH_CHUNK) {
        size_t n = hi - off < HASH_CHUNK ? (size_t)(hi - off) : HASH_CHUNK;
        if (!buf) buf = xmalloc(HASH_CHUNK, "checksum buffer");  // (HASH_CHUNK) bytes
        size_t got = 0;
        while (got < n) {
            ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) die_errno("%s: read at byte %llu failed", path, (unsigned long long)(off + got));
            if (r == 0)
                die("%s: the file ends at byte %llu, before %llu: it was truncated", path,
                    (unsigned long long)(off + got), (unsigned long long)hi);
            got += (size_t)r;
        }
        h += ckpt_hash_units(buf, n, off / (uint64_t)unit, unit);
    }
    free(buf);
    return h;
}

uint64_t ckpt_hash_file(const char *path, uint64_t *bytes) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die_errno("cannot open %s to checksum it", path);
    struct stat st;
    if (fstat(fd, &st) != 0) die_errno("cannot stat %s", path);
    *bytes = (uint64_t)st.st_size;
    uint64_t h = ckpt_hash_file_range(fd, path, 0, *bytes, CKPT_HASH_UNIT);
    close(fd);
    return h;
}

// ---------------------------------------------------------------- the manifest

// The files a checkpoint may hold, in the order the manifest lists them.
static const char *const KNOWN_FILES[] = {"model.safetensors",      "optimizer.safetensors",
                                          "config.json",            "trainer_state.json",
                                          "generation_config.json", "tokenizer.json",
                                          "tokenizer_config.json",  "special_tokens_map.json"};
#define N_KNOWN (int)(sizeof KNOWN_FILES / sizeof KNOWN_FILES[0])

void ckpt_manifest_add(CkptManifest *m, const char *name, uint64_t bytes, uint64_t hash) {
    if (m->n >= CKPT_MAX_FILES) die("checkpoint manifest: more than %d files", CKPT_MAX_FILES);
    CkptFileSum *f = &m->f[m->n++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->bytes = bytes;
    f->hash = hash;
}

void ckpt_write_manifest(const char *path, const CkptManifest *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", MANIFEST_FORMAT);
    cJSON_AddNumberToObject(root, "step", m->step);
    cJSON_AddStringToObject(root, "hash", HASH_NAME);
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    char num[32];
    for (int i = 0; i < m->n; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", m->f[i].name);
        snprintf(num, sizeof num, "%" PRIu64, m->f[i].bytes);
        cJSON_AddRawToObject(f, "bytes", num);
        snprintf(num, sizeof num, "%016" PRIx64, m->f[i].hash);
        cJSON_AddStringToObject(f, "hash", num);
        cJSON_AddItemToArray(files, f);
    }
    char *text = cJSON_Print(root);
    if (!text) die("out of memory writing %s", path);
    size_t len = strlen(text);
    char *with_nl = xmalloc(len + 2, "manifest text");  // (len + 2) JSON + "\n" + NUL
    memcpy(with_nl, text, len);
    memcpy(with_nl + len, "\n", 2);
    ckpt_write_text_file(path, with_nl);
    free(with_nl);
    free(text);
    cJSON_Delete(root);
}

// A manifest is small: anything above this is not one.
#define MANIFEST_MAX_BYTES 65536

void ckpt_read_manifest(const char *path, CkptManifest *m) {
    struct stat st;
    if (stat(path, &st) != 0) die_errno("cannot read %s", path);
    if (st.st_size > MANIFEST_MAX_BYTES)
        die("%s is %lld bytes: not a checkpoint manifest (at most %d)", path, (long long)st.st_size,
            MANIFEST_MAX_BYTES);
    char *text = read_text_file(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) die("%s is corrupt: not a JSON object", path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "hash");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MANIFEST_FORMAT) != 0)
        die("%s: \"format\" is not \"%s\" (corrupt, or written by a newer femtotron)", path, MANIFEST_FORMAT);
    int unit = !cJSON_IsString(hash)                         ? 0
               : strcmp(hash->valuestring, HASH_NAME) == 0    ? CKPT_HASH_UNIT
               : strcmp(hash->valuestring, HASH_NAME_V1) == 0 ? 4
                                                              : 0;
    if (!unit)
        die("%s: unknown checksum \"%s\" (this femtotron checks \"%s\" and \"%s\")", path,
            cJSON_IsString(hash) ? hash->valuestring : "?", HASH_NAME, HASH_NAME_V1);
    if (!cJSON_IsNumber(step) || step->valuedouble < 0 || step->valuedouble > 2147483647.0 ||
        step->valuedouble != (double)(int)step->valuedouble)
        die("%s is corrupt: \"step\" must be a non-negative integer", path);
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1 || cJSON_GetArraySize(files) > CKPT_MAX_FILES)
        die("%s is corrupt: \"files\" must list 1 to %d files", path, CKPT_MAX_FILES);
    memset(m, 0, sizeof *m);
    m->step = (int)step->valuedouble;
    m->unit = unit;
    for (const cJSON *f = files->child; f; f = f->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(f, "hash");
        int known = 0;
        for (int k = 0; cJSON_IsString(name) && k < N_KNOWN; k++) known |= strcmp(name->valuestring, KNOWN_FILES[k]) == 0;
        if (!known) die("%s is corrupt: a \"files\" entry does not name a checkpoint file", path);
        char *end = NULL;
        uint64_t hv = cJSON_IsString(h) ? strtoull(h->valuestring, &end, 16) : 0;
        if (!cJSON_IsNumber(bytes) || bytes->valuedouble < 0 || bytes->valuedouble > 9007199254740992.0 ||
            !end || *end || strlen(h->valuestring) != 16)
            die("%s is corrupt: the entry of %s needs \"bytes\" (an integer) and \"hash\" (16 hex digits)",
                path, name->valuestring);
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->f[i].name, name->valuestring) == 0) die("%s is corrupt: %s is listed twice", path, name->valuestring);
        ckpt_manifest_add(m, name->valuestring, (uint64_t)bytes->valuedouble, hv);
    }
    cJSON_Delete(root);
}

// ---------------------------------------------------------------- verification

// Stop every rank with one message: rank 0 reports it (its die() ends the job) and
// the others wait for that in a barrier. Every rank computed the same verdict.
#define VERIFY_FAIL(...)                            \
    do {                                            \
        if (comm_world_rank() == 0) die(__VA_ARGS__); \
        group_barrier(GROUP_WORLD);                 \
        die(__VA_ARGS__);                           \
    } while (0)

// The step a checkpoint directory's name says (step_NNNNNNN), or -1.
static int step_of_dir_name(const char *dir) {
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (strncmp(base, "step_", 5) != 0 || !base[5]) return -1;
    long v = 0;
    for (const char *p = base + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > 214748364) return -1;
        v = v * 10 + (*p - '0');
    }
    return (int)v;
}

int checkpoint_verify(const char *ckpt_dir) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, ckpt_dir, "manifest.json");
    if (!path_is_file(path)) return 0;  // written before manifests existed: nothing to check
    CkptManifest m;
    ckpt_read_manifest(path, &m);
    int named = step_of_dir_name(ckpt_dir);
    if (named >= 0 && named != m.step)
        VERIFY_FAIL("checkpoint %s: its manifest says step %d: the directory was renamed or its "
                    "manifest belongs to another checkpoint", ckpt_dir, m.step);
    const int rank = comm_world_rank(), world = comm_world_size();
    uint64_t sums[CKPT_MAX_FILES] = {0};
    for (int i = 0; i < m.n; i++) {
        ckpt_path_join(path, ckpt_dir, m.f[i].name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) VERIFY_FAIL("checkpoint %s: %s is missing (listed in its manifest)", ckpt_dir, m.f[i].name);
        struct stat st;
        if (fstat(fd, &st) != 0) die_errno("cannot stat %s", path);
        if ((uint64_t)st.st_size != m.f[i].bytes)
            VERIFY_FAIL("checkpoint %s: %s is %lld bytes, its manifest says %" PRIu64 ": the file was "
                        "truncated or replaced", ckpt_dir, m.f[i].name, (long long)st.st_size, m.f[i].bytes);
        // This rank's share of the file's units.
        const uint64_t u = (uint64_t)m.unit;
        uint64_t units = (m.f[i].bytes + u - 1) / u, per = (units + (uint64_t)world - 1) / (uint64_t)world;
        uint64_t lo = per * (uint64_t)rank, hi = lo + per;
        if (lo > units) lo = units;
        if (hi > units) hi = units;
        uint64_t end = hi * u < m.f[i].bytes ? hi * u : m.f[i].bytes;
        if (lo * u < end) sums[i] = ckpt_hash_file_range(fd, path, lo * u, end, m.unit);
        close(fd);
    }
    group_allreduce_sum_u64(GROUP_WORLD, sums, (size_t)m.n);
    for (int i = 0; i < m.n; i++)
        if (sums[i] != m.f[i].hash)
            VERIFY_FAIL("checkpoint %s: %s does not match its manifest (checksum %016" PRIx64 ", expected "
                        "%016" PRIx64 "): the file is corrupt or comes from another checkpoint",
                        ckpt_dir, m.f[i].name, sums[i], m.f[i].hash);
    // Every file must say it belongs to this step: a file copied in from another
    // checkpoint together with a rewritten manifest is still caught here.
    for (int i = 0; i < m.n; i++) {
        ckpt_path_join(path, ckpt_dir, m.f[i].name);
        int step = -1;
        if (strstr(m.f[i].name, ".safetensors")) {
            StIndex idx;
            st_open(&idx, path);
            const char *s = st_metadata(&idx, "step");
            step = s ? atoi(s) : -1;
            st_close(&idx);
        } else if (strcmp(m.f[i].name, "trainer_state.json") == 0) {
            TrainerState ts;
            ckpt_read_trainer_state(path, &ts);
            step = ts.step;
        } else {
            continue;  // the JSON files but trainer_state.json carry no step
        }
        if (step != m.step)
            VERIFY_FAIL("checkpoint %s: %s belongs to step %d, the checkpoint to step %d: files of "
                        "different checkpoints were mixed", ckpt_dir, m.f[i].name, step, m.step);
    }
    return 1;
}

// ---------------------------------------------------------------- finite values

void ckpt_check_finite(const CkptPiece *pieces, int n_pieces, const LlamaModel *model,
                       const char *ckpt_dir) {
    for (int i = 0; i < n_pieces; i++) {
        const CkptPiece *pc = &pieces[i];
        for (size_t e = pc->lo; e < pc->hi; e++) {
            float v = pc->data[e - pc->lo];
            if (v == v && v <= 3.4028235e38f && v >= -3.4028235e38f) continue;  // finite
            const char *name = "?";
            size_t at = e;
            for (int t = 0; t < model->n_params; t++)
                if (e >= model->params[t].offset && e < model->params[t].offset + model->params[t].numel) {
                    name = model->params[t].name;
                    at = e - model->params[t].offset;
                }
            die("checkpoint %s: %s of %s holds %g at element %zu of this rank's slice: a checkpoint "
                "with non-finite values is refused", ckpt_dir,
                CKPT_KIND_NAMES[pc->kind], name, (double)v, at);
        }
    }
}
