#!/usr/bin/env bash
# tests/shell/test_checkpoint_mpi.sh — sharded checkpoints on several ranks.
# A 1-rank checkpoint_save of whole buffers is the reference; 3 and 4 ranks each
# pwrite their own uneven pieces with checkpoint_save_pieces, and every file of the
# result must equal the reference byte for byte. The driver (tests/ckpt_pieces_main.c)
# also loads back under other partitions and checks values bit for bit, and pieces
# with a gap or an overlap must end the job with a message naming the problem.
# Tensor-parallel saves (slices of every tensor, vocab padding) must give the same
# bytes as the unsharded save, and load back into any tp.
set -u
cd "$(dirname "$0")/../.."
fail=0
pass() { echo "PASS $*"; }
failed() { echo "FAIL $*"; fail=1; }

# The Makefile's build/tests/% rule compiles any tests/NAME.c against $(OBJ).
if ! make -s build/tests/ckpt_pieces_main >/dev/null; then
    failed "build of build/tests/ckpt_pieces_main"
    exit 1
fi
drv=build/tests/ckpt_pieces_main
tmp=$(mktemp -d /tmp/femtotron_ckpt_mpi_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
mpi() { local np=$1; shift; mpirun --oversubscribe --allow-run-as-root -np "$np" "$@"; }

if "$drv" ref "$tmp/ref" >"$tmp/ref.log" 2>&1; then
    pass "1 rank: reference checkpoints written with checkpoint_save"
else
    failed "1 rank: reference checkpoint_save failed: $(tail -3 "$tmp/ref.log")"
fi

# manifest.json too: the checksums a rank sums over its own bytes add up to the
# same file checksums whatever the ranks' pieces.
files="step_0000003/model.safetensors step_0000003/optimizer.safetensors
       step_0000003/config.json step_0000003/trainer_state.json step_0000003/manifest.json"
for np in 1 3 4; do
    out="$tmp/np$np"
    mpi "$np" "$drv" save "$out" >"$tmp/np$np.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL) ' "$tmp/np$np.log" | sed "s/^\(PASS\|FAIL\) /\1 driver: /"
    grep -q '^FAIL ' "$tmp/np$np.log" && fail=1
    if [ "$rc" -ne 0 ]; then
        failed "$np ranks: driver exited with status $rc: $(grep -v '^PASS ' "$tmp/np$np.log" | tail -5)"
        continue
    fi
    for variant in untied tied; do
        bad=""
        for f in $files; do
            cmp -s "$tmp/ref/$variant/$f" "$out/$variant/$f" || bad="$bad $f"
        done
        [ "$(readlink "$out/$variant/latest")" = step_0000003 ] || bad="$bad latest"
        if [ -z "$bad" ]; then
            pass "$np ranks, $variant: every checkpoint file equals the 1-rank checkpoint_save byte for byte"
        else
            failed "$np ranks, $variant: files differ from the 1-rank reference:$bad"
        fi
        n=$(find "$out/$variant" -mindepth 1 | wc -l)
        [ "$n" -eq 8 ] && pass "$np ranks, $variant: no temporaries left (step dir, 6 files, latest)" \
                       || failed "$np ranks, $variant: $n entries under the checkpoint dir, expected 8"
    done
done

# Tensor parallel: each rank holds slices (model_tp_shard; vocab 257 and 131 leave
# padding rows at tp 2 and 3). A tp = 2 save on 2 ranks, a tp = 3 save on 3 and a
# tp = 2 save by 2 tp groups of 2 on 4 ranks must all equal the 1-rank unsharded
# checkpoint byte for byte; each run also loads the previous run's checkpoint (tp 2
# into tp 2 and tp 1, tp 2 into tp 3, tp 3 into tp 2) and checks every value.
for spec in "2 2 tp2 tp2" "3 3 tp3 tp2" "4 2 tp2x2 tp3"; do
    read -r np T name from <<<"$spec"
    out="$tmp/$name"
    mpi "$np" "$drv" tp "$T" "$out" "$tmp/$from" >"$tmp/$name.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL) ' "$tmp/$name.log" | sed "s/^\(PASS\|FAIL\) /\1 driver: /"
    grep -q '^FAIL ' "$tmp/$name.log" && fail=1
    if [ "$rc" -ne 0 ]; then
        failed "$np ranks, tp $T: driver exited with status $rc: $(grep -v '^PASS ' "$tmp/$name.log" | tail -5)"
        continue
    fi
    for variant in tp_untied tp_tied; do
        bad=""
        for f in $files; do
            cmp -s "$tmp/ref/$variant/$f" "$out/$variant/$f" || bad="$bad $f"
        done
        if [ -z "$bad" ]; then
            pass "$np ranks, tp $T, $variant: the sliced save equals the 1-rank unsharded checkpoint_save byte for byte"
        else
            failed "$np ranks, tp $T, $variant: files differ from the 1-rank reference:$bad"
        fi
    done
done

for mode in tpgap tpmix; do
    mpi 2 "$drv" "$mode" "$tmp/$mode" >"$tmp/$mode.log" 2>&1
    rc=$?
    if [ "$mode" = tpgap ]; then
        want="params elements \\[[0-9]*, [0-9]*) of tensor-parallel rank 1's flat order .* are written by no rank"
    else want='rank 1 is tensor-parallel rank 0 of 1, but rank 0 runs tp = 2'; fi
    if [ "$rc" -ne 0 ] && grep -q "error: checkpoint_save: $want" "$tmp/$mode.log"; then
        pass "2 ranks, $mode: the job ends (status $rc) with: $(grep -o "checkpoint_save: .*" "$tmp/$mode.log" | head -1)"
    else
        failed "2 ranks, $mode: status $rc, log: $(head -c 600 "$tmp/$mode.log")"
    fi
    [ ! -e "$tmp/$mode/bad/latest" ] && pass "2 ranks, $mode: no checkpoint was published" \
                                     || failed "2 ranks, $mode: a checkpoint was published"
done

for mode in gap overlap; do
    mpi 2 "$drv" "$mode" "$tmp/$mode" >"$tmp/$mode.log" 2>&1
    rc=$?
    if [ "$mode" = gap ]; then want='are written by no rank: the pieces leave a gap'
    else want='are written twice, by rank 0 and rank 1: the pieces overlap'; fi
    if [ "$rc" -ne 0 ] && grep -q "error: checkpoint_save: params elements \[.*$want" "$tmp/$mode.log"; then
        pass "2 ranks, params pieces with a $mode: the job ends (status $rc) naming the range and the $mode"
    else
        failed "2 ranks, params pieces with a $mode: status $rc, log: $(head -c 600 "$tmp/$mode.log")"
    fi
    if [ ! -e "$tmp/$mode/bad/step_0000001" ] && [ ! -e "$tmp/$mode/bad/latest" ]; then
        pass "2 ranks, $mode: no step directory and no latest were written"
    else
        failed "2 ranks, $mode: a checkpoint was published despite the bad pieces"
    fi
done
exit $fail
