#!/usr/bin/env bash
# Trains the demo model (models/README.md) from random initialisation on the local Python standard library:
#   1. lists /usr/lib/python3.N/**/*.py (sorted); every 20th file is held out;
#   2. learns a 2048-piece BPE vocabulary with sentencepiece and converts it to llama.cpp SPM tokenizer keys;
#   3. writes a LLaMA GGUF with that vocabulary (4 layers, width 128) and trains its weights from random init:
#      TRAINER=torch (default): PyTorch (tools/train/train-torch.py, batches of 16 x 256 tokens, about 3,400
#      tokens/s here), weights copied back into the GGUF and scored by llama.cpp (`rest-train import`, `eval`);
#      TRAINER=llama: llama.cpp's own training API (llama_opt_epoch, one 256-token sequence per step, ~860 tokens/s);
#   4. converts it to F16 into models/ (Q8_0 is smaller, but its batched and single-token kernels round
#      differently enough to flip greedy near-ties between plain and REST decoding), and plots the loss curve into models/loss-curve.png.
# Usage: scripts/train-demo-model.sh            (about 65 min on 2 cores; set THREADS, STEPS to change)
# Env: BUILD_DIR (build), WORK (.cache/train-demo: intermediate files, reused when present), PYLIB (newest
#      /usr/lib/python3.N), THREADS (2), TRAINER (torch), STEPS (3000 for torch, 9000 for llama), MAX_MINUTES
#      (ends the learning-rate decay and training by then), OUT (models/pystdlib-demo-f16.gguf).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
WORK=${WORK:-.cache/train-demo}
PYLIB=${PYLIB:-$(ls -d /usr/lib/python3.[0-9]* 2>/dev/null | sort -V | tail -1)}
THREADS=${THREADS:-2}
TRAINER=${TRAINER:-torch}
case $TRAINER in
    torch) STEPS=${STEPS:-3000} ;;
    llama) STEPS=${STEPS:-9000} ;;
    *) echo "train-demo-model: TRAINER must be torch or llama" >&2; exit 1 ;;
esac
OUT=${OUT:-models/pystdlib-demo-f16.gguf}
[ -d "$PYLIB" ] || { echo "train-demo-model: no /usr/lib/python3.N found; set PYLIB" >&2; exit 1; }

step() { echo "== [$(date +%H:%M:%S)] $*" >&2; }
t_start=$(date +%s)

step "dependencies"
# Only this recipe's extra packages (the build's own come from scripts/setup-deps.sh / README command 2).
need=()
# PyTorch's Debian build calls the system BLAS: with the reference libblas3 a matrix product runs at ~3 GFLOP/s on
# this machine, with OpenBLAS at 60-130, so the OpenBLAS package is part of the recipe.
pkgs=(sentencepiece libsentencepiece-dev gnuplot-nox)
[ "$TRAINER" = torch ] && pkgs+=(python3-torch python3-numpy libopenblas0-pthread)
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "train-demo-model: run: sudo apt-get install -y ${need[*]}" >&2; exit 1
    fi
fi

step "build rest-train in $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DREST_BUILD_TOOLS=ON >/dev/null
ninja -C "$BUILD_DIR" -j"${NINJA_JOBS:-2}" rest-train
TRAIN="$BUILD_DIR/bin/rest-train"
QUIET="^(llama|load|print_info|llm_load|init_tokenizer|graph_reserve|sched_reserve|llama_context|llama_kv|create_tensor|\.)"

mkdir -p "$WORK" "$(dirname "$OUT")"
step "corpus: $PYLIB"
find "$PYLIB" -name '*.py' -type f | LC_ALL=C sort > "$WORK/all.txt"
awk 'NR % 20 == 0' "$WORK/all.txt" > "$WORK/heldout.txt"
awk 'NR % 20 != 0' "$WORK/all.txt" > "$WORK/train.txt"
echo "$(wc -l < "$WORK/train.txt") training files, $(wc -l < "$WORK/heldout.txt") held out" >&2

if [ ! -f "$WORK/pystd-spm.model" ]; then
    step "sentencepiece BPE vocabulary (2048 pieces, about 2 min)"
    # One sentence per source line, prefixed by a stand-in for its newline (U+23CE; rest-train maps it back to
    # '\n'), so pieces such as "\n        " (newline + indentation) can be learned. Whitespace is kept verbatim.
    xargs -d '\n' -a "$WORK/train.txt" cat | sed 's/^/\xe2\x8f\x8e/' > "$WORK/spm-input.txt"
    spm_train --input="$WORK/spm-input.txt" --model_prefix="$WORK/pystd-spm" --model_type=bpe --vocab_size=2048 \
        --character_coverage=0.9999 --byte_fallback=true --normalization_rule_name=identity \
        --remove_extra_whitespaces=false --add_dummy_prefix=false --split_by_whitespace=false \
        --split_by_unicode_script=false --allow_whitespace_only_pieces=true --max_sentencepiece_length=16 \
        --num_threads=2 --unk_id=0 --bos_id=1 --eos_id=2 --max_sentence_length=8192 > "$WORK/spm.log" 2>&1
