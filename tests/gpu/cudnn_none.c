// tests/gpu/cudnn_none.c — ops/cudnn_attention.h for the GPU test driver built
// against the CPU backend (make build/tests/gpu_ops_cpu, tests/shell/test_cuda_build.sh:
// the CPU compared with itself, a check of the driver): the CPU build has no cuDNN,
// so it does not load, with the reason, and gpu_ops' cuDNN checks print SKIP. (The
// CPU backend also refuses ops_set_attention_cudnn(1).)
#include "ops/cudnn_attention.h"
#include "util.h"

static const char WHY[] = "the CPU build has no cuDNN (training.attention = cudnn needs ./femtotron-cuda)";

const char *cudnn_attention_load(void) { return WHY; }
long cudnn_attention_version(void) { return 0; }
size_t cudnn_attention_workspace(int backward, int B, int S, int H, int KV, int hd) {
    (void)backward, (void)B, (void)S, (void)H, (void)KV, (void)hd;
    die("cuDNN attention: %s", WHY);
}
void cudnn_attention_forward(uint16_t *o16, float *lse, const uint16_t *qkv16, int B, int S, int H, int KV, int hd,
                             void *workspace, void *stream) {
    (void)o16, (void)lse, (void)qkv16, (void)B, (void)S, (void)H, (void)KV, (void)hd, (void)workspace, (void)stream;
    die("cuDNN attention: %s", WHY);
}
void cudnn_attention_backward(uint16_t *dqkv16, const uint16_t *qkv16, const uint16_t *o16, const uint16_t *do16,
                              const float *lse, int B, int S, int H, int KV, int hd, void *workspace, void *stream) {
    (void)dqkv16, (void)qkv16, (void)o16, (void)do16, (void)lse, (void)B, (void)S, (void)H, (void)KV, (void)hd;
    (void)workspace, (void)stream;
    die("cuDNN attention: %s", WHY);
}
