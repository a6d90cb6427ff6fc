// model/llama_build.c — a rank's model: its shard (ModelShard), the parameter
// table of its flat buffer (model/param_table.h), and what the rest of the program
// asks of the model's shape (sizes, FLOPs, units, local tokens).
#include "model/llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama_layer.h"
#include "model/moe.h"
#include "model/param_access.h"
#include "model/rope.h"
#include "ops/ops.h"
#include "util.h"

// Append one tensor to the table (when the table exists; the first pass only counts)
// and return its offset in the flat buffer. cols == 0 means a 1-D tensor. The
// slice held here follows `split`: `parts` equal slices of the split dimension,
// this rank's being number m->tp_rank; `valid_rows` < the slice for vocab padding.
// expert: one of a mixture-of-experts expert's tensors; held == 0 (an expert
// another expert-parallel rank holds): listed with its global shape, but nothing of
// it is here (no rows, no elements).
static size_t add_param_ex(LlamaModel *m, int *count, size_t *offset, const char *name, int64_t rows,
                           int64_t cols, SplitKind split, int expert, int held) {
    int64_t lrows = rows, lcols = cols > 0 ? cols : 1, start = 0, valid = 0;
    const int tp = m->tp.size, tp_rank = m->tp.rank;
    if (split == SPLIT_ROWS) {
        lrows = (rows + tp - 1) / tp;  // vocab rows are padded to a multiple of tp
        start = lrows * tp_rank;
        valid = rows - start < 0 ? 0 : (rows - start < lrows ? rows - start : lrows);
    } else if (split == SPLIT_COLS) {
        lcols = cols / tp;
        start = lcols * tp_rank;
        valid = lcols;
    }
    if (!held) lrows = valid = 0;
    size_t at = *offset, numel = (size_t)lrows * (size_t)lcols;
    if (m->params) {
        ParamInfo *p = &m->params[*count];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = cols > 0 ? 2 : 1;
        p->shape[0] = rows;
        p->shape[1] = cols > 0 ? cols : 1;
        p->local_shape[0] = lrows;
        p->local_shape[1] = lcols;
        p->split = split;
        p->start = start;
        p->valid = valid;
        p->replica_writer = split != SPLIT_NONE || tp_rank == 0;
        p->offset = at;
        p->numel = numel;
        p->weight_decay = p->ndim >= 2;
        p->expert = expert;
    }
    (*count)++;
    *offset += numel;
    return at;
}

static size_t add_param(LlamaModel *m, int *count, size_t *offset, const char *name,
                        int64_t rows, int64_t cols, SplitKind split) {
    return add_param_ex(m, count, offset, name, rows, cols, split, 0, 1);
}

int64_t param_global_index(const ParamInfo *p, size_t e) {
    if (p->split == SPLIT_NONE) return (int64_t)e;
    int64_t i = (int64_t)e / p->local_shape[1], j = (int64_t)e % p->local_shape[1];
    if (p->split == SPLIT_ROWS) return i < p->valid ? (p->start + i) * p->shape[1] + j : -1;
    return i * p->shape[1] + p->start + j;
}