fi
"$TRAIN" vocab --spm "$WORK/pystd-spm.model" -o "$WORK/pystd-vocab.gguf"

step "random-init model"
"$TRAIN" init --vocab "$WORK/pystd-vocab.gguf" -o "$WORK/init.gguf" --layers 4 --embd 128 --heads 4 --heads-kv 4 \
    --ffn 384 --ctx 256 --seed 1 --output-scale 0.1 --embd-std 1 2>&1 | grep --line-buffered -Ev "$QUIET" || true
"$TRAIN" check -m "$WORK/init.gguf" --files "$WORK/all.txt" 2>&1 | grep --line-buffered -Ev "$QUIET"

t_train=$(date +%s)
if [ "$TRAINER" = torch ]; then
    step "tokenize for PyTorch (llama.cpp's tokenizer, each file as <s> + text + </s>)"
    "$TRAIN" tokens -m "$WORK/init.gguf" --files "$WORK/train.txt" -o "$WORK/train.u16" 2>&1 | grep -Ev "$QUIET|bad special"
    "$TRAIN" tokens -m "$WORK/init.gguf" --files "$WORK/heldout.txt" -o "$WORK/heldout.u16" 2>&1 | grep -Ev "$QUIET|bad special"
    step "train $STEPS steps of 16 x 256 tokens with PyTorch on $THREADS threads (progress every 20 steps)"
    /usr/bin/python3 tools/train/train-torch.py --train "$WORK/train.u16" --heldout "$WORK/heldout.u16" \
        --out "$WORK/weights" --log "$WORK/loss.tsv" --vocab 2048 --layers 4 --embd 128 --heads 4 --ffn 384 \
        --ctx 256 --batch 16 --steps "$STEPS" --warmup 100 --lr 3e-3 --lr-min 1e-4 --wd 0.1 --eval-every 200 \
        --eval-seqs 64 --threads "$THREADS" --seed 42 ${MAX_MINUTES:+--max-minutes $MAX_MINUTES}
    step "weights into the GGUF; held-out loss by llama.cpp's forward pass"
    "$TRAIN" import -m "$WORK/init.gguf" --weights "$WORK/weights" -o "$WORK/trained-f32.gguf" 2>&1 | grep -Ev "$QUIET"
else
    step "train $STEPS steps of 256 tokens on $THREADS threads (progress every 20 steps)"
    "$TRAIN" train -m "$WORK/init.gguf" -o "$WORK/trained-f32.gguf" --train-files "$WORK/train.txt" \
        --heldout-files "$WORK/heldout.txt" --log "$WORK/loss.tsv" --ctx 256 -t "$THREADS" --steps "$STEPS" \
        --warmup 200 --lr 2e-4 --lr-min 2e-5 --beta2 0.99 --eval-every 500 --eval-seqs 32 --seed 42 ${MAX_MINUTES:+--max-minutes $MAX_MINUTES} \
        2>&1 | grep --line-buffered -Ev "$QUIET"
fi
echo "training took $(( ($(date +%s) - t_train) / 60 )) min" >&2

step "convert to F16: $OUT"
"$TRAIN" quantize -m "$WORK/trained-f32.gguf" -o "$OUT" --type f16 --name "rest.cpp pystdlib demo" 2>&1 \
    | grep --line-buffered -Ev "$QUIET" | grep -v '^\[' || true
ls -l "$OUT" >&2
"$TRAIN" eval -m "$OUT" --files "$WORK/heldout.txt" -t "$THREADS" 2>&1 | grep -Ev "$QUIET|bad special"

step "loss curve: $(dirname "$OUT")/loss-curve.png"
# Per-step losses are noisy (one batch each): the curve also shows means over 100 steps.
awk -F'\t' 'NR > 1 { s += $5; n++; if (n == 100) { print $2 "\t" s / n; s = 0; n = 0 } }' "$WORK/loss.tsv" \
    > "$WORK/loss-mean100.tsv"
gnuplot <<EOF
set terminal pngcairo size 800,480
set output "$(dirname "$OUT")/loss-curve.png"
set datafile separator "\t"
set key top right
set xlabel "training tokens (millions)"
set ylabel "cross-entropy (nats/token)"
set grid
set title "rest.cpp demo model: Python stdlib, from random init"
plot "$WORK/loss.tsv" every ::1 using (\$2/1e6):5 with lines lc rgb "#d6e0ee" title "train (per step)", \
     "$WORK/loss-mean100.tsv" using (\$1/1e6):2 with lines lw 2 lc rgb "#2c5aa0" title "train (mean of 100 steps)", \
     "$WORK/loss.tsv" every ::1 using (\$2/1e6):(\$6 > 0 ? \$6 : 1/0) with linespoints lc rgb "#c0392b" pt 7 title "held-out"
EOF
tail -1 "$WORK/loss.tsv" | awk -F'\t' '{printf "final: step %s, %.1f M tokens, %.0f s, held-out loss %s nats/token\n", $1, $2/1e6, $3, $6}' >&2
echo "total $(( ($(date +%s) - t_start) / 60 )) min" >&2
