#!/usr/bin/env bash
# tests/shell/test_parity.sh — layout-independent numerics (docs/DESIGN.md,
# invariant 1: layout-independent numerics): every layout in the layout file trains
# the same tiny model on the same data and global batch as a 1-rank reference run,
# and every step's loss and gradient norm must agree with the reference to a
# relative 1e-5. Each row's run also checks the planner's exact memory model
# (docs/DESIGN.md, invariant 3: all memory planned): every rank reports the bytes
# it allocated per category (logging.verbose), and they must equal what
# build/tests/plan_memory_main (plan/memory_rank.c) predicts from the same arguments.
#
# usage: bash tests/shell/test_parity.sh [LAYOUT_FILE [NAME_REGEX]]
#   LAYOUT_FILE  default tests/shell/parity_layouts.txt (its header documents the format)
#   NAME_REGEX   only rows whose name matches (grep -E), e.g. 'zero3|tied'
# environment: FEMTOTRON (binary, default ./femtotron), REF_FEMTOTRON (the binary of
#   the 1-rank references and of `prepare`, default FEMTOTRON), ROW_ARGS (arguments
#   added to every row's run and its memory prediction but not to its reference, e.g.
#   "--training.device cuda --training.precision fp32": tests/gpu/layouts.sh runs the
#   rows on the GPU against CPU references), REF_ARGS (arguments added to the
#   1-rank reference runs only, e.g. the device and bf16 precision when the
#   references run on the GPU too: tests/gpu/layouts_bf16.sh), MPIRUN (launcher, default
#   "mpirun --oversubscribe --allow-run-as-root"), PARITY_TIMEOUT (s per run,
#   default 120), PARITY_TOL (default 1e-5), PARITY_JOBS (rows at a time, default
#   2), KEEP=1 (keep the work directory),
#   PLAN_MEMORY (the memory predictor, default build/tests/plan_memory_main),
#   NCCL_LINKS=1 (rows run with parallel.comm = nccl, a GPU per rank: no rank
#   staged more than expert parallelism's token counts (bytes; "0.0 MiB") through
#   MPI, and where the row has pipeline or context parallelism every rank's
#   messages went over NCCL links; tests/gpu/nccl.sh).
# Prints one "PASS name ..." or "FAIL name ..." line per row, and one
# "PASS memory name ..." or "FAIL memory name ..." line; exit 1 on any failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
layouts=${1:-tests/shell/parity_layouts.txt}
filter=${2:-}
FEMTOTRON=${FEMTOTRON:-./femtotron}
REF_FEMTOTRON=${REF_FEMTOTRON:-$FEMTOTRON}
read -r -a ROW_ARGS <<< "${ROW_ARGS:-}"
read -r -a REF_ARGS <<< "${REF_ARGS:-}"
read -r -a MPIRUN <<< "${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}"
TIMEOUT=${PARITY_TIMEOUT:-120}
TOL=${PARITY_TOL:-1e-5}
PLAN_MEMORY=${PLAN_MEMORY:-build/tests/plan_memory_main}
STEPS=12

tmp=$(mktemp -d)
if [ "${KEEP:-0}" = 1 ]; then echo "work directory: $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi
fail=0
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
failed() { echo "FAIL $*"; fail=1; }

[ -x "$FEMTOTRON" ] || { failed "setup: $FEMTOTRON not built (run make)"; exit 1; }
[ -x "$REF_FEMTOTRON" ] || { failed "setup: $REF_FEMTOTRON not built (run make)"; exit 1; }
[ -r "$layouts" ] || { failed "setup: cannot read layout file $layouts"; exit 1; }
# The default predictor is (re)built here, so a tree whose ops changed since it
# was built does not predict with stale sizes; other builds' predictors
# (build-mkl/, build-emu/) are their callers' to make.
if [ "$PLAN_MEMORY" = build/tests/plan_memory_main ]; then
    make -s "$PLAN_MEMORY" >/dev/null 2>&1
else
    [ -x "$PLAN_MEMORY" ] || make -s "$PLAN_MEMORY" >/dev/null 2>&1
fi
[ -x "$PLAN_MEMORY" ] || { failed "setup: $PLAN_MEMORY not built (run make $PLAN_MEMORY)"; exit 1; }

