# bench/lib.sh — the start the benchmark scripts share. Source it first:
#   . "$(dirname "$0")/lib.sh"
# It stops on any error (set -euo pipefail), runs from the repository root, makes
# RES (bench/results unless set) and TMP (a fresh work directory, removed on exit),
# and sets FT, the femtotron binary: $FEMTOTRON if set, else ./femtotron (built when
# missing). Then:
#   bench_private_binary  copy FT into TMP and use the copy (for long timing runs:
#                         someone rebuilding ./femtotron meanwhile cannot change it)
#   bench_corpus          TMP/data: this repository's C sources as byte-token shards
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RES=${RES:-bench/results}
mkdir -p "$RES"
TMP=$(mktemp -d /tmp/femtotron_bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
FT=${FEMTOTRON:-./femtotron}
if [ -z "${FEMTOTRON:-}" ]; then make -s -j2 femtotron >/dev/null || [ -x "$FT" ] || exit 1; fi

bench_private_binary() {
    cp "$FT" "$TMP/femtotron"
    FT="$TMP/femtotron"
}

bench_corpus() {
    cat src/*.c src/*/*.c >"$TMP/corpus.txt"
    "$FT" prepare --input "$TMP/corpus.txt" --output "$TMP/data" --val-fraction 0 >/dev/null
}
