#!/usr/bin/env bash
# tests/shell/test_blas_cores.sh — OpenBLAS's kernels matched to the CPU
# (ops/blas_cores.c): where OpenBLAS falls back to an SSE core on a CPU it does not
# know, femtotron starts again with OPENBLAS_CORETYPE set to the family the CPU's
# features allow, once, its start-up lines saying so (once per job); a user's
# OPENBLAS_CORETYPE is kept; where it cannot be set, no start again (2a).
# OPENBLAS_VERBOSE=2 makes OpenBLAS print "Core: NAME" each time it loads, so the
# lines count the starts and name the kernels each start ran. A CPU OpenBLAS knows is
# made to look unknown by a preloaded openblas_get_corename that answers "Prescott"
# (OpenBLAS itself still loads the kernels OPENBLAS_CORETYPE names).
. "$(dirname "$0")/lib.sh"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
# The family this CPU's features allow, in ops/blas_cores.c's order.
if has avx512f && has avx512cd && has avx512bw && has avx512dq && has avx512vl; then
    if has avx512_bf16; then want=Cooperlake; else want=SkylakeX; fi
elif has avx2 && has fma; then want=Haswell
elif has avx; then want=Sandybridge
else want=""; fi
cores() { sed -n 's/^Core: //p' "$1" | tr '\n' ' ' | sed 's/ $//'; }  # one name a start
notes() { grep -c "^BLAS: OpenBLAS's .* kernels, chosen by femtotron" "$1"; }  # train's start-up line
sse_core() { case "$1" in Sandybridge|Bulldozer|Piledriver|Steamroller|Excavator|Haswell|Zen|SkylakeX|Cooperlake|SapphireRapids) return 1 ;; esac; }
run() {  # run LOG [ENV=VALUE ...]: femtotron bench peak, OpenBLAS saying which kernels it loads
    local log=$1; shift
    env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 "$@" "$FT" bench peak --threads 1 --size 128 --seconds 0.05 >"$log" 2>&1
}

# 1. A user's OPENBLAS_CORETYPE is kept: one start, no note.
run "$tmp/user.log" OPENBLAS_CORETYPE=Prescott
[ "$(cores "$tmp/user.log")" = Prescott ] && grep -q '^gemm_peak_gflops' "$tmp/user.log" &&
    pass "OPENBLAS_CORETYPE=Prescott set by the user: kept (one start, Core: Prescott)" ||
    failed "the user's OPENBLAS_CORETYPE: $(cat "$tmp/user.log")"

# 2. OpenBLAS's fallback corrected: its choice reported as Prescott.
cat >"$tmp/prescott.c" <<'C'
char *openblas_get_corename(void) { return "Prescott"; }
C
gcc -shared -fPIC -o "$tmp/prescott.so" "$tmp/prescott.c" || { failed "build the preloaded openblas_get_corename"; exit 1; }
run "$tmp/fallback.log" LD_PRELOAD="$tmp/prescott.so"
got=$(cores "$tmp/fallback.log")
if [ -n "$want" ]; then
    # two starts: OpenBLAS's own choice, then $want
    [ "${got##* }" = "$want" ] && [ "$(wc -w <<<"$got")" = 2 ] && grep -q '^gemm_peak_gflops' "$tmp/fallback.log" &&
        pass "OpenBLAS falling back to Prescott: started again once, on $want's kernels (starts: $got)" ||
        failed "fallback to Prescott on a CPU for $want: starts '$got', log: $(cat "$tmp/fallback.log")"
else
    [ "$(wc -w <<<"$got")" = 1 ] &&
        pass "OpenBLAS falling back to Prescott on a CPU without AVX: kept" ||
        failed "no AVX: starts '$got', log: $(cat "$tmp/fallback.log")"
fi

# 2a. Where setting OPENBLAS_CORETYPE fails (a preloaded setenv refuses it, as with no
# memory left), no start again (it would start again for ever): a warning naming the
# error, OpenBLAS's choice kept, the program runs.
if [ -n "$want" ]; then
    cat >"$tmp/nosetenv.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
char *openblas_get_corename(void) { return "Prescott"; }
int setenv(const char *name, const char *value, int overwrite) {
    if (strcmp(name, "OPENBLAS_CORETYPE") == 0) { errno = ENOMEM; return -1; }
    int (*next)(const char *, const char *, int) = (int (*)(const char *, const char *, int))dlsym(RTLD_NEXT, "setenv");
    return next(name, value, overwrite);
}
C
    gcc -shared -fPIC -o "$tmp/nosetenv.so" "$tmp/nosetenv.c" -ldl || { failed "build the preloaded setenv"; exit 1; }
    timeout 60 env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 LD_PRELOAD="$tmp/nosetenv.so" "$FT" bench peak --threads 1 \
        --size 128 --seconds 0.05 >"$tmp/nosetenv.log" 2>&1
    rc=$?
    [ $rc = 0 ] && [ "$(wc -w <<<"$(cores "$tmp/nosetenv.log")")" = 1 ] && grep -q '^gemm_peak_gflops' "$tmp/nosetenv.log" &&
        grep -q "starting again with OPENBLAS_CORETYPE=$want failed (Cannot allocate memory)" "$tmp/nosetenv.log" &&
        pass "OPENBLAS_CORETYPE could not be set: one start, a warning, the program runs ($(grep -o 'starting again.*' "$tmp/nosetenv.log" | cut -c1-70)...)" ||
        failed "OPENBLAS_CORETYPE refused by setenv: exit $rc, starts '$(cores "$tmp/nosetenv.log" | cut -c1-80)', log: $(grep -v '^Core' "$tmp/nosetenv.log" | head -n 5)"
