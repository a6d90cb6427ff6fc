// plan/hardware.c — hardware profiles: the built-in GPU datasheets, rate curves,
// the collective cost model, and the JSON form written by `femtotron bench calibrate`.
#define _POSIX_C_SOURCE 200809L
#include "plan/hardware.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// ---------------------------------------------------------------- built-ins
//
// Datasheet figures (NVIDIA SXM parts, dense bf16 without sparsity), and the
// fraction of peak that cuBLAS GEMMs and FlashAttention-2 kernels typically reach
// against the FLOPs of one call. These are starting points for the planner, to be
// refined by measurement (`femtotron bench calibrate` on the real machine).
// Links are per GPU and per direction: NVLink inside a node, InfiniBand across.
//
//          peak FLOP/s  memory B   HBM B/s   NVLink B/s  IB B/s   GPUs/node
//   h100   989e12       81559 MiB  3.35e12   450e9       50e9     8   (IB 400 Gb/s)
//   h200   989e12       143771 MiB 4.8e12    450e9       50e9     8   (IB 400 Gb/s)
//   a100   312e12       81920 MiB  2.0e12    300e9       25e9     8   (NVLink3, HDR 200 Gb/s)
//
//   Memory is what the device reports (nvidia-smi's total): the "80 GB" parts
//   carry 80 GiB of HBM (five 16 GiB stacks), not 80e9 bytes, and the 141 GB
//   H200 is 140.4 GiB.
//   Links are priced at what collectives attain on them, not the line rate:
//   NCCL's reduce-scatter/all-gather bus bandwidth over NVSwitch reaches about
//   80% of the NVLink figure (~360 of 450 GB/s on H100, ~240 of 300 on A100:
//   protocol headers, the SMs' copy engines, the switch), and over InfiniBand or
//   RoCE about 90% of the NIC's line rate (45 of 50, 22.5 of 25 GB/s).
//   LINK_INTRA and LINK_INTER below hold these fractions.
//
//   latency per message step: 5 us inside a node, 10 us across nodes
//
//   fraction of peak     FLOPs per call:  1e8    1e9    1e10   1e11   1e12
//   GEMM                                  0.10   0.35   0.62   0.75   0.80
//   FLOPs per (sequence, head):           1e7    1e8    1e9    1e10
//   attention forward                     0.08   0.25   0.45   0.55
//   attention backward                    0.06   0.20   0.36   0.45
//   (per (sequence, head) at hd 128: S = 512 is 6.7e7, S = 8192 is 1.7e10)
typedef struct {
    const char *name;
    double peak, mem, mem_bw, intra_bw, inter_bw;
    int gpus_per_node;
} Builtin;

static const Builtin BUILTINS[] = {
    {"h100", 989e12, 81559.0 * 1048576, 3.35e12, 450e9, 50e9, 8},
    {"h200", 989e12, 143771.0 * 1048576, 4.8e12, 450e9, 50e9, 8},
    {"a100", 312e12, 81920.0 * 1048576, 2.0e12, 300e9, 25e9, 8},
};
static const double LINK_INTRA = 0.8, LINK_INTER = 0.9;  // attained / line rate
static const double INTRA_LAT = 5e-6, INTER_LAT = 1e-5;

static const double GEMM_WORK[] = {1e8, 1e9, 1e10, 1e11, 1e12};
static const double GEMM_FRAC[] = {0.10, 0.35, 0.62, 0.75, 0.80};
static const double ATTN_WORK[] = {1e7, 1e8, 1e9, 1e10};
static const double ATTN_FWD_FRAC[] = {0.08, 0.25, 0.45, 0.55};
static const double ATTN_BWD_FRAC[] = {0.06, 0.20, 0.36, 0.45};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void fill_curve(RateCurve *c, const double *work, const double *frac, int n, double peak) {
    c->n = n;
    for (int i = 0; i < n; i++) {
        c->work[i] = work[i];
        c->rate[i] = frac[i] * peak;
    }
}

