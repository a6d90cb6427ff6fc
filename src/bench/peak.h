// bench/peak.h — measured GEMM peak of this rank (the MFU denominator on CPU).
#ifndef FEMTOTRON_PEAK_H
#define FEMTOTRON_PEAK_H

// Best FLOP/s of square fp32 sgemm (n x n x n) over repeats lasting about `seconds`,
// with the threads currently set for this rank.
double bench_gemm_peak(int n, double seconds);

// `./femtotron bench peak [--threads T] [--size N] [--seconds S]`, and
// `femtotron bench calibrate ...` (bench/calibrate.h)
int bench_main(int argc, char **argv);

#endif
