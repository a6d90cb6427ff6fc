// ops/ops.h — the kernel API, and the backend boundary (docs/DESIGN.md, invariant
// 6: the backend boundary). Plain pointers in, pointers out, fp32, row-major.
// Every forward has a backward; a backward ACCUMULATES (+=) into weight gradients
// and into the input gradient when it says so, because the residual stream and
// gradient accumulation both need sums. Shapes are in the comments:
//   N = tokens in the micro-batch (B*S), D = hidden, F = intermediate (FFN width),
//   H = query heads, KV = key/value heads, hd = head dim, V = vocab.
// The model, the engines and the parallel layers touch the contents of a planned
// buffer only through these functions (copies and zeroing included, "buffers"
// below), so that a backend whose buffers live in device memory can implement the
// same list. The CPU implementation (ops/cpu.c, ops/matmul_cpu.c, ops/attention_cpu.c,
// ops/buffers_cpu.c) uses BLAS for every matrix product and OpenMP for the rest.
#ifndef FEMTOTRON_OPS_H
#define FEMTOTRON_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cuda_workspace.h"

// ---- the backend itself ----

// Start the backend, before any planned buffer exists (main.c calls it first). CPU:
// nothing. CUDA: fatal at once, saying so, when no GPU can be used; otherwise take
// GPU local_rank % (GPUs on the node) (main.c passes comm_launched_local_rank: the
// launcher is dist/'s business) and put planned buffers in GPU memory.
void ops_init(int local_rank);
// "cpu" or "cuda": the training.device this binary runs (config_check_backend).
const char *ops_backend_name(void);
// The BLAS this binary runs its CPU matrix products with, as it describes itself
// (OpenBLAS's build configuration, or BLIS and its version), into out (size bytes):
// the node peak's cache key (bench/run_peak.c).
void ops_blas_name(char *out, size_t size);
// The devices the ops run on: how many this node has (0: the CPU backend) and,
// into name (size bytes), the one this rank uses as it names itself ("NVIDIA H100
// 80GB HBM3"; "" on the CPU). The MFU peak of a GPU run (bench/run_peak.c).
int ops_device(char *name, size_t size);
// Bytes of memory of this rank's device (0 on the CPU: buffers are host memory).
size_t ops_device_memory(void);
// 1 when the backend has bf16 kernels (training.precision = bf16), else 0: the
// CUDA backend, and the CPU's in the oneMKL build (ops/matmul_bf16_cpu.c).
int ops_has_bf16(void);
// The matrix products' precision from now on (training.precision; main.c's
// train command sets it once, before step 1): 0 = fp32 operands and fp32 sums
// (the default); 1 = bf16 operands, each fp32 input
// rounded to the nearest bf16 (ties to even) as the product reads it, the
// products summed in fp32 into fp32 outputs, which is what tensor cores do with
// bf16 inputs. Attention's products follow it too (ops/flash_attention.cuh:
// Q, K, V, dO, P and dS rounded to bf16, the softmax and every sum in fp32; the
// CPU's ops/attention_cpu.c the same).
// Every other op stays fp32. Fatal where ops_has_bf16() is 0.
void ops_set_matmul_bf16(int on);
// What ops_set_matmul_bf16 last set (0 before any call): the backends' products and
// attention ask it, and the model, where an activation only products read can be
// written as bf16 in the first place (the loss's gradient:
// cross_entropy_forward_backward_bf16).
int ops_matmul_bf16(void);
// Single-block attention (attention_forward/backward) on cuDNN's fused kernels
// from now on (training.attention = cudnn; set once, before step 1, like the
// above): with bf16 products on, q|k|v, the output and its gradient rounded to
// bf16, cuDNN's flash kernels (fp32 softmax and sums) writing a bf16 output and
// bf16 gradients, widened back to fp32; the lse as ever. The block ops of context
// parallelism keep femtotron's kernels. cuDNN loads on the first such call (fatal,
// naming why, where it cannot); the work buffers it takes are OpsBounds'
// cudnn_attention part. Fatal on the CPU backend, which has no cuDNN.
void ops_set_attention_cudnn(int on);
// The bf16 copy of the weights (bf16 products): `weights` (n) is the arena of this
// rank's parameters and `copy` a planned buffer of n bf16 values (2n bytes). From
// now on a product whose weight operand lies in the arena reads its bf16 copy at
// the same offset, rounded the first time after each ops_bf16_weights_changed(),
// instead of rounding the weight for every product (forward and backward, every
// micro-batch). NULL, 0, NULL forgets the arena. Fatal where ops_has_bf16() is 0.
void ops_keep_bf16_weights(const float *weights, size_t n, void *copy);
// The weights may have changed (an optimizer step, a load): every copy is stale,
// except the slices adamw_update wrote (below). The trainer says so before each
// step and each validation; nothing writes the weights while a step runs (ZeRO-3's
// gathered weights are outside the arena).
void ops_bf16_weights_changed(void);

