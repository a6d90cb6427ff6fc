// bench/calibrate.c — `femtotron bench calibrate`: measure this machine's hardware
// profile (plan/hardware.h) with the kernels and collectives femtotron really calls,
// and write it as JSON for the planner.
//
// Every rank measures at the same time, the same sequence of calls with the same
// repeat counts: so a run with more ranks than cores measures the rates a rank
// really gets when all ranks compute at once, as they do in training. Per kernel,
// after a warm-up, 3 batches of calls, each timed from a world barrier to a world
// barrier (calib_time_call: the batch ends with the slowest rank's), the best
// batch kept; rank 0 aggregates:
//   - compute rates and memory bandwidth: the MEDIAN over ranks (robust to one
//     rank that was unlucky with the scheduler; with 2 ranks it is the mean);
//   - collective times: each rank's median over repeats, then the MAXIMUM over
//     ranks (a collective is done when its slowest member is).
//
// What it measures (FLOPs counted as in plan/hardware.h; bench/calibrate_kernels.c
// and bench/calibrate_collectives.c):
//   gemm      matmul_forward (2·M·K·N) and matmul_backward (input and weight
//             gradients, 4·M·K·N) on transformer-layer shapes, operands rotated
//             through a pool larger than the rank's share of the last-level cache
//             (in a step they come from memory), folded into one curve of rate
//             against FLOPs per call (equal FLOPs averaged);
//   attn_*    attention_forward / attention_backward (causal, one sequence of
//             S = 128 .. 2048 tokens, 8 heads of --head-dim), keyed by the FLOPs of
//             one (sequence, head): forward 4·hd·S(S+1)/2, backward twice that;
//             with --attention cudnn attention_forward_bf16 / attention_backward_bf16
//             on bf16 q|k|v and output, the ops a cudnn run calls;
//   mem_bw    one layer's elementwise kernels (rmsnorm, residual, RoPE, SwiGLU),
//             priced as the step model counts them;
//   peak      the square sgemm peak (bench_gemm_peak), raised to the best curve
//             point if one beat it;
//   cores     the node's cores (node_cores): with more ranks x threads than cores
//             the ranks share them, and the planner lets a rank that computes
//             while others wait run faster (plan/step_time.c);
//   collectives  all-reduce, reduce-scatter, all-gather on groups of 2, 4, ...
//             consecutive ranks (powers of two dividing the world, and the world),
//             and p2p (half a ping-pong round trip between ranks 2i and 2i+1), on
//             4 KiB .. 16 MiB; t = alpha + beta·bytes fitted by least squares
//             through the smallest message's time (fit_alpha_beta), alpha, beta >= 0.
// --quick drops the largest shapes (4096 tokens, 2048 x 2048; S = 1024 and 2048; messages
// above 1 MiB), the cache-sized GEMM pool and shortens the batches: a few seconds
// on 2 ranks of this 2-core machine, against about 20 s for the full run.
// With one rank there is nothing to communicate with: no collective entries, and
// the link classes get placeholders (bandwidth mem_bw/2, latency 1 us) marked as
// unmeasured in the summary. intra_bw/intra_lat come from the largest all-reduce
// fit through the ring formula; inter_* are copies of them (not measured: one
// calibration run does not know which of its groups cross nodes). All fits are
// labelled intra_node when every rank of the world shares one node.
#define _DEFAULT_SOURCE  // sysconf(_SC_PHYS_PAGES)
#include "bench/calibrate.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/calibrate_util.h"
#include "bench/peak.h"
#include "dist/comm.h"
#include "ops/ops.h"
#include "plan/hardware.h"
#include "util.h"

static void calibrate_usage(void) {
    printf("usage: [mpirun -np N] femtotron bench calibrate [--output FILE] [--threads T]\n"
           "                                                [--head-dim HD] [--precision P] [--attention K]\n"
           "                                                [--quick]\n"
           "  Measures the hardware profile the planner uses, on every rank at once: GEMM and\n"
           "  attention rate curves, memory bandwidth, GEMM peak, and alpha-beta fits of\n"
           "  all-reduce, reduce-scatter, all-gather and p2p on groups of 2, 4, ... ranks.\n"
           "  --output FILE  the JSON profile (default profile.json)\n"
           "  --threads T    threads per rank (default: the cores bound to the rank, else\n"
           "                 the node's cores divided among its ranks)\n"
           "  --head-dim HD  head dim of the attention curves (default 64; use the model's)\n"
           "  --precision P  fp32 or bf16 matrix products (training.precision; default bf16\n"
           "                 on the CUDA build, fp32, the only one, on the CPU build)\n"
           "  --attention K  femtotron or cudnn: the attention kernels the attention curves\n"
           "                 time (training.attention; cudnn needs the CUDA build and bf16)\n"
           "  --quick        smaller shapes and messages (a few seconds)\n");
}