# Corpus: this repository's C sources as bytes (deterministic text).
# A fixed corpus (Debian's fortunes package, installed by scripts/install_deps.sh):
# the training data must not change when the code does.
# FORTUNES_DIR: where the corpus is on a machine without the package (gpu-bundle/env.sh).
FORTUNES=${FORTUNES_DIR:-/usr/share/games/fortunes}
cat "$FORTUNES"/{computers,science,literature,wisdom,linux} > "$tmp/corpus.txt"
"$REF_FEMTOTRON" prepare --input "$tmp/corpus.txt" --output "$tmp/data" --val-fraction 0 \
    >"$tmp/prepare.log" 2>&1 || { failed "setup: prepare corpus"; cat "$tmp/prepare.log"; exit 1; }

# The problem every row solves: tiny model, 8 sequences x 32 tokens per step, a
# learning rate that moves the loss (5.5 -> ~4.6 in 12 steps; higher rates make
# the fp32 rounding noise grow into grad_norm differences near 1e-5), shuffled data so the
# data-order rule (by global sample index) is exercised.
common=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
        --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 32 --training.global_batch_size 8 --training.steps "$STEPS"
        --training.lr 2e-3 --training.min_lr 3e-5 --training.warmup_steps 2
        --training.threads 1 --training.peak_flops 1e10 --training.seed 1234)

# run_layout BIN NP LOG METRICS ARGS... -> exit status of the job (124 = timed out)
# (logging.verbose: every rank prints its "memory bytes (rank R): ..." line for check_memory)
run_layout() {
    local bin=$1 np=$2 log=$3 metrics=$4; shift 4
    timeout -k 10 "$TIMEOUT" "${MPIRUN[@]}" -np "$np" "$bin" train "${common[@]}" "$@" \
        --logging.verbose true --logging.metrics "$metrics" >"$log" 2>&1
}

# check_memory NAME NP LOG ARGS... -> prints "PASS memory NAME ..." or "FAIL memory NAME ..."
# Every rank of the run logged "memory bytes (rank R): params N grads N optimizer N
# activations N comm N" (what it allocated, counted by buf_alloc); the planner predicts
# the same line for every rank from the same arguments (ARGS: the row's, without -np).
# Both must hold one line per rank, equal in all 5 categories.
check_memory() {
    local name=$1 np=$2 log=$3; shift 3
    local pred="$tmp/$name.memory" res
    if ! "$PLAN_MEMORY" --world "$np" "${common[@]}" "$@" >"$pred" 2>&1; then
        failed "memory $name: the planner failed: $(tail -n 1 "$pred")"; return
    fi
    if res=$(awk -v np="$np" '
        /^memory bytes \(rank [0-9]+\):/ {
            r = $4; sub(/\):$/, "", r)
            if (FNR == NR) { np_[r]++; for (i = 5; i < NF; i += 2) { if (!(($i) in seen)) { seen[$i] = 1; cat[nc++] = $i } p[r, $i] = $(i + 1) } }
            else { nr[r]++; for (i = 5; i < NF; i += 2) { if (!(($i) in seen)) { seen[$i] = 1; cat[nc++] = $i } m[r, $i] = $(i + 1) } }
        }
        END {
            for (r = 0; r < np; r++) {
                if (np_[r] != 1) { bad = bad sprintf(" rank %d: %d predicted lines;", r, np_[r]); continue }
                if (nr[r] != 1) { bad = bad sprintf(" rank %d: %d reported lines;", r, nr[r]); continue }
                for (c = 0; c < nc; c++)
                    if (p[r, cat[c]] != m[r, cat[c]])
                        bad = bad sprintf(" rank %d %s: predicted %s, reported %s;", r, cat[c], p[r, cat[c]], m[r, cat[c]])
            }
            if (bad != "") { if (length(bad) > 400) bad = substr(bad, 1, 400) " ..."; printf "%s", bad; exit 1 }
            printf "%d ranks x %d categories equal", np, nc
        }' "$pred" "$log"); then
        echo "PASS memory $name: $res"
    else
        failed "memory $name:$res"
    fi
}