int hardware_builtin(Hardware *hw, const char *name) {
    for (int i = 0; i < COUNT(BUILTINS); i++) {
        const Builtin *b = &BUILTINS[i];
        if (strcmp(name, b->name) != 0) continue;
        memset(hw, 0, sizeof *hw);
        snprintf(hw->name, sizeof hw->name, "%s", b->name);
        hw->peak_flops = b->peak;
        hw->mem_bytes = b->mem;
        hw->mem_bw = b->mem_bw;
        hw->bytes_per_value = 2;
        snprintf(hw->precision, sizeof hw->precision, "bf16");
        fill_curve(&hw->gemm, GEMM_WORK, GEMM_FRAC, COUNT(GEMM_WORK), b->peak);
        fill_curve(&hw->attn_fwd, ATTN_WORK, ATTN_FWD_FRAC, COUNT(ATTN_WORK), b->peak);
        fill_curve(&hw->attn_bwd, ATTN_WORK, ATTN_BWD_FRAC, COUNT(ATTN_WORK), b->peak);
        hw->intra_bw = LINK_INTRA * b->intra_bw;
        hw->inter_bw = LINK_INTER * b->inter_bw;
        hw->intra_lat = INTRA_LAT;
        hw->inter_lat = INTER_LAT;
        hw->gpus_per_node = b->gpus_per_node;
        hw->n_coll = 0;
        return 1;
    }
    return 0;
}

// ------------------------------------------------------------------- models

double curve_rate(const RateCurve *c, double work) {
    if (c->n <= 0) return 0.0;
    if (c->n == 1 || work <= c->work[0]) return c->rate[0];
    if (work >= c->work[c->n - 1]) return c->rate[c->n - 1];
    int i = 0;
    while (work > c->work[i + 1]) i++;  // work[i] < work <= work[i+1]
    double t = log(work / c->work[i]) / log(c->work[i + 1] / c->work[i]);
    return c->rate[i] + t * (c->rate[i + 1] - c->rate[i]);
}

// Ring factors of a collective on n ranks: the number of latency steps and the
// fraction of the buffer each rank moves over its link.
static double ring_steps(CollKind k, int n) {
    if (k == COLL_P2P) return 1.0;
    return (k == COLL_ALLREDUCE ? 2.0 : 1.0) * (n - 1);
}

static double ring_share(CollKind k, int n) {
    if (k == COLL_P2P) return 1.0;
    return (k == COLL_ALLREDUCE ? 2.0 : 1.0) * (n - 1) / (double)n;
}

// Measured fits are looked up in this order:
//  1. the fit for exactly (kind, ranks, intra_node);
//  2. for p2p, any p2p fit of the same link class (a message between two ranks
//     does not depend on how many ranks the group has);
//  3. fits of the same kind and link class on other group sizes: each is turned
//     into a per-step latency alpha / steps(m) and a per-byte link cost
//     beta / share(m) with the ring factors (steps = (m-1), share = (m-1)/m, both
//     doubled for all-reduce), these are interpolated linearly in the rank count
//     between the nearest measured sizes below and above n (held at the nearest
//     one beyond the measured range), and scaled back with steps(n), share(n);
//  4. the ring model over the link class (intra_* or inter_*).
double hardware_collective_s(const Hardware *hw, CollKind kind, int ranks, int intra_node,
                             double bytes) {
    if (ranks <= 1) return 0.0;
    intra_node = intra_node != 0;
    for (int pass = 0; pass < (kind == COLL_P2P ? 2 : 1); pass++)
        for (int i = 0; i < hw->n_coll; i++) {
            const CollFit *f = &hw->coll[i];
            if (f->kind == kind && (f->intra_node != 0) == intra_node && (pass == 1 || f->ranks == ranks))
                return f->alpha + bytes * f->beta;
        }
    const CollFit *lo = NULL, *hi = NULL;  // nearest measured sizes below / above
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *f = &hw->coll[i];
        if (f->kind != kind || (f->intra_node != 0) != intra_node || f->ranks < 2) continue;
        if (f->ranks < ranks && (!lo || f->ranks > lo->ranks)) lo = f;
        if (f->ranks > ranks && (!hi || f->ranks < hi->ranks)) hi = f;
    }
    if (lo || hi) {
        const CollFit *a = lo ? lo : hi, *b = hi ? hi : lo;
        double lat_a = a->alpha / ring_steps(kind, a->ranks), lat_b = b->alpha / ring_steps(kind, b->ranks);
        double byte_a = a->beta / ring_share(kind, a->ranks), byte_b = b->beta / ring_share(kind, b->ranks);
        double t = a == b ? 0.0 : (double)(ranks - a->ranks) / (b->ranks - a->ranks);
        double lat = lat_a + t * (lat_b - lat_a), per_byte = byte_a + t * (byte_b - byte_a);
        return ring_steps(kind, ranks) * lat + ring_share(kind, ranks) * per_byte * bytes;
    }
    double bw = intra_node ? hw->intra_bw : hw->inter_bw;
    double lat = intra_node ? hw->intra_lat : hw->inter_lat;
    return ring_steps(kind, ranks) * lat + ring_share(kind, ranks) * bytes / bw;
}

