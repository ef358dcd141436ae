#!/usr/bin/env bash
# Builds llama.cpp's own llama-bench, llama-lookup, llama-lookup-create, llama-lookahead and llama-server from the
# pinned llama.cpp source, in a build directory outside the repository. bench/run-standard.sh uses them (when
# present) for llama.cpp's own figures next to rest bench's: plain decode speed (llama-bench tg), llama-lookup's M
# with a static cache, lookahead decoding, and llama-server's plain decoding and n-gram speculative types
# (bench/peers.py runs the last two as external processes on the same prompts).
# Usage: bench/build-llama-tools.sh [BUILD_DIR]   (default ~/.cache/rest.cpp/llama-tools; binaries in BUILD_DIR/bin)
set -euo pipefail
cache=${RESTCPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp}
src=${RESTCPP_LLAMA_DIR:-$cache/llama.cpp-80fb11a}
dir=${1:-$cache/llama-tools}
[ -f "$src/include/llama.h" ] || { echo "build-llama-tools: no llama.cpp source at $src (configure rest.cpp once, or set RESTCPP_LLAMA_DIR)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Static, position-independent, native: the same ggml/llama flags as rest.cpp's own build (cmake/llama.cmake).
cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "${launcher[@]}" >/dev/null
ninja -C "$dir" -j2 llama-bench llama-lookup llama-lookup-create llama-lookahead llama-server
echo "build-llama-tools: $dir/bin/{llama-bench,llama-lookup,llama-lookup-create,llama-lookahead,llama-server}"