// ---- the CUDA backend's own work buffers, planned (docs/DESIGN.md, invariant 3) ----
// Besides the planned buffers the layers pass in, the CUDA ops need work buffers of
// their own: cuBLASLt's workspace, the cross-entropy's per-row losses and the
// gradient norm's partial sums (doubles), and, for bf16 products, the bf16 copies
// of product operands the kept weight copy does not hold (slot 0: a product's
// output gradient, or the forward's weight; 1: its input; 2: the backward's
// weight). A training rank sizes them from the widest operands its step gives the
// ops (OpsBounds, from model/llama.h: llama_op_bounds), takes them as one planned
// buffer (MEM_ACTIVATIONS, engines/rank.c) and installs it before step 1: nothing
// is allocated inside a step, and the memory line counts them. An op that would
// need more than the installed workspace is fatal (a bound that missed a shape is
// a bug). Without one installed (tests, generation, bench) the backend grows its own.
// (OpsBounds, OpsCudaWorkspace and their sizes: ops/cuda_workspace.h.)
// Install `buf` (ops_cuda_workspace(b).total bytes, a planned buffer) as the
// backend's work buffers, releasing those it grew itself; NULL uninstalls it.
// The CPU backend's only work buffers are bf16 products' operand copies
// (ops_cpu_workspace_bytes(b) bytes, the same slots; fatal there in fp32).
void ops_set_workspace(void *buf, const OpsBounds *b);
// Host memory <-> a planned buffer, `bytes` bytes (the places where host code
// prepares or reads buffer contents: token ids, positions, checkpoint pieces, the
// scalars a step reads back). CPU: memcpy. Both wait until the copy is done.
void ops_upload(void *dst_buffer, const void *src_host, size_t bytes);
void ops_download(void *dst_host, const void *src_buffer, size_t bytes);
// Host staging for ops_upload_queued: `bytes` of host memory the device can copy
// from while the host goes on (CUDA: pinned, cudaMallocHost; CPU: malloc), zeroed.
// Not a planned buffer (not counted: transient I/O staging). Fatal when out of memory.
void *ops_host_alloc(size_t bytes, const char *what);
void ops_host_free(void *p);
// Host staging -> a planned buffer, queued behind every op issued so far (so the
// ops still reading dst's old contents finish first) and returning at once: the
// host does not wait. src_host must come from ops_host_alloc and stay unchanged
// until the next host wait (ops_sync, ops_download). CPU: memcpy.
void ops_upload_queued(void *dst_buffer, const void *src_host, size_t bytes);
// Wait until every op issued so far has finished (CPU: nothing to wait for). The
// CUDA ops return before they finish: host code that reads or writes a buffer's
// contents itself (not through an op) calls this first.
void ops_sync(void);

// ---- buffers: moving and clearing contents ----

// dst(n) = src(n); the ranges must not overlap.
void copy_f32(float *dst, const float *src, size_t n);
// dst(n) = src(n) where the ranges may overlap.
void move_f32(float *dst, const float *src, size_t n);
// x(n) = 0
void zero_f32(float *x, size_t n);
// x(n) = 0 for doubles (the loss and norm accumulators' start).
void zero_f64(double *x, size_t n);
// rows x cols block: dst[r * ld_dst + c] = src[r * ld_src + c] (row-strided copy,
// e.g. the key|value columns of every token out of a qkv buffer).
void copy_rows_f32(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                   size_t cols);

// Row permutations of an (n, cols) block: gather dst[r] = src[idx[r]], scatter
// dst[idx[r]] = src[r] (idx a permutation of 0..n-1; the ranges must not overlap).
void gather_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols);
void scatter_rows_f32(float *dst, const float *src, const int32_t *idx, size_t n, size_t cols);

// ---- linear layers: ops/ops_matmul.h ----
#include "ops/ops_matmul.h"

