// ops/blas_cores.c — OpenBLAS's kernels matched to the CPU. Debian's OpenBLAS is
// built with DYNAMIC_ARCH: as the library loads, it picks one family of kernels by
// the CPU's vendor, family and model number. A model it does not know gets its
// fallback, and 0.3.21 (Debian 12) falls back to Prescott's SSE3 kernels on Intel's
// Emerald Rapids (family 6, model 207): sgemm at 29 GFLOP/s a core where its
// SkylakeX (AVX-512) kernels run at 120 on the same core, so every CPU matrix
// product took 4x too long. OpenBLAS reads OPENBLAS_CORETYPE only as it loads, so a
// constructor here, which runs after OpenBLAS's (a library's constructors run before
// the program's) and before main, compares OpenBLAS's choice with the CPU's vector
// features; where OpenBLAS took an SSE-only core on a CPU with AVX or wider, it sets
// OPENBLAS_CORETYPE to the family the features allow and starts the program again
// (execv of /proc/self/exe, the same arguments and process id; nothing is open yet,
// no MPI, no thread, no file); the program started again says so in its start-up
// lines (blas_kernels_note). The families, widest first, in the order of
// OpenBLAS's own fallback by feature: AVX-512 with bf16 → Cooperlake, AVX-512 →
// SkylakeX, AVX2 and FMA → Haswell, AVX → Sandybridge.
//
// A user's OPENBLAS_CORETYPE is never changed (that is also what stops a second
// start), a core OpenBLAS recognised is kept (even where a wider family would run:
// that is OpenBLAS's call), and the BLIS and MKL builds (make BLAS=blis, BLAS=mkl) have
// no constructor. The build on PyPI's OpenBLAS (make BLAS=scipy-openblas), whose
// threads are its own, starts again for its thread settings too (pthread_blas_env).
#define _POSIX_C_SOURCE 200809L  // setenv, execv, readlink
#include "ops/blas_cores.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"
#include "ops/blas_api.h"
#include "ops/ops.h"

unsigned blas_cpu_features(void) {
    __builtin_cpu_init();  // needed before main: the constructor below calls this
    unsigned f = 0;
    if (__builtin_cpu_supports("avx")) f |= BLAS_CPU_AVX;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= BLAS_CPU_AVX2_FMA;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        f |= BLAS_CPU_AVX512;
    if ((f & BLAS_CPU_AVX512) && __builtin_cpu_supports("avx512bf16")) f |= BLAS_CPU_AVX512_BF16;
    return f;
}

// OpenBLAS's x86-64 core names (driver/others/dynamic.c) whose kernels use AVX or
// wider; every other x86 name (Prescott, Core2, Nehalem, Atom, Opteron, Barcelona,
// ...) is an SSE core.
static int is_vector_core(const char *name) {
    static const char *const wide[] = {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator",
                                       "Haswell",     "Zen",       "SkylakeX",   "Cooperlake",  "SapphireRapids"};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (strcmp(name, wide[i]) == 0) return 1;
    return 0;
}

const char *blas_core_upgrade(const char *chosen, unsigned features) {
    if (chosen == NULL || is_vector_core(chosen)) return NULL;
    if (features & BLAS_CPU_AVX512_BF16) return "Cooperlake";
    if (features & BLAS_CPU_AVX512) return "SkylakeX";
    if (features & BLAS_CPU_AVX2_FMA) return "Haswell";
    if (features & BLAS_CPU_AVX) return "Sandybridge";
    return NULL;
}

#if !defined(FEMTOTRON_BLIS) && !defined(FEMTOTRON_MKL)
char *openblas_get_corename(void);  // declared in OpenBLAS's cblas.h on some builds only

typedef struct {
    const char *name, *value;
} EnvSetting;

#ifdef FEMTOTRON_SCIPY_OPENBLAS
// PyPI's scipy-openblas32 (make BLAS=scipy-openblas) runs its own pool of threads
// (pthreads), beside OpenMP's, where Debian's OpenMP build shares OpenMP's. Both
// pools spin for a while when idle, waiting for the next call: after each product
// OpenBLAS's thread spins on the second core while OpenMP's element-wise kernels want
// it, and OpenMP's spins while the next product wants it. On the 2-core machine that
// cost the small training config 0.70x its tokens/s (612-722 against 867-1015
// with Debian's OpenBLAS). With both pools told to sleep at once (OpenBLAS's shortest
// timeout, 2^4 cycles, and OpenMP's passive waiting) it trains at Debian's speed
// (0.98x small, 1.01x gpt2: bench/results/train_vs_pytorch_2026-11-30_amd_scipy.md).
// Both libraries read these only as they load, so they are set here, where the user
// has not set them, and the program started again.
static const EnvSetting pthread_blas_env[] = {{"OPENBLAS_THREAD_TIMEOUT", "4"}, {"OMP_WAIT_POLICY", "passive"}};
enum { PTHREAD_BLAS_ENV = sizeof pthread_blas_env / sizeof pthread_blas_env[0] };
#else
static const EnvSetting pthread_blas_env[] = {{NULL, NULL}};
enum { PTHREAD_BLAS_ENV = 0 };  // Debian's OpenBLAS runs on OpenMP's threads
#endif

