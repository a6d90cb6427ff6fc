// ops/blas_cores.h — which of OpenBLAS's kernel families this CPU should run, where
// OpenBLAS's own choice falls back to SSE on a CPU it does not know (ops/blas_cores.c).
#ifndef FEMTOTRON_OPS_BLAS_CORES_H
#define FEMTOTRON_OPS_BLAS_CORES_H

// The CPU's vector features that decide the family (each also needs the OS to save
// its registers: GCC's __builtin_cpu_supports checks both).
enum {
    BLAS_CPU_AVX = 1 << 0,
    BLAS_CPU_AVX2_FMA = 1 << 1,    // AVX2 and FMA3 both
    BLAS_CPU_AVX512 = 1 << 2,      // AVX-512 F, CD, BW, DQ and VL: Skylake-SP's set
    BLAS_CPU_AVX512_BF16 = 1 << 3, // AVX-512 BF16 (Cooper Lake and later)
};

// This CPU's features, as the BLAS_CPU_* bits.
unsigned blas_cpu_features(void);

// The OpenBLAS core type (an OPENBLAS_CORETYPE value) to run instead of `chosen`
// (OpenBLAS's choice, openblas_get_corename()), or NULL to keep it: a family only
// where OpenBLAS chose an SSE-only core (its fallback for models it does not know)
// and the CPU has AVX or wider. A core OpenBLAS recognised is kept.
const char *blas_core_upgrade(const char *chosen, unsigned features);

// Where femtotron chose OpenBLAS's kernels in OpenBLAS's place (ops/blas_cores.c),
// or the build is one a user chose (make BLAS=mkl, BLAS=scipy-openblas: the library,
// and the thread settings femtotron made): writes a sentence saying which and why
// into out and returns 1; else 0.
#include <stddef.h>
int blas_kernels_note(char *out, size_t size);

#endif