// ------------------------------------------------------------------ main

static void check_writable(const char *path) {
    if (access(path, F_OK) == 0) {
        if (access(path, W_OK) != 0) die_errno("bench calibrate: cannot write %s", path);
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char *d = dirname(dir);
    if (access(d, W_OK) != 0) die_errno("bench calibrate: cannot write %s (directory %s)", path, d);
}

static void print_curve(const char *name, const char *per, const RateCurve *c) {
    double lo = c->rate[0], hi = c->rate[0];
    for (int i = 1; i < c->n; i++) {
        if (c->rate[i] < lo) lo = c->rate[i];
        if (c->rate[i] > hi) hi = c->rate[i];
    }
    printf("%-9s %2d points, %.3g .. %.3g FLOPs/%s: %.1f .. %.1f GFLOP/s (%.1f at the largest)\n", name,
           c->n, c->work[0], c->work[c->n - 1], per, lo / 1e9, hi / 1e9, c->rate[c->n - 1] / 1e9);
}

static void print_summary(const Hardware *hw, const char *path, double seconds) {
    printf("calibrated %d rank%s x %d thread%s (%d on this node) in %.1f s, %s matrix products, %s attention\n",
           hw->calib_ranks, hw->calib_ranks == 1 ? "" : "s", hw->calib_threads, hw->calib_threads == 1 ? "" : "s",
           hw->gpus_per_node, seconds, hw->precision, hw->attention[0] ? hw->attention : "femtotron");
    char device[256];
    if (ops_device(device, sizeof device) > 0) printf("device    %s\n", device);
    if (hw->node_cores > 0)
        printf("cores     %d on the node, %d rank%s x %d thread%s on them\n", hw->node_cores, hw->gpus_per_node,
               hw->gpus_per_node == 1 ? "" : "s", hw->calib_threads, hw->calib_threads == 1 ? "" : "s");
    printf("peak      %.1f GFLOP/s per rank\n", hw->peak_flops / 1e9);
    print_curve("gemm", "call", &hw->gemm);
    print_curve("attn_fwd", "(seq,head)", &hw->attn_fwd);
    print_curve("attn_bwd", "(seq,head)", &hw->attn_bwd);
    printf("mem_bw    %.2f GB/s per rank | memory %.2f GB per rank\n", hw->mem_bw / 1e9, hw->mem_bytes / 1e9);
    for (int i = 0; i < hw->n_coll; i++) {
        const CollFit *f = &hw->coll[i];
        printf("%-15s %3d ranks %s: alpha %8.2f us  beta %.4f ns/B (%.2f GB/s)\n", hardware_coll_name(f->kind),
               f->ranks, f->intra_node ? "intra" : "inter", f->alpha * 1e6, f->beta * 1e9,
               f->beta > 0 ? 1e-9 / f->beta : INFINITY);
    }
    if (hw->n_coll == 0)
        printf("links     not measured (1 rank): placeholders %.2f GB/s, %.1f us\n", hw->intra_bw / 1e9,
               hw->intra_lat * 1e6);
    else
        printf("links     ring fallback %.2f GB/s, %.2f us per step (inter_* = intra_*, not measured)\n",
               hw->intra_bw / 1e9, hw->intra_lat * 1e6);
    printf("wrote %s\n", path);
}

static int parse_int(const char *s, const char *opt) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 1 || v > 4096)
        die("bench calibrate: %s needs a positive integer (got \"%s\")", opt, s);
    return (int)v;
}

