#!/usr/bin/env bash
# Carry a CUDA build to a GPU machine that has no Debian -dev packages and reaches no registry (docs/gpu.md).
#
#   bench/gpu-bundle.sh pack BUILD_DIR BUNDLE_DIR   here: the build's binaries, CTest files and bench-cache indexes,
#                                                   the shared data, the tokenizer files the tests use, and the
#                                                   shared libraries the binaries need, each a .tar.zst
#   bench/gpu-bundle.sh unpack BUNDLE_DIR           there: puts each at the path the build was made with (the
#                                                   paths are compiled into the tests), and writes
#                                                   BUILD_DIR/gpu-env.sh, which adds only the libraries that
#                                                   machine lacks; then: . BUILD_DIR/gpu-env.sh &&
#                                                   bench/gpu-check.sh --prebuilt --build-dir BUILD_DIR OUT
#
# Why not build there: the GPU machine has nvcc, CMake and ninja but none of the -dev packages (xxhash, zstd,
# CLI11, nlohmann-json, cpp-httplib, GoogleTest), and its time is scarce. Every test binary links ggml's CUDA
# kernels statically (~75 MB each); one zstd stream with a long window stores those once.
# REST_BUNDLE_VOCABS (default "llama-spm llama-bpe phi-3 qwen2 deepseek-coder"): the tokenizers the tests load.
# REST_BUNDLE_MAX_MB (default 56): pack fails above this, since the device carries at most 64 MiB with the tree.
set -euo pipefail

die() { echo "gpu-bundle: $*" >&2; exit 2; }
zst() { zstd -q -T0 --long=28 -19 "$@"; }
unzst() { zstd -q -d --long=28 "$@"; }
need_zstd() { command -v zstd >/dev/null 2>&1 || die "zstd not found (apt-get install zstd)"; }
root=$(cd "$(dirname "$0")/.." && pwd -P)

# The shared libraries that files link, outside glibc and CUDA's driver and toolkit (ldd fails on a script: its
# libraries are none, and the others' still count).
libs_of() {
    ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' \
        | grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcudart|libcublas[A-Za-z]*|libnccl)\.so' \
        | sort -u || true
}

cache_value() {  # build dir, CMake cache key: the value, or nothing
    sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" | head -1
}

