#!/usr/bin/env bash
# Compile check for the CUDA build on a machine without a GPU (docs/gpu.md): configures rest.cpp with
# -DGGML_CUDA=ON against a llama.cpp source tree (default: the pinned one CMake caches), builds rest-cli (and with
# it ggml-cuda) in a separate build directory with ccache, and reports the wall time. Nothing is run on a GPU.
#
# Usage: bench/cuda-compile.sh [-j N] [--cuda-arch ARCH] [--target T] [LLAMA_CPP_DIR] [BUILD_DIR]
#   LLAMA_CPP_DIR  default: $RESTCPP_CACHE_DIR/llama.cpp-80fb11a (RESTCPP_CACHE_DIR defaults to ~/.cache/rest.cpp)
#   BUILD_DIR      default: /work/cuda-build; never the repository's build/
#   -j N           ninja jobs (default: nproc); --cuda-arch (default 90, H100/H200); --target (default rest-cli)
# Logs: BUILD_DIR/cuda-configure.log, BUILD_DIR/cuda-build.log. Exit status 0 when the build succeeded.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "cuda-compile: $*" >&2; exit 2; }
cache=${RESTCPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp}
jobs=$(nproc) arch=90 target=rest-cli
pos=()
while [ $# -gt 0 ]; do
    case $1 in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -j|--cuda-arch|--target)
        [ $# -ge 2 ] || die "$1 needs a value"
        case $1 in -j) jobs=$2 ;; --cuda-arch) arch=$2 ;; --target) target=$2 ;; esac
        shift 2 ;;
    -j[0-9]*) jobs=${1#-j}; shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) pos+=("$1"); shift ;;
    esac
done
llama=${pos[0]:-$cache/llama.cpp-80fb11a}
build=${pos[1]:-/work/cuda-build}
[ -f "$llama/include/llama.h" ] || die "$llama is not a llama.cpp checkout (no include/llama.h; configure the CPU build once to cache the pinned one)"
llama=$(cd "$llama" && pwd)
build=$(realpath -m "$build")
case $build/ in "$root/build/"*) die "$build is inside the repository's build/ (use a separate directory)" ;; esac
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j must be a positive number (got '$jobs')"
mkdir -p "$build"
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
[ -n "$nvcc" ] || die "nvcc not found (put the CUDA toolkit's bin in PATH)"
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi

echo "cuda-compile: $($nvcc --version | tail -1); llama.cpp $llama; arch $arch; -j $jobs; build $build"
t0=$(date +%s)
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        "-DCMAKE_CUDA_ARCHITECTURES=$arch" "-DCMAKE_CUDA_COMPILER=$nvcc" "${launcher[@]}" \
        "-DRESTCPP_LLAMA_DIR=$llama" -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF \
        -DREST_BUILD_TESTS=OFF -DREST_BUILD_BENCH=OFF -DREST_BUILD_TOOLS=OFF >"$build/cuda-configure.log" 2>&1; then
    tail -20 "$build/cuda-configure.log" >&2
    die "configure failed after $(( $(date +%s) - t0 )) s (log: $build/cuda-configure.log)"
fi
t1=$(date +%s)
grep -E 'CUDA Toolkit found|Using CMAKE_CUDA_ARCHITECTURES|The CUDA compiler identification' "$build/cuda-configure.log" || true
if ! ninja -C "$build" -j "$jobs" "$target" >"$build/cuda-build.log" 2>&1; then
    grep -m5 -E 'error|FAILED' "$build/cuda-build.log" >&2 || tail -20 "$build/cuda-build.log" >&2
    die "build of $target failed after $(( $(date +%s) - t1 )) s (configure $(( t1 - t0 )) s; log: $build/cuda-build.log)"
fi
t2=$(date +%s)
n_cu=$(grep -c 'Building CUDA object' "$build/cuda-build.log" || true)
lib=$(find "$build" -name 'libggml-cuda.a' -print -quit)
echo "cuda-compile: ok: $target in $(( t2 - t0 )) s wall (configure $(( t1 - t0 )) s, build $(( t2 - t1 )) s," \
     "$n_cu CUDA objects (ccache hits included), $(du -h "${lib:-/dev/null}" | cut -f1) libggml-cuda.a)"
