# tests/shell/lib.sh — the start the shell tests share. Source it first:
#   . "$(dirname "$0")/lib.sh"
# Runs from the repository root with set -u. Sets FT (the binary: $FEMTOTRON or
# ./femtotron), tmp (a fresh work directory, removed on exit) and fail=0 (the
# script's exit status); pass / failed print the PASS / FAIL lines tests/run_all.sh
# counts, failed also sets fail=1. Then:
#   fortunes_data   $tmp/data: token shards of a fixed corpus (Debian's fortunes
#                   package, installed by scripts/install_deps.sh), so the training
#                   data does not change when the code does
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
FT=${FEMTOTRON:-./femtotron}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
pass() { echo "PASS $*"; }
failed() { echo "FAIL $*"; fail=1; }

fortunes_data() {
    cat /usr/share/games/fortunes/{computers,science,literature,wisdom,linux} >"$tmp/corpus.txt"
    "$FT" prepare --input "$tmp/corpus.txt" --output "$tmp/data" --val-fraction 0 >/dev/null 2>&1 ||
        { failed "prepare corpus"; exit 1; }
}
