// bench/run_peak.c — the MFU peak of a training run: given, from a profile, or the
// node's cached sgemm peak shared among the node's ranks (bench/run_peak.h).
#define _POSIX_C_SOURCE 200809L  // gethostname, gmtime_r
#include "bench/run_peak.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/peak.h"
#include "dist/comm.h"
#include "ops/ops.h"
#include "plan/hardware.h"
#include "util.h"

#define PEAK_GEMM_N 1024      // square sgemm size of the per-core measurement
#define PEAK_SECONDS 1.0      // how long it repeats (best of the repeats counts)

// What makes a cached peak this machine's: the same host, CPU, core count and BLAS.
typedef struct {
    char host[256];
    char cpu[256];
    int cores;
    char blas[256];
} Machine;

static void machine_identity(Machine *m) {
    memset(m, 0, sizeof *m);
    if (gethostname(m->host, sizeof m->host - 1) != 0) snprintf(m->host, sizeof m->host, "unknown");
    snprintf(m->cpu, sizeof m->cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(m->cpu, sizeof m->cpu, "%s", v);
        m->cpu[strcspn(m->cpu, "\n")] = '\0';
        break;
    }
    if (f) fclose(f);
    m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    ops_blas_name(m->blas, sizeof m->blas);
}

static void cache_dir(char *dir, size_t size) {
    const char *env = getenv("FEMTOTRON_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && env[0]) snprintf(dir, size, "%s", env);
    else if (xdg && xdg[0]) snprintf(dir, size, "%s/femtotron", xdg);
    else snprintf(dir, size, "%s/.cache/femtotron", home && home[0] ? home : "/tmp");
}

// The cache file of machine m under dir: peak-HOST.json for the fp32 product,
// peak-HOST-bf16.json for the bf16 one (training.precision = bf16).
static void cache_path(const char *dir, const Machine *m, int bf16, char *path, size_t size) {
    char host[sizeof m->host];
    snprintf(host, sizeof host, "%s", m->host);
    for (char *c = host; *c; c++)  // a file name, whatever the host is called
        if (*c == '/' || *c == ' ') *c = '_';
    snprintf(path, size, "%s/peak-%s%s.json", dir, host, bf16 ? "-bf16" : "");
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

// One core's peak cached in path for machine m, or 0: why then says why nothing
// usable was read; *measured gets the date.
static double cache_read(const char *path, const Machine *m, char *why, size_t why_size, char *measured,
                         size_t msize) {
    why[0] = '\0';
    if (!path_is_file(path)) {
        snprintf(why, why_size, "no cached peak in %s", path);
        return 0.0;
    }
    char *text = read_text_file(path);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *flops = o ? cJSON_GetObjectItemCaseSensitive(o, "per_core_flops") : NULL;
    const cJSON *cores = o ? cJSON_GetObjectItemCaseSensitive(o, "cores") : NULL;
    const char *host = o ? json_str(o, "host") : NULL, *cpu = o ? json_str(o, "cpu") : NULL;
    const char *blas = o ? json_str(o, "blas") : NULL, *when = o ? json_str(o, "measured") : NULL;
    double peak = 0.0;
    if (!o || !cJSON_IsNumber(flops) || !cJSON_IsNumber(cores) || !host || !cpu || !blas ||
        !(flops->valuedouble > 0))
        snprintf(why, why_size, "%s is not a peak cache file (unreadable, or a key is missing)", path);
    else if (strcmp(host, m->host) || strcmp(cpu, m->cpu) || cores->valueint != m->cores || strcmp(blas, m->blas))
        snprintf(why, why_size, "%s was measured on another machine (%s, %s, %d cores)", path, host, cpu,
                 cores->valueint);
    else
        peak = flops->valuedouble;
    snprintf(measured, msize, "%s", when ? when : "an unknown date");
    cJSON_Delete(o);
    return peak;
}

// mkdir -p that reports instead of dying: the cache is a convenience.
static int make_dirs_quiet(const char *dir) {
    char p[CFG_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

// Write the cache atomically (a temporary file renamed over it); 0 on success.
static int cache_write(const char *dir, const char *path, const Machine *m, double per_core, const char *when) {
    if (make_dirs_quiet(dir) != 0) return -1;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "host", m->host);
    cJSON_AddStringToObject(o, "cpu", m->cpu);
    cJSON_AddNumberToObject(o, "cores", m->cores);
    cJSON_AddStringToObject(o, "blas", m->blas);
    cJSON_AddNumberToObject(o, "per_core_flops", per_core);
    cJSON_AddNumberToObject(o, "gemm_size", PEAK_GEMM_N);
    cJSON_AddStringToObject(o, "measured", when);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char tmp[CFG_PATH_MAX + 340];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (ok && rename(tmp, path) == 0) return 0;
    unlink(tmp);
    return -1;
}

// The node leader's part of case 3: one core's sgemm peak (bf16: its bf16
// product's), from the cache or measured now (with one thread, so the number does
// not depend on how the launcher bound this rank) and cached. `how` says which.
static double node_per_core(int threads, int bf16, char *how, size_t how_size) {
    char dir[CFG_PATH_MAX], path[CFG_PATH_MAX + 300], why[2 * CFG_PATH_MAX + 1200], when[64];
    Machine m;  // read once: /proc/cpuinfo and the BLAS build
    machine_identity(&m);
    cache_dir(dir, sizeof dir);
    cache_path(dir, &m, bf16, path, sizeof path);
    double per_core = cache_read(path, &m, why, sizeof why, when, sizeof when);
    if (per_core > 0) {
        snprintf(how, how_size, "cached in %s on %s; delete it to measure again", path, when);
        return per_core;
    }
    ops_set_threads(1);
    per_core = bench_gemm_peak(PEAK_GEMM_N, PEAK_SECONDS, bf16);
    ops_set_threads(threads);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    char was[sizeof why + 4] = "";  // why the cache was not used, unless there was none
    if (path_is_file(path)) snprintf(was, sizeof was, " (%s)", why);
    if (cache_write(dir, path, &m, per_core, when) == 0)
        snprintf(how, how_size, "measured now%s, cached in %s", was, path);
    else
        snprintf(how, how_size, "measured now; could not cache it in %s (%s), so the next run measures again",
                 path, strerror(errno));
    return per_core;
}

// The datasheet's dense peak of a GPU this rank runs on in the run's precision, by
// its name, or 0 for a GPU not in the table: bf16 (tensor cores) from the
// planner's built-in profiles (plan/hardware.c); fp32 from NVIDIA's datasheets
// (the CUDA cores' FP32 rate: fp32 runs multiply with CUBLAS_COMPUTE_32F, no TF32:
// 67 TFLOP/s on the H100 and H200 SXM, 19.5 on the A100 SXM). The PCIe and NVL
// parts of the H100 and H200 run at lower clocks and power than the SXM ones the
// table describes: not matched.
static double datasheet_peak(const char *device, Precision precision, char *which, size_t size) {
    static const struct {
        const char *name, *profile;
        double fp32;
    } KNOWN[] = {{"H100", "h100", 66.9e12}, {"H200", "h200", 66.9e12}, {"A100", "a100", 19.5e12}};
    if (strstr(device, "PCIe") || strstr(device, "NVL")) return 0.0;
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++) {
        Hardware hw;
        if (!strstr(device, KNOWN[i].name)) continue;
        if (precision == PRECISION_FP32) {
            snprintf(which, size, "dense fp32 peak (NVIDIA's datasheet)");
            return KNOWN[i].fp32;
        }
        if (hardware_builtin(&hw, KNOWN[i].profile)) {
            snprintf(which, size, "dense bf16 peak (the planner's %s profile)", KNOWN[i].profile);
            return hw.peak_flops;
        }
    }
    return 0.0;
}

// Case 4 (run_peak.h): a GPU's peak, shared by the ranks that run on one GPU.
static void gpu_peak(RunPeak *r, Precision precision) {
    char device[256], which[64] = "";
    const int gpus = ops_device(device, sizeof device), ranks_here = comm_local_size();
    double per_gpu = datasheet_peak(device, precision, which, sizeof which);
    char how[512];
    if (per_gpu > 0) {
        snprintf(how, sizeof how, "the %s datasheet's %s", device, which);
    } else {
        // Every rank measures its own GPU's product in the run's precision (no
        // cache: one product of 4096^3 takes milliseconds on a GPU).
        per_gpu = bench_gemm_peak(4096, 0.5, precision == PRECISION_BF16);
        snprintf(how, sizeof how, "measured on %s (a 4096-cube product of the run's precision; the table of "
                 "datasheet peaks knows H100, H200 and A100 SXM parts only)", device);
    }
    // Ranks sharing GPUs (more ranks than GPUs on the node) share their peaks.
    const double share = ranks_here > gpus ? (double)gpus / ranks_here : 1.0;
    r->per_rank = per_gpu * share;
    snprintf(r->source, sizeof r->source, "GPU peak %.1f TFLOP/s: %s; %d rank%s on %d GPU%s here", per_gpu / 1e12,
             how, ranks_here, ranks_here == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s");
}

RunPeak run_peak(const Config *cfg, int threads) {
    RunPeak r = {0};
    const int world = comm_world_size(), rank = comm_world_rank();
    if (cfg->training.peak_flops > 0) {
        r.per_rank = cfg->training.peak_flops;
        snprintf(r.source, sizeof r.source, "training.peak_flops");
    } else if (cfg->parallel.profile[0]) {
        Hardware hw;
        hardware_load(&hw, cfg->parallel.profile);
        r.per_rank = hw.peak_flops;
        if (hw.calib_ranks > 0)
            snprintf(r.source, sizeof r.source, "parallel.profile %s, measured by bench calibrate with "
                     "%d ranks x %d threads", cfg->parallel.profile, hw.calib_ranks, hw.calib_threads);
        else
            snprintf(r.source, sizeof r.source, "parallel.profile %s (datasheet)", cfg->parallel.profile);
    } else if (ops_device(NULL, 0) > 0) {
        gpu_peak(&r, cfg->training.precision);
    } else {
        // The leader measures or reads the cache while the node's other ranks wait
        // in a barrier that sleeps (dist/comm.c, comm_wait), then every rank reads
        // its leader's number from a world-sized table.
        const int leader = comm_node_leader(), ranks_here = comm_local_size();
        char how[4 * CFG_PATH_MAX + 3000] = "";
        double *table = xcalloc(sizeof(double) * (size_t)world, "peak table");  // (world) per-core peak by leader
        const int bf16 = cfg->training.precision == PRECISION_BF16;
        if (rank == leader) table[rank] = node_per_core(threads, bf16, how, sizeof how);
        group_barrier(GROUP_WORLD);
        group_allreduce_sum_f64(GROUP_WORLD, table, (size_t)world);
        const double per_core = table[leader];
        free(table);
        const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
        const int used = ranks_here * threads < cores ? ranks_here * threads : cores;
        r.per_rank = per_core * used / ranks_here;
        snprintf(r.source, sizeof r.source, "node %speak %.1f GFLOP/s = %.1f per core x %d cores, %s; "
                 "%d ranks x %d threads here use %d of them", bf16 ? "bf16 product " : "",
                 per_core * cores / 1e9, per_core / 1e9, cores, how, ranks_here, threads, used);
    }
    r.total = r.per_rank;
    group_allreduce_sum_f64(GROUP_WORLD, &r.total, 1);
    return r;
}
