// bench/peak.c — measure the GEMM peak: the best achievable matmul rate of the
// machine with this rank's threads. MFU on CPU is reported against it, because a
// datasheet peak (FMA units x clock) is not reachable by any real kernel on a
// shared virtual machine and would say more about the VM than about femtotron.
#include "bench/peak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/calibrate.h"
#include "bench/links.h"
#include "ops/ops.h"
#include "util.h"

double bench_gemm_peak(int n, double seconds, int bf16) {
    size_t elems = (size_t)n * n;
    // Buffers the backend's products can read (device memory on a GPU).
    float *a = buf_alloc(MEM_ACTIVATIONS, elems * sizeof(float), "GEMM peak A");  // (n, n)
    float *b = buf_alloc(MEM_ACTIVATIONS, elems * sizeof(float), "GEMM peak B");  // (n, n)
    float *c = buf_alloc(MEM_ACTIVATIONS, elems * sizeof(float), "GEMM peak C");  // (n, n)
    // bf16: a as bf16 values, b's kept copy (both n x n bf16)
    uint16_t *a16 = bf16 ? buf_alloc(MEM_ACTIVATIONS, elems * sizeof(uint16_t), "GEMM peak A, bf16") : NULL;
    void *b16 = bf16 ? buf_alloc(MEM_ACTIVATIONS, elems * sizeof(uint16_t), "GEMM peak B's bf16 copy") : NULL;
    for (size_t i = 0; i < elems; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    if (bf16) {
        round_to_bf16(a16, a, elems);
        ops_keep_bf16_weights(b, elems, b16);
        ops_bf16_weights_changed();
    }
    const double flops = 2.0 * n * (double)n * n;
    double best = 0.0, t_end = now_seconds() + seconds;
    int reps = 0, batch = 1;
    // The first call warms caches and BLAS thread pools (and rounds b's copy); it
    // is timed too but a later one nearly always wins. c = a b^T, the call
    // femtotron's linear layers make (on the CPU sgemm(RowMajor, N, T), its rows cut
    // among the threads as ops/matmul_cpu.c cuts the step's). A
    // sample is `batch` calls up to the wait for the device (ops_sync): on a GPU one
    // call of a small n takes less time than the launch and the wait, so samples
    // grow to ~10 ms.
    while (reps < 2 || now_seconds() < t_end) {
        double t0 = now_seconds();
        for (int k = 0; k < batch; k++) {
            if (bf16) matmul_forward_from_bf16(c, a16, c, b, n, n, n);
            else matmul_forward(c, a, b, n, n, n);
        }
        ops_sync();
        double dt = (now_seconds() - t0) / batch;
        if (flops / dt > best) best = flops / dt;
        if (batch < 100 && dt * batch < 0.01) batch = dt > 0 ? (int)(0.01 / dt) + 1 : 100;
        if (batch > 100) batch = 100;
        reps++;
    }
    if (bf16) {
        ops_keep_bf16_weights(NULL, 0, NULL);
        buf_free(a16);
        buf_free(b16);
    }
    buf_free(a);
    buf_free(b);
    buf_free(c);
    return best;
}

static void bench_usage(void) {
    printf("usage: femtotron bench peak [--threads T] [--size N] [--seconds S] [--precision fp32|bf16]\n"
           "  Measures the GEMM peak (square sgemm, best of repeats) with T threads\n"
           "  (default: all cores) and prints it in GFLOP/s. MFU on CPU is reported\n"
           "  against this number unless training.peak_flops is set. On the CUDA build:\n"
           "  the GPU's fp32 cuBLASLt product (default size 8192). --precision bf16: the\n"
           "  bf16 product on bf16 operands (the oneMKL build on a CPU, or a GPU), the\n"
           "  MFU denominator of training.precision = bf16.\n\n"
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
    // A GPU finishes a 2048-cube product in microseconds: a larger default there.
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n = ops_device(NULL, 0) > 0 ? 8192 : 2048;
    double seconds = 2.0;
    const char *precision = "fp32";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            bench_usage();
            return 0;
        }
        if (i + 1 >= argc) die("bench peak: %s needs a value", argv[i]);
        if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0) n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--precision") == 0) precision = argv[++i];
        else die("bench peak: unknown option \"%s\"", argv[i]);
    }
    if (threads < 1 || n < 16 || seconds <= 0) die("bench peak: threads, size and seconds must be positive");
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        die("bench peak: --precision must be fp32 or bf16 (got \"%s\")", precision);
    const int bf16 = !strcmp(precision, "bf16");
    if (bf16 && !ops_has_bf16())
        die("bench peak: --precision bf16 needs bf16 products, which this build's BLAS has not (the oneMKL build "
            "has: make BLAS=mkl build-mkl/femtotron; or ./femtotron-cuda on a GPU)");
    ops_set_threads(threads);
    ops_set_matmul_bf16(bf16);
    double peak = bench_gemm_peak(n, seconds, bf16);
    char device[256];
    if (ops_device(device, sizeof device) > 0)
        printf("gemm_peak_gflops %.1f device %s size %d precision %s\n", peak / 1e9, device, n, precision);
    else
        printf("gemm_peak_gflops %.1f threads %d size %d precision %s\n", peak / 1e9, threads, n, precision);
    return 0;
}