// ---- embedding ----
// Token ids index tables: every id is checked to lie in [0, V) first (ops_check_ids;
// fatal, naming the id and its position), so no id ever reads or writes outside a
// table, whatever the data holds.

// Fatal unless every ids(N) is in [0, V); `what` names the caller in the message.
// CPU: at once. CUDA, for ids in a planned buffer: checked by a kernel queued like
// any op, the fatal raised at the next host wait (before the step's update: its
// loss is read back first); the kernels that index by id skip ids outside their
// table meanwhile, so none is ever indexed. Host ids are checked at once.
void ops_check_ids(const int32_t *ids, int N, int V, const char *what);
// out(N, D) = table[tokens[n]]   with table (V, D)
void embedding_forward(float *out, const int32_t *tokens, const float *table, int N, int D, int V);
// dtable(V, D) += scatter of dout(N, D) by tokens
void embedding_backward(float *dtable, const float *dout, const int32_t *tokens, int N, int D, int V);

// Vocab-parallel pieces: table(rows, D) holds vocabulary ids v0 .. v0+rows-1; ids
// outside the slice are skipped (the caller checks them against the whole vocabulary).
// out(N, D) = table[tokens[n] - v0] for ids inside the slice, 0 for the others.
void embedding_forward_range(float *out, const int32_t *tokens, const float *table, int N, int D,
                             int v0, int rows);
// out(N, D): the rows of the ids inside the slice set to table[id - v0], the others
// left as they are (a table handed out in pieces: out zeroed once, then every piece).
void embedding_copy_range(float *out, const int32_t *tokens, const float *table, int N, int D, int v0,
                          int rows);
// dtable(rows, D) += scatter of dout(N, D) by the tokens inside the slice.
void embedding_backward_range(float *dtable, const float *dout, const int32_t *tokens, int N, int D,
                              int v0, int rows);

// ---- RMSNorm (Hugging Face LlamaRMSNorm: y = w * x / sqrt(mean(x^2) + eps)) ----

// out(N, D) = w * xhat, xhat = x * rstd, rstd(N) = 1/sqrt(mean(x^2)+eps) saved for
// backward; xhat(N, D) too unless NULL. A layer keeps xhat and rstd only (one
// (N, D) tensor per norm, not its input and its output): the backward needs x
// only through xhat, and the product after the norm needs out = w * xhat, which
// rmsnorm_rebuild makes again bit for bit.
void rmsnorm_forward(float *out, float *xhat, float *rstd, const float *in, const float *weight,
                     int N, int D, float eps);
// out(N, D) = w * xhat: the forward's output again from its kept xhat.
void rmsnorm_rebuild(float *out, const float *xhat, const float *weight, int N, int D);
// The two with the output out16(N, D) rounded to the nearest bf16 as it is written
// (a bf16 run's norm outputs, the q|k|v and gate|up products' bf16 inputs, read by
// matmul_*_from_bf16 / matmul_forward_bf16 / matmul_backward_bf16); xhat and rstd
// fp32 as above, so the rebuild is the forward's output bit for bit again.
void rmsnorm_forward_to_bf16(uint16_t *out16, float *xhat, float *rstd, const float *in, const float *weight,
                             int N, int D, float eps);
void rmsnorm_rebuild_to_bf16(uint16_t *out16, const float *xhat, const float *weight, int N, int D);
// din(N, D) += dx = rstd * (w*dout - xhat * mean(w*dout*xhat));  dweight(D) += sum_n
// dout * xhat. Either may be NULL (that gradient not wanted; dweight alone reads
// neither weight nor rstd).
void rmsnorm_backward(float *din, float *dweight, const float *dout, const float *xhat,
                      const float *weight, const float *rstd, int N, int D);
// The same, din wanted, and din16(N, D) = each sum din + dx rounded to the nearest
// bf16 as it is written (din16 NULL: rmsnorm_backward): under bf16 products the
// residual stream's gradient as the next products read it (model/llama.c: the
// down and o products' output gradient), bit for bit round_to_bf16 of din after
// the op, without that op's pass over it. din16 must not overlap din or dout.
void rmsnorm_backward_with_bf16(float *din, uint16_t *din16, float *dweight, const float *dout, const float *xhat,
                                const float *weight, const float *rstd, int N, int D);

// ---- residual ----

// out(n) = a(n) + b(n)   (out may alias a)
void residual_forward(float *out, const float *a, const float *b, size_t n);