// Walk the tensors in buffer order; a first pass counts, a second fills the table.
static void layout_params(LlamaModel *m) {
    int count = 0;
    size_t off = 0;
    char name[PARAM_NAME_MAX];
    const int D = m->D, F = m->F, q_rows = m->H * m->hd, kv_rows = m->KV * m->hd;
    m->embed = add_param(m, &count, &off, "model.embed_tokens.weight", m->V, D, SPLIT_ROWS);
    for (int l = 0; l < m->L; l++) {
        LayerOffsets lo;
#define LAYER_PARAM(suffix, rows, cols, split) \
    (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), \
     add_param(m, &count, &off, name, rows, cols, split))
        lo.ln1 = LAYER_PARAM("input_layernorm.weight", D, 0, SPLIT_NONE);
        lo.qkv = LAYER_PARAM("self_attn.q_proj.weight", q_rows, D, SPLIT_ROWS);  // q, k, v adjacent:
        LAYER_PARAM("self_attn.k_proj.weight", kv_rows, D, SPLIT_ROWS);          // one fused GEMM
        LAYER_PARAM("self_attn.v_proj.weight", kv_rows, D, SPLIT_ROWS);
        lo.o = LAYER_PARAM("self_attn.o_proj.weight", D, q_rows, SPLIT_COLS);
        lo.ln2 = LAYER_PARAM("post_attention_layernorm.weight", D, 0, SPLIT_NONE);
        if (m->E > 0) {  // Mixtral's sparse block (model/moe.h)
            lo.gate_up = lo.down = 0;
            lo.router = LAYER_PARAM("block_sparse_moe.gate.weight", m->E, D, SPLIT_NONE);
            if (m->Fs > 0) {  // shared experts: one SwiGLU of width Fs, tensor-split like the dense MLP
                lo.gate_up = LAYER_PARAM("block_sparse_moe.shared_experts.gate_proj.weight", m->Fs, D, SPLIT_ROWS);
                LAYER_PARAM("block_sparse_moe.shared_experts.up_proj.weight", m->Fs, D, SPLIT_ROWS);
                lo.down = LAYER_PARAM("block_sparse_moe.shared_experts.down_proj.weight", D, m->Fs, SPLIT_COLS);
            }
            // The experts last, so that under expert parallelism the layer is its dense
            // part then its experts (model/param_access.h: two pieces). This rank holds
            // experts [e0, e0 + El) of its expert-parallel rank; the others are listed
            // with nothing held.
            const int El = m->E / m->ep.size, e0 = m->ep.rank * El;
            lo.experts = off;
            for (int e = 0; e < m->E; e++) {  // w1, w3 adjacent (one fused gate|up GEMM), then w2
                const int held = e >= e0 && e < e0 + El;
#define EXPERT_PARAM(w, rows, cols, split) \
    (snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, w), \
     add_param_ex(m, &count, &off, name, rows, cols, split, 1, held))
                EXPERT_PARAM("w1", F, D, SPLIT_ROWS);
                EXPERT_PARAM("w3", F, D, SPLIT_ROWS);
                EXPERT_PARAM("w2", D, F, SPLIT_COLS);
#undef EXPERT_PARAM
            }
        } else {
            lo.router = lo.experts = 0;
            lo.gate_up = LAYER_PARAM("mlp.gate_proj.weight", F, D, SPLIT_ROWS);  // gate, up adjacent:
            LAYER_PARAM("mlp.up_proj.weight", F, D, SPLIT_ROWS);                 // one fused GEMM
            lo.down = LAYER_PARAM("mlp.down_proj.weight", D, F, SPLIT_COLS);
        }
#undef LAYER_PARAM
        if (m->layer) m->layer[l] = lo;
    }
    m->final_norm = add_param(m, &count, &off, "model.norm.weight", D, 0, SPLIT_NONE);
    m->head = m->cfg.tie_word_embeddings
                  ? m->embed
                  : add_param(m, &count, &off, "lm_head.weight", m->V, D, SPLIT_ROWS);
    m->n_params = count;
    m->num_elements = off;
    if (m->unit_lo) {  // units: embedding | layer 0 | ... | layer L-1 | final norm (+ head)
        m->unit_lo[0] = 0;
        for (int l = 0; l < m->L; l++) m->unit_lo[1 + l] = m->layer[l].ln1;
        m->unit_lo[m->L + 1] = m->final_norm;
        m->unit_lo[m->L + 2] = off;
    }
}

ModelShard model_whole(void) { return model_tp_shard(1, 0, 0); }

ModelShard model_tp_shard(int size, int rank, int sp) {
    ModelShard s = {tp_group(size, rank, sp), {1, 0}, RECOMPUTE_NONE, {1, 0}, 0, 0, 0, 0};
    return s;
}

ModelShard model_shard_of(const Config *cfg, GridCoords at) {
    const ParallelConfig *p = &cfg->parallel;
    ModelShard s = {tp_group(p->tp, at.tp, p->sequence_parallel), {p->cp, at.cp},
                    cfg->training.recompute, {p->ep, grid_ep_rank(p, at)},
                    cfg->training.precision == PRECISION_BF16,
                    cfg->training.precision == PRECISION_BF16 && cfg->training.attention == ATTENTION_CUDNN,
                    cfg->training.keep_bf16_inputs, cfg->training.precision == PRECISION_BF16};
    return s;
}

