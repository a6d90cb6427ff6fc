#!/usr/bin/env bash
# bench/blas_products.sh — which fp32 matrix-product library is fastest on this CPU for
# femtotron's training step, including libraries femtotron has no build for: the
# products of one step of bench/train_vs_pytorch.sh's two configs (small: hidden 512,
# 8 layers, q|k|v 1024, intermediate 1536, vocab 8192, 2048 tokens; gpt2: hidden 768,
# 12 layers, q|k|v 1280, intermediate 2048, vocab 32768, 2048 tokens), each shape
# timed alone (bench/tools/sgemm_step_shapes.c, 2 threads) with:
#   openblas  Debian's OpenBLAS (femtotron's default build)
#   mkl       oneMKL (`make BLAS=mkl`; scripts/install_mkl.sh)
#   openblas-new  PyPI's scipy-openblas32 (scripts/install_scipy_openblas.sh, the library of
#             `make BLAS=scipy-openblas`): a recent OpenBLAS (DYNAMIC_ARCH), the question
#             "would an OpenBLAS newer than Debian's be faster here"
#   onednn-matmul, onednn-sgemm  oneDNN (PyPI's onednn-cpu-gomp, the library PyTorch's CPU
#             kernels come from): its matmul primitive (brgemm kernels) and dnnl_sgemm
# The libraries run interleaved, ROUNDS times; a shape's rate is its best round. The
# step's product time is each shape's time x its calls a step: a library that would
# make a build option worth having shows there first. PyPI's wheels are downloaded
# (pip download, no install) into build/blas-products/ (scipy-openblas32 into
# build/scipy-openblas, where the build finds it); a library that cannot be had is
# left out with a warning. Output: bench/results/blas_products.md.
# Usage: bench/blas_products.sh (env: ROUNDS=3, REPS=5)
. "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-5}
LIBDIR=build/blas-products
mkdir -p "$LIBDIR"
SRC=bench/tools/sgemm_step_shapes.c
CC=${CC:-cc}
declare -A RUN=()  # library -> the command that runs its binary, less the shape arguments
libs=""

# A PyPI wheel's files, unpacked into LIBDIR/NAME (once; bench/wheel.sh).
. bench/wheel.sh
wheel() {
    local pkg=$1 dir=$LIBDIR/$2
    [ -d "$dir" ] && return 0
    wheel_unpack "$pkg" "$dir.part" && mv "$dir.part" "$dir" && return 0
    rm -rf "$dir.part"
    echo "WARNING: could not download $pkg from PyPI: left out" >&2
    return 1
}
add() {  # add NAME CMD...: a library whose binary built
    libs="$libs $1"
    RUN[$1]="${*:2}"
}

"$CC" -O2 -std=c11 -fopenmp -DLIB_CBLAS "$SRC" -o "$TMP/openblas" -lopenblas && add openblas "$TMP/openblas"
if bash scripts/install_mkl.sh >/dev/null 2>&1; then
    read -r -a MKL_LIBS <<<"$(make -s BLAS=mkl blas-libs)"
    "$CC" -O2 -std=c11 -fopenmp -DLIB_MKL -Ibuild/mklenv/include "$SRC" -o "$TMP/mkl" "${MKL_LIBS[@]}" -lm &&
        add mkl "$TMP/mkl"
else
    echo "WARNING: oneMKL could not be installed: left out" >&2
fi
# the library `make BLAS=scipy-openblas` links, where that build finds it
. bench/blas_lib.sh
if bash scripts/install_scipy_openblas.sh >/dev/null 2>&1; then
    d=$(realpath build/scipy-openblas/scipy_openblas32/lib)
    "$CC" -O2 -std=c11 -DLIB_SCIPY -I"$d/../include" "$SRC" -o "$TMP/openblas-new" -L"$d" -Wl,-rpath,"$d" \
        -lscipy_openblas -lpthread && add openblas-new "$TMP/openblas-new"
    NEW_VERSION=$(scipy_openblas_version)
else
    echo "WARNING: could not download scipy-openblas32 from PyPI: left out" >&2
