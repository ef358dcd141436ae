#!/usr/bin/env bash
# The index fuzzer's long run (issue 20): clang's libFuzzer with AddressSanitizer + UndefinedBehaviorSanitizer over
# tests/fuzz/fuzz-index.cpp (open + lookups + drafting on arbitrary bytes) and the core library's sources, seeded with
# small valid indexes. CTest replays the seeds, garbage variants and tests/fuzz/crashers (test-fuzz-index-replay);
# copy any crash-* file this writes into tests/fuzz/crashers once it is fixed.
#
# Usage: scripts/fuzz-index.sh [RUNS] [WORK_DIR]     (default 1000000 runs in /tmp/rest-fuzz-index)
# Inputs up to 300,000 bytes: the seed with a 70,000-token vocabulary carries a 280 KB first-token table.
# Needs clang (apt-get install clang) and a build of test-fuzz-index-replay in BUILD_DIR (default build) for the seeds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1000000}
work=${2:-/tmp/rest-fuzz-index}
build=${BUILD_DIR:-$root/build}
command -v clang++ >/dev/null || { echo "fuzz-index: clang++ not found (apt-get install clang)" >&2; exit 1; }
[[ $runs =~ ^[0-9]+$ ]] || { echo "fuzz-index: RUNS must be a number (got '$runs')" >&2; exit 1; }
mkdir -p "$work/corpus" "$work/obj"
rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*
cmake --build "$build" --target test-fuzz-index-replay >"$work/replay-build.log" 2>&1 \
    || { tail -20 "$work/replay-build.log" >&2; exit 1; }
"$build/bin/test-fuzz-index-replay" --write-seeds "$work/corpus" >/dev/null

# shellcheck disable=SC2054  # the commas belong to the sanitizer list
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I"$root/include" -I"$root/src")
echo "fuzz-index: compiling with clang (ASan + UBSan)"
rm -f "$work"/obj/*.o
pids=()
for src in "$root"/src/index/*.cpp "$root"/src/draft/*.cpp "$root"/src/decode/*.cpp "$root/tests/fuzz/fuzz-index.cpp"; do
    obj="$work/obj/$(basename "$(dirname "$src")")-$(basename "$src" .cpp).o"
    clang++ "${flags[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.2; done
done
for pid in "${pids[@]}"; do wait "$pid" || { echo "fuzz-index: a compile failed" >&2; exit 1; }; done
clang++ -fsanitize=fuzzer,address,undefined "$work"/obj/*.o -lxxhash -lzstd -pthread -o "$work/fuzz-index"

# The kept crashers first, under the sanitizers (CTest's replay is an ordinary build: it catches signals only).
"$work/fuzz-index" "$root"/tests/fuzz/crashers/*.idx >"$work/crashers.log" 2>&1 \
    || { tail -20 "$work/crashers.log" >&2; echo "fuzz-index: a kept crasher fails again" >&2; exit 1; }
echo "fuzz-index: $runs runs, corpus $work/corpus"
start=$(date +%s)
rc=0
"$work/fuzz-index" -runs="$runs" -max_len=300000 -print_final_stats=1 -artifact_prefix="$work/" \
    "$work/corpus" >"$work/fuzz.log" 2>&1 || rc=$?
grep -E "^#[0-9]+ +(pulse|DONE)|ERROR|SUMMARY|stat::" "$work/fuzz.log" | tail -20 || true
found=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
echo "fuzz-index: exit $rc after $(( $(date +%s) - start )) s; findings: $found"
exit "$rc"
