#!/usr/bin/env bash
# bench/gpu-bundle.sh pack + unpack on a fake build: what a GPU machine gets is at the paths the build was made with,
# reached through a link when the checkout sits elsewhere, and gpu-env.sh adds only libraries that machine lacks.
# Everything happens under WORK_DIR: the script runs from a copy in a fake checkout there, since unpack writes
# into its own checkout (the real one's build-gpu/ may hold a CUDA build).
# Args: SOURCE_DIR WORK_DIR
set -euo pipefail
src=$1 work=$2
dir="$work/gpu-bundle-roundtrip"
rm -rf "$dir"
mkdir -p "$dir/build/bin" "$dir/build/tests" "$dir/build/bench-cache" "$dir/llama/models" "$dir/data/models" \
    "$dir/checkout/bench"
cp "$src/bench/gpu-bundle.sh" "$dir/checkout/bench/"
checkout=$(cd "$dir/checkout" && pwd)
tool="$checkout/bench/gpu-bundle.sh"
fail() { echo "gpu-bundle-roundtrip: $*"; exit 1; }

# The fake build: a real dynamic executable as bin/rest, CTest files, a cached index, a cache naming its sources.
cp "$(command -v ls)" "$dir/build/bin/rest"
echo 'subdirs("tests")' > "$dir/build/CTestTestfile.cmake"
echo 'add_test(t "/nowhere/t")' > "$dir/build/tests/CTestTestfile.cmake"
echo index > "$dir/build/bench-cache/x.idx"
echo fixture > "$dir/build/bench-cache/x.gguf"
# The data path as CMake writes it for the tests: relative to the root, with its "..".
printf 'RESTCPP_LLAMA_DIR:PATH=%s\nREST_SHARED_DATA_DIR:PATH=%s\n' "$dir/llama" "$dir/build/../data" > "$dir/build/CMakeCache.txt"
for v in one two; do echo "vocab $v" > "$dir/llama/models/ggml-vocab-$v.gguf"; done
echo model > "$dir/data/models/stories260K.gguf"

# Refusals: one line, non-zero exit.
if REST_BUNDLE_VOCABS="one three" "$tool" pack "$dir/build" "$dir/b" 2>"$dir/err"; then fail "packed a missing tokenizer"; fi
grep -q 'ggml-vocab-three.gguf' "$dir/err" && [ "$(wc -l <"$dir/err")" = 1 ] || fail "bad error: $(cat "$dir/err")"
if "$tool" unpack "$dir/none" 2>"$dir/err"; then fail "unpacked a missing bundle"; fi
grep -q 'no manifest.env' "$dir/err" || fail "bad error: $(cat "$dir/err")"

REST_BUNDLE_VOCABS="one two" "$tool" pack "$dir/build" "$dir/b" > "$dir/pack.out" || fail "pack failed"
grep -qx 'bench-cache/x.idx' "$dir/b/build.list" || fail "the cached index is not packed"
if grep -q 'x.gguf' "$dir/b/build.list"; then fail "a fixture model was packed"; fi

# Unpack as if the build had been made under another root: a link from that root to this checkout.
new="$dir/elsewhere/main"
sed -i "s|^BUNDLE_ROOT=.*|BUNDLE_ROOT=$new|; s|^BUNDLE_BUILD=.*|BUNDLE_BUILD=$new/build-gpu|" "$dir/b/manifest.env"
# The data as the tests have it compiled in, beside the root: through the link, beside the real checkout.
grep -qx "BUNDLE_DATA=$dir/build/../data" "$dir/b/manifest.env" || fail "manifest data: $(grep DATA "$dir/b/manifest.env")"
sed -i "s|^BUNDLE_MODELS=.*|BUNDLE_MODELS=$dir/models-there|; s|^BUNDLE_DATA=.*|BUNDLE_DATA=$new/../data-there|" "$dir/b/manifest.env"
# ... on a machine whose zstd does not run (the H200's had none): unpack takes the one pack brought.
mkdir -p "$dir/nozstd"
printf '#!/bin/sh\nexit 127\n' > "$dir/nozstd/zstd"
chmod +x "$dir/nozstd/zstd"
PATH="$dir/nozstd:$PATH" "$tool" unpack "$dir/b" > "$dir/unpack.out" 2>&1 || fail "unpack failed: $(cat "$dir/unpack.out")"
[ "$(readlink "$new")" = "$checkout" ] || fail "$new does not link to the checkout"
b="$checkout/build-gpu"
cmp -s "$b/bin/rest" "$dir/build/bin/rest" || fail "bin/rest differs after the round trip"
[ -f "$b/tests/CTestTestfile.cmake" ] && [ -f "$b/bench-cache/x.idx" ] && [ -d "$b/test-tmp" ] || fail "build files missing"
[ "$(cat "$dir/models-there/ggml-vocab-two.gguf")" = "vocab two" ] || fail "tokenizer missing"
[ "$(cat "$checkout/../data-there/models/stories260K.gguf")" = model ] || fail "data not beside the real checkout"
grep -q "^export LD_LIBRARY_PATH=$b/carried-lib" "$b/gpu-env.sh" || fail "gpu-env.sh: $(cat "$b/gpu-env.sh")"
# This machine has every library the executable needs, so none is added.
[ -z "$(ls -A "$b/carried-lib")" ] || fail "libraries added that the machine has: $(ls "$b/carried-lib")"
# A second unpack onto an existing foreign root is refused rather than overwriting it.
rm "$new"; mkdir -p "$new"
if "$tool" unpack "$dir/b" 2>"$dir/err"; then fail "unpacked over a foreign $new"; fi
grep -q 'is not this checkout' "$dir/err" || fail "bad error: $(cat "$dir/err")"
rm -rf "$dir"
echo "gpu-bundle round trip: ok"
