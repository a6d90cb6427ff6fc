// tests/unit/test_cuda_workspace.c — the CUDA backend's own work buffers are planned
// (ops/cuda_workspace.h, model/llama.h: llama_op_bounds, engines/rank.c): their
// parts from the bounds, the bounds from the model's shapes worked out here by hand,
// and a GPU run's predicted memory holding exactly the workspace more than the same
// run on the CPU in fp32 (in bf16 also the weight copy, less the bf16 activations'
// saving). The CUDA side (nothing grows once it is installed; an op beyond
// it is fatal) runs in tests/gpu/ (gpu_ops, and every emulated training run).
#include <string.h>

#include "check.h"
#include "config.h"
#include "dist/grid.h"
#include "model/llama.h"
#include "ops/ops.h"
#include "plan/memory_rank.h"

static size_t r256(size_t x) { return (x + 255) / 256 * 256; }
static size_t r8(size_t x) { return (x + 7) / 8 * 8; }

static void test_parts(void) {
    OpsBounds b = {.rows = 1000, .in_cols = 1, .out_cols = 261, .weight = 0, .bf16 = 0};
    OpsCudaWorkspace w = ops_cuda_workspace(&b);
    CHECK(w.lt == (size_t)32 << 20 && w.scratch == r256(1000 * 8) && !w.half[0] && !w.half[1] && !w.half[2],
          "fp32: cuBLASLt's 32 MiB and 1000 doubles of row losses, no bf16 copies (scratch %zu)", w.scratch);
    CHECK(w.total == 256 + w.lt + w.scratch, "the total is the parts and 256 bytes of alignment slack (%zu)",
          w.total);
    b.rows = 10;
    w = ops_cuda_workspace(&b);
    CHECK(w.scratch == 256 * 8, "few rows: the gradient norm's 256 partial sums still fit (%zu bytes)", w.scratch);
    b.in_cols = 100;
    w = ops_cuda_workspace(&b);
    CHECK(w.scratch == r256(OPS_CUDA_COL_CHUNKS * 100 * 4),
          "wide rows: RMSNorm's weight gradient's %d chunk partials of each of 100 columns fit (%zu bytes)",
          OPS_CUDA_COL_CHUNKS, w.scratch);
    b.rows = 1000;
    b.bf16 = 1;
    w = ops_cuda_workspace(&b);
    CHECK(w.half[0] == r256(2 * 1000 * r8(261)) && w.half[1] == r256(2 * 1000 * r8(100)) && w.half[2] == 0,
          "bf16: an output gradient of 1000 x 264 and an input of 1000 x 104 bf16 values, no weight copies "
          "(%zu, %zu, %zu)", w.half[0], w.half[1], w.half[2]);
    b.weight = 5000000;  // a gathered weight larger than any activation operand
    w = ops_cuda_workspace(&b);
    CHECK(w.half[0] == r256(2 * 5000000) && w.half[2] == r256(2 * 5000000),
          "bf16 with weights outside the kept copy: slots 0 and 2 hold the largest (%zu, %zu)", w.half[0],
          w.half[2]);
    CHECK(ops_cuda_operand_elements(3, 17) == 3 * 24 && ops_cuda_operand_elements(0, 17) == 0,
          "an operand's rows are padded to 8 values");
    // cuDNN's attention part: only with cudnn_attention and bf16; what a run's bf16
    // ops use: the bf16 copy of the output gradient (1000 x 64) and the reserve for
    // cuDNN's own workspace: 5 floats an output value, 2 bytes a padded score (B 2,
    // H 4, S 500 -> 512: Hopper's deterministic backward keeps dP in bf16), 32 MiB.
    // The fp32 ops' parts (copies 1) add the copies of q|k|v (1000 x 96), the output
    // and cuDNN's q|k|v gradient.
    b.att_qkv = 1000 * 96, b.att_out = 1000 * 64, b.att_scores = ops_cuda_cudnn_scores(2, 4, 500);
    CHECK(b.att_scores == 2 * 4 * 512 * 512, "cuDNN's scores: B x H x S x S with S padded to 128 (%zu)", b.att_scores);
    const size_t before = ops_cuda_workspace(&b).total;
    CHECK(ops_cuda_workspace(&b).att == 0, "no cuDNN attention part unless training.attention = cudnn");
    b.cudnn_attention = 1;
    w = ops_cuda_workspace(&b);
    size_t part[CUDNN_PARTS], all[CUDNN_PARTS];
    ops_cuda_cudnn_parts(b.att_qkv, b.att_out, b.att_scores, 0, part);
    ops_cuda_cudnn_parts(b.att_qkv, b.att_out, b.att_scores, 1, all);
    const size_t reserve = r256(5 * 4 * 64000 + 2 * 2 * 4 * 512 * 512 + ((size_t)32 << 20));
    const size_t want = reserve;
    CHECK(w.att == want && w.total == before + want && part[CUDNN_QKV16] == 0 && part[CUDNN_O16] == 0 &&
              part[CUDNN_DQKV16] == 0 && part[CUDNN_DO16] == 0 && part[CUDNN_WS] == reserve &&
              reserve == r256(OPS_CUDA_CUDNN_RESERVE(64000, b.att_scores)),
          "cudnn: cuDNN's reserve, %zu bytes more (%zu); no copy of q|k|v, the output or their gradients (the bf16 "
          "ops read them as bf16)", want, w.att);
    CHECK(all[CUDNN_QKV16] == r256(2 * 96000) && all[CUDNN_DQKV16] == r256(2 * 96000) &&
              all[CUDNN_O16] == r256(2 * 64000) && all[CUDNN_DO16] == r256(2 * 64000) && all[CUDNN_WS] == reserve,
          "the fp32 ops on cuDNN: bf16 copies of q|k|v, the output and their gradients besides");
    b.bf16 = 0;
    CHECK(ops_cuda_workspace(&b).att == 0, "no cuDNN attention part in fp32 (cuDNN's kernels take bf16)");
}