int bench_calibrate_main(int argc, char **argv) {
    const char *output = "profile.json";
    int threads = 0;
    CalibOpts o = {0, 0.06, 64, ops_device(NULL, 0) > 0, 0, 0};
    // bf16 by default where a GPU is (the CUDA build's training default); the CPU
    // measures fp32 unless asked (its bf16 products, oneMKL's, are asked for by name)
    const char *precision = ops_has_bf16() && o.gpu ? "bf16" : "fp32", *attention = "femtotron";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (comm_world_rank() == 0) calibrate_usage();
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            o.quick = 1;
        } else if (strcmp(argv[i], "--output") == 0 || strcmp(argv[i], "--threads") == 0 ||
                   strcmp(argv[i], "--head-dim") == 0 || strcmp(argv[i], "--precision") == 0 ||
                   strcmp(argv[i], "--attention") == 0) {
            if (i + 1 >= argc) die("bench calibrate: %s needs a value", argv[i]);
            if (strcmp(argv[i], "--output") == 0) output = argv[i + 1];
            else if (strcmp(argv[i], "--precision") == 0) precision = argv[i + 1];
            else if (strcmp(argv[i], "--attention") == 0) attention = argv[i + 1];
            else if (strcmp(argv[i], "--threads") == 0) threads = parse_int(argv[i + 1], argv[i]);
            else o.head_dim = parse_int(argv[i + 1], argv[i]);
            i++;
        } else {
            die("bench calibrate: unknown option \"%s\" (options: --output FILE, --threads T, --head-dim HD, "
                "--precision P, --attention K, --quick)", argv[i]);
        }
    }
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        die("bench calibrate: --precision must be fp32 or bf16 (got \"%s\")", precision);
    if (!strcmp(precision, "bf16") && !ops_has_bf16())
        die("bench calibrate: --precision bf16 needs bf16 products, which this build has not: run it with "
            "./femtotron-cuda (make cuda) on a GPU, or the oneMKL build (make BLAS=mkl build-mkl/femtotron) on a "
            "CPU, or measure fp32");
    if (strcmp(attention, "femtotron") && strcmp(attention, "cudnn"))
        die("bench calibrate: --attention must be femtotron or cudnn (got \"%s\")", attention);
    if (!strcmp(attention, "cudnn") && strcmp(precision, "bf16"))
        die("bench calibrate: --attention cudnn needs --precision bf16 (cuDNN's fused attention takes bf16)");
    ops_set_matmul_bf16(!strcmp(precision, "bf16"));  // products and attention's, as in training
    ops_set_attention_cudnn(!strcmp(attention, "cudnn"));  // fatal on the CPU build, naming it
    o.bf16 = !strcmp(precision, "bf16");
    o.cudnn = !strcmp(attention, "cudnn");
    if (o.quick) o.target_s = 0.03;
    if (comm_world_rank() == 0) check_writable(output);
    double t0 = now_seconds();
    int ws = comm_world_size(), local = comm_local_size();
    if (threads == 0) threads = comm_default_threads();  // the rule `femtotron train` uses
    ops_set_threads(threads);
    // Ranks sharing cores: longer batches, so that each spans many scheduler time
    // slices and every rank gets its fair share within it (up to 4x longer).
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double over = cores > 0 ? (double)local * threads / (double)cores : 1.0;
    if (over > 1.0) o.target_s *= over < 4.0 ? over : 4.0;

    Hardware hw;
    memset(&hw, 0, sizeof hw);
    snprintf(hw.name, sizeof hw.name, "this");
    hw.bytes_per_value = 4;  // femtotron trains in fp32
    hw.gpus_per_node = local;
    hw.calib_ranks = ws;
    hw.calib_threads = threads;
    hw.node_cores = o.gpu ? 0 : (int)cores;  // a GPU rank's speed does not depend on the host's cores
    snprintf(hw.precision, sizeof hw.precision, "%s", precision);
    snprintf(hw.attention, sizeof hw.attention, "%s", attention);
    hw.attn_head_dim = o.head_dim;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    hw.mem_bytes = (double)pages * (double)page / local;
    if (o.gpu) hw.mem_bytes = (double)ops_device_memory();  // per rank: its GPU's (ranks sharing one: less)

    group_barrier(GROUP_WORLD);
    double peak = bench_gemm_peak(o.quick ? 1024 : o.gpu ? 8192 : 2048, o.quick ? 0.3 : 1.0, o.bf16);
    calib_world_median(&peak, &hw.peak_flops, 1);
    calib_measure_gemm(&hw.gemm, &o);
    for (int i = 0; i < hw.gemm.n; i++)
        if (hw.gemm.rate[i] > hw.peak_flops) hw.peak_flops = hw.gemm.rate[i];
    calib_measure_attention(&hw.attn_fwd, &hw.attn_bwd, &o);
    hw.mem_bw = calib_measure_mem_bw(&o);
    if (ws > 1) {
        calib_measure_collectives(&hw, &o);
    } else {  // placeholders (see the top of the file)
        hw.intra_bw = hw.inter_bw = hw.mem_bw / 2;
        hw.intra_lat = hw.inter_lat = 1e-6;
    }
    if (comm_world_rank() == 0) {
        hardware_save(&hw, output);
        print_summary(&hw, output, now_seconds() - t0);
        fflush(stdout);
    }
    group_barrier(GROUP_WORLD);
    return 0;
}
