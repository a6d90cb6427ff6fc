// tests/unit/test_hardware.c — the planner's hardware profiles (plan/hardware.h): the
// built-in datasheets, log-interpolated rate curves, the collective cost model
// (ring formula computed by hand, measured fits and their rescaling to other group
// sizes), the JSON round trip, and one check per fatal error of hardware_load (run
// in a fork()ed child, since die() ends the process) that stderr names the file
// and the offending key.
#define _GNU_SOURCE
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "run_child.h"
#include "plan/hardware.h"

static char tmpdir[256];

static void path_in(char *out, const char *name) { snprintf(out, 512, "%s/%s", tmpdir, name); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

// ------------------------------------------------------------- built-ins

static void test_builtins(void) {
    Hardware hw;
    int ok = hardware_builtin(&hw, "h100");
    CHECK(ok && strcmp(hw.name, "h100") == 0 && hw.peak_flops == 989e12 && hw.mem_bytes == 81559.0 * 1048576 &&
              hw.mem_bw == 3.35e12 && hw.intra_bw == 360e9 && hw.inter_bw == 45e9 &&
              hw.gpus_per_node == 8 && hw.bytes_per_value == 2 && hw.intra_lat == 5e-6 &&
              hw.inter_lat == 1e-5 && hw.n_coll == 0,
          "builtin h100: datasheet compute, nvidia-smi memory, links at 80%% (NVLink) and 90%% (IB) of line rate");
    CHECK(hw.gemm.n == 5 && hw.gemm.work[0] == 1e8 && hw.gemm.work[4] == 1e12 &&
              rel_diff(hw.gemm.rate[0], 0.10 * 989e12) < 1e-12 && rel_diff(hw.gemm.rate[4], 0.80 * 989e12) < 1e-12,
          "h100 GEMM curve: 10%% of peak at 1e8 FLOPs, 80%% at 1e12");
    CHECK(hw.attn_fwd.n == 4 && rel_diff(hw.attn_fwd.rate[3], 0.55 * 989e12) < 1e-12 && hw.attn_bwd.n == 4 &&
              rel_diff(hw.attn_bwd.rate[0], 0.06 * 989e12) < 1e-12,
          "h100 attention curves: forward 55%% at 1e11, backward 6%% at 1e8");
    ok = hardware_builtin(&hw, "h200");
    CHECK(ok && hw.peak_flops == 989e12 && hw.mem_bytes == 143771.0 * 1048576 && hw.mem_bw == 4.8e12 && hw.intra_bw == 360e9,
          "builtin h200: h100 compute and links, 143,771 MiB at 4.8 TB/s");
    ok = hardware_builtin(&hw, "a100");
    CHECK(ok && hw.peak_flops == 312e12 && hw.mem_bytes == 81920.0 * 1048576 && hw.mem_bw == 2.0e12 && hw.intra_bw == 240e9 &&
              hw.inter_bw == 22.5e9 && hw.gpus_per_node == 8 && rel_diff(hw.gemm.rate[2], 0.62 * 312e12) < 1e-12,
          "builtin a100: 312 TFLOP/s, NVLink3 240 of 300 GB/s, HDR 22.5 of 25 GB/s");
    CHECK(!hardware_builtin(&hw, "h300") && !hardware_builtin(&hw, "") && !hardware_builtin(&hw, "H100"),
          "unknown profile names return 0");
    CHECK(strcmp(hardware_coll_name(COLL_ALLREDUCE), "allreduce") == 0 &&
              strcmp(hardware_coll_name(COLL_REDUCE_SCATTER), "reduce_scatter") == 0 &&
              strcmp(hardware_coll_name(COLL_ALLGATHER), "allgather") == 0 && strcmp(hardware_coll_name(COLL_P2P), "p2p") == 0,
          "collective kinds have their JSON names");
}

// ---------------------------------------------------------------- curves

static void test_curves(void) {
    RateCurve c = {3, {1e8, 1e10, 1e12}, {10.0, 50.0, 70.0}};
    CHECK(curve_rate(&c, 1e8) == 10.0 && curve_rate(&c, 1e10) == 50.0 && curve_rate(&c, 1e12) == 70.0,
          "curve_rate is exact at the points");
    CHECK(rel_diff(curve_rate(&c, 1e9), 30.0) < 1e-12 && rel_diff(curve_rate(&c, 1e11), 60.0) < 1e-12,
          "curve_rate at log-midpoints is the mean of the neighbours (%g, %g)", curve_rate(&c, 1e9),
          curve_rate(&c, 1e11));
    CHECK(rel_diff(curve_rate(&c, pow(10, 8.5)), 20.0) < 1e-12,
          "curve_rate a quarter of the way in log(work) (%g)", curve_rate(&c, pow(10, 8.5)));
    CHECK(curve_rate(&c, 1e3) == 10.0 && curve_rate(&c, 0) == 10.0 && curve_rate(&c, 1e15) == 70.0,
          "curve_rate clamps to the end points outside the range");
    RateCurve one = {1, {5e9}, {42.0}}, none = {0, {0}, {0}};
    CHECK(curve_rate(&one, 1) == 42.0 && curve_rate(&one, 1e20) == 42.0 && curve_rate(&none, 1e9) == 0.0,
          "a one-point curve is constant, an empty one 0");
    Hardware hw;
    hardware_builtin(&hw, "h100");
    double mid = curve_rate(&hw.gemm, sqrt(1e9 * 1e10));
    CHECK(rel_diff(mid, 0.5 * (0.35 + 0.62) * 989e12) < 1e-12, "h100 GEMM rate at 3.16e9 FLOPs (%g)", mid);
}

// ----------------------------------------------------------- collectives

static void test_collectives(void) {
    Hardware hw;
    hardware_builtin(&hw, "h100");
    const double B = 1e9;
    double t = hardware_collective_s(&hw, COLL_ALLREDUCE, 8, 1, B);
    double want = 2 * 7 * 5e-6 + 2.0 * 7 / 8 * B / 360e9;
    CHECK(rel_diff(t, want) < 1e-12, "h100 all-reduce of 1 GB on 8 ranks (NVLink): %g s = %g", t, want);
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 16, 0, B);
    want = 2 * 15 * 1e-5 + 2.0 * 15 / 16 * B / 45e9;
    CHECK(rel_diff(t, want) < 1e-12, "h100 all-reduce of 1 GB on 16 ranks (InfiniBand): %g s = %g", t, want);
    t = hardware_collective_s(&hw, COLL_REDUCE_SCATTER, 4, 1, B);
    want = 3 * 5e-6 + 3.0 / 4 * B / 360e9;
    CHECK(rel_diff(t, want) < 1e-12, "h100 reduce-scatter on 4 ranks: %g s = %g", t, want);
    t = hardware_collective_s(&hw, COLL_ALLGATHER, 32, 0, 1e6);
    want = 31 * 1e-5 + 31.0 / 32 * 1e6 / 45e9;
    CHECK(rel_diff(t, want) < 1e-12, "h100 all-gather of 1 MB on 32 ranks: %g s = %g", t, want);
    t = hardware_collective_s(&hw, COLL_P2P, 2, 0, 1e8);
    want = 1e-5 + 1e8 / 45e9;
    CHECK(rel_diff(t, want) < 1e-12, "h100 p2p of 100 MB across nodes: %g s = %g", t, want);
    hardware_builtin(&hw, "a100");
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 2, 1, 4e6);
    want = 2 * 5e-6 + 1.0 * 4e6 / 240e9;
    CHECK(rel_diff(t, want) < 1e-12, "a100 all-reduce of 4 MB on 2 ranks: %g s = %g", t, want);
    CHECK(hardware_collective_s(&hw, COLL_ALLREDUCE, 1, 1, B) == 0 && hardware_collective_s(&hw, COLL_P2P, 1, 0, B) == 0 &&
              hardware_collective_s(&hw, COLL_ALLGATHER, 0, 0, B) == 0,
          "collectives on 1 rank take 0 s");

    // Measured fits.
    hardware_builtin(&hw, "h100");
    hw.coll[0] = (CollFit){COLL_ALLREDUCE, 4, 1, 2e-5, 1e-9};
    hw.coll[1] = (CollFit){COLL_P2P, 2, 1, 3e-6, 2e-11};
    hw.coll[2] = (CollFit){COLL_ALLGATHER, 2, 1, 1e-5, 4e-10};
    hw.coll[3] = (CollFit){COLL_ALLGATHER, 8, 1, 7e-5, 2e-9};
    hw.n_coll = 4;
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 4, 1, 1e6);
    CHECK(rel_diff(t, 2e-5 + 1e6 * 1e-9) < 1e-12, "a measured fit is used for its (kind, ranks, intra): %g", t);
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 4, 0, 1e6);
    want = 2 * 3 * 1e-5 + 2.0 * 3 / 4 * 1e6 / 45e9;
    CHECK(rel_diff(t, want) < 1e-12, "an intra-node fit is not used across nodes (ring model): %g = %g", t, want);
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 8, 1, 1e6);
    // alpha scales with (n-1), beta with (n-1)/n from the 4-rank fit.
    want = 2e-5 * 7 / 3 + 1e-9 * (7.0 / 8) / (3.0 / 4) * 1e6;
    CHECK(rel_diff(t, want) < 1e-12, "a fit on 4 ranks extrapolated to 8 with the ring factors: %g = %g", t, want);
    t = hardware_collective_s(&hw, COLL_ALLREDUCE, 2, 1, 1e6);
    want = 2e-5 * 1 / 3 + 1e-9 * (1.0 / 2) / (3.0 / 4) * 1e6;
    CHECK(rel_diff(t, want) < 1e-12, "a fit on 4 ranks extrapolated down to 2: %g = %g", t, want);
    t = hardware_collective_s(&hw, COLL_ALLGATHER, 4, 1, 1e6);
    // Per-step latency 1e-5/1 and 7e-5/7 = 1e-5; per-byte 4e-10/(1/2) = 8e-10 and
    // 2e-9/(7/8) = 2.2857e-9, interpolated at n = 4 (one third of the way 2 -> 8).
    double lat = 1e-5, pb = 8e-10 + (4.0 - 2) / (8 - 2) * (2e-9 / (7.0 / 8) - 8e-10);
    want = 3 * lat + 3.0 / 4 * pb * 1e6;
    CHECK(rel_diff(t, want) < 1e-12, "fits on 2 and 8 ranks interpolated at 4: %g = %g", t, want);
    t = hardware_collective_s(&hw, COLL_P2P, 2, 1, 1e7);
    double t8 = hardware_collective_s(&hw, COLL_P2P, 8, 1, 1e7);
    CHECK(rel_diff(t, 3e-6 + 1e7 * 2e-11) < 1e-12 && t8 == t, "the p2p fit is used whatever the group size: %g", t);
    t = hardware_collective_s(&hw, COLL_REDUCE_SCATTER, 4, 1, 1e6);
    want = 3 * 5e-6 + 3.0 / 4 * 1e6 / 360e9;
    CHECK(rel_diff(t, want) < 1e-12, "a kind without fits falls back to the ring model: %g = %g", t, want);
    CHECK(hardware_collective_s(&hw, COLL_ALLREDUCE, 1, 1, 1e6) == 0, "1 rank is 0 s even with fits");
}

