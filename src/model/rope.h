// model/rope.h — the rotary position embedding's frequencies of a model: plain RoPE
// (Su et al. 2021), or scaled for a longer context as Hugging Face's
// ROPE_INIT_FUNCTIONS do for "linear" (position interpolation, Chen et al. 2023)
// and "llama3" (Llama 3.1/3.2). The tables of cos/sin built from them are the
// kernels' job (ops/ops.h: rope_tables).
#ifndef FEMTOTRON_ROPE_H
#define FEMTOTRON_ROPE_H

#include "config.h"

// freq(hd/2): the inverse frequency of each rotated pair i of a head of hd
// dimensions, in double precision:
//   plain    f_i = theta^(-2i/hd)
//   linear   f_i / factor                          (every position divided by factor)
//   llama3   with wavelength w_i = 2 pi / f_i, L = original_max_position_embeddings,
//            w_hi = L / high_freq_factor, w_lo = L / low_freq_factor:
//              w_i < w_hi           f_i            (high frequencies kept)
//              w_i > w_lo           f_i / factor   (low frequencies interpolated)
//              otherwise            (1 - s) f_i / factor + s f_i,
//                                   s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor)
// Neither scaling changes the attention temperature (attention_factor 1).
void rope_frequencies(const ModelConfig *mc, int hd, double *freq);
// Plain RoPE of base theta (no model config): f_i = theta^(-2i/hd).
void rope_plain_frequencies(int hd, double theta, double *freq);

#endif