// --------------------------------------------------------------------- JSON

static const char *const COLL_NAMES[COLL_KINDS] = {"allreduce", "reduce_scatter", "allgather", "p2p"};

const char *hardware_coll_name(CollKind k) {
    return k >= 0 && k < COLL_KINDS ? COLL_NAMES[k] : "?";
}

// A number in the shortest "%.Ng" that reads back bit for bit (cJSON's own printer
// accepts 15 digits that are only within an epsilon). Non-finite: null, which
// hardware_load then rejects naming the key.
static cJSON *num(double x) {
    char buf[40];
    if (!isfinite(x)) return cJSON_CreateNull();
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return cJSON_CreateRaw(buf);
}

void hardware_json_numbers_exact(cJSON *root) {
    for (cJSON *c = root->child, *next; c; c = next) {
        next = c->next;
        if (!cJSON_IsNumber(c)) {
            hardware_json_numbers_exact(c);
        } else if (cJSON_IsObject(root)) {
            const char *key = c->string;  // freed with c: the replacement copies it first
            cJSON_ReplaceItemInObjectCaseSensitive(root, key, num(c->valuedouble));
        } else {
            cJSON_ReplaceItemViaPointer(root, c, num(c->valuedouble));
        }
    }
}

static void add_num(cJSON *o, const char *key, double x) { cJSON_AddItemToObject(o, key, num(x)); }

static cJSON *curve_json(const RateCurve *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON *w = cJSON_AddArrayToObject(o, "work"), *r = cJSON_AddArrayToObject(o, "rate");
    for (int i = 0; i < c->n; i++) {
        cJSON_AddItemToArray(w, num(c->work[i]));
        cJSON_AddItemToArray(r, num(c->rate[i]));
    }
    return o;
}

void hardware_save(const Hardware *hw, const char *path) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", hw->name);
    add_num(o, "peak_flops", hw->peak_flops);
    add_num(o, "mem_bytes", hw->mem_bytes);
    add_num(o, "mem_bw", hw->mem_bw);
    add_num(o, "bytes_per_value", hw->bytes_per_value);
    add_num(o, "gpus_per_node", hw->gpus_per_node);
    add_num(o, "intra_bw", hw->intra_bw);
    add_num(o, "inter_bw", hw->inter_bw);
    add_num(o, "intra_lat", hw->intra_lat);
    add_num(o, "inter_lat", hw->inter_lat);
    add_num(o, "calib_ranks", hw->calib_ranks);
    add_num(o, "calib_threads", hw->calib_threads);
    add_num(o, "node_cores", hw->node_cores);
    add_num(o, "attn_head_dim", hw->attn_head_dim);
    cJSON_AddStringToObject(o, "precision", hw->precision[0] ? hw->precision : "fp32");
    cJSON_AddStringToObject(o, "attention", hw->attention[0] ? hw->attention : "femtotron");
    cJSON_AddItemToObject(o, "gemm", curve_json(&hw->gemm));
    cJSON_AddItemToObject(o, "attn_fwd", curve_json(&hw->attn_fwd));
    cJSON_AddItemToObject(o, "attn_bwd", curve_json(&hw->attn_bwd));
    cJSON *cs = cJSON_AddArrayToObject(o, "collectives");
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *f = &hw->coll[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "kind", hardware_coll_name(f->kind));
        add_num(c, "ranks", f->ranks);
        cJSON_AddBoolToObject(c, "intra_node", f->intra_node != 0);
        add_num(c, "alpha_s", f->alpha);
        add_num(c, "beta_s_per_byte", f->beta);
        cJSON_AddItemToArray(cs, c);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) die("hardware profile %s: out of memory while printing", path);
    FILE *f = fopen(path, "w");
    if (!f) die_errno("hardware profile %s: cannot open for writing", path);
    if (fputs(text, f) < 0 || fputc('\n', f) == EOF) die_errno("hardware profile %s: write failed", path);
    if (fclose(f) != 0) die_errno("hardware profile %s: write failed", path);
    cJSON_free(text);
}

// Typed getters: each dies naming the file and the key (with its path, such as
// "gemm.rate[2]" or "collectives[1].kind").
static const cJSON *get_key(const cJSON *o, const char *key, const char *path, const char *where) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) die("hardware profile %s: missing key \"%s%s\"", path, where, key);
    return v;
}