static void make_cfg(Config *c, int world, const char *const *args, int n) {
    config_defaults(c);
    const char *base[] = {"--model.hidden_size", "64", "--model.intermediate_size", "128",
                          "--model.num_hidden_layers", "4", "--model.num_attention_heads", "4",
                          "--model.num_key_value_heads", "2", "--model.vocab_size", "257",
                          "--training.seq_length", "32", "--training.micro_batch_size", "2",
                          "--training.global_batch_size", "8", "--training.threads", "1", "--data.train", "unused_*.bin"};
    char *argv[64];
    int argc = 0;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) argv[argc++] = (char *)base[i];
    for (int i = 0; i < n; i++) argv[argc++] = (char *)args[i];
    config_apply_args(c, argc, argv);
    config_validate(c, world);
}

// The bounds of a rank, worked out by hand for the model above: D 64, 4 heads of 16,
// 2 kv heads, F 128, V 257; B 2, seq 32.
static void test_bounds(void) {
    Config c;
    make_cfg(&c, 1, NULL, 0);
    LlamaModel m;
    llama_build(&m, &c.model, model_whole());
    OpsBounds b = llama_op_bounds(&m, 2, 32, 1, 0, 0, 0);
    // outputs: q|k|v (4+2+2)*16 = 128, o 64, gate|up 256, head 257; inputs: D, A 64, F 128.
    CHECK(b.rows == 64 && b.out_cols == 256 && b.in_cols == 128 && b.weight == 0,
          "one rank in fp32: 64 rows, gate|up's 256 columns out (no product copies the head's output gradient), "
          "the down product's 128 in (%zu, %zu, %zu)", b.rows, b.out_cols, b.in_cols);
    CHECK(b.att_qkv == 64 * 128 && b.att_out == 64 * 64 && b.att_scores == 2 * 4 * 128 * 128 && !b.cudnn_attention,
          "attention: 64 rows of q|k|v 128 wide and of output 64 wide, 2 x 4 heads of 32 x 32 scores padded to 128 "
          "(%zu, %zu, %zu); cuDNN's part off by default",
          b.att_qkv, b.att_out, b.att_scores);
    b = llama_op_bounds(&m, 2, 32, 0, 0, 0, 0);
    CHECK(b.out_cols == 256, "a stage without the head: gate|up's 256 columns are the widest (%zu)", b.out_cols);
    b = llama_op_bounds(&m, 2, 32, 1, 1, 0, 0);
    CHECK(b.weight == 257 * 64, "bf16 without the kept copy (ZeRO-3): the head, 257 x 64, is the largest weight "
          "(%zu)", b.weight);
    CHECK(b.out_cols == 257, "bf16, vocabulary 257: the loss's bf16 rows are 514 values apart, not 16-byte "
          "aligned, so the head's products read a copy of its 257 columns (%zu)", b.out_cols);
    b = llama_op_bounds(&m, 2, 32, 1, 1, 1, 0);
    CHECK(b.weight == 0, "bf16 with the kept copy: no weight is copied per product");
    b = llama_op_bounds(&m, 2, 32, 0, 1, 1, 0);
    CHECK(b.out_cols == 256, "bf16, a stage without the head: gate|up's 256 (%zu)", b.out_cols);
    llama_free(&m);
    llama_build(&m, &c.model, model_tp_shard(2, 0, 1));
    b = llama_op_bounds(&m, 2, 32, 1, 0, 0, 0);
    // tp 2: q|k|v 64, gate|up 128, head rows 129; inputs D 64, F/2 64.
    CHECK(b.rows == 64 && b.out_cols == 128 && b.in_cols == 64,
          "tp 2 with sequence parallel in fp32: the gathered 64 rows, gate|up's 128 out, 64 in (%zu, %zu, %zu)",
          b.rows, b.out_cols, b.in_cols);
    b = llama_op_bounds(&m, 2, 32, 1, 1, 1, 0);
    CHECK(b.out_cols == 129, "tp 2 in bf16: the head's 129 rows of this rank are copied (rows 258 apart) (%zu)",
          b.out_cols);
    CHECK(b.att_scores == 2 * 2 * 128 * 128, "tp 2: cuDNN's scores for this rank's 2 heads (%zu)", b.att_scores);
    llama_free(&m);
}

