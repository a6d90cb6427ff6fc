// ops/cudnn_attention.cpp — ops/cudnn_attention.h on cuDNN: one cudnn-frontend
// graph per shape and direction (an SDPA node, causal, bf16 in and out, fp32
// inside), built once (the slow part: cuDNN picks and compiles a kernel) and
// executed on the backend's stream every call after.
//
// Strided views, no copies: Q, K and V are views into the one q|k|v buffer (dims
// {B, heads, S, hd}, strides {S*ld, hd, ld, 1}), as are dQ, dK and dV into dqkv16;
// grouped-query attention is cuDNN's own (K and V with KV heads, H/KV queries a
// group). The backward asks for cuDNN's deterministic algorithm: the same bits
// every run, as every other op of the backend.
//
// cuDNN is dlopened (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): the frontend resolves
// every cuDNN call through cudnn_frontend::cudnn_dlhandle, defined here.
#include "ops/cudnn_attention.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>

#include <cudnn_frontend.h>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

extern "C" {
#include "util.h"
}

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { Q_UID = 1, K_UID, V_UID, O_UID, STATS_UID, DO_UID, DQ_UID, DK_UID, DV_UID };

cudnnHandle_t g_handle;
std::string g_why;     // why cuDNN is not ready ("" once it is)
bool g_tried = false;  // cudnn_attention_load ran
long g_version = 0;

using Key = std::tuple<int, int, int, int, int, int>;  // (backward, B, S, H, KV, hd)
std::map<Key, std::shared_ptr<fe::graph::Graph>> g_graphs;

// t as a view of `heads` heads of width hd in a (B*S, ld) row-major bf16 buffer,
// from the buffer's pointer (the caller offsets it to the first head's column):
// an input made with g->tensor(...) or an output the SDPA node returned.
fe::graph::Tensor_attributes &heads_view(fe::graph::Tensor_attributes &t, int64_t uid, int B, int heads, int S,
                                         int hd, int ld) {
    return t.set_uid(uid).set_dim({B, heads, S, hd}).set_stride({(int64_t)S * ld, hd, ld, 1});
}

// t as the (B, H, S) fp32 stats: the lse of ops.h.
fe::graph::Tensor_attributes &stats_view(fe::graph::Tensor_attributes &t, int B, int H, int S) {
    return t.set_uid(STATS_UID)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, H, S, 1})
        .set_stride({(int64_t)H * S, S, 1, 1});
}

// The same for an input being made (named(...)), by value for g->tensor.
fe::graph::Tensor_attributes heads_view(fe::graph::Tensor_attributes &&t, int64_t uid, int B, int heads, int S, int hd,
                                        int ld) {
    return heads_view(t, uid, B, heads, S, hd, ld);
}
fe::graph::Tensor_attributes stats_view(fe::graph::Tensor_attributes &&t, int B, int H, int S) {
    return stats_view(t, B, H, S);
}

// A named input tensor of the graph.
fe::graph::Tensor_attributes named(const char *name) { return fe::graph::Tensor_attributes().set_name(name); }

void check(const fe::error_object &e, const char *step, const Key &k) {
    if (e.is_good()) return;
    die("cuDNN attention (%s, B %d S %d H %d KV %d hd %d): %s failed: %s (set training.attention = femtotron to "
        "use femtotron's kernels)",
        std::get<0>(k) ? "backward" : "forward", std::get<1>(k), std::get<2>(k), std::get<3>(k), std::get<4>(k),
        std::get<5>(k), step, e.err_msg.c_str());
}

// dlopen cuDNN, once: "" when loaded, else dlopen's reason.
const std::string &load_library() {
    static std::string why;
    static bool tried;
    if (tried) return why;
    tried = true;
    // cuDNN 9's front library (it loads its graph and engine libraries itself):
    // from LD_LIBRARY_PATH, the CUDA toolkit's lib, or PyTorch's nvidia-cudnn wheel.
    cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!cudnn_frontend::cudnn_dlhandle) {
        const char *e = dlerror();
        why = std::string("cannot load libcudnn.so.9 (") + (e ? e : "dlopen failed") +
              "): install cuDNN 9 or put its lib folder on LD_LIBRARY_PATH";
    }
    return why;
}

// The graph for key k, defined (its tensors, the SDPA node, its outputs), not yet
// built. sm_version > 0 names the GPU generation (90: Hopper) instead of asking
// the device, for cudnn_attention_check_graph on a machine without one.
std::shared_ptr<fe::graph::Graph> define_graph(const Key &k, int sm_version) {
    const auto [backward, B, S, H, KV, hd] = k;
    const int ld = (H + 2 * KV) * hd, A = H * hd;
    auto g = std::make_shared<fe::graph::Graph>();
    if (sm_version > 0) g->set_sm_version(sm_version);  // before the nodes: they copy the context
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = g->tensor(heads_view(named("Q"), Q_UID, B, H, S, hd, ld));
    auto K = g->tensor(heads_view(named("K"), K_UID, B, KV, S, hd, ld));
    auto V = g->tensor(heads_view(named("V"), V_UID, B, KV, S, hd, ld));
    const float scale = 1.0f / sqrtf((float)hd);
    if (!backward) {
        auto opts = fe::graph::SDPA_attributes()
                        .set_name("attention_forward")
                        .set_generate_stats(true)
                        .set_causal_mask(true)
                        .set_attn_scale(scale);
        auto [O, stats] = g->sdpa(Q, K, V, opts);
        heads_view(O->set_output(true), O_UID, B, H, S, hd, A);
        stats_view(stats->set_output(true), B, H, S);
    } else {
        auto O = g->tensor(heads_view(named("O"), O_UID, B, H, S, hd, A));
        auto dO = g->tensor(heads_view(named("dO"), DO_UID, B, H, S, hd, A));
        auto stats = g->tensor(stats_view(named("stats"), B, H, S));
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("attention_backward")
                        .set_causal_mask(true)
                        .set_deterministic_algorithm(true)
                        .set_attn_scale(scale);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
        heads_view(dQ->set_output(true), DQ_UID, B, H, S, hd, ld);  // into dqkv16, as Q, K, V into qkv16
        heads_view(dK->set_output(true), DK_UID, B, KV, S, hd, ld);
        heads_view(dV->set_output(true), DV_UID, B, KV, S, hd, ld);
    }
    return g;
}

