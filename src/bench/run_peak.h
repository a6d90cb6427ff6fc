// bench/run_peak.h — the peak FLOP/s a training run's MFU is measured against, and
// where it came from (the README's MFU paragraph says the same for users).
//
// In order of precedence:
//   1. training.peak_flops   FLOP/s per rank, as given;
//   2. parallel.profile      the profile's peak_flops per rank (plan/hardware.h;
//                            `femtotron bench calibrate` measured it);
//   3. the node's cached peak: one core's fp32 sgemm peak times the node's cores,
//      measured once per node by its leader (comm_node_leader) while the node's
//      other ranks wait, and cached in FEMTOTRON_CACHE (else $XDG_CACHE_HOME/
//      femtotron, else ~/.cache/femtotron) as peak-HOST.json with the machine's
//      identity (host, CPU model, cores, BLAS build); a cache whose identity differs
//      is measured again. Deleting the file re-measures.
//   4. a GPU (the CUDA build): the datasheet's dense peak of an H100, H200 or
//      A100 SXM in the run's precision, recognised by the device's name: bf16 the
//      planner's built-in profiles (989, 989, 312 TFLOP/s, issue 21's MFU
//      definition), fp32 the CUDA cores' (67, 67, 19.5: fp32 runs use no TF32);
//      another GPU's is measured (bench_gemm_peak through the backend, in the
//      run's precision).
//      Ranks sharing GPUs share their peaks: GPUs / ranks of the node each.
// In case 3 the ranks of a node share its peak: a node running R ranks of T
// threads on C cores uses min(C, R*T) cores, and each rank's peak is
//   per_core * min(C, R*T) / R,
// so 8 ranks on 2 cores get a quarter of two cores each, never a "measured" 1/8
// of a contended GEMM.
#ifndef FEMTOTRON_RUN_PEAK_H
#define FEMTOTRON_RUN_PEAK_H

#include "config.h"

typedef struct {
    double per_rank;   // this rank's peak, FLOP/s
    double total;      // the sum over all ranks (the MFU denominator)
    char source[4 * CFG_PATH_MAX + 3400];  // rank 0's: where the number came from, for the start-up line
} RunPeak;

// Collective over the world (after comm_grid_init); threads: this rank's threads.
RunPeak run_peak(const Config *cfg, int threads);

#endif