// glibc calls a constructor with main's arguments (as it does every .init_array entry).
__attribute__((constructor)) static void blas_match_cpu(int argc, char **argv, char **envp) {
    (void)envp;
    if (argc < 1 || argv == NULL) return;
    const char *chosen = openblas_get_corename();
    const char *core = getenv("OPENBLAS_CORETYPE") ? NULL : blas_core_upgrade(chosen, blas_cpu_features());
    int missing[PTHREAD_BLAS_ENV + 1], n_missing = 0;  // pthread_blas_env's entries the user left unset
    for (int i = 0; i < PTHREAD_BLAS_ENV; i++)
        if (getenv(pthread_blas_env[i].name) == NULL) missing[n_missing++] = i;
    if (core == NULL && n_missing == 0) return;
    // Started through the dynamic loader (ld-linux-x86-64.so.2 ./femtotron ...),
    // /proc/self/exe is the loader, which these arguments would not start: keep
    // OpenBLAS's choice there.
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return;
    exe[len] = '\0';
    const char *base = strrchr(exe, '/');
    if (strncmp(base ? base + 1 : exe, "ld-", 3) == 0) return;
    // FEMTOTRON_BLAS_FALLBACK tells the program started again what OpenBLAS chose, and
    // FEMTOTRON_BLAS_THREADS which thread settings femtotron made (blas_kernels_note);
    // they travel to any program it starts in turn.
    // Every setting must be in place before the start again: one missing would be
    // missing there too, and the program would start again for ever.
    char made[128] = "";
    int set = 1;
    for (int i = 0; i < n_missing; i++) {
        const char *name = pthread_blas_env[missing[i]].name, *value = pthread_blas_env[missing[i]].value;
        size_t used = strlen(made);
        snprintf(made + used, sizeof made - used, "%s%s=%s", used ? " " : "", name, value);
        set = set && setenv(name, value, 1) == 0;
    }
    if (n_missing) set = set && setenv("FEMTOTRON_BLAS_THREADS", made, 1) == 0;
    if (core)
        set = set && setenv("OPENBLAS_CORETYPE", core, 1) == 0 && setenv("FEMTOTRON_BLAS_FALLBACK", chosen, 1) == 0;
    if (set) execv("/proc/self/exe", argv);
    int err = errno;  // setenv or the start failed: carry on as loaded, slower but right
    for (int i = 0; i < n_missing; i++) unsetenv(pthread_blas_env[missing[i]].name);
    unsetenv("FEMTOTRON_BLAS_THREADS");
    if (core) {
        unsetenv("OPENBLAS_CORETYPE");
        unsetenv("FEMTOTRON_BLAS_FALLBACK");
    }
    if (comm_launched_rank() != 0) return;
    if (core)
        fprintf(stderr, "femtotron: warning: OpenBLAS chose its %s kernels (SSE) on a CPU with wider vectors, and "
                "starting again with OPENBLAS_CORETYPE=%s failed (%s): matrix products run slower\n",
                chosen, core, strerror(err));
    if (n_missing)
        fprintf(stderr, "femtotron: warning: starting again with %s failed (%s): OpenBLAS's threads and OpenMP's "
                "spin against each other, and matrix products run slower\n", made, strerror(err));
}

// The kernels OpenBLAS loaded (its name for them: OPENBLAS_CORETYPE's value may be
// an alias, SapphireRapids loading Cooperlake's on 0.3.21), where femtotron chose
// them; in the scipy-openblas build the library, always (a choice the user made, as
// make BLAS=mkl), and the thread settings femtotron made.
int blas_kernels_note(char *out, size_t size) {
    const char *fallback = getenv("FEMTOTRON_BLAS_FALLBACK"), *core = getenv("OPENBLAS_CORETYPE");
    size_t used = 0;
    out[0] = '\0';
#ifdef FEMTOTRON_SCIPY_OPENBLAS
    char name[200];
    ops_blas_name(name, sizeof name);
    const char *threads = getenv("FEMTOTRON_BLAS_THREADS");
    used += (size_t)snprintf(out, size, "%s (make BLAS=scipy-openblas: its own threads beside OpenMP's%s%s)", name,
                             threads ? "; idle ones sleep at once: femtotron set " : "", threads ? threads : "");
#endif
    if (fallback != NULL && core != NULL && used < size)
        used += (size_t)snprintf(out + used, size - used,
                                 "%sOpenBLAS's %s kernels, chosen by femtotron (OPENBLAS_CORETYPE=%s): OpenBLAS took "
                                 "this CPU for %s (SSE), its fallback for a CPU it does not know; set "
                                 "OPENBLAS_CORETYPE yourself to choose",
                                 used ? "; " : "", openblas_get_corename(), core, fallback);
    return used > 0;
}
#elif defined(FEMTOTRON_MKL)
// oneMKL chooses its kernels by the CPU's features; the line names the library, as
// the MKL build (make BLAS=mkl) is a choice a user made and may want to see taken.
int blas_kernels_note(char *out, size_t size) {
    char name[200];
    ops_blas_name(name, sizeof name);
    snprintf(out, size, "%s (make BLAS=mkl)", name);
    return 1;
}
#else
int blas_kernels_note(char *out, size_t size) {  // BLIS chooses its own kernels
    (void)out, (void)size;
    return 0;
}
#endif