// The graph for key k, built and cached on first use.
fe::graph::Graph &graph_for(const Key &k) {
    auto it = g_graphs.find(k);
    if (it != g_graphs.end()) return *it->second;
    const char *why = cudnn_attention_load();
    if (why) die("cuDNN attention: %s", why);
    std::shared_ptr<fe::graph::Graph> g = define_graph(k, 0);
    check(g->validate(), "validate", k);
    check(g->build_operation_graph(g_handle), "build_operation_graph", k);
    check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans", k);
    check(g->check_support(g_handle), "check_support", k);
    check(g->build_plans(g_handle), "build_plans", k);
    g_graphs.emplace(k, g);
    return *g;
}

void run(const Key &k, std::unordered_map<int64_t, void *> &pack, void *workspace, void *stream) {
    fe::graph::Graph &g = graph_for(k);
    if (fe::detail::set_stream(g_handle, (cudaStream_t)stream) != CUDNN_STATUS_SUCCESS)
        die("cuDNN attention: cudnnSetStream failed");
    check(g.execute(g_handle, pack, workspace), "execute", k);
}

}  // namespace

extern "C" const char *cudnn_attention_load(void) {
    if (g_tried) return g_why.empty() ? nullptr : g_why.c_str();
    g_tried = true;
    g_why = load_library();
    if (!g_why.empty()) return g_why.c_str();
    try {
        g_version = (long)fe::detail::get_backend_version();
        const cudnnStatus_t s = fe::detail::create_handle(&g_handle);
        if (s != CUDNN_STATUS_SUCCESS)
            g_why = "cudnnCreate failed (status " + std::to_string((int)s) + ")";
    } catch (const std::exception &e) {
        g_why = std::string("cuDNN did not start: ") + e.what();
    }
    if (!g_why.empty()) g_version = 0;
    return g_why.empty() ? nullptr : g_why.c_str();
}

extern "C" long cudnn_attention_version(void) { return g_version; }

extern "C" size_t cudnn_attention_workspace(int backward, int B, int S, int H, int KV, int hd) {
    const int64_t bytes = graph_for(Key(backward != 0, B, S, H, KV, hd)).get_workspace_size();
    return bytes > 0 ? (size_t)bytes : 0;
}

extern "C" void cudnn_attention_forward(uint16_t *o16, float *lse, const uint16_t *qkv16, int B, int S, int H,
                                        int KV, int hd, void *workspace, void *stream) {
    uint16_t *qkv = const_cast<uint16_t *>(qkv16);  // cuDNN's variant pack holds void *
    std::unordered_map<int64_t, void *> pack = {
        {Q_UID, qkv}, {K_UID, qkv + (size_t)H * hd}, {V_UID, qkv + (size_t)(H + KV) * hd},
        {O_UID, o16}, {STATS_UID, lse}};
    run(Key(0, B, S, H, KV, hd), pack, workspace, stream);
}

extern "C" void cudnn_attention_backward(uint16_t *dqkv16, const uint16_t *qkv16, const uint16_t *o16,
                                         const uint16_t *do16, const float *lse, int B, int S, int H, int KV, int hd,
                                         void *workspace, void *stream) {
    uint16_t *qkv = const_cast<uint16_t *>(qkv16);
    const size_t koff = (size_t)H * hd, voff = (size_t)(H + KV) * hd;
    std::unordered_map<int64_t, void *> pack = {
        {Q_UID, qkv},          {K_UID, qkv + koff},   {V_UID, qkv + voff},
        {O_UID, const_cast<uint16_t *>(o16)},          {DO_UID, const_cast<uint16_t *>(do16)},
        {STATS_UID, const_cast<float *>(lse)},         {DQ_UID, dqkv16},
        {DK_UID, dqkv16 + koff}, {DV_UID, dqkv16 + voff}};
    run(Key(1, B, S, H, KV, hd), pack, workspace, stream);
}

extern "C" const char *cudnn_attention_check_graph(int backward, int B, int S, int H, int KV, int hd,
                                                    int sm_version) {
    static std::string why;
    why = load_library();
    if (!why.empty()) return why.c_str();
    try {
        fe::error_object e = define_graph(Key(backward != 0, B, S, H, KV, hd), sm_version)->validate();
        why = e.is_good() ? "" : e.err_msg;
    } catch (const std::exception &x) {
        why = x.what();
    }
    return why.empty() ? nullptr : why.c_str();
}