void llama_build(LlamaModel *m, const ModelConfig *cfg, ModelShard shard) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->D = cfg->hidden_size;
    m->F = cfg->intermediate_size;
    m->L = cfg->num_hidden_layers;
    m->H = cfg->num_attention_heads;
    m->KV = cfg->num_key_value_heads;
    m->hd = model_head_dim(cfg);
    m->V = cfg->vocab_size;
    m->tp = shard.tp;
    m->cp = shard.cp;
    m->recompute = shard.recompute;
    m->ep = shard.ep;
    m->vocab = tp_vocab_shard(&m->tp, m->V);
    m->Hl = m->H / m->tp.size;
    m->KVl = m->KV / m->tp.size;
    m->Fl = m->F / m->tp.size;
    m->Vl = m->vocab.rows;
    m->E = cfg->num_local_experts;
    m->K = m->E > 0 ? cfg->num_experts_per_tok : 0;
    m->moe_aux = m->E > 0 && cfg->output_router_logits;
    m->mlp_bf16 = shard.bf16_acts && m->E == 0;  // a Mixtral block keeps its rows in fp32 (model/moe.h)
    m->qkv_bf16 = shard.bf16_acts;
    m->att_bf16 = shard.bf16_acts && shard.att_bf16;
    m->inputs16_kept = shard.keep16 && m->mlp_bf16 && m->recompute != RECOMPUTE_FULL;
    m->dres16_mlp = shard.products16 && m->mlp_bf16;
    m->dres16_o = shard.products16 && m->att_bf16;
    if (m->att_bf16 && m->cp.size > 1)  // config_validate refuses training.attention = cudnn with cp > 1
        die("bf16 q|k|v for cuDNN's attention need context parallel 1 (got %d): the ring's blocks are femtotron's",
            m->cp.size);
    if (shard.bf16_acts && m->D % 2)  // the norms' bf16 outputs travel as float pairs (tensor_parallel.c)
        die("training.precision = bf16 needs an even hidden_size (got %d)", m->D);
    m->Fs = m->E > 0 ? cfg->n_shared_experts * m->F : 0;
    m->Fsl = m->Fs / m->tp.size;
    layout_params(m);  // count
    m->params = xcalloc(sizeof(ParamInfo) * (size_t)m->n_params, "parameter table");
    m->layer = xcalloc(sizeof(LayerOffsets) * (size_t)m->L, "layer offsets");
    m->n_units = m->L + 2;
    m->unit_lo = xcalloc(sizeof(size_t) * (size_t)(m->n_units + 1), "unit offsets");
    layout_params(m);  // fill
    m->rope_freq = xmalloc(sizeof(double) * (size_t)(m->hd / 2 > 0 ? m->hd / 2 : 1), "RoPE frequencies");
    rope_frequencies(cfg, m->hd, m->rope_freq);
}

void llama_free(LlamaModel *m) {
    free(m->params);
    free(m->layer);
    free(m->unit_lo);
    free(m->rope_freq);
    memset(m, 0, sizeof *m);
}

