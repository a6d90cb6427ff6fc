# bench/blas_lib.sh — what the benchmarks that compare BLAS builds share. Source it
# from the repository root (bench/lib.sh's scripts are there already):
#   blas_build NAME DIR   make femtotron's NAME build (blis: Debian's libblis-openmp-dev,
#                         installed with apt when missing; mkl: oneMKL from PyPI,
#                         scripts/install_mkl.sh; scipy-openblas: PyPI's recent
#                         OpenBLAS, scripts/install_scipy_openblas.sh), copy it to DIR/femtotron-NAME (a
#                         private copy, as bench_private_binary) and print that path;
#                         where the library cannot be had or the build fails, a warning
#                         on stderr and status 1
#   scipy_openblas_version  the version of PyPI's OpenBLAS in build/scipy-openblas
#                         (scripts/install_scipy_openblas.sh), e.g. 0.3.34.481.3
#   openblas_core BIN     the OpenBLAS kernels BIN runs (OpenBLAS's own "Core:" line;
#                         ops/blas_cores.c may have chosen them), empty when unknown

blas_build() {
    local name=$1 dir=$2
    case $name in
        blis) [ -e /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so ] ||
                  apt-get install -y -q libblis-openmp-dev >/dev/null 2>&1 ;;
        mkl) bash scripts/install_mkl.sh >/dev/null 2>&1 ;;
        scipy-openblas) bash scripts/install_scipy_openblas.sh >/dev/null 2>&1 ;;
        *) echo "blas_build: unknown build '$name' (blis, mkl, scipy-openblas)" >&2; return 2 ;;
    esac
    if ! make -s -j2 BLAS="$name" "build-$name/femtotron" >/dev/null 2>&1; then
        echo "WARNING: femtotron's $name build could not be made (library missing?): left out" >&2
        return 1
    fi
    cp "build-$name/femtotron" "$dir/femtotron-$name"
    echo "$dir/femtotron-$name"
}

openblas_core() {
    OPENBLAS_VERBOSE=2 "$1" bench peak --threads 1 --size 128 --seconds 0.05 2>&1 | sed -n 's/^Core: //p' | tail -n 1
}

scipy_openblas_version() {
    sed -n 's/^Version: //p' build/scipy-openblas/scipy_openblas32-*.dist-info/METADATA
}