static double get_number(const cJSON *o, const char *key, const char *path, const char *where) {
    const cJSON *v = get_key(o, key, path, where);
    if (!cJSON_IsNumber(v)) die("hardware profile %s: key \"%s%s\" must be a number", path, where, key);
    if (!isfinite(v->valuedouble)) die("hardware profile %s: key \"%s%s\" must be finite", path, where, key);
    return v->valuedouble;
}

static double get_positive(const cJSON *o, const char *key, const char *path) {
    double x = get_number(o, key, path, "");
    if (!(x > 0)) die("hardware profile %s: key \"%s\" must be positive (got %g)", path, key, x);
    return x;
}

static double get_nonneg(const cJSON *o, const char *key, const char *path, const char *where) {
    double x = get_number(o, key, path, where);
    if (x < 0) die("hardware profile %s: key \"%s%s\" must be >= 0 (got %g)", path, where, key, x);
    return x;
}

static int get_int(const cJSON *o, const char *key, const char *path, const char *where, int min) {
    double x = get_number(o, key, path, where);
    if (x != floor(x) || x < min || x > 1e9)
        die("hardware profile %s: key \"%s%s\" must be an integer >= %d (got %g)", path, where, key, min, x);
    return (int)x;
}

static void load_curve(RateCurve *c, const cJSON *root, const char *key, const char *path) {
    const cJSON *o = get_key(root, key, path, "");
    if (!cJSON_IsObject(o)) die("hardware profile %s: key \"%s\" must be an object {\"work\": [..], \"rate\": [..]}", path, key);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "work"), *r = cJSON_GetObjectItemCaseSensitive(o, "rate");
    if (!w) die("hardware profile %s: missing key \"%s.work\"", path, key);
    if (!r) die("hardware profile %s: missing key \"%s.rate\"", path, key);
    if (!cJSON_IsArray(w)) die("hardware profile %s: key \"%s.work\" must be an array", path, key);
    if (!cJSON_IsArray(r)) die("hardware profile %s: key \"%s.rate\" must be an array", path, key);
    int n = cJSON_GetArraySize(w);
    if (n != cJSON_GetArraySize(r))
        die("hardware profile %s: key \"%s.rate\" has %d points but \"%s.work\" has %d", path, key,
            cJSON_GetArraySize(r), key, n);
    if (n < 1) die("hardware profile %s: key \"%s.work\" is empty", path, key);
    if (n > HW_CURVE_MAX) die("hardware profile %s: key \"%s.work\" has %d points (at most %d)", path, key, n, HW_CURVE_MAX);
    c->n = n;
    for (int i = 0; i < n; i++) {
        const cJSON *wi = cJSON_GetArrayItem(w, i), *ri = cJSON_GetArrayItem(r, i);
        if (!cJSON_IsNumber(wi) || !isfinite(wi->valuedouble))
            die("hardware profile %s: key \"%s.work[%d]\" must be a number", path, key, i);
        if (!cJSON_IsNumber(ri) || !isfinite(ri->valuedouble))
            die("hardware profile %s: key \"%s.rate[%d]\" must be a number", path, key, i);
        c->work[i] = wi->valuedouble;
        c->rate[i] = ri->valuedouble;
        if (!(c->work[i] > 0))
            die("hardware profile %s: key \"%s.work[%d]\" must be positive (got %g)", path, key, i, c->work[i]);
        if (!(c->rate[i] > 0))
            die("hardware profile %s: key \"%s.rate[%d]\" must be positive (got %g)", path, key, i, c->rate[i]);
        if (i > 0 && !(c->work[i] > c->work[i - 1]))
            die("hardware profile %s: key \"%s.work\" must be strictly ascending (work[%d] = %g after %g)",
                path, key, i, c->work[i], c->work[i - 1]);
    }
}