const ParamInfo *llama_find(const LlamaModel *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

size_t llama_global_params(const LlamaModel *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        n += (size_t)m->params[i].shape[0] * (size_t)m->params[i].shape[1];
    return n;
}

size_t llama_matmul_params(const LlamaModel *m) {
    size_t qkv = (size_t)(m->H + 2 * m->KV) * m->hd;
    size_t mlp = m->E > 0 ? (size_t)m->E * m->D + (size_t)m->K * 3 * m->D * m->F  // router + k experts
                                + 3 * (size_t)m->D * m->Fs                             // + shared experts
                          : 3 * (size_t)m->D * m->F;
    size_t per_layer = (size_t)m->D * qkv + (size_t)m->H * m->hd * m->D + mlp;
    return (size_t)m->L * per_layer + (size_t)m->V * m->D;  // + output head
}

double llama_flops_per_token(const LlamaModel *m, int seq_length) {
    return 6.0 * (double)llama_matmul_params(m) + 6.0 * m->L * (double)seq_length * m->H * m->hd;
}


int llama_rows(const LlamaModel *m, int N) { return tp_rows(&m->tp, N); }

static size_t max_of(const size_t *x, int n) {
    size_t best = 0;
    for (int i = 0; i < n; i++) best = x[i] > best ? x[i] : best;
    return best;
}

// The widest piece of the head's bf16 output gradient (dlogits, rows CE_LD16(Vl)
// apart, written by the loss) that the products cannot read where it lies, and so
// copy into slot 0 (ops_cuda_bf16_in_place): its rows not 16-byte aligned (Vl not a
// multiple of 4), or a piece (ZeRO-2/3's windows, piece_max) starting at a row r0
// that is not a multiple of 8. 0 when every piece is read in place: at SmolLM-1.7B's
// micro-batch of 8192 tokens that keeps 8192 x 49152 bf16 values (805 MB; 2.1 GB at
// Llama-3.2-1B's vocabulary) out of slot 0, which the other products size (268 MB).
static size_t head_copied_cols(const LlamaModel *m, size_t piece_max) {
    const int tied = m->cfg.tie_word_embeddings, uh = tied ? 0 : m->L + 1;
    const size_t hoff = tied ? m->embed : m->head;
    size_t widest = 0;
    for (int k = 0; k < llama_unit_n_pieces(m, uh, piece_max); k++) {  // as head_backward walks them
        size_t lo, hi;
        int r0, r1;
        llama_unit_piece(m, uh, piece_max, k, &lo, &hi);
        llama_piece_rows(m, hoff, m->Vl, lo, hi, &r0, &r1);
        if (r1 > r0 && !ops_cuda_bf16_in_place(CE_LD16(m->Vl), (size_t)r0) && (size_t)(r1 - r0) > widest)
            widest = (size_t)(r1 - r0);
    }
    return widest;
}

OpsBounds llama_op_bounds(const LlamaModel *m, int B, int S, int has_head, int bf16, int weights_kept,
                          size_t piece_max) {
    const size_t N = (size_t)B * S, D = (size_t)m->D, Fl = (size_t)m->Fl, Fsl = (size_t)m->Fsl;
    const size_t QKV = (size_t)(m->Hl + 2 * m->KVl) * m->hd, A = (size_t)m->Hl * m->hd;
    // The head's product only where it is, and its output gradient only where a piece
    // of it is copied (bf16 products; in fp32 no product copies anything).
    const size_t Vl = has_head ? (size_t)m->Vl : 0;  // the head's rows, where it is
    const size_t head_copy = has_head && bf16 ? head_copied_cols(m, piece_max) : 0;
    const size_t E = (size_t)m->E;
    // Every product of llama.c, llama_split.c, moe.c and tensor_parallel.c, as
    // (out_dim, in_dim): q|k|v, o, gate|up, down (dense, or the shared experts at
    // Fsl), the head's copied pieces, the router, an expert's w1|w3 and w2 (Fl wide: tp's slice).
    const size_t outs[] = {QKV, D, 2 * Fl, 2 * Fsl, head_copy, E};
    const size_t ins[] = {D, A, Fl, Fsl};
    OpsBounds b = {0};
    b.bf16 = bf16;
    // Rows: the micro-batch's N tokens (sequence parallel gathers them whole before
    // a product), or an expert's rows, at most all R this rank's experts receive.
    b.rows = N;
    b.att_qkv = N * QKV;  // attention's q|k|v and output (cuDNN's copies: training.attention)
    b.att_out = N * A;
    b.att_scores = ops_cuda_cudnn_scores((size_t)B, (size_t)m->Hl, (size_t)S);
    if (m->E > 0) {
        const MoeDims md = {(int)N, B, S, m->D, m->Fl, m->E, m->K, m->ep};
        const size_t R = moe_expert_rows(&md);
        b.rows = R > b.rows ? R : b.rows;
    }
    b.out_cols = max_of(outs, (int)(sizeof outs / sizeof outs[0]));
    b.in_cols = max_of(ins, (int)(sizeof ins / sizeof ins[0]));
    if (bf16 && !weights_kept) {  // ZeRO-3: every weight is rounded where it was gathered
        const size_t w[] = {ops_cuda_operand_elements(QKV, D), ops_cuda_operand_elements(D, A),
                            ops_cuda_operand_elements(2 * Fl, D), ops_cuda_operand_elements(D, Fl),
                            ops_cuda_operand_elements(2 * Fsl, D), ops_cuda_operand_elements(D, Fsl),
                            ops_cuda_operand_elements(Vl, D), ops_cuda_operand_elements(E, D)};
        b.weight = max_of(w, (int)(sizeof w / sizeof w[0]));
    }
    return b;
}

void llama_local_tokens(const LlamaModel *m, const int32_t *full, int32_t *local, int B,
                        int seq_length) {
    if (m->cp.size == 1) {
        memcpy(local, full, sizeof(int32_t) * (size_t)B * seq_length);
        return;
    }
    cp_take_local(full, local, B, seq_length, m->cp.size, m->cp.rank);
}

StageUnits llama_all_units(const LlamaModel *m) {
    StageUnits su = {0, m->L + 1};
    return su;
}