# compare REF ROW -> prints "worst_rel_diff=... grad_norm_rel_diff=..." ; status 1 on mismatch
compare() {
    awk -v tol="$TOL" -v steps=$STEPS '
        BEGIN { num = "^-?[0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?$" }
        function field(line, key,   m) {
            if (match(line, "\"" key "\": [^,}]*")) {
                m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m
            }
            return "NA"
        }
        function rel(a, b,   d, s) {
            a += 0; b += 0; d = a - b; if (d < 0) d = -d
            s = b < 0 ? -b : b; if (s < 1e-30) s = 1e-30
            return d / s
        }
        FNR == NR { rl[FNR] = field($0, "loss"); rg[FNR] = field($0, "grad_norm"); rs[FNR] = field($0, "step"); nref = FNR; next }
        {
            n++
            s = field($0, "step"); l = field($0, "loss"); g = field($0, "grad_norm"); k = field($0, "skipped")
            if (s != rs[n]) { bad = bad sprintf(" line %d: step %s, reference step %s;", n, s, rs[n]); next }
            if (k == "true") bad = bad sprintf(" step %s skipped;", s)
            if (l !~ num || g !~ num) { bad = bad sprintf(" step %s: no finite loss/grad_norm;", s); next }
            dl = rel(l, rl[n]); dg = rel(g, rg[n])
            if (dl > wl) wl = dl
            if (dg > wg) wg = dg
            if (dl > tol && !firstl) firstl = sprintf(" step %s loss %.17g vs reference %.17g (rel %.3g);", s, l, rl[n], dl)
            if (dg > tol && !firstg) firstg = sprintf(" step %s grad_norm %.17g vs reference %.17g (rel %.3g);", s, g, rg[n], dg)
        }
        END {
            if (nref != steps) bad = bad sprintf(" reference has %d steps, expected %d;", nref, steps)
            if (n != steps) bad = bad sprintf(" %d steps logged, expected %d;", n, steps)
            printf "worst_rel_diff=%.3g grad_norm_rel_diff=%.3g", wl, wg
            if (length(bad) > 300) bad = substr(bad, 1, 300) " ..."
            if (wl > tol || wg > tol || bad != "") { printf " (tolerance %s):%s%s%s", tol, firstl, firstg, bad; exit 1 }
        }' "$1" "$2"
}

# Parse the layout file: name | run args [| model args]
names=(); runargs=(); modelargs=()
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    [[ "$line" =~ ^[[:space:]]*$ ]] && continue
    IFS='|' read -r f_name f_run f_model f_extra <<< "$line"
    f_name=$(echo $f_name); f_run=$(echo $f_run); f_model=$(echo ${f_model:-})
    if [ -z "$f_name" ] || [ -n "${f_extra:-}" ] || ! [[ "$f_name" =~ ^[A-Za-z0-9_.-]+$ ]]; then
        failed "$layouts:$lineno: malformed row (expected 'name | run args [| model args]'): $line"
        continue
    fi
    for n in "${names[@]}"; do
        [ "$n" = "$f_name" ] && { failed "$layouts:$lineno: duplicate name $f_name"; continue 2; }
    done
    if [ -n "$filter" ] && ! echo "$f_name" | grep -Eq -- "$filter"; then continue; fi
    names+=("$f_name"); runargs+=("$f_run"); modelargs+=("$f_model")