pack() {
    [ $# = 2 ] || die "usage: bench/gpu-bundle.sh pack BUILD_DIR BUNDLE_DIR"
    local build bundle llama data data_raw models bins
    build=$(cd "$1" 2>/dev/null && pwd) || die "$1 is not a directory"
    [ -x "$build/bin/rest" ] && [ -f "$build/CMakeCache.txt" ] || die "$build has no bin/rest or CMakeCache.txt"
    bundle=$(realpath -m "$2")
    llama=$(cache_value "$build" RESTCPP_LLAMA_DIR)
    [ -n "$llama" ] || llama=$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/rest.cpp/llama.cpp-* 2>/dev/null | head -1)
    models=$llama/models
    # As compiled into the tests (../shared/data beside the checkout): unpack resolves it where the checkout is.
    data_raw=$(cache_value "$build" REST_SHARED_DATA_DIR)
    data=$(realpath -m "$data_raw")
    [ -f "$data/models/stories260K.gguf" ] || die "no shared data at $data"
    need_zstd
    mkdir -p "$bundle"
    rm -rf "$bundle"/{build,data,vocab,libs}.tar.zst "$bundle"/{build,libs}.list "$bundle/manifest.env" "$bundle/zstd"
    # zstd itself, for a machine without it (the H200's had none): the program and its libraries outside glibc.
    mkdir -p "$bundle/zstd"
    cp "$(command -v zstd)" "$bundle/zstd/zstd.bin"
    libs_of "$(command -v zstd)" | xargs -r cp -L -t "$bundle/zstd/"
    printf '#!/bin/sh\nd=$(dirname "$0")\nLD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/zstd.bin" "$@"\n' \
        > "$bundle/zstd/zstd"
    chmod +x "$bundle/zstd/zstd"

    # The build: binaries (stripped copies: symbols are a fifth of each), CTest's files, the cache (architectures),
    # cached bench indexes (not the fixtures).
    local stage
    stage=$(mktemp -d)
    trap "rm -rf '$stage'" EXIT
    mkdir -p "$stage/bin"
    cp -p "$build"/bin/* "$stage/bin/"
    strip --strip-unneeded "$stage"/bin/* 2>/dev/null || true  # scripts and non-ELF files stay as they are
    (cd "$build" && { find . -name CTestTestfile.cmake; echo CMakeCache.txt;
                      find bench-cache -name '*.idx' 2>/dev/null || true; } | sed 's|^\./||' | sort -u) \
        > "$bundle/build.list"
    tar -C "$stage" -cf - bin -C "$build" -T "$bundle/build.list" | zst -o "$bundle/build.tar.zst"
    (cd "$stage" && find bin -type f) >> "$bundle/build.list"
    rm -rf "$stage"
    tar -C "$data" -cf - . | zst -o "$bundle/data.tar.zst"
    local vocabs=() v
    for v in ${REST_BUNDLE_VOCABS:-llama-spm llama-bpe phi-3 qwen2 deepseek-coder}; do
        [ -f "$models/ggml-vocab-$v.gguf" ] || die "no $models/ggml-vocab-$v.gguf"
        vocabs+=("ggml-vocab-$v.gguf")
    done
    tar -C "$models" -cf - "${vocabs[@]}" | zst -o "$bundle/vocab.tar.zst"
    # The GPU machine may lack them.
    mapfile -t bins < <(find "$build/bin" -type f -perm -u+x)
    libs_of "${bins[@]}" > "$bundle/libs.list"
    tar -chf - -T "$bundle/libs.list" --transform 's|.*/||' 2>/dev/null | zst -o "$bundle/libs.tar.zst"
    printf 'BUNDLE_%s=%q\n' ROOT "$root" BUILD "$build" MODELS "$models" DATA "$data_raw" \
        COMMIT "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" > "$bundle/manifest.env"
    local mb
    mb=$(du -cm "$bundle"/*.tar.zst | tail -1 | cut -f1)
    du -h "$bundle"/*.tar.zst
    echo "gpu-bundle: $bundle holds $mb MB ($(wc -l < "$bundle/build.list") build files, $(wc -l < "$bundle/libs.list") libraries)"
    [ "$mb" -le "${REST_BUNDLE_MAX_MB:-56}" ] || die "$mb MB is over REST_BUNDLE_MAX_MB=${REST_BUNDLE_MAX_MB:-56}"
}

unpack() {
    [ $# = 1 ] || die "usage: bench/gpu-bundle.sh unpack BUNDLE_DIR"
    local bundle=$1
    [ -f "$bundle/manifest.env" ] || die "$bundle has no manifest.env (made by: bench/gpu-bundle.sh pack)"
    zstd --version >/dev/null 2>&1 || PATH="$(cd "$bundle" && pwd)/zstd:$PATH"  # none that runs: the one pack brought
    need_zstd
    local BUNDLE_ROOT BUNDLE_BUILD BUNDLE_MODELS BUNDLE_DATA BUNDLE_COMMIT
    # shellcheck disable=SC1091
    . "$bundle/manifest.env"
    # The tests hold the paths of the machine that built them: make this checkout answer at that root.
    if [ "$(realpath -m "$BUNDLE_ROOT")" != "$root" ]; then
        [ ! -e "$BUNDLE_ROOT" ] || die "$BUNDLE_ROOT exists and is not this checkout ($root)"
        mkdir -p "$(dirname "$BUNDLE_ROOT")"
        ln -s "$root" "$BUNDLE_ROOT"
    fi
    local build data
    build=$(realpath -m "$BUNDLE_BUILD")
    data=$(realpath -m "$BUNDLE_DATA")  # through that link: ../shared beside wherever the checkout really is
    mkdir -p "$build/test-tmp" "$BUNDLE_MODELS" "$build/carried-lib"
    unzst -c "$bundle/build.tar.zst" | tar -C "$build" -xf -
    unzst -c "$bundle/vocab.tar.zst" | tar -C "$BUNDLE_MODELS" -xf -
    if [ ! -f "$data/models/stories260K.gguf" ]; then
        mkdir -p "$data"
        unzst -c "$bundle/data.tar.zst" | tar -C "$data" -xf -
    fi
    local tmp lib name added=() have
    tmp=$(mktemp -d)
    unzst -c "$bundle/libs.tar.zst" | tar -C "$tmp" -xf -
    have=$(ldconfig -p 2>/dev/null || true)  # read once: grep -q in a pipe could end ldconfig early (SIGPIPE)
    for lib in "$tmp"/*; do
        [ -e "$lib" ] || continue
        name=$(basename "$lib")
        if [[ $have != *$'\t'"$name "* ]]; then
            cp "$lib" "$build/carried-lib/"
            added+=("$name")
        fi
    done
    rm -rf "$tmp"
    # The toolkit's first (where the build found them, per its RUNPATH), then the wheels' (libnccl among them).
    local dirs=("$build/carried-lib") d
    for d in /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             $(ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib /usr/local/lib/python3*/dist-packages/nvidia/*/lib 2>/dev/null); do
        [ -d "$d" ] && dirs+=("$d")
    done
    printf 'export LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$(IFS=:; echo "${dirs[*]}")" > "$build/gpu-env.sh"
    echo "gpu-bundle: commit $BUNDLE_COMMIT unpacked: build $build, tokenizers $BUNDLE_MODELS, data $data;" \
         "libraries added: ${added[*]:-none}"
    local missing
    missing=$(. "$build/gpu-env.sh" && ldd "$build/bin/rest" | grep 'not found' || true)
    [ -z "$missing" ] || die "bin/rest still lacks: $(echo "$missing" | tr -s ' \n' ' ')"
}

case ${1:-} in
pack) shift; pack "$@" ;;
unpack) shift; unpack "$@" ;;
-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
*) die "usage: bench/gpu-bundle.sh pack BUILD_DIR BUNDLE_DIR | unpack BUNDLE_DIR (see --help)" ;;
esac
