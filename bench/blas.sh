#!/usr/bin/env bash
# bench/blas.sh — OpenBLAS (the default build) against BLIS (`make BLAS=blis
# build-blis/femtotron`, Debian's libblis-openmp-dev) and oneMKL (`make BLAS=mkl
# build-mkl/femtotron`, PyPI's wheels by scripts/install_mkl.sh) on this machine: the sgemm peak
# each measures (`bench peak`, 2 threads) and training tokens/s of bench/train_vs_pytorch.sh's
# two configs (small: hidden 512, 8 layers, seq 256, micro-batch 8; gpt2: hidden 768,
# 12 layers, vocab 32768, seq 512, micro-batch 4), the two binaries interleaved ROUNDS
# times, the median timed step of each run (steps after the third), best round kept.
# Installs libblis-openmp-dev with apt and oneMKL with pip when missing; a build that
# cannot be had is left out with a warning.
# BLASES=scipy-openblas adds (or runs alone) the build on PyPI's recent OpenBLAS.
# Output: bench/results/blas.md. Usage: bench/blas.sh (env: ROUNDS=2, BLASES="blis mkl")
. "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
. "$(dirname "$0")/blas_lib.sh"
bench_private_binary
declare -A BIN=([openblas]="$FT")
builds=openblas
for b in ${BLASES:-blis mkl}; do
    [ "$b" = openblas ] && continue
    if bin=$(blas_build "$b" "$TMP"); then BIN[$b]=$bin; builds="$builds $b"
    elif [ $? = 2 ]; then exit 2; fi
done
mapfile -t TEXTS < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
"$FT" prepare --input "${TEXTS[@]}" --split-on % --output "$TMP/data" --force >/dev/null
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A CFG=([small]="512 8 8 1536 8192 256 8 8" [gpt2]="768 12 12 2048 32768 512 4 6")
: >"$TMP/rows"
for r in $(seq 1 "$ROUNDS"); do
    for bin in $builds; do
        b=${BIN[$bin]}
        peak=$("$b" bench peak --threads 2 --seconds 4 | awk '{ print $2 }')
        echo "$bin peak $r $peak" >>"$TMP/rows"
        for c in small gpt2; do
            read -r H L NH I V S B ST <<<"${CFG[$c]}"
            "$b" train --data.train "$TMP/data/train_*.bin" --model.hidden_size "$H" --model.num_hidden_layers "$L" \
                --model.num_attention_heads "$NH" --model.num_key_value_heads 4 --model.intermediate_size "$I" \
                --model.vocab_size "$V" --model.max_position_embeddings "$S" --training.seq_length "$S" \
                --training.micro_batch_size "$B" --training.steps "$ST" --training.threads 2 --training.peak_flops 1e11 \
                --logging.metrics "$TMP/m.jsonl" >/dev/null 2>&1
            tps=$(python3 -c "import json, statistics, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if 'step_ms' in x and x['step'] > 3]
print(round(r[0]['tokens'] * 1e3 / statistics.median(x['step_ms'] for x in r)))" "$TMP/m.jsonl")
            echo "$bin $c $r $tps" >>"$TMP/rows"
            echo "round $r: $bin $c $tps tok/s"
        done
    done
done
python3 - "$TMP/rows" "$RES/blas.md" "$LOAD0" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import sys, datetime
rows, out, load0, load1 = sys.argv[1:5]
best, rounds = {}, {}
for line in open(rows):
    b, what, r, v = line.split()
    v = float(v)
    best[b, what] = max(best.get((b, what), 0.0), v)
    rounds.setdefault((b, what), []).append(v)
builds = list(dict.fromkeys(b for b, _ in best))  # in the order they ran, OpenBLAS first
NAMES = {"openblas": "OpenBLAS (default)", "blis": "BLIS (`make BLAS=blis`)", "mkl": "oneMKL (`make BLAS=mkl`)",
         "scipy-openblas": "PyPI's OpenBLAS (`make BLAS=scipy-openblas`)"}
others = [b for b in builds if b != "openblas"]
L = ["# OpenBLAS vs " + " and ".join(NAMES[b].split(" (")[0] for b in others) + " for femtotron's CPU matrix products", "",
     f"{datetime.datetime.now():%Y-%m-%d %H:%M} · load average at start {load0}, at end {load1} · "
     "bench/blas.sh: the binaries interleaved, best round kept (per-round figures after the slash)", "",
     "| | " + " | ".join(NAMES[b] for b in builds) + " | " + " | ".join(f"{NAMES[b].split(' (')[0]} / OpenBLAS" for b in others) + " |",
     "|---|" + "---:|" * (len(builds) + len(others))]
for what, label in (("peak", "sgemm peak GFLOP/s (2 threads)"), ("small", "small tok/s"), ("gpt2", "gpt2 tok/s")):
    fmt = lambda k: f"{best[k]:.1f} / " + " ".join(f"{v:.1f}" for v in rounds[k]) if what == "peak" else \
        f"{best[k]:.0f} / " + " ".join(f"{v:.0f}" for v in rounds[k])
    L.append(f"| {label} | " + " | ".join(fmt((b, what)) for b in builds) + " | " +
             " | ".join(f"{best[b, what] / best['openblas', what]:.3f}" for b in others) + " |")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