fi
if wheel onednn-cpu-gomp onednn && wheel onednn-devel-cpu-gomp onednn-devel; then
    inc=$(dirname "$(find "$LIBDIR/onednn-devel" -name dnnl.h -path '*include/dnnl.h' | head -n 1)")
    so=$(find "$LIBDIR/onednn" -name 'libdnnl.so.[0-9]' | head -n 1)
    "$CC" -O2 -std=c11 -fopenmp -DLIB_ONEDNN -I"$inc" "$SRC" -o "$TMP/onednn" "$so" -Wl,-rpath,"$(realpath "$(dirname "$so")")" &&
        add onednn-matmul "$TMP/onednn" && RUN[onednn-sgemm]="$TMP/onednn" && libs="$libs onednn-sgemm"
    ONEDNN_VERSION=$(sed -n 's/^Version: //p' "$LIBDIR"/onednn/*.dist-info/METADATA)
fi

declare -A CFG=([small]="2048 512 1024 1536 8192 8" [gpt2]="2048 768 1280 2048 32768 12")
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$TMP/rows"
for r in $(seq 1 "$ROUNDS"); do
    for lib in $libs; do
        for c in small gpt2; do
            extra=""
            case $lib in onednn-matmul) extra=matmul ;; onednn-sgemm) extra=sgemm ;; esac
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 ${RUN[$lib]} ${CFG[$c]} "$REPS" $extra |
                sed "s/^/$lib $c $r /" >>"$TMP/rows"
        done
        echo "round $r: $lib $(grep "^$lib gpt2 $r step" "$TMP/rows" | cut -d' ' -f5-)"
    done
done
python3 - "$TMP/rows" "$RES/blas_products.md" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "${NEW_VERSION:-?}" "${ONEDNN_VERSION:-?}" "$(lscpu | sed -n 's/^Model name: *//p')" <<'PY'
import sys, datetime
rows, out, load0, load1, new_v, dnn_v, cpu = sys.argv[1:8]
shape, step = {}, {}
for line in open(rows):
    f = line.split()
    lib, cfg, rnd = f[:3]
    if f[3] == "shape":
        key = (cfg, " x ".join(f[4:7]) + " " + f[7], int(f[8]))
        shape.setdefault(key, {}).setdefault(lib, []).append(float(f[9]))
    else:  # step MS ms GFLOPS GFLOP/s
        step.setdefault((cfg, lib), []).append((float(f[4]), float(f[6])))
libs = list(dict.fromkeys(l for (_, l) in step))
NAMES = {"openblas": "OpenBLAS 0.3.21 (Debian; default build)", "mkl": "oneMKL (`make BLAS=mkl`)",
         "openblas-new": f"OpenBLAS {'.'.join(new_v.split('.')[:3])} (PyPI scipy-openblas32)",
         "onednn-matmul": f"oneDNN {dnn_v} matmul primitive", "onednn-sgemm": f"oneDNN {dnn_v} dnnl_sgemm"}
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
L = ["# fp32 matrix-product libraries on femtotron's training-step shapes", "",
     f"{when} · {cpu} (2 threads) · load average {load0} at start, {load1} at end · "
     f"{len(next(iter(step.values())))} interleaved rounds; each shape the best of its rounds; "
     "`bash bench/blas_products.sh` (bench/tools/sgemm_step_shapes.c)", "",
     "The products of one training step (each shape's time x its calls a step; the step's other "
     "work is not here), against the default build's OpenBLAS:", "",
     "| config | library | step's products ms (best round) | per round | GFLOP/s | vs OpenBLAS 0.3.21 |",
     "|---|---|---|---|---|---|"]
for cfg in ("small", "gpt2"):
    base = min(step[cfg, "openblas"]) if (cfg, "openblas") in step else None  # (ms, GFLOP/s) of the best round
    for lib in libs:
        v = step[cfg, lib]
        ms, rate = min(v)
        ratio = f"**{base[0] / ms:.2f}x**" if base else "—"
        L.append(f"| {cfg} | {NAMES.get(lib, lib)} | {ms:.1f} | {' / '.join(f'{x[0]:.1f}' for x in v)} | {rate:.1f} | {ratio} |")
L += ["", "Each shape (GFLOP/s, best round; M x N x K, op, calls a step):", "",
      "| config | shape | calls | " + " | ".join(NAMES.get(l, l).split(" (")[0] for l in libs) + " |",
      "|---|---|---|" + "---|" * len(libs)]
for (cfg, s, calls), by in shape.items():
    L.append(f"| {cfg} | {s} | {calls} | " + " | ".join(f"{max(by[l]):.1f}" if l in by else "—" for l in libs) + " |")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
