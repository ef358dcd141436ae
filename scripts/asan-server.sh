#!/usr/bin/env bash
# The server tests (CTest label `server`) under AddressSanitizer + LeakSanitizer (issue 19). Builds rest.cpp's own
# code with -DREST_SANITIZE_ADDRESS=ON in BUILD_DIR (default build-asan; llama.cpp itself is not instrumented),
# runs `ctest -L server` with every sanitizer report written to BUILD_DIR/asan-logs/ (the test binaries and each
# `rest serve` child they start), and fails on a failing test or on any report there or in the servers' logs.
# Builds and tests run under `nice -n 19`. Extra arguments go to ctest (e.g. -R test-server-api).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD_DIR:-build-asan}
jobs=${JOBS:-$(nproc)}

# The server test targets, as tests/server.cmake declares them (rest-cli: the binary the integration tests start).
targets=(rest-cli $(sed -n 's/^rest_add_test(\(test-server-[a-z0-9-]*\).*/\1/p' tests/server.cmake))

echo "== configure ($build)"
mkdir -p "$build"
nice -n 19 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREST_BUILD_TESTS=ON \
    -DREST_BUILD_BENCH=OFF -DREST_SANITIZE_ADDRESS=ON >"$build/configure.log" 2>&1 \
    || { tail -20 "$build/configure.log"; exit 1; }
echo "== build: ${targets[*]}"
nice -n 19 ninja -C "$build" -j "$jobs" "${targets[@]}"

# The npm `openai` test installs its package into the build's test cache; reuse a normal build's copy when there
# is one (no network needed), else it installs or skips as usual.
if ! compgen -G "$build/test-cache/npm-openai-*" >/dev/null; then
    for d in build/test-cache/npm-openai-*; do
        [ -d "$d" ] || continue
        mkdir -p "$build/test-cache" && cp -a "$d" "$build/test-cache/"
    done
fi

logs=$root/$build/asan-logs
rm -rf "$logs" "$build/test-tmp"
mkdir -p "$logs"
# log_path: each process writes its report to asan-logs/asan.PID (only when it has one), the server children too.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$logs/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
if [ -f tests/lsan.supp ]; then
    export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi

echo "== ctest -L server (ASAN_OPTIONS=$ASAN_OPTIONS)"
set +e
(cd "$build" && nice -n 19 ctest -L server --output-on-failure "$@") 2>&1 | tee "$build/asan-ctest.log"
rc=${PIPESTATUS[0]}
set -e

reports=$(find "$logs" -type f | sort)
in_logs=$(grep -l -E "ERROR: AddressSanitizer|ERROR: LeakSanitizer|SUMMARY: AddressSanitizer" \
    "$build"/test-tmp/*.log "$build/asan-ctest.log" 2>/dev/null || true)
if [ -n "$reports" ] || [ -n "$in_logs" ]; then
    echo "== sanitizer reports:"
    for f in $reports $in_logs; do
        echo "---- $f"
        grep -E "ERROR: |SUMMARY: " "$f" | head -5
    done
    [ "$rc" -ne 0 ] || rc=1
else
    echo "== no sanitizer reports"
fi
skipped=$(grep -c '(Skipped)' "$build/asan-ctest.log" || true)
echo "== $skipped test(s) skipped; exit $rc"
exit "$rc"