// ------------------------------------------------------------ round trip

static int curves_equal(const RateCurve *a, const RateCurve *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->work[i] != b->work[i] || a->rate[i] != b->rate[i]) return 0;
    return 1;
}

static void test_round_trip(void) {
    Hardware a, b;
    hardware_builtin(&a, "a100");
    snprintf(a.name, sizeof a.name, "this");
    a.peak_flops = 1.0 / 3.0 * 1e11;
    a.mem_bytes = 12345678901.0;
    a.mem_bw = 2.0 / 7.0 * 1e10;
    a.bytes_per_value = 4;
    a.gpus_per_node = 3;
    a.intra_bw = 3.3e9 + 0.1;
    a.inter_bw = 1.1e9 / 3;
    a.intra_lat = 1.234567890123e-6;
    a.inter_lat = 0;
    a.calib_ranks = 6;
    a.calib_threads = 5;
    a.node_cores = 7;
    a.attn_head_dim = 96;
    a.gemm.n = HW_CURVE_MAX;
    for (int i = 0; i < HW_CURVE_MAX; i++) {
        a.gemm.work[i] = 1e6 * pow(1.5, i);
        a.gemm.rate[i] = 1e9 * (1 + sin(i));
    }
    a.attn_bwd.n = 1;
    for (int k = 0; k < COLL_KINDS; k++)
        for (int r = 0; r < 3; r++)
            a.coll[a.n_coll++] = (CollFit){(CollKind)k, 2 << r, r != 1, k * 1e-6 / 3 + r * 1e-7, (k + 1) * 1e-10 / 7};
    a.coll[1].alpha = 0;
    char path[512];
    path_in(path, "round_trip.json");
    hardware_save(&a, path);
    hardware_load(&b, path);
    CHECK(strcmp(a.name, b.name) == 0, "round trip: name \"%s\"", b.name);
    CHECK(a.peak_flops == b.peak_flops && a.mem_bytes == b.mem_bytes && a.mem_bw == b.mem_bw,
          "round trip: peak, memory and bandwidth bit for bit");
    CHECK(a.bytes_per_value == b.bytes_per_value && a.gpus_per_node == b.gpus_per_node &&
              a.calib_ranks == b.calib_ranks && a.calib_threads == b.calib_threads &&
              a.node_cores == b.node_cores && a.attn_head_dim == b.attn_head_dim,
          "round trip: bytes_per_value, gpus_per_node, calib_ranks, calib_threads, node_cores, attn_head_dim");
    CHECK(a.intra_bw == b.intra_bw && a.inter_bw == b.inter_bw && a.intra_lat == b.intra_lat &&
              a.inter_lat == b.inter_lat,
          "round trip: link bandwidths and latencies");
    CHECK(curves_equal(&a.gemm, &b.gemm) && curves_equal(&a.attn_fwd, &b.attn_fwd) &&
              curves_equal(&a.attn_bwd, &b.attn_bwd),
          "round trip: the three curves (%d, %d, %d points)", b.gemm.n, b.attn_fwd.n, b.attn_bwd.n);
    int same = a.n_coll == b.n_coll;
    for (int i = 0; same && i < a.n_coll; i++)
        same = a.coll[i].kind == b.coll[i].kind && a.coll[i].ranks == b.coll[i].ranks &&
               a.coll[i].intra_node == b.coll[i].intra_node && a.coll[i].alpha == b.coll[i].alpha &&
               a.coll[i].beta == b.coll[i].beta;
    CHECK(same, "round trip: %d collective fits", b.n_coll);
    Hardware h;
    hardware_builtin(&h, "h200");
    path_in(path, "h200.json");
    hardware_save(&h, path);
    hardware_load(&b, path);
    CHECK(b.mem_bytes == 143771.0 * 1048576 && b.n_coll == 0 && curves_equal(&h.gemm, &b.gemm) && b.calib_ranks == 0,
          "round trip of a built-in (no collective fits)");
}

