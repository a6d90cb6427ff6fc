// ops/matmul_cpu.h — what the CPU's matrix products (ops/matmul_cpu.c) tell about
// how they run, beyond the kernel API of ops/ops_matmul.h: for tests and benchmarks.
#ifndef FEMTOTRON_OPS_MATMUL_CPU_H
#define FEMTOTRON_OPS_MATMUL_CPU_H

// How many blocks of C's rows ops/matmul_cpu.c cuts a product C(M, N) = A B (K the
// summed dimension) into, one single-threaded sgemm a thread, if called here and
// now (the thread count, inside a parallel region or not, the build's BLAS); 1 is
// one sgemm, threaded by the BLAS itself.
int matmul_cpu_row_blocks(int M, int N, int K);

#endif
