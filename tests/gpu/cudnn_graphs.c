// tests/gpu/cudnn_graphs.c — cuDNN's attention graphs for the shapes femtotron
// trains, checked by cuDNN's frontend without a GPU (cudnn_attention_check_graph
// for Hopper, sm 90): every dim, stride, type and output layout femtotron gives
// the SDPA forward and backward nodes (tests/shell/test_cuda_build.sh runs it on
// the CUDA build). A head dim cuDNN cannot take (20: not a multiple of 8) must be
// refused, so the check is not one that passes anything. Building the plans and
// running them needs the GPU: tests/gpu/gpu_ops.c's cuDNN checks.
//   cudnn_graphs   -> PASS/FAIL lines, "N passed, N failed"; SKIP where cuDNN does not load
#include <stdio.h>
#include <string.h>

#include "ops/cudnn_attention.h"

int main(void) {
    static const struct {
        const char *name;
        int B, S, H, KV, hd;
    } shapes[] = {
        {"SmolLM-1.7B", 4, 2048, 32, 32, 64}, {"SmolLM-360M", 8, 2048, 15, 5, 64},
        {"Llama-3.2-1B", 4, 2048, 32, 8, 64}, {"Llama-3.1-8B", 1, 8192, 32, 8, 128},
        {"gpu_ops hd 64", 2, 256, 4, 2, 64},   {"gpu_ops hd 128", 2, 256, 4, 2, 128},
        {"gpu_ops S 150", 2, 150, 4, 2, 64},
    };
    const char *why = cudnn_attention_check_graph(0, 1, 64, 2, 1, 64, 90);
    if (why && !strncmp(why, "cannot load libcudnn", 20)) {  // cudnn_attention.cpp's dlopen message
        printf("SKIP cuDNN's attention graphs: %s\n", why);
        printf("0 passed, 0 failed\n");
        return 0;
    }
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int backward = 0; backward < 2; backward++) {
            why = cudnn_attention_check_graph(backward, shapes[i].B, shapes[i].S, shapes[i].H, shapes[i].KV,
                                              shapes[i].hd, 90);
            printf("%s cuDNN's attention %s graph for %s (B %d S %d H %d/%d hd %d) valid for sm 90%s%s\n",
                   why ? "FAIL" : "PASS", backward ? "backward" : "forward", shapes[i].name, shapes[i].B, shapes[i].S,
                   shapes[i].H, shapes[i].KV, shapes[i].hd, why ? ": " : "", why ? why : "");
            why ? failed++ : passed++;
        }
    why = cudnn_attention_check_graph(0, 2, 256, 4, 2, 20, 90);
    printf("%s cuDNN's frontend refuses head dim 20 (not a multiple of 8)%s%s\n", why ? "PASS" : "FAIL",
           why ? ": " : "", why ? why : "");
    why ? passed++ : failed++;
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
