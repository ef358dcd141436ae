#!/usr/bin/env bash
# bench/gpu-check.sh's argument and no-fetch checks, through its --dry-run (no GPU, nothing built).
# Args: SOURCE_DIR LLAMA_DIR WORK_DIR
set -euo pipefail
src=$1 llama=$2 work=$3
check="$src/bench/gpu-check.sh"
dir="$work/gpu-check-dry-run"
rm -rf "$dir"
mkdir -p "$dir/not-llama"
fail() { echo "gpu-check-dry-run: $*"; exit 1; }

# expect_error NAME MESSAGE ARGS...: a non-zero exit, nothing on stdout, one line on stderr that says MESSAGE.
expect_error() {
    local name=$1 expect=$2; shift 2
    if "$check" "$@" >"$dir/$name.out" 2>"$dir/$name.err"; then fail "$name: exit 0 for: $*"; fi
    [ ! -s "$dir/$name.out" ] || fail "$name: unexpected stdout: $(cat "$dir/$name.out")"
    [ "$(wc -l <"$dir/$name.err")" = 1 ] || fail "$name: want one line of error, got: $(cat "$dir/$name.err")"
    grep -qF -- "$expect" "$dir/$name.err" || fail "$name: error does not say '$expect': $(cat "$dir/$name.err")"
}
expect_error no-arg "no llama.cpp source directory" --dry-run --cuda-arch 90
expect_error no-arg-out "no llama.cpp source directory" --cuda-arch 90 --build-dir "$dir/b"
expect_error not-llama "is not a llama.cpp checkout" --dry-run --cuda-arch 90 "$dir/not-llama"
expect_error missing "is not a directory" --dry-run --cuda-arch 90 "$dir/missing"
expect_error bad-arch "--cuda-arch must look like" --dry-run --cuda-arch sm_90 "$llama"
expect_error bad-option "unknown option" --dry-run --fetch "$llama"
# --prebuilt: no llama.cpp directory, and a build directory that holds a build.
expect_error prebuilt-llama "--prebuilt takes no llama.cpp directory" --prebuilt --dry-run "$llama" "$dir/out"
expect_error prebuilt-none "--prebuilt: no build at" --prebuilt --dry-run --build-dir "$dir/not-llama" "$dir/out"

# A valid checkout: exit 0, the exact commands, and nothing created.
build="$dir/build-gpu" out="$dir/out"
"$check" --dry-run --cuda-arch 90 --build-dir "$build" "$llama" "$out" >"$dir/ok.out" 2>&1 \
    || fail "dry run failed: $(cat "$dir/ok.out")"
configure=$(grep '^configure: ' "$dir/ok.out") || fail "no configure line in: $(cat "$dir/ok.out")"
for want in " -DGGML_CUDA=ON " " -DCMAKE_CUDA_ARCHITECTURES=90 " " -DRESTCPP_LLAMA_DIR=$llama " \
            " -DFETCHCONTENT_FULLY_DISCONNECTED=ON " " -B $build "; do
    [[ "$configure " == *"$want"* ]] || fail "configure line lacks '$want': $configure"
done
grep -q '^build: ninja .* rest-cli .*test-llama-verify.*' "$dir/ok.out" || fail "no ninja line with the targets"
grep -q '^build: .*test-decode-lossless' "$dir/ok.out" || fail "the build skips test-decode-lossless"
grep -q '^test: env REST_TEST_NGL=99 ctest .*-R .*test-decode-lossless' "$dir/ok.out" \
    || fail "no ctest line for the lossless tests, offloaded: $(grep '^test:' "$dir/ok.out")"
if grep -q '^test: .*test-llama-dir-build' "$dir/ok.out"; then fail "ctest would run test-llama-dir-build"; fi
grep -q '^bench: .*REST_BENCH_NGL=99 .*bench/run-standard.sh' "$dir/ok.out" || fail "no run-standard line with --ngl 99"
grep -q '^bench: .*REST_BUDGET_TRACE=.*/budget-trace.tsv .*bench/run-standard.sh' "$dir/ok.out" || fail "the bench records no budget trace"
grep -q 'npm_config_offline=true' "$dir/ok.out" || fail "npm is not told to stay offline"
if grep -Eq '(^|[[:space:]/=])npm([[:space:]]|$)' "$dir/ok.out"; then fail "the dry run invokes npm: $(cat "$dir/ok.out")"; fi
[ ! -e "$build" ] || fail "the dry run created $build"
[ ! -e "$out" ] || fail "the dry run created $out"
# A prebuilt build: tests and bench on it, nothing configured or built.
mkdir -p "$dir/pre/bin"
printf '#!/bin/sh\n' > "$dir/pre/bin/rest"; chmod +x "$dir/pre/bin/rest"
: > "$dir/pre/CTestTestfile.cmake"
"$check" --prebuilt --dry-run --build-dir "$dir/pre" "$out" >"$dir/pre.out" 2>&1 || fail "prebuilt dry run failed: $(cat "$dir/pre.out")"
grep -q '^configure: (none: prebuilt)' "$dir/pre.out" || fail "prebuilt dry run would configure: $(cat "$dir/pre.out")"
grep -q "^test: env REST_TEST_NGL=99 ctest --test-dir $dir/pre " "$dir/pre.out" || fail "prebuilt: no ctest line on $dir/pre"
[ ! -e "$out" ] || fail "the prebuilt dry run created $out"
rm -rf "$dir"
echo "gpu-check dry run: ok"