static void load_collectives(Hardware *hw, const cJSON *root, const char *path) {
    const cJSON *cs = get_key(root, "collectives", path, "");
    if (!cJSON_IsArray(cs)) die("hardware profile %s: key \"collectives\" must be an array", path);
    int n = cJSON_GetArraySize(cs);
    if (n > HW_COLL_MAX) die("hardware profile %s: key \"collectives\" has %d entries (at most %d)", path, n, HW_COLL_MAX);
    hw->n_coll = n;
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cs, i);
        char where[48];
        snprintf(where, sizeof where, "collectives[%d].", i);
        if (!cJSON_IsObject(c)) die("hardware profile %s: key \"collectives[%d]\" must be an object", path, i);
        CollFit *f = &hw->coll[i];
        const cJSON *k = get_key(c, "kind", path, where);
        f->kind = COLL_KINDS;
        for (int j = 0; j < COLL_KINDS && cJSON_IsString(k); j++)
            if (strcmp(k->valuestring, COLL_NAMES[j]) == 0) f->kind = (CollKind)j;
        if (f->kind == COLL_KINDS)
            die("hardware profile %s: key \"%skind\" must be one of \"allreduce\", \"reduce_scatter\", "
                "\"allgather\", \"p2p\"", path, where);
        f->ranks = get_int(c, "ranks", path, where, 2);
        const cJSON *intra = get_key(c, "intra_node", path, where);
        if (!cJSON_IsBool(intra)) die("hardware profile %s: key \"%sintra_node\" must be true or false", path, where);
        f->intra_node = cJSON_IsTrue(intra);
        f->alpha = get_nonneg(c, "alpha_s", path, where);
        f->beta = get_nonneg(c, "beta_s_per_byte", path, where);
    }
}

void hardware_load(Hardware *hw, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die_errno("hardware profile %s: cannot open", path);
    fclose(f);
    char *text = read_text_file(path);
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1);
    if (!root) {
        const char *err = cJSON_GetErrorPtr();
        int line = 1;
        for (const char *p = text; err && p < err && *p; p++) line += *p == '\n';
        die("hardware profile %s: invalid JSON near line %d", path, line);
    }
    free(text);
    if (!cJSON_IsObject(root)) die("hardware profile %s: the top level must be a JSON object", path);
    memset(hw, 0, sizeof *hw);
    const cJSON *name = get_key(root, "name", path, "");
    if (!cJSON_IsString(name)) die("hardware profile %s: key \"name\" must be a string", path);
    if (strlen(name->valuestring) >= sizeof hw->name)
        die("hardware profile %s: key \"name\" is longer than %zu characters", path, sizeof hw->name - 1);
    snprintf(hw->name, sizeof hw->name, "%s", name->valuestring);
    hw->peak_flops = get_positive(root, "peak_flops", path);
    hw->mem_bytes = get_positive(root, "mem_bytes", path);
    hw->mem_bw = get_positive(root, "mem_bw", path);
    hw->bytes_per_value = get_int(root, "bytes_per_value", path, "", 1);
    hw->gpus_per_node = get_int(root, "gpus_per_node", path, "", 1);
    hw->intra_bw = get_positive(root, "intra_bw", path);
    hw->inter_bw = get_positive(root, "inter_bw", path);
    hw->intra_lat = get_nonneg(root, "intra_lat", path, "");
    hw->inter_lat = get_nonneg(root, "inter_lat", path, "");
    hw->calib_ranks = get_int(root, "calib_ranks", path, "", 0);
    hw->calib_threads = get_int(root, "calib_threads", path, "", 0);
    // Profiles written before node_cores existed keyed the attention curves by FLOPs
    // per call: planning with them would be wrong, not just less exact.
    if (!cJSON_GetObjectItemCaseSensitive(root, "node_cores"))
        die("hardware profile %s: missing key \"node_cores\" (a profile from an older femtotron: run "
            "`femtotron bench calibrate` again)", path);
    hw->node_cores = get_int(root, "node_cores", path, "", 0);
    hw->attn_head_dim = get_int(root, "attn_head_dim", path, "", 0);
    // Profiles from before the key measured fp32 products.
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(root, "precision");
    if (prec && !(cJSON_IsString(prec) && (!strcmp(prec->valuestring, "fp32") || !strcmp(prec->valuestring, "bf16"))))
        die("hardware profile %s: key \"precision\" must be \"fp32\" or \"bf16\"", path);
    snprintf(hw->precision, sizeof hw->precision, "%s", prec ? prec->valuestring : "fp32");
    // Profiles from before the key timed femtotron's attention kernels.
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(root, "attention");
    if (att && !(cJSON_IsString(att) && (!strcmp(att->valuestring, "femtotron") || !strcmp(att->valuestring, "cudnn"))))
        die("hardware profile %s: key \"attention\" must be \"femtotron\" or \"cudnn\"", path);
    snprintf(hw->attention, sizeof hw->attention, "%s", att ? att->valuestring : "femtotron");
    load_curve(&hw->gemm, root, "gemm", path);
    load_curve(&hw->attn_fwd, root, "attn_fwd", path);
    load_curve(&hw->attn_bwd, root, "attn_bwd", path);
    load_collectives(hw, root, path);
    cJSON_Delete(root);
}
