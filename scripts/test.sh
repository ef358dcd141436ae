#!/usr/bin/env bash
# README command 2: install what is missing, build rest.cpp (llama.cpp is fetched and built once, then cached),
# and run the whole test suite. BUILD_DIR overrides the build directory (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}

scripts/setup-deps.sh
ccache -M 5G >/dev/null 2>&1 || true
echo "== configure ($build)"
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREST_BUILD_TESTS=ON -DREST_BUILD_BENCH=ON >"$build/configure.log" 2>&1 \
    || { tail -20 "$build/configure.log"; exit 1; }
echo "== build (first build compiles llama.cpp too: about 10-15 minutes on 2 cores)"
start=$(date +%s)
ninja -C "$build" -j "$(nproc)"
echo "== built in $(( $(date +%s) - start )) s"
echo "== test"
cd "$build"
set +e
ctest --output-on-failure -j 2 --timeout 1200 "$@" 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
# Tests whose data is absent exit 77 (tests/test-main.cpp) and CTest lists them as "(Skipped)": say how many.
skipped=$(grep -c '(Skipped)' ctest.log || true)
echo "== $skipped test(s) skipped (CTest lists them under \"The following tests did not run\")"
exit "$rc"