done < "$layouts"
[ ${#names[@]} -gt 0 ] || { failed "no layouts selected from $layouts${filter:+ by '$filter'}"; exit 1; }

# One 1-rank reference per distinct model-args string: B = 8, A = 1.
declare -A ref_of ref_ok
nref=0
for i in "${!names[@]}"; do
    key="k:${modelargs[$i]}"   # bash cannot use an empty string as a key
    [ -n "${ref_of[$key]+x}" ] && continue
    nref=$((nref + 1))
    ref="$tmp/ref$nref"
    ref_of[$key]=$ref
    read -r -a margs <<< "${key#k:}"
    t0=$(now)
    run_layout "$REF_FEMTOTRON" 1 "$ref.log" "$ref.jsonl" --training.micro_batch_size 8 "${margs[@]}" "${REF_ARGS[@]}"
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '"loss":' "$ref.jsonl")" -eq $STEPS ]; then
        ref_ok[$key]=1
        printf 'reference%s: 1 rank, B 8 x A 1: loss %s -> %s (%s)\n' "${margs[*]:+ [${margs[*]}]}" \
            "$(grep -m1 '"loss":' "$ref.jsonl" | grep -o '"loss": [^,]*' | cut -d' ' -f2)" \
            "$(grep '"loss":' "$ref.jsonl" | tail -n1 | grep -o '"loss": [^,]*' | cut -d' ' -f2)" \
            "$(since "$t0")"
    else
        ref_ok[$key]=0
        echo "reference run${margs[*]:+ [${margs[*]}]} failed (status $rc):"; tail -n 20 "$ref.log" | sed 's/^/    /'
    fi
done

# NCCL_LINKS=1: what went over NCCL (see the top), from every rank's last lines.
check_links() {
    local name=$1 np=$2 log=$3; shift 3
    local -a a=("$@")
    local p2p=0 j staged links
    for ((j = 0; j + 1 < ${#a[@]}; j++)); do
        case "${a[$j]}" in --parallel.pp | --parallel.cp) [ "${a[$((j + 1))]}" -gt 1 ] && p2p=1 ;; esac
    done
    # Ranks that staged 0.1 MiB or more (the expert counts are bytes: "0.0 MiB").
    staged=$(grep 'staged through pinned host memory' "$log" | grep -vc ': 0\.0 MiB of collectives')
    links=$(grep -c 'of point-to-point messages over NCCL links' "$log")
    if [ "$staged" -ne 0 ]; then
        failed "nccl $name: $staged ranks staged collectives through MPI under parallel.comm = nccl"
    elif [ "$p2p" = 1 ] && [ "$links" -ne "$np" ]; then
        failed "nccl $name: $links of $np ranks sent their pipeline or ring messages over NCCL links"
    else
        echo "PASS nccl $name: under 0.1 MiB staged through MPI$([ "$p2p" = 1 ] && echo ", every rank's point-to-point messages over NCCL links")"
    fi
}

# check_row I: row I run, its memory line, links and losses checked; prints its
# PASS/FAIL lines, sets fail on a failure.
check_row() {
    local i=$1 name=${names[$1]} args margs np rest j key ref log metrics t0 rc dt res
    read -r -a args <<< "${runargs[$i]}"
    read -r -a margs <<< "${modelargs[$i]}"
    np=1; rest=()
    for ((j = 0; j < ${#args[@]}; j++)); do
        if [ "${args[$j]}" = "-np" ]; then np=${args[$((j + 1))]:-}; j=$((j + 1))
        else rest+=("${args[$j]}"); fi
    done
    [[ "$np" =~ ^[1-9][0-9]*$ ]] || { failed "$name: bad -np value '$np'"; return; }
    key="k:${modelargs[$i]}"
    ref=${ref_of[$key]}
    if [ "${ref_ok[$key]}" != 1 ]; then failed "$name: its 1-rank reference run failed"; return; fi
    log="$tmp/$name.log"; metrics="$tmp/$name.jsonl"
    t0=$(now)
    run_layout "$FEMTOTRON" "$np" "$log" "$metrics" "${rest[@]}" "${margs[@]}" "${ROW_ARGS[@]}"
    rc=$?
    dt=$(since "$t0")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        failed "$name: hung (timeout ${TIMEOUT}s, $np ranks)"; tail -n 5 "$log" | sed 's/^/    /'; return
    fi
    if [ $rc -ne 0 ]; then
        failed "$name: exited with status $rc ($np ranks, $dt)"; grep -v '^step ' "$log" | tail -n 8 | sed 's/^/    /'; return
    fi
    check_memory "$name" "$np" "$log" "${rest[@]}" "${margs[@]}" "${ROW_ARGS[@]}"
    [ "${NCCL_LINKS:-0}" = 1 ] && check_links "$name" "$np" "$log" "${rest[@]}"
    [ -f "$metrics" ] || { failed "$name: no metrics file written"; return; }
    if res=$(compare "$ref.jsonl" "$metrics"); then
        echo "PASS $name $res ($np ranks, $dt)"
    else
        failed "$name $res ($np ranks, $dt)"
    fi
}

# The rows, PARITY_JOBS (default 2) at a time (tests/shell/pool.sh): a row's runs are
# small and mostly wait (the launcher, pipeline bubbles, ring steps), so two rows
# share the two cores of a CI machine well (113 -> 75 s there).
. tests/shell/pool.sh
pool_init "${PARITY_JOBS:-2}" || exit 1
for i in "${!names[@]}"; do
    pool_run "${names[$i]}" check_row "$i"
done
pool_finish || fail=1
exit $fail
