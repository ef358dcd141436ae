#!/usr/bin/env bash
# Issue 20's scale benchmark: one index of the Linux source (.c/.h of linux-source-6.1) grown by appending
# /usr/include (then compacted: its shards merged), against building /usr/include alone, with a 32k-vocabulary
# tokenizer (llama.cpp's models/ggml-vocab-llama-spm.gguf by default: the index needs only a tokenizer, and a
# vocab-only GGUF is one). Then the draft step in fresh processes (bench-draft-index: retrieval plus a 16-node tree)
# on the indexes: evicted from the page cache, page-cached, and page-cached SETTLE_MS after open (a format version 1
# index's bigram tables are built by then; version 2 files carry them). A
# benchmark, not a test: the Linux build takes about 15 minutes of one core and ~3.5 GB of memory.
#
#   bench/index-scale-linux.sh [TOKENIZER.gguf]
#
# Environment (all optional):
#   REST      the rest binary                            (default: build/bin/rest)
#   DRAFT     the bench-draft-index binary               (default: next to REST)
#   WORK      scratch directory; steps whose output exists there are not redone (default: /tmp/rest-scale-linux)
#   THREADS   tokenizer threads for build and append     (default: 1, so that a core stays free)
#   STEPS     draft steps per run                        (default: 20000)
#   SETTLE_MS wait after open for the settled condition  (default: 12000: a version 1 600M-token index's tables take
#             ~8 s to build)
#   QUERIES   held-out files to draft along (default: llama.cpp's ggml C sources, in neither index)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${RESTCPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp}
llama=${RESTCPP_LLAMA_DIR:-$cache/llama.cpp-80fb11a}
vocab=${1:-$llama/models/ggml-vocab-llama-spm.gguf}
rest=${REST:-$here/build/bin/rest}
draft=${DRAFT:-$(dirname "$rest")/bench-draft-index}
work=${WORK:-/tmp/rest-scale-linux}
threads=${THREADS:-1}
steps=${STEPS:-20000}
settle=${SETTLE_MS:-12000}
tarball=/usr/src/linux-source-6.1.tar.xz
if [[ -z ${QUERIES:-} ]]; then
    g=$llama/ggml/src
    QUERIES="$g/ggml-alloc.c $g/ggml.c $g/ggml-quants.c $g/ggml-cpu/ggml-cpu.c $g/ggml-cpu/quants.c"
fi

for f in "$rest" "$draft" "$vocab" "$tarball" /usr/bin/time; do
    [[ -e $f ]] || { echo "index-scale-linux: $f not found (linux-source-6.1 and time are Debian packages)" >&2; exit 1; }
done
for c in python3 bc; do
    command -v "$c" >/dev/null || { echo "index-scale-linux: $c not found" >&2; exit 1; }
done
mkdir -p "$work"
if [[ ! -d $work/linux ]]; then
    mkdir -p "$work/linux.tmp" && tar -xJf "$tarball" -C "$work/linux.tmp" && mv "$work/linux.tmp" "$work/linux"
fi

# timed NAME CMD...: runs CMD under /usr/bin/time -v once (skipped when NAME's output exists), keeps its output.
timed() {
    local name=$1; shift
    [[ -s $work/$name.time ]] && return 0
    /usr/bin/time -v -o "$work/$name.time.tmp" "$@" > "$work/$name.out" 2> "$work/$name.err" ||
        { echo "index-scale-linux: $name failed" >&2; tail -n 5 "$work/$name.err" >&2; exit 1; }
    mv "$work/$name.time.tmp" "$work/$name.time"
}
timed linux "$rest" index build -m "$vocab" -o "$work/linux.idx" -t "$threads" --include '*.c' --include '*.h' "$work/linux"
timed include "$rest" index build -m "$vocab" -o "$work/include.idx" -t "$threads" /usr/include
if [[ ! -s $work/append.time ]]; then
    cp "$work/linux.idx" "$work/linux-include.idx"
fi
timed append "$rest" index append -m "$vocab" -t "$threads" "$work/linux-include.idx" /usr/include
if [[ ! -s $work/compact.time ]]; then
    cp "$work/linux-include.idx" "$work/linux-include-compact.idx"
fi
timed compact "$rest" index compact "$work/linux-include-compact.idx"

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== tokenizer: $vocab"
for name in linux include append compact; do
    idx=$work/$name.idx
    [[ $name == append ]] && idx=$work/linux-include.idx
    [[ $name == compact ]] && idx=$work/linux-include-compact.idx
    tokens=$("$rest" index inspect --json "$idx" | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
    bytes=$(stat -c %s "$idx")
    peak_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$name.time")
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/$name.time")
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$work/$name.time")
    printf "%-8s tokens %d, wall %s, CPU %.1f s, peak RSS %d KiB = %.2f B/token, disk %d B = %.2f B/token\n" \
        "$name" "$tokens" "$wall" "$cpu" "$peak_kb" "$(echo "$peak_kb * 1024 / $tokens" | bc -l)" "$bytes" \
        "$(echo "$bytes / $tokens" | bc -l)"
    grep -hE '^(time|compacted)' "$work/$name.out" | sed 's/^/         /'
done

# The draft step: one fresh process per condition, twice each, interleaved.
for idx in "$work/linux-include.idx" "$work/linux-include-compact.idx" "$work/include.idx"; do
    for run in 1 2; do
        for cond in "--evict" "" "--settle-ms $settle"; do
            echo "== $(basename "$idx"), run $run, ${cond:-page-cached}"
            # shellcheck disable=SC2086  # cond and QUERIES are word lists
            "$draft" -m "$vocab" --index "$idx" $cond --steps "$steps" $QUERIES 2>&1 |
                grep -E '^(open|page cache|cold total|warm steps|  wall us|  steps over|  nodes per)'
        done
    done
done