// ---- rotary position embedding (Hugging Face rotate-half convention) ----

// cos, sin: (S, hd/2) tables for positions pos0 .. pos0+S-1 from the inverse
// frequencies freq(hd/2) (model/rope.h; plain RoPE: theta^(-2i/hd)):
//   angle(p, i) = p * freq[i], i in [0, hd/2), in double, rounded once to float
void rope_tables(float *cos_t, float *sin_t, int S, int hd, const double *freq, int pos0);
// The same for arbitrary positions pos(S) (context-parallel chunks).
void rope_tables_at(float *cos_t, float *sin_t, const int *pos, int S, int hd, const double *freq);

// In place on the q and k parts of qkv(B*S, (H + 2*KV) * hd), laid out per token as
// [q heads (H*hd) | k heads (KV*hd) | v heads (KV*hd)], each head [x1 (hd/2) | x2 (hd/2)]:
//   x1' = x1*cos - x2*sin,  x2' = x2*cos + x1*sin   (token t uses table row t % S)
void rope_forward(float *qkv, const float *cos_t, const float *sin_t,
                  int B, int S, int H, int KV, int hd);
// In place on dqkv: the transpose rotation (dx1 = d1*cos + d2*sin, dx2 = d2*cos - d1*sin)
void rope_backward(float *dqkv, const float *cos_t, const float *sin_t,
                   int B, int S, int H, int KV, int hd);
// dqkv16 = rope_backward(dqkv) with every value (v's too) rounded to the nearest
// bf16 as it is written, dqkv(B*S, (H + 2*KV) * hd) left as it is: a bf16 run's
// q|k|v gradient, which both q|k|v products read as it is
// (matmul_backward_bf16), the bits they would have rounded it to.
void rope_backward_to_bf16(uint16_t *dqkv16, const float *dqkv, const float *cos_t, const float *sin_t,
                           int B, int S, int H, int KV, int hd);

// q|k|v kept as bf16 (LlamaModel.att_bf16, training.attention = cudnn): RoPE on
// the bf16 values of qkv16(B*S, (H + 2*KV) * hd) in place, each pair widened,
// rotated in fp32 as rope_forward does and rounded to the nearest bf16 as written
// (v's columns untouched) ...
void rope_forward_bf16(uint16_t *qkv16, const float *cos_t, const float *sin_t, int B, int S, int H, int KV, int hd);
// ... and dst16 = rope_backward(src16) the same way, v's columns copied, or in
// place (dst16 == src16: q and k rotated where they are, v's columns left alone).
void rope_backward_bf16(uint16_t *dst16, const uint16_t *src16, const float *cos_t, const float *sin_t, int B, int S,
                        int H, int KV, int hd);

// ---- causal grouped-query attention, flash style ----
//
// Tiled attention with an online softmax (Dao et al. 2022; Rabe & Staats 2021):
// no score matrix larger than one tile per thread is ever held, the forward saves
// only the log-sum-exp of each query row, and the backward recomputes each tile's
// probabilities from it, so attention memory is linear in the sequence length.
// Queries and keys carry GLOBAL positions: key j is visible to query i iff
// kpos[j] <= qpos[i] (causal), which also covers context-parallel blocks (a block
// of keys from another rank, zigzag chunks). Tiles entirely above the diagonal are
// skipped. Query head h uses key/value head h / (H/KV).
//
// Layouts: q rows are tokens of qkv(B*Sq, ldq) with query head h at column h*hd;
// a key/value block kv(B*Sk, ldkv) holds key head g at column koff + g*hd and value
// head g at voff + g*hd. o(B*Sq, H*hd); m, l, lse, rowdot: (B, H, Sq).

// Floats of scratch the two block kernels need for head dimension hd (per-thread
// tiles and contiguous copies of the key/value chunks).
size_t attention_scratch_floats(int hd);

// Start a row block: o = 0, m = -inf, l = 0.
void attention_block_init(float *o, float *m, float *l, int B, int Sq, int H, int hd);
// Fold one key/value block into the running (o unnormalised, m max, l sum).
void attention_block_forward(float *o, float *m, float *l, const float *q, int ldq,
                             const float *kv, int ldkv, int koff, int voff, const int *qpos,
                             const int *kpos, int B, int Sq, int Sk, int H, int KV, int hd,
                             float *scratch);
