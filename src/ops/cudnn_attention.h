// ops/cudnn_attention.h — cuDNN's fused causal attention (its flash kernels, built
// through the cudnn-frontend graph API), behind a C interface for
// ops/attention_cuda.cu. Implemented in ops/cudnn_attention.cpp (C++: the frontend
// is a header-only C++ library, third_party/cudnn-frontend, compiled in this one
// translation unit because it is slow to compile) in the CUDA build, and by the
// definition on the host in the emulated one (tests/emu/cudnn_attention_emu.cpp).
//
// cuDNN is loaded at run time (dlopen of libcudnn.so.9) on first use, so
// ./femtotron-cuda starts, and trains with femtotron's own kernels, on a machine
// without it. Used for training.attention = cudnn (or FEMTOTRON_ATTENTION=cudnn):
// ops/attention_cuda.cu's single-block attention_forward/backward in bf16 runs.
//
// Layouts (bf16 = 16-bit words, fp32 = float; rows = B*S tokens, ld = (H+2KV)*hd):
//   qkv16, dqkv16 (rows, ld) bf16: query head h at column h*hd, key head g at
//     H*hd + g*hd, value head g at (H+KV)*hd + g*hd (the layout of ops.h's qkv);
//   o16, do16 (rows, H*hd) bf16;
//   lse (B, H, S) fp32: the natural log-sum-exp of each query row's scaled scores
//     (cuDNN's "stats"), ops.h's lse.
// Query i sees key j iff j <= i (causal, top-left aligned); scale 1/sqrt(hd).
#ifndef FEMTOTRON_CUDNN_ATTENTION_H
#define FEMTOTRON_CUDNN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Load cuDNN and create its handle, once: NULL when ready, else why not (the same
// message every later call: dlopen's error, or cuDNN's).
const char *cudnn_attention_load(void);
// cuDNN's version as cudnnGetVersion gives it (91900 for 9.19.0); 0 when not loaded.
long cudnn_attention_version(void);
// Bytes of workspace cuDNN's plan for this shape needs (the plan is built and
// cached on first use: seconds); backward != 0 for the backward's plan. Fatal,
// naming cuDNN's reason, where cuDNN has no plan for the shape.
size_t cudnn_attention_workspace(int backward, int B, int S, int H, int KV, int hd);
// o16 and lse from qkv16 on `stream` (a cudaStream_t), with `workspace` holding at
// least cudnn_attention_workspace(0, ...) bytes.
void cudnn_attention_forward(uint16_t *o16, float *lse, const uint16_t *qkv16, int B, int S, int H, int KV, int hd,
                             void *workspace, void *stream);
// dqkv16 (every value written) from qkv16, o16, do16 and lse; deterministic (the
// same bits every run). Workspace: cudnn_attention_workspace(1, ...) bytes.
void cudnn_attention_backward(uint16_t *dqkv16, const uint16_t *qkv16, const uint16_t *o16, const uint16_t *do16,
                              const float *lse, int B, int S, int H, int KV, int hd, void *workspace, void *stream);

// The check cuDNN's frontend makes of this shape's graph (dims, strides, types,
// grouped-query heads, the outputs' layout) before building it, run for GPU
// generation sm_version (90: Hopper) with cuDNN loaded but no GPU needed: NULL
// when the graph is valid, else the frontend's reason (or why cuDNN did not load).
// For tests on machines without a GPU (tests/gpu/cudnn_graphs.c); building the
// plans, and cuDNN's support of the shape, need the GPU.
const char *cudnn_attention_check_graph(int backward, int B, int S, int H, int KV, int hd, int sm_version);

#ifdef __cplusplus
}
#endif
#endif