// The head's bf16 output gradient in slot 0 only where a piece of it is not read in
// place: vocabulary 1024 (rows 2048 bf16 values apart, 16-byte aligned), whole, or in
// ZeRO-2/3's pieces of 300 rows (pieces from rows 300 and 900 start 8 bytes off
// 16: copied, 300 wide at most) or of 296 (every piece starts aligned), untied and tied.
static void test_head_in_place(void) {
    CHECK(ops_cuda_bf16_in_place(2048, 0) && ops_cuda_bf16_in_place(2048, 296) && !ops_cuda_bf16_in_place(2048, 300) &&
              !ops_cuda_bf16_in_place(514, 0),
          "in place: rows a multiple of 8 values apart and the first column a multiple of 8");
    for (int tied = 0; tied < 2; tied++) {
        const char *args[] = {"--model.vocab_size", "1024", "--model.tie_word_embeddings", tied ? "true" : "false"};
        Config c;
        make_cfg(&c, 1, args, 4);
        LlamaModel m;
        llama_build(&m, &c.model, model_whole());
        const size_t whole = llama_op_bounds(&m, 2, 32, 1, 1, 1, 0).out_cols;
        const size_t p300 = llama_op_bounds(&m, 2, 32, 1, 1, 1, 300 * 64).out_cols;
        const size_t p296 = llama_op_bounds(&m, 2, 32, 1, 1, 1, 296 * 64).out_cols;
        const size_t p300_32 = llama_op_bounds(&m, 2, 32, 1, 0, 0, 300 * 64).out_cols;
        const size_t zero3_weight = llama_op_bounds(&m, 2, 32, 1, 1, 0, 296 * 64).weight;
        CHECK(zero3_weight == 1024 * 64,
              "%s head, vocabulary 1024, bf16 under ZeRO-3, its pieces read in place: the weight bound is still "
              "the whole head's 1024 x 64 (%zu)", tied ? "tied" : "untied", zero3_weight);
        CHECK(whole == 256 && p300 == 300 && p296 == 256 && p300_32 == 256,
              "%s head, vocabulary 1024, bf16: whole read in place (slot 0 for gate|up's 256: %zu); pieces of 300 "
              "rows copied (%zu); of 296 in place (%zu); fp32 never copies (%zu)",
              tied ? "tied" : "untied", whole, p300, p296, p300_32);
        llama_free(&m);
    }
}

// A GPU run's predicted memory: in fp32 the CPU run's plus the workspace in
// activations; in bf16 also the bf16 copy of the weights in params, the bf16
// operand copies in the workspace, and bf16 activations (model/activations.h: a
// layer slot keeps gate|up as bf16 and no SwiGLU output, N (3F x 4 - 2F x 2) =
// 64 x 1024 bytes fewer here) for each layer of the stage in each activation slot
// of the pipeline (1f1b, pp 2: stage 0 holds 2 micro-batches in flight, stage 1 one).
static void test_planned(void) {
    const char *gpu[] = {"--training.device", "cuda", "--training.precision", "bf16", "--parallel.pp", "2"};
    const char *gpu32[] = {"--training.device", "cuda", "--training.precision", "fp32", "--parallel.pp", "2"};
    const char *cpu[] = {"--training.device", "cpu", "--parallel.pp", "2"};
    Config g, g32, c;
    make_cfg(&g, 2, gpu, 6);
    make_cfg(&g32, 2, gpu32, 6);
    make_cfg(&c, 2, cpu, 4);
    ops_set_threads(1);
    for (int stage = 0; stage < 2; stage++) {
        const GridCoords at = grid_coords(&g.parallel, stage);
        MemoryReport mg = plan_rank_memory(&g, at), m32 = plan_rank_memory(&g32, at), mc = plan_rank_memory(&c, at);
        const OpsBounds b = {.rows = 64, .in_cols = 128, .out_cols = stage ? 257 : 256, .weight = 0, .bf16 = 1};
        OpsBounds b32 = b;
        b32.bf16 = 0;
        const size_t ws = ops_cuda_workspace(&b).total, ws32 = ops_cuda_workspace(&b32).total;
        CHECK(m32.activations == mc.activations + ws32 && m32.params == mc.params,
              "pp stage %d on the GPU in fp32: activations hold %zu bytes of CUDA work buffers more than on the CPU "
              "(%zu vs %zu), params the same", stage, ws32, m32.activations, mc.activations);
        const size_t mlp = (size_t)64 * 1024 * 2 * (stage ? 1 : 2);  // 2 layers x slots in flight
        CHECK(mg.activations == m32.activations - ws32 + ws - mlp && mg.params == mc.params + 2 * (mc.params / 4),
              "pp stage %d on the GPU in bf16: activations %zu bytes = fp32's %zu with the bf16 workspace (%zu) and "
              "%zu bytes fewer for bf16 activations; params the bf16 copy", stage, mg.activations, m32.activations,
              ws, mlp);
    }
}

int main(void) {
    test_parts();
    test_bounds();
    test_head_in_place();
    test_planned();
    return check_summary();
}