// o /= l (in place) and lse = m + log(l).
void attention_block_finish(float *o, float *lse, const float *m, const float *l, int B, int Sq,
                            int H, int hd);
// rowdot = sum over the head dim of dout * out (the softmax backward's correction).
void attention_rowdot(float *rowdot, const float *dout, const float *out, int B, int Sq, int H,
                      int hd);
// Gradients of one key/value block: dq(B*Sq, ldq) += ..., and the block's key and
// value gradients dkv(B*Sk, ldkv) (same koff/voff layout) += ... .
void attention_block_backward(float *dq, float *dkv, const float *q, int ldq, const float *kv,
                              int ldkv, int koff, int voff, const float *dout, const float *lse,
                              const float *rowdot, const int *qpos, const int *kpos, int B,
                              int Sq, int Sk, int H, int KV, int hd, float *scratch);

// Single-block causal attention over qkv(B*S, (H+2KV)*hd) with positions pos(S):
// out(B*S, H*hd), lse(B, H, S); m, l: (B, H, S) scratch.
void attention_forward(float *out, float *lse, float *m, float *l, const float *qkv,
                       const int *pos, int B, int S, int H, int KV, int hd, float *scratch);
// dqkv(B*S, (H+2KV)*hd) = gradient w.r.t. qkv (overwritten); rowdot: (B, H, S) scratch.
void attention_backward(float *dqkv, float *rowdot, const float *dout, const float *qkv,
                        const float *out, const float *lse, const int *pos, int B, int S, int H,
                        int KV, int hd, float *scratch);

// The same single-block attention on bf16 q|k|v (LlamaModel.att_bf16): out16(B*S,
// H*hd) written as bf16, lse(B, H, S) as ever; the backward reads dout16(B*S, H*hd)
// as bf16 (the o product writes it so: matmul_backward_from_bf16_to_bf16) and
// writes dqkv16 as bf16 (dqkv16 must not overlap dout16). On CUDA cuDNN's fused kernels (fp32 softmax and sums; ops_set_attention_cudnn
// need not be on: these ops are cuDNN's); on the CPU, the reference: the fp32 ops
// above on the widened values, rounded as written (temporaries allocated per call:
// the CPU trains with fp32 q|k|v, so only tests call it there).
void attention_forward_bf16(uint16_t *out16, float *lse, const uint16_t *qkv16, const int *pos, int B, int S, int H,
                            int KV, int hd);
void attention_backward_bf16(uint16_t *dqkv16, const uint16_t *dout16, const uint16_t *qkv16, const uint16_t *out16,
                             const float *lse, const int *pos, int B, int S, int H, int KV, int hd);

// ---- SwiGLU ----

// gu(N, 2F) = per token [gate (F) | up (F)];  out(N, F) = silu(gate) * up
void swiglu_forward(float *out, const float *gu, int N, int F);
// dgu(N, 2F) = gradient w.r.t. gu (overwritten)
void swiglu_backward(float *dgu, const float *dout, const float *gu, int N, int F);

// ---- bf16 activations (training.precision = bf16; ops/bf16.h: the bits) ----
// A bf16 run keeps the dense MLP's gate|up pre-activations for the backward as
// bf16 (uint16_t bits), half the bytes, and no SwiGLU output at all: the backward
// rebuilds it from the kept gate|up with swiglu_forward_bf16, the same op on the
// same values as the forward, so bit for bit (model/activations.h). That output is
// bf16 too: the down product reads it as its bf16 operand (matmul_*_from_bf16),
// which bf16 products would have rounded it to anyway; so are gate|up's gradient
// and the norms' outputs (matmul_backward_bf16, matmul_forward_bf16).
// dst(n) = src(n) rounded to the nearest bf16 (ties to even).
void round_to_bf16(uint16_t *dst, const float *src, size_t n);
// dst(n) = src(n) widened to fp32 (exactly).
void widen_from_bf16(float *dst, const uint16_t *src, size_t n);
// swiglu_forward and swiglu_backward on a gu(N, 2F) kept as bf16: each value
// widened to fp32 (exactly), then the fp32 formula, each output rounded to the
// nearest bf16 as it is written: out16(N, F), dgu16(N, 2F) (the operand the
// gate|up backward reads, matmul_backward_bf16, which bf16 products would have
// rounded an fp32 dgu to); dout(N, F) fp32.
void swiglu_forward_bf16(uint16_t *out16, const uint16_t *gu, int N, int F);
void swiglu_backward_to_bf16(uint16_t *dgu16, const float *dout, const uint16_t *gu, int N, int F);
// swiglu_backward_to_bf16 with dout16(N, F) bf16 (matmul_backward_input_to_bf16's),
// widened, and with h16(N, F) not NULL the SwiGLU output rebuilt beside it, the same
// values swiglu_forward_bf16 writes, bit for bit: the down product's weight gradient
// reads it after, so gate|up is read once for both. dgu16, h16, dout16 and gu apart.
void swiglu_backward_bf16(uint16_t *dgu16, uint16_t *h16, const uint16_t *dout16, const uint16_t *gu, int N, int F);