// -------------------------------------------------------------- failures

static void child_load(void *p) {
    Hardware hw;
    hardware_load(&hw, (const char *)p);
}

static void expect_load_death(const char *what, const char *path, const char *needle) {
    char err[4096];
    int rc = run_child(child_load, (void *)path, err, sizeof err);
    int ok = rc != 0 && strstr(err, needle) && strstr(err, path);
    CHECK(ok, "%s: load exits %d with \"%s\" naming the file (stderr: %.200s)", what, rc, needle, err);
}

// A saved h100 profile (with one collective fit) with one edit applied through
// cJSON, written to `path`.
typedef void (*Edit)(cJSON *root);

static void write_edited(const char *path, Edit edit) {
    Hardware hw;
    hardware_builtin(&hw, "h100");
    hw.coll[0] = (CollFit){COLL_ALLREDUCE, 2, 1, 1e-5, 1e-10};
    hw.n_coll = 1;
    hardware_save(&hw, path);
    FILE *f = fopen(path, "r");
    char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    edit(root);
    char *out = cJSON_Print(root);
    write_text(path, out);
    cJSON_free(out);
    cJSON_Delete(root);
}

static void edit_no_gemm(cJSON *r) { cJSON_DeleteItemFromObject(r, "gemm"); }
static void edit_negative_rate(cJSON *r) {
    cJSON *rate = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "gemm"), "rate");
    cJSON_ReplaceItemInArray(rate, 1, cJSON_CreateNumber(-5.0));
}
static void edit_unsorted(cJSON *r) {
    cJSON *work = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "attn_fwd"), "work");
    cJSON_ReplaceItemInArray(work, 2, cJSON_CreateNumber(1e8));
}
static void edit_too_many(cJSON *r) {
    cJSON *c = cJSON_GetObjectItem(r, "attn_bwd");
    cJSON *w = cJSON_CreateArray(), *rt = cJSON_CreateArray();
    for (int i = 0; i < HW_CURVE_MAX + 1; i++) {
        cJSON_AddItemToArray(w, cJSON_CreateNumber(1e6 * (i + 1)));
        cJSON_AddItemToArray(rt, cJSON_CreateNumber(1e9));
    }
    cJSON_ReplaceItemInObject(c, "work", w);
    cJSON_ReplaceItemInObject(c, "rate", rt);
}
static void edit_length_mismatch(cJSON *r) {
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "gemm"), "rate"), 0);
}
static void edit_string_peak(cJSON *r) { cJSON_ReplaceItemInObject(r, "peak_flops", cJSON_CreateString("fast")); }
static void edit_zero_bw(cJSON *r) { cJSON_ReplaceItemInObject(r, "inter_bw", cJSON_CreateNumber(0)); }
static void edit_frac_gpus(cJSON *r) { cJSON_ReplaceItemInObject(r, "gpus_per_node", cJSON_CreateNumber(2.5)); }
static void edit_no_collectives(cJSON *r) { cJSON_DeleteItemFromObject(r, "collectives"); }
// A profile from before node_cores existed keyed attention by FLOPs per call.
static void edit_no_node_cores(cJSON *r) { cJSON_DeleteItemFromObject(r, "node_cores"); }
static void edit_bad_kind(cJSON *r) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "collectives"), 0);
    cJSON_ReplaceItemInObject(c, "kind", cJSON_CreateString("broadcast"));
}
static void edit_neg_beta(cJSON *r) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "collectives"), 0);
    cJSON_ReplaceItemInObject(c, "beta_s_per_byte", cJSON_CreateNumber(-1e-9));
}
static void edit_intra_number(cJSON *r) {
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "collectives"), 0);
    cJSON_ReplaceItemInObject(c, "intra_node", cJSON_CreateNumber(1));
}

