#!/usr/bin/env bash
# tests/shell/test_blas_scipy_openblas.sh — the build on a recent OpenBLAS (make
# BLAS=scipy-openblas build-scipy-openblas/femtotron; scripts/install_scipy_openblas.sh
# unpacks PyPI's scipy-openblas32 into build/scipy-openblas): it links that library
# and not Debian's OpenBLAS, calls it under its prefixed names (ops/blas_api.h), says
# so in train's start-up lines, trains the default build's losses (within 1e-5
# relative), repeats itself bit for bit, resumes bit-exactly, and keeps the layout
# invariant under mpirun (tests/shell/blas_build_lib.sh). Its threads are its own,
# not OpenMP's: the program starts again with OPENBLAS_THREAD_TIMEOUT=4 and
# OMP_WAIT_POLICY=passive where the user has not set them (ops/blas_cores.c), which
# libgomp then loads with (its own OMP_DISPLAY_ENV report), and leaves a user's own
# setting alone.
# Where the wheel cannot be had (no PyPI), prints SKIP and checks nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/blas_build_lib.sh"
unset OPENBLAS_THREAD_TIMEOUT OMP_WAIT_POLICY FEMTOTRON_BLAS_THREADS
PARITY_ROWS='^(tp2_sp|dp2_tp2_pp2)$' PARITY_MIN=4  # two layouts under mpirun: the start again there
blas_build_make scipy-openblas scripts/install_scipy_openblas.sh
blas_build_checks scipy-openblas32 libscipy_openblas libopenblas 'OpenBLAS [0-9.]* .*(make BLAS=scipy-openblas'

# The thread settings: made where unset (the runs above), a user's kept.
note() { grep '^BLAS:' "$tmp/$1.log"; }
[[ $(note build) == *"femtotron set OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive)" ]] &&
    pass "started again with OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive, unset before: $(note build | grep -o '(make.*')" ||
    failed "no thread settings in the start-up line: $(note build)"
OMP_WAIT_POLICY=active train "$BIN" user_policy --training.steps 1
[[ $(note user_policy) == *"femtotron set OPENBLAS_THREAD_TIMEOUT=4)" ]] &&
    pass "OMP_WAIT_POLICY=active from the user kept, only the timeout set: $(note user_policy | grep -o '(make.*')" ||
    failed "with the user's OMP_WAIT_POLICY: $(note user_policy)"
OMP_WAIT_POLICY=active OPENBLAS_THREAD_TIMEOUT=10 train "$BIN" user_both --training.steps 1
[[ $(note user_both) == *"(make BLAS=scipy-openblas: its own threads beside OpenMP's)" ]] &&
    pass "both settings from the user kept, no start again: $(note user_both | grep -o '(make.*')" ||
    failed "with both of the user's settings: $(note user_both)"
# What libgomp itself loaded with (OMP_DISPLAY_ENV=verbose prints its settings as it
# starts, once per start): spinning a while (300000 times) before sleeping at the first start,
# passive (0) at the second; a user's OMP_WAIT_POLICY=active (spin for ever) kept.
spins() { OMP_DISPLAY_ENV=verbose "$@" "$BIN" bench peak --threads 1 --size 64 --seconds 0.01 2>&1 |
    sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tr '\n' ' '; }
got=$(spins env)
[[ $got =~ ^[1-9][0-9]*\ 0\ $ ]] &&
    pass "libgomp's spin count: ${got%% *} as first loaded, 0 (passive) as started again" ||
    failed "libgomp's spin count at each start: '$got', want a count, then 0"
[ "$(spins env OMP_WAIT_POLICY=active)" = "30000000000 30000000000 " ] &&
    pass "libgomp's spin count with the user's OMP_WAIT_POLICY=active: theirs at both starts" ||
    failed "libgomp's spin count with OMP_WAIT_POLICY=active: '$(spins env OMP_WAIT_POLICY=active)'"
exit $fail