// ---- mixture of experts (model/moe.h): routing, grouping, dispatch and combine ----
// N tokens, E experts, K experts per token (top-k), D hidden. A token's K choices
// are "slots" t*K + j; the grouped rows put every slot of expert 0 first (tokens in
// increasing order), then expert 1, ..., so each expert's rows are one contiguous
// block for its GEMMs. Routing indices are int32 (they live in the float arenas'
// 4-byte cells: the model keeps them there, nothing reads them as floats).

// Router: probs(N, E) = softmax(logits) in place (fp32, max-subtracted); sel(N, K)
// the K most probable experts by decreasing probability, a tie going to the lower
// expert index; wts(N, K) their probabilities divided by the sum of the K chosen
// (Mixtral's renormalisation).
void moe_route(float *probs, int32_t *sel, float *wts, int N, int E, int K);
// Grouping: start(E+1) the first grouped row of each expert (start[E] = N*K);
// slot_of(N*K): grouped row r -> slot t*K + j; row_of(N*K): slot -> grouped row.
void moe_group(int32_t *start, int32_t *slot_of, int32_t *row_of, const int32_t *sel, int N, int E,
               int K);
// Dispatch: xg(N*K, D) row r = x(N, D) row slot_of[r] / K.
void moe_dispatch(float *xg, const float *x, const int32_t *slot_of, int N, int K, int D);
// Combine: out(N, D) = sum over j (in order) of wts[t, j] * y(N*K, D)[row_of[t*K+j]]
// (overwritten; a fixed order per token, so deterministic).
void moe_combine(float *out, const float *y, const float *wts, const int32_t *row_of, int N, int K,
                 int D);
// Combine backward: dy(N*K, D) row row_of[t*K+j] = wts[t, j] * dout[t] (overwritten);
// dwts(N, K) = <dout[t], y[row_of[t*K+j]]> (overwritten).
void moe_combine_backward(float *dy, float *dwts, const float *dout, const float *y,
                          const float *wts, const int32_t *row_of, int N, int K, int D);
// Dispatch backward: dx(N, D) += sum over j (in order) of dxg[row_of[t*K+j]].
void moe_dispatch_backward(float *dx, const float *dxg, const int32_t *row_of, int N, int K, int D);
// Load-balancing statistics of B sequences of S tokens (N = B*S), accumulated over
// layers: count(B, E) += how many of a sequence's tokens chose e; psum(B, E) += the
// sum of its tokens' router probabilities of e.
void moe_route_stats(float *count, float *psum, const float *probs, const int32_t *sel, int B, int S,
                     int E, int K);
// Router backward: dlogits(N, E) (overwritten) from the gradient of the renormalised
// weights dwts(N, K) and, when aux_g is not NULL, a gradient aux_g(B, E) of every
// probability of a token of sequence b = t / S (the load-balancing loss):
//   dp[sel_j] = (dwts_j - sum_i dwts_i wts_i) / sum_i probs[sel_i]  (+ aux_g[b, e] for all e)
//   dlogits   = probs * (dp - sum_e probs_e dp_e)                    (softmax backward)
void moe_route_backward(float *dlogits, const float *probs, const int32_t *sel, const float *wts,
                        const float *dwts, const float *aux_g, int N, int S, int E, int K);

// The load-balancing loss of B sequences from their statistics over T (layer, token)
// pairs each (model/moe.h): returns sum_b E * sum_e (count_be / T) (psum_be / T); with
// aux_g not NULL, aux_g(B, E) = g_scale * E * count_be / T^2 (its gradient w.r.t.
// each probability, scaled).
double moe_aux_loss(float *aux_g, const float *count, const float *psum, int B, int E, double T,
                    float g_scale);

