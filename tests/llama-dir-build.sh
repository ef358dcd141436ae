#!/usr/bin/env bash
# -DRESTCPP_LLAMA_DIR=<checkout> builds rest.cpp against a user's own llama.cpp. Tested with a plain checkout: the
# pinned clone this build already uses (ccache makes the second compile cheap). Args: SOURCE_DIR LLAMA_DIR WORK_DIR
set -euo pipefail
src=$1 llama=$2 work=$3
mkdir -p "$work"
build="$work/llama-dir-build"
rm -rf "$build"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRESTCPP_LLAMA_DIR="$llama" \
      -DREST_BUILD_TESTS=OFF -DREST_BUILD_BENCH=OFF >"$work/llama-dir-configure.log" 2>&1 \
    || { tail -5 "$work/llama-dir-configure.log"; exit 1; }
grep -q "llama.cpp from $llama" "$work/llama-dir-configure.log" || { echo "configure did not use $llama"; exit 1; }
ninja -C "$build" rest-cli >"$work/llama-dir-build.log" 2>&1 || { tail -20 "$work/llama-dir-build.log"; exit 1; }
"$build/bin/rest" fixture -o "$work/llama-dir-fixture.gguf" >/dev/null
out=$("$build/bin/rest" generate -m "$work/llama-dir-fixture.gguf" -p "Hello" -n 8 --no-spec --json -t 1)
echo "$out" | grep -q '"n_tokens":8' || { echo "unexpected output: $out"; exit 1; }
# A path that is not a llama.cpp checkout fails at configure time with one clear line.
if cmake -S "$src" -B "$work/llama-dir-bad" -DRESTCPP_LLAMA_DIR=/nonexistent >"$work/llama-dir-bad.log" 2>&1; then
    echo "configure with a bad RESTCPP_LLAMA_DIR should fail"; exit 1
fi
grep -q "is not a llama.cpp checkout" "$work/llama-dir-bad.log" || { echo "no clear error for a bad RESTCPP_LLAMA_DIR"; exit 1; }
rm -rf "$build" "$work/llama-dir-bad"
echo "RESTCPP_LLAMA_DIR build: ok"
