// bench/peak.h — measured GEMM peak of this rank (the MFU denominator on CPU).
#ifndef FEMTOTRON_PEAK_H
#define FEMTOTRON_PEAK_H

// Best FLOP/s of a square product (n x n x n) over repeats lasting about `seconds`,
// with the threads currently set for this rank: fp32 (sgemm), or with bf16 (1; bf16
// products switched on, ops_set_matmul_bf16) the bf16 product on operands kept as
// bf16, as a training step's products read them (the weight from the kept copy,
// the input a bf16 activation): no rounding pass is timed. bf16 keeps a copy of its
// own weight operand (ops_keep_bf16_weights), so it runs outside training only.
double bench_gemm_peak(int n, double seconds, int bf16);

// `./femtotron bench peak [--threads T] [--size N] [--seconds S] [--precision P]`, and
// `femtotron bench calibrate ...` (bench/calibrate.h)
int bench_main(int argc, char **argv);

#endif