// ---- cross-entropy, fused with its backward ----
// The losses are not returned: each call ADDS its sum over the N tokens (in double)
// to *loss_sum, a planned buffer of one double (a step's loss accumulator), so
// that a GPU step reads its loss back once, not once per micro-batch (the host
// reads it with ops_download after its last micro-batch). On the CPU, host memory.

// logits(N, V) in, overwritten in place by dlogits = (softmax - onehot(target)) * grad_scale;
// *loss_sum += sum over the N tokens of -log softmax(logits)[target].
// targets[n] must be in [0, V) (checked: fatal otherwise).
void cross_entropy_forward_backward(float *logits, const int32_t *targets, int N, int V,
                                    float grad_scale, double *loss_sum);
// The same, with dlogits written as bf16 in place for bf16 products: each value the
// fp32 op writes, rounded to the nearest bf16 (ties to even), row n's V values at
// (uint16_t *)logits + n * CE_LD16(V), the first half of its own fp32 row's bytes
// (so no row is written over another's before that is read; the second half is
// left undefined). Only the head's products read dlogits, and a bf16 product
// rounds its fp32 operand to these very values, so the products are the same bit
// for bit, without the pass that rounded the fp32 gradient, and with half the
// bytes written (issue 21: 8.4 of the 23 GB the head and loss move over an
// 8192-token micro-batch at Llama-3.2-1B's 128256 ids, 3.2 of 8.9 at SmolLM's
// 49152). matmul_backward_ld16 reads the result.
#define CE_LD16(V) (2 * (size_t)(V))  // leading dimension, in bf16 values, of a bf16 dlogits
void cross_entropy_forward_backward_bf16(float *logits, const int32_t *targets, int N, int V,
                                         float grad_scale, double *loss_sum);
// Loss only (validation): *loss_sum += the sum of -log softmax[target]; logits untouched.
void cross_entropy_forward(const float *logits, const int32_t *targets, int N, int V,
                           double *loss_sum);

// Vocab-parallel cross-entropy on a shard logits(N, Vl) of vocabulary ids
// v0 .. v0+valid-1 (columns valid .. Vl-1 are padding). Three passes, with a sum or
// max over the tensor-parallel group between them (tensor_parallel.c):
// 1) rowmax(N) = max over the valid columns
void ce_shard_max(const float *logits, int N, int Vl, int valid, float *rowmax);
// 2) sumexp(N) = sum exp(x - rowmax) over valid columns; tlogit(N) = the target's
//    logit when it falls in this shard, else 0
void ce_shard_sums(const float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                   const float *rowmax, float *sumexp, float *tlogit);
// 3) with the group-wide max, sum and target logit: *loss_sum += the SUM of the
//    losses log(sumexp) + max - tlogit; with want_grads, logits become
//    dlogits = (softmax - onehot) * grad_scale (padding columns 0): fp32 where
//    want_grads is CE_GRADS_F32, bf16 in place as cross_entropy_forward_backward_bf16
//    writes them (rows CE_LD16(Vl) apart) where it is CE_GRADS_BF16.
#define CE_NO_GRADS 0  // (macros: tests/gpu/cpu_ref.h reads this header twice)
#define CE_GRADS_F32 1
#define CE_GRADS_BF16 2
void ce_shard_finish(float *logits, const int32_t *targets, int N, int Vl, int valid, int v0,
                     const float *rowmax, const float *sumexp, const float *tlogit,
                     float grad_scale, int want_grads, double *loss_sum);

// ---- optimizer ----

// *acc += the sum of squares of x(n), accumulated in double; acc is a planned
// buffer of doubles (the gradient norm's, read back once per step with the loss) or, on the
// CPU, host memory.
void sum_squares(const float *x, size_t n, double *acc);
// One AdamW step with PyTorch semantics on n elements (t = step number from 1), on
// the gradient g = grad_scale * grad (the clipping coefficient, applied here instead
// of in a pass of its own over the gradients; 1 = no clipping; the same float
// product either way):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * wd * p                                    (decoupled weight decay)
//   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// On a backend that keeps a bf16 copy of the weights (ops_keep_bf16_weights), an
// update of weights in the arena also writes their copy, rounded, so the next
// generation's products need no rounding pass over them (issue 21: AdamW writes
// the bf16 copy); the CPU keeps no copy.
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                  float grad_scale, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t);

// ---- threads ----
void ops_set_threads(int threads);  // OpenMP and BLAS threads for this rank

#endif