fi

# 2b. Started through the dynamic loader, /proc/self/exe is the loader: no start again
# (the arguments would not start it), OpenBLAS's choice kept, the program runs.
loader=$(ldd "$FT" | awk '/ld-linux/ { print $1; exit }')
if [ -x "$loader" ]; then
    env -u OPENBLAS_CORETYPE OPENBLAS_VERBOSE=2 LD_PRELOAD="$tmp/prescott.so" "$loader" "$FT" bench peak --threads 1 \
        --size 128 --seconds 0.05 >"$tmp/loader.log" 2>&1
    rc=$?
    [ $rc = 0 ] && [ "$(wc -w <<<"$(cores "$tmp/loader.log")")" = 1 ] && grep -q '^gemm_peak_gflops' "$tmp/loader.log" &&
        pass "started through $loader: OpenBLAS's choice kept, no second start, the program runs" ||
        failed "through the loader (rc $rc): $(cat "$tmp/loader.log")"
fi

# 3. This machine as it is: OpenBLAS's own choice, corrected only where it is an SSE core.
run "$tmp/own.log"
got=$(cores "$tmp/own.log")
first=${got%% *}
if sse_core "$first" && [ -n "$want" ]; then
    [ "$got" = "$first $want" ] &&
        pass "this CPU: OpenBLAS chose $first, femtotron runs $want's kernels" ||
        failed "this CPU: starts '$got' (want '$first $want')"
else
    [ "$got" = "$first" ] &&
        pass "this CPU: OpenBLAS's own choice $first kept (one start)" ||
        failed "this CPU: starts '$got' (want '$first' alone)"
fi

# 4. Under mpirun: every rank starts again before MPI starts, one note for the job.
tiny=(--data.train "$tmp/data/train_*.bin" --training.seq_length 16 --training.micro_batch_size 1
      --training.global_batch_size 2 --model.hidden_size 32 --model.intermediate_size 64 --model.num_hidden_layers 1
      --model.num_attention_heads 2 --model.num_key_value_heads 1 --training.threads 1 --training.steps 2
      --training.peak_flops 1e9 --checkpoint.dir "$tmp/ck")
fortunes_data
OPENBLAS_CORETYPE=Haswell "$FT" train "${tiny[@]}" >"$tmp/user_train.log" 2>&1 && [ "$(notes "$tmp/user_train.log")" = 0 ] &&
    ! grep -q '^BLAS:' "$tmp/user_train.log" && grep -q '^step     2/2' "$tmp/user_train.log" &&
    pass "OPENBLAS_CORETYPE=Haswell set by the user: train's start-up lines say nothing of the BLAS" ||
    failed "train with the user's OPENBLAS_CORETYPE: $(grep -m3 -e '^BLAS' -e error "$tmp/user_train.log")"
if [ -n "$want" ]; then
    rm -rf "$tmp/ck"
    mpirun --oversubscribe --allow-run-as-root -np 2 -x OPENBLAS_VERBOSE=2 -x LD_PRELOAD="$tmp/prescott.so" \
        env -u OPENBLAS_CORETYPE "$FT" train "${tiny[@]}" --parallel.dp 2 >"$tmp/mpi.log" 2>&1
    rc=$?
    got=$(cores "$tmp/mpi.log")
    # 4 starts, two a rank, the ranks' lines interleaved: the second of each is $want's,
    # and the first OpenBLAS's own choice, which may be $want too (as on AMD's Zen 4,
    # Cooperlake): at least 2 of the 4 then.
    [ $rc = 0 ] && [ "$(grep -o "$want" <<<"$got" | wc -l)" -ge 2 ] && [ "$(wc -w <<<"$got")" = 4 ] &&
        [ "$(notes "$tmp/mpi.log")" = 1 ] && grep -q "(OPENBLAS_CORETYPE=$want): OpenBLAS took this CPU for Prescott" "$tmp/mpi.log" &&
        grep -q '^step     2/2' "$tmp/mpi.log" &&
        pass "mpirun -np 2: both ranks started again on $want's kernels, the start-up lines say so once, 2 steps trained" ||
        failed "mpirun -np 2 (rc $rc): starts '$got', notes $(notes "$tmp/mpi.log"): $(tail -5 "$tmp/mpi.log")"
fi
exit $fail
