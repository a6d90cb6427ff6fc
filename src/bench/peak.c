// bench/peak.c — measure the GEMM peak: the best achievable matmul rate of the
// machine with this rank's threads. MFU on CPU is reported against it, because a
// datasheet peak (FMA units x clock) is not reachable by any real kernel on a
// shared virtual machine and would say more about the VM than about femtotron.
#include "bench/peak.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/calibrate.h"
#include "bench/links.h"
#include "ops/ops.h"
#include "util.h"

double bench_gemm_peak(int n, double seconds) {
    size_t elems = (size_t)n * n;
    float *a = xmalloc(elems * sizeof(float), "GEMM peak A");  // (n, n)
    float *b = xmalloc(elems * sizeof(float), "GEMM peak B");  // (n, n)
    float *c = xmalloc(elems * sizeof(float), "GEMM peak C");  // (n, n)
    for (size_t i = 0; i < elems; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    const double flops = 2.0 * n * (double)n * n;
    double best = 0.0, t_end = now_seconds() + seconds;
    int reps = 0;
    // The first call warms caches and BLAS thread pools; it is timed too but a
    // later one nearly always wins.
    while (reps < 2 || now_seconds() < t_end) {
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_seconds() - t0;
        if (flops / dt > best) best = flops / dt;
        reps++;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

static void bench_usage(void) {
    printf("usage: femtotron bench peak [--threads T] [--size N] [--seconds S]\n"
           "  Measures the fp32 GEMM peak (square sgemm, best of repeats) with T threads\n"
           "  (default: all cores) and prints it in GFLOP/s. MFU on CPU is reported\n"
           "  against this number unless training.peak_flops is set.\n\n"
           "usage: [mpirun -np N] femtotron bench calibrate [--output FILE] [--threads T] [--quick]\n"
           "  Measures the planner's hardware profile on every rank at once (GEMM and\n"
           "  attention rate curves, memory bandwidth, peak, alpha-beta fits of all-reduce,\n"
           "  reduce-scatter, all-gather and p2p) and writes it as JSON (default\n"
           "  profile.json); threads per rank default to the cores bound to the rank, else\n"
           "  the node's cores divided among its ranks. --quick: a few seconds.\n\n"
           "usage: mpirun -np NODES --map-by ppr:1:node femtotron bench links [--output FILE] [--bytes B] [--reps R]\n"
           "  Measures bandwidth and latency between every pair of ranks (one per node) in\n"
           "  n-1 rounds of disjoint pairs, and writes the matrix into FILE's \"links\" object\n"
           "  (default profile.json, other keys kept) for `femtotron plan --links FILE`.\n"
           "  B: message bytes (default 8 MiB), R: repeats per direction (default 3).\n");
}

int bench_main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        bench_usage();
        return argc < 2 ? 1 : 0;
    }
    if (strcmp(argv[1], "calibrate") == 0) return bench_calibrate_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "links") == 0) return bench_links_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "peak") != 0) die("bench: unknown benchmark \"%s\" (try: peak, calibrate, links)", argv[1]);
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n = 2048;
    double seconds = 2.0;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc) die("bench peak: %s needs a value", argv[i]);
        if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0) n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[++i]);
        else die("bench peak: unknown option \"%s\"", argv[i]);
    }
    if (threads < 1 || n < 16 || seconds <= 0) die("bench peak: threads, size and seconds must be positive");
    ops_set_threads(threads);
    double peak = bench_gemm_peak(n, seconds);
    printf("gemm_peak_gflops %.1f threads %d size %d\n", peak / 1e9, threads, n);
    return 0;
}
