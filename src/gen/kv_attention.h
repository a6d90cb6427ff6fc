// gen/kv_attention.h — causal grouped-query attention of new tokens over a key/value
// cache, for generation (one forward per new token, or a chunk of the prompt).
// Shapes: n new tokens, T cache positions, H query heads, KV key/value heads, hd head dim.
#ifndef FEMTOTRON_KV_ATTENTION_H
#define FEMTOTRON_KV_ATTENTION_H

// n new tokens at positions pos0 .. pos0+n-1, whose keys and values are already in
// the cache at those positions (cache rows 0 .. pos0+n-1 are valid).
//   q(n, q_stride)            query heads of token t at q + t*q_stride: H heads of hd,
//                             after RoPE (q_stride lets q point into a fused qkv row)
//   k_cache, v_cache (T, KV*hd)  keys (after RoPE) and values by position
//   out(n, H*hd)              per token the heads side by side (o_proj input)
//   scratch(threads, pos0+n)  scores; threads = omp_get_max_threads()
// Query head h uses kv head h / (H/KV); token t attends to positions 0 .. pos0+t,
// softmax(q k^T / sqrt(hd)) as Hugging Face Llama does.
void kv_attention(float *out, const float *q, int q_stride, const float *k_cache,
                  const float *v_cache, int pos0, int n, int H, int KV, int hd, float *scratch);

#endif
