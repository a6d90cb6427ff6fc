// tests/unit/test_init.c — the counter-based initialisation: Philox4x32-10 against the
// published known-answer vectors (Random123 kat_vectors), the documented Box-Muller
// mapping, and the property the layout-parity invariant rests on: any slice drawn
// on its own equals the same slice of the whole tensor.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/init.h"
#include "model/llama.h"
#include "util.h"

static void kat(const char *name, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                uint32_t k1, uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3) {
    uint32_t ctr[4] = {c0, c1, c2, c3}, key[2] = {k0, k1}, out[4];
    philox4x32(key, ctr, out);
    CHECK(out[0] == e0 && out[1] == e1 && out[2] == e2 && out[3] == e3,
          "philox4x32-10 known answer %s (got %08x %08x %08x %08x)", name, out[0], out[1], out[2],
          out[3]);
}

int main(void) {
    kat("zeros", 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
    kat("ones", 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
        0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
    kat("pi", 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
        0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);

    // The documented mapping: key = (seed lo, fnv1a32(name) ^ seed hi), counter = (i lo, i hi, 0, 0).
    const uint64_t seed = 0x123456789abcdefULL;
    const char *name = "model.layers.0.mlp.up_proj.weight";
    for (uint64_t i = 0; i < 3; i++) {
        uint64_t idx = i * 0x100000001ULL;  // exercises the high counter word
        uint32_t key[2] = {(uint32_t)seed, fnv1a32(name) ^ (uint32_t)(seed >> 32)};
        uint32_t ctr[4] = {(uint32_t)idx, (uint32_t)(idx >> 32), 0, 0}, w[4];
        philox4x32(key, ctr, w);
        double z = sqrt(-2.0 * log(((double)w[0] + 1.0) / 4294967296.0)) *
                   cos(2.0 * 3.14159265358979323846 * ((double)w[1] / 4294967296.0));
        CHECK(init_normal(seed, name, idx) == z, "init_normal(%llu) follows the documented formula",
              (unsigned long long)idx);
    }

    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 32; c.intermediate_size = 48; c.num_hidden_layers = 2;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.vocab_size = 300;
    c.initializer_range = 0.02; c.rms_norm_eps = 1e-5; c.rope_theta = 1e4;
    LlamaModel m;
    llama_build(&m, &c, model_whole());
    float *whole = xmalloc(sizeof(float) * m.num_elements, "whole");  // (num_elements)
    llama_init_params(&m, whole, 7);

    // Statistics of the embedding (9600 draws): mean ~ 0, std ~ initializer_range.
    const ParamInfo *emb = llama_find(&m, "model.embed_tokens.weight");
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < emb->numel; i++) {
        s1 += whole[emb->offset + i];
        s2 += (double)whole[emb->offset + i] * whole[emb->offset + i];
    }
    double mean = s1 / emb->numel, sd = sqrt(s2 / emb->numel - mean * mean);
    CHECK(fabs(mean) < 0.02 * 4 / sqrt((double)emb->numel) && fabs(sd / 0.02 - 1) < 0.03,
          "embedding draws: mean %.2e, std %.5f (initializer_range 0.02)", mean, sd);
    const ParamInfo *ln = llama_find(&m, "model.layers.1.input_layernorm.weight");
    int ones = 1;
    for (size_t i = 0; i < ln->numel; i++) ones &= whole[ln->offset + i] == 1.0f;
    CHECK(ones, "norm weights start at one");
    CHECK(whole[emb->offset + 5] == (float)(0.02 * init_normal(7, emb->name, 5)),
          "element 5 of the embedding is 0.02 * init_normal(seed, name, 5)");

    // Slices drawn alone equal the slices of the whole: any layout gets the same weights.
    int same = 1;
    size_t cuts[][2] = {{0, 17}, {100, 9700}, {m.num_elements - 33, m.num_elements}, {5000, 5001}};
    for (int k = 0; k < 4; k++) {
        size_t lo = cuts[k][0], hi = cuts[k][1];
        float *part = xmalloc(sizeof(float) * (hi - lo), "part");  // (hi - lo)
        llama_init_range(&m, 7, lo, hi, part);
        same &= memcmp(part, whole + lo, sizeof(float) * (hi - lo)) == 0;
        free(part);
    }
    CHECK(same, "llama_init_range slices are bit-identical to the whole-buffer init");

    float *other = xmalloc(sizeof(float) * m.num_elements, "other");
    llama_init_params(&m, other, 8);
    CHECK(memcmp(other, whole, sizeof(float) * emb->numel) != 0, "a different seed gives different weights");
    free(other);
    free(whole);
    llama_free(&m);
    return check_summary();
}