static void test_load_errors(void) {
    char path[512];
    path_in(path, "missing.json");
    expect_load_death("missing file", path, "cannot open");
    path_in(path, "bad.json");
    write_text(path, "{\"name\": \"x\", \"peak_flops\": 1e12,\n \"mem_bytes\": }\n");
    expect_load_death("bad JSON", path, "invalid JSON near line 2");
    path_in(path, "array.json");
    write_text(path, "[1, 2]");
    expect_load_death("top level not an object", path, "JSON object");
    struct {
        const char *what, *file;
        Edit edit;
        const char *needle;
    } cases[] = {
        {"missing \"gemm\"", "no_gemm.json", edit_no_gemm, "missing key \"gemm\""},
        {"negative rate", "neg_rate.json", edit_negative_rate, "\"gemm.rate[1]\" must be positive"},
        {"unsorted work", "unsorted.json", edit_unsorted, "\"attn_fwd.work\" must be strictly ascending"},
        {"too many points", "too_many.json", edit_too_many, "\"attn_bwd.work\" has 33 points (at most 32)"},
        {"work and rate lengths differ", "mismatch.json", edit_length_mismatch, "\"gemm.rate\" has 4 points"},
        {"string peak_flops", "str_peak.json", edit_string_peak, "\"peak_flops\" must be a number"},
        {"zero inter_bw", "zero_bw.json", edit_zero_bw, "\"inter_bw\" must be positive"},
        {"fractional gpus_per_node", "frac.json", edit_frac_gpus, "\"gpus_per_node\" must be an integer"},
        {"missing \"collectives\"", "no_coll.json", edit_no_collectives, "missing key \"collectives\""},
        {"missing \"node_cores\"", "no_cores.json", edit_no_node_cores, "missing key \"node_cores\""},
        {"unknown collective kind", "kind.json", edit_bad_kind, "\"collectives[0].kind\" must be one of"},
        {"negative beta", "beta.json", edit_neg_beta, "\"collectives[0].beta_s_per_byte\" must be >= 0"},
        {"intra_node a number", "intra.json", edit_intra_number, "\"collectives[0].intra_node\" must be true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        path_in(path, cases[i].file);
        write_edited(path, cases[i].edit);
        expect_load_death(cases[i].what, path, cases[i].needle);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/femtotron_hw_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_builtins();
    test_curves();
    test_collectives();
    test_round_trip();
    test_load_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_summary();
}
