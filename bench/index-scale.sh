#!/usr/bin/env bash
# Scale benchmark of the datastore (issue 3): build an index of >= 100M tokens of real code, then measure build
# time, peak RSS, disk bytes per token, open time and interval-lookup latency percentiles. A benchmark, not a test:
# it takes minutes and most of the machine, so run it on purpose.
#
#   bench/index-scale.sh [MODEL]
#
# Environment (all optional):
#   REST          the rest binary                 (default: build/bin/rest)
#   LOOKUP        the bench-index-lookup binary   (default: next to REST)
#   CORPUS        system: /usr/include + the Python standard library (*.py)   (default)
#                 linux:  the kernel tree from /usr/src/linux-source-6.1.tar.xz (apt-get install linux-source-6.1),
#                         unpacked once under $WORK
#   WORK          scratch directory               (default: /tmp/rest-index-scale)
#   THREADS       tokenizer threads               (default: 2)
#   SHARD_TOKENS  --shard-tokens for the build    (default: 0, one suffix array's reach)
#   QUERIES       lookups to time                 (default: 50000)
# MODEL defaults to ../shared/data/models/stories260K.gguf (a 512-token SPM vocabulary: u16 tokens).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/../shared/data/models/stories260K.gguf}
rest=${REST:-$here/build/bin/rest}
lookup=${LOOKUP:-$(dirname "$rest")/bench-index-lookup}
work=${WORK:-/tmp/rest-index-scale}
threads=${THREADS:-2}
shard_tokens=${SHARD_TOKENS:-0}
queries=${QUERIES:-50000}
corpus=${CORPUS:-system}

for f in "$rest" "$lookup" "$model"; do
    [[ -e $f ]] || { echo "index-scale: $f not found" >&2; exit 1; }
done
[[ -x /usr/bin/time ]] || { echo "index-scale: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
mkdir -p "$work"
idx=$work/scale.idx

inputs=()
case $corpus in
    system)
        inputs+=(/usr/include)
        while IFS= read -r -d '' f; do inputs+=("$f"); done < <(find /usr/lib/python3* -name '*.py' -type f -print0 | sort -z)
        ;;
    linux)
        tarball=/usr/src/linux-source-6.1.tar.xz
        [[ -e $tarball ]] || { echo "index-scale: $tarball not found (apt-get install linux-source-6.1)" >&2; exit 1; }
        if [[ ! -d $work/linux ]]; then
            mkdir -p "$work/linux.tmp" && tar -xJf "$tarball" -C "$work/linux.tmp" && mv "$work/linux.tmp" "$work/linux"
        fi
        inputs+=("$work/linux")
        ;;
    *) echo "index-scale: CORPUS must be system or linux" >&2; exit 1 ;;
esac

echo "== machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== corpus: $corpus (${#inputs[@]} inputs), model: $model, threads: $threads, shard tokens: $shard_tokens"

/usr/bin/time -v -o "$work/time.txt" "$rest" index build -m "$model" -o "$idx" -t "$threads" \
    --shard-tokens "$shard_tokens" "${inputs[@]}" > "$work/build.out" 2> "$work/build.err" ||
    { echo "index-scale: build failed" >&2; cat "$work/build.err" "$work/time.txt" >&2; exit 1; }
head -n 12 "$work/build.err"  # warnings (skipped files)
peak_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
cat "$work/build.out"

# The same figures again from the index itself.
"$rest" index inspect --json "$idx" > "$work/inspect.json"
tokens=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'])" "$work/inspect.json")
bytes=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes'])" "$work/inspect.json")
width=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['token_width_bytes'])" "$work/inspect.json")
shards=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['shards'])" "$work/inspect.json")
build_s=$(sed -n 's/^time: \([0-9.]*\) s total.*/\1/p' "$work/build.out")
cpu_pct=$(awk -F': ' '/Percent of CPU/ {print $2}' "$work/time.txt")
cpu_s=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$work/time.txt")

verify_start=$(date +%s.%N)
"$rest" index verify "$idx"
verify_s=$(echo "$(date +%s.%N) - $verify_start" | bc)

"$lookup" "$idx" "$queries" | tee "$work/lookup.out"

echo "== figures"
printf "tokens:            %d (u%d, %d shard(s))\n" "$tokens" $((8 * width)) "$shards"
printf "build:             %.1f s wall, %.1f s CPU, %s of one core (goal <= 180 s wall on 2 cores)\n" "$build_s" "$cpu_s" "$cpu_pct"
printf "peak RSS:          %.1f MiB = %.2f bytes/token (goal <= 10; /usr/bin/time -v)\n" \
    "$(echo "$peak_kb / 1024" | bc -l)" "$(echo "$peak_kb * 1024 / $tokens" | bc -l)"
printf "disk:              %d bytes = %.3f bytes/token (goal <= 6 for u16, 8 for u32)\n" "$bytes" \
    "$(echo "$bytes / $tokens" | bc -l)"
printf "verify:            %.2f s\n" "$verify_s"
grep '^open:' "$work/lookup.out" | sed 's/^open:/open:             /'
awk '/pass 2/ {warm = 1} warm && $1 == "all" {printf "lookup p99 (warm): %s us over %s patterns of 1-16 tokens, p50 %s us (goal p99 <= 5 us)\n", $6, $2, $4}' "$work/lookup.out"
awk '/pass 2/ {warm = 1} warm && $1 == "1" && $2 == "narrow" {printf "one narrow() p99: %s us, p50 %s us\n", $7, $5}' "$work/lookup.out"
