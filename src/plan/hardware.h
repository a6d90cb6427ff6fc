// plan/hardware.h — what the planner knows about a machine: a hardware profile.
//
// Built-in profiles (h100, h200, a100) hold datasheet figures; the profile "this"
// is measured by `femtotron bench calibrate` on the process grid and saved as JSON
// (hardware_save / hardware_load). All rates are per rank (one GPU, or one MPI
// rank with its threads on a CPU).
#ifndef FEMTOTRON_HARDWARE_H
#define FEMTOTRON_HARDWARE_H

#include <stddef.h>

#define HW_CURVE_MAX 32
#define HW_COLL_MAX 64

// A measured throughput curve: rate[i] (FLOP/s) at work[i] (FLOPs of one call),
// work ascending. Between points the rate is interpolated in log(work); outside it
// is clamped to the end points.
typedef struct {
    int n;
    double work[HW_CURVE_MAX];
    double rate[HW_CURVE_MAX];
} RateCurve;

// Collective kinds the time model prices.
typedef enum { COLL_ALLREDUCE, COLL_REDUCE_SCATTER, COLL_ALLGATHER, COLL_P2P, COLL_KINDS } CollKind;

// One measured collective: on a group of `ranks` ranks (ranks sharing a node when
// intra_node), a call on a message of B bytes (the whole buffer: the all-reduced
// vector, the reduce-scatter input, the all-gather output, the p2p message) takes
//   alpha + B * beta  seconds.
typedef struct {
    CollKind kind;
    int ranks;
    int intra_node;
    double alpha;  // s
    double beta;   // s per byte
} CollFit;

typedef struct {
    char name[64];
    double peak_flops;      // dense matmul peak per rank (bf16 on GPUs, fp32 sgemm measured on CPU)
    double mem_bytes;       // memory per rank
    double mem_bw;          // bytes/s of elementwise kernels (norms, activations, optimizer)
    int bytes_per_value;    // 2 for the GPU bf16 mixed-precision model, 4 for femtotron's fp32
    RateCurve gemm;         // GEMM FLOP/s against FLOPs per call
    // Causal attention FLOPs of one (sequence, head) pair of S tokens and head dim hd:
    //   forward  = 4 * hd * S(S+1)/2   (Q K^T and P V over the causal half)
    //   backward = 2 * forward         (nominal; rate = nominal FLOPs / seconds)
    // A call over B sequences and H heads does B*H times that at the same rate: the
    // kernel's speed is set by the tile work of one pair (S and hd), not by how
    // many pairs there are once they fill the device.
    RateCurve attn_fwd;     // attention forward FLOP/s against FLOPs per (sequence, head)
    RateCurve attn_bwd;     // attention backward FLOP/s against FLOPs per (sequence, head)
    int attn_head_dim;      // head dim the attention curves were measured at (0: datasheet)
    // Link classes for collectives not in the measured table: a ring over n ranks
    // moves (n-1)/n of the buffer per rank per phase in n-1 latency steps.
    double intra_bw, inter_bw;    // bytes/s per rank
    double intra_lat, inter_lat;  // s per message step
    int gpus_per_node;            // ranks sharing the fast (intra) link
    int n_coll;
    CollFit coll[HW_COLL_MAX];    // measured fits (profile "this"), looked up first
    // Measurement conditions of "this": ranks that ran at once and threads each.
    int calib_ranks, calib_threads;
    // CPU cores the ranks of one node share (0: every rank has its own device).
    // When a node's ranks x threads exceed them, the measured rates are the shares
    // ranks get while all compute, and a rank computing while others wait (a
    // pipeline bubble) runs faster: plan/step_time.c.
    int node_cores;
    // The matrix products' precision the curves were measured in ("fp32", "bf16":
    // bench calibrate --precision; the built-in datasheet profiles are bf16).
    char precision[8];
    // The attention kernels the attention curves timed ("femtotron", "cudnn": bench
    // calibrate --attention, training.attention; profiles from before: femtotron).
    char attention[12];
} Hardware;

// Fill hw with a built-in profile ("h100", "h200", "a100"); returns 0 when the
// name is unknown.
int hardware_builtin(Hardware *hw, const char *name);
// Read/write the JSON form (`femtotron bench calibrate --output FILE`). Load dies
// naming the file and the key on any problem.
void hardware_load(Hardware *hw, const char *path);
void hardware_save(const Hardware *hw, const char *path);
// Every number in the JSON tree `root` (a cJSON *) made to print bit for bit, as
// hardware_save writes them: for a writer that rewrites a profile it parsed
// (links_save keeps its other keys), where cJSON's own printer would round them
// to 15 digits and shift the planner's near-ties.
struct cJSON;
void hardware_json_numbers_exact(struct cJSON *root);

// Rate of a curve at `work` FLOPs (log-interpolated, clamped; 0 for an empty curve).
double curve_rate(const RateCurve *c, double work);
// Seconds of a collective of `bytes` on `ranks` ranks (0 when ranks <= 1):
// a measured fit for (kind, ranks, intra) when there is one (for p2p, any p2p fit
// of the link class); else, when the same kind and link class was measured on
// other group sizes, those fits rescaled with the ring factors (per-step latency
// alpha/(n-1) and per-byte cost beta/((n-1)/n), interpolated in n between the
// nearest measured sizes, held beyond them); else the ring model over the link
// class: all-reduce 2(n-1)·lat + 2(n-1)/n·B/bw, reduce-scatter and all-gather
// (n-1)·lat + (n-1)/n·B/bw, p2p lat + B/bw.
double hardware_collective_s(const Hardware *hw, CollKind kind, int ranks, int intra_node, double bytes);
// "allreduce", "reduce_scatter", "allgather", "p2p" (the JSON spelling).
const char *hardware_coll_name(CollKind k);

#endif
