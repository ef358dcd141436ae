#!/usr/bin/env bash
# GPU readiness check (docs/gpu.md): on a machine with an NVIDIA GPU and no registry access, build rest.cpp with
# CUDA against a llama.cpp source tree brought along, run the lossless tests (test-llama-*, test-decode-*) and
# bench/run-standard.sh with every layer offloaded, and write one JSON summary. Nothing is fetched: the llama.cpp
# source is an argument, CMake runs with FETCHCONTENT_FULLY_DISCONNECTED=ON, and npm, npx and apt-get are replaced
# by stubs that fail (gnuplot, which bench/plot.sh would otherwise install, by a no-op when it is missing).
#
# Usage: bench/gpu-check.sh [options] LLAMA_CPP_DIR [OUT_DIR]      (default OUT_DIR: /tmp/rest-gpu-check)
#        bench/gpu-check.sh --prebuilt [options] [OUT_DIR]         (a CUDA build made elsewhere: bench/gpu-bundle.sh)
# Options:
#   --prebuilt         use the build already in --build-dir (made on another machine and unpacked by
#                      bench/gpu-bundle.sh): no configure, no build, no nvcc or ninja needed; then tests, bench, summary
#   --cuda-arch ARCH   CMAKE_CUDA_ARCHITECTURES (default: the first GPU's compute capability, 9.0 -> 90)
#   --build-dir DIR    build directory (default: build-gpu in the repository; reused by a rerun)
#   --data DIR         shared data (default: $REST_SHARED_DATA, else ../shared/data beside the repository)
#   --parts "P ..."    run-standard parts (default: "stories260K tinyllama"; "none" skips the bench)
#   --ngl N            layers to offload in the bench (default 99)
#   --jobs N           ninja jobs (default: nproc)
#   --full             the bench's full prompt sets instead of REST_BENCH_QUICK=1
#   --dry-run          check the arguments, print the commands, build and run nothing
#   -h, --help         this text
# Writes OUT_DIR/gpu-check.json (machine, GPU, build time, test counts, speed ratios, paths) and logs beside it;
# the bench's own output is OUT_DIR/bench/, its budget policies' steps OUT_DIR/budget-trace.tsv and, from them,
# OUT_DIR/budget-costs.txt and .log (bench/trace-costs.py: the machine for bench-policy-replay). Exit status 0 only when the build, every test and the bench passed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 2; }

cuda_arch="" build="" data=${REST_SHARED_DATA:-} parts="stories260K tinyllama" ngl=99 jobs="" quick=1 dry=0 prebuilt=0
pos=()
while [ $# -gt 0 ]; do
    case $1 in
    -h|--help) usage; exit 0 ;;
    --cuda-arch|--build-dir|--data|--parts|--ngl|--jobs)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --cuda-arch) cuda_arch=$2 ;; --build-dir) build=$2 ;; --data) data=$2 ;;
        --parts) parts=$2 ;; --ngl) ngl=$2 ;; --jobs) jobs=$2 ;;
        esac
        shift 2 ;;
    --full) quick=0; shift ;;
    --dry-run) dry=1; shift ;;
    --prebuilt) prebuilt=1; shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) pos+=("$1"); shift ;;
    esac
done

# Argument and no-fetch checks: the same in a dry run as in a real one.
if [ "$prebuilt" = 1 ]; then
    # The build came with its llama.cpp compiled in: the only positional argument is OUT_DIR.
    [ ${#pos[@]} -le 1 ] || die "--prebuilt takes no llama.cpp directory, only OUT_DIR (got: ${pos[*]})"
    llama="(prebuilt)"
    out=${pos[0]:-/tmp/rest-gpu-check}
else
    [ ${#pos[@]} -ge 1 ] || die "no llama.cpp source directory given (usage: bench/gpu-check.sh [options] LLAMA_CPP_DIR [OUT_DIR]; nothing is fetched)"
    [ ${#pos[@]} -le 2 ] || die "too many arguments: ${pos[*]} (see --help)"
    [ -d "${pos[0]}" ] || die "${pos[0]} is not a directory (want a llama.cpp source tree)"
    llama=$(cd "${pos[0]}" && pwd)
    if [ ! -f "$llama/include/llama.h" ] || [ ! -f "$llama/CMakeLists.txt" ]; then
        die "$llama is not a llama.cpp checkout (no include/llama.h or CMakeLists.txt)"
    fi
    out=${pos[1]:-/tmp/rest-gpu-check}
fi
case $out in /*) ;; *) out=$PWD/$out ;; esac
build=${build:-$root/build-gpu}
case $build in /*) ;; *) build=$PWD/$build ;; esac
[ "$prebuilt" = 1 ] || [ "$build" != "$root/build" ] || die "--build-dir must not be the CPU build directory $root/build"
[[ $ngl =~ ^[0-9]+$ ]] || die "--ngl must be a number (got '$ngl')"
jobs=${jobs:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive number (got '$jobs')"
[ "$parts" != none ] || parts=""
for p in $parts; do
    case $p in stories260K|tinyllama|humaneval|mtbench|llamacpp) ;; *) die "unknown bench part '$p'" ;; esac
done
if [ "$prebuilt" = 1 ]; then
    [ -x "$build/bin/rest" ] && [ -f "$build/CTestTestfile.cmake" ] \
        || die "--prebuilt: no build at $build (want bin/rest and CTestTestfile.cmake; see bench/gpu-bundle.sh)"
    # The architecture the build was made for, from its cache ("none": a CPU build, for checking this script).
    cuda_arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null | head -1 || true)
    cuda_arch=${cuda_arch:-none}
elif [ -z "$cuda_arch" ]; then
    command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: no GPU to read the architecture from (give --cuda-arch, e.g. 90)"
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
    [[ $cap =~ ^[0-9]+\.[0-9]+$ ]] || die "nvidia-smi gave no compute capability ('$cap'); give --cuda-arch"
    cuda_arch=${cap/./}
fi
[ "$prebuilt" = 1 ] || [[ $cuda_arch =~ ^[0-9]+[af]?(-real|-virtual)?(\;[0-9]+[af]?(-real|-virtual)?)*$ ]] \
    || die "--cuda-arch must look like 90 or 86;90-real (got '$cuda_arch')"
if [ -z "$data" ]; then
    data=$root/../shared/data
    [ -d "$data" ] || { [ -d "$root/shared/data" ] && data=$root/shared/data; }
fi
[ ! -d "$data" ] || data=$(cd "$data" && pwd)
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; }

# The test binaries: every rest_add_test(test-llama-* / test-decode-*) in tests/*.cmake, so new ones are included.
mapfile -t tests < <(grep -ho 'rest_add_test(test-\(llama\|decode\)-[a-z0-9-]*' "$root"/tests/*.cmake | cut -d'(' -f2 | sort -u)
[ ${#tests[@]} -gt 0 ] || die "no test-llama-*/test-decode-* tests found in $root/tests/*.cmake"
test_regex="^($(IFS='|'; echo "${tests[*]}"))\$"

# No fetching: stubs for the package managers in front of PATH, npm told to stay offline, FetchContent disconnected.
stubs=$out/no-fetch-bin
run_env=(env "PATH=$stubs:$PATH" npm_config_offline=true)
configure=(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
           -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch" "-DRESTCPP_LLAMA_DIR=$llama"
           -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DGGML_CUDA_FA_ALL_QUANTS=OFF
           -DREST_BUILD_TESTS=ON -DREST_BUILD_BENCH=OFF -DREST_BUILD_TOOLS=OFF)
[ -z "$nvcc" ] || configure+=("-DCMAKE_CUDA_COMPILER=$nvcc")
if command -v ccache >/dev/null 2>&1; then configure+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi
build_cmd=(ninja -C "$build" -j "$jobs" rest-cli "${tests[@]}")
# REST_TEST_NGL: the tests load their models with that many layers offloaded (tests/test-util.h).
ctest_cmd=(env "REST_TEST_NGL=$ngl" ctest --test-dir "$build" -R "$test_regex" --output-on-failure -j 4 --timeout 900)
bench_out=$out/bench
# Every budget policy of the bench records its steps (src/decode/budget-trace.h): what the automatic budget saw on
# this machine, to replay offline (bench-policy-replay --true-costs / --jitter / --cold-us).
bench_cmd=(env "REST_BIN=$build/bin/rest" "REST_SHARED_DATA=$data" "REST_BENCH_NGL=$ngl" "REST_BENCH_QUICK=$quick"
           "REST_BENCH_PARTS=$parts" "REST_BENCH_CACHE=$build/bench-cache" "REST_BUDGET_TRACE=$out/budget-trace.tsv"
           "$root/bench/run-standard.sh" "$bench_out")

if [ "$dry" = 1 ]; then
    q() { printf '%q ' "$@" | sed 's/ $//'; }
    echo "gpu-check: dry run; nothing is built or run"
    echo "llama.cpp: $llama"
    echo "cuda arch: $cuda_arch"
    [ -n "$nvcc" ] || echo "warning: nvcc not found; a real run would stop here"
    [ -f "$data/models/stories260K.gguf" ] || echo "warning: no shared data at $data; a real run would skip the bench"
    echo "environment of every command: PATH=$stubs:\$PATH npm_config_offline=true ($stubs: failing npm, npx, apt-get)"
    if [ "$prebuilt" = 1 ]; then
        echo "configure: (none: prebuilt)"
        echo "build: (none: prebuilt $build)"
    else
        echo "configure: $(q "${configure[@]}")"
        echo "build: $(q "${build_cmd[@]}")"
    fi
    echo "test: $(q "${ctest_cmd[@]}")"
    if [ -n "$parts" ]; then echo "bench: $(q "${bench_cmd[@]}")"; else echo "bench: (none)"; fi
    echo "summary: $out/gpu-check.json"
    exit 0
fi

[ "$prebuilt" = 1 ] || [ -n "$nvcc" ] || die "nvcc not found (put the CUDA toolkit's bin in PATH)"
command -v python3 >/dev/null 2>&1 || die "python3 not found (it writes the JSON summary)"
[ "$prebuilt" = 1 ] || command -v ninja >/dev/null 2>&1 || die "ninja not found (apt-get install ninja-build, on a machine that can)"
mkdir -p "$out" "$stubs"
for tool in npm npx apt-get; do
    printf '#!/bin/sh\necho "gpu-check: %s is disabled here (nothing is fetched)" >&2\nexit 1\n' "$tool" > "$stubs/$tool"
done
plots=made
if ! command -v gnuplot >/dev/null 2>&1; then
    printf '#!/bin/sh\ncat >/dev/null\n' > "$stubs/gnuplot"  # bench/plot.sh would apt-get it: draw nothing instead
    plots="skipped (no gnuplot)"
fi
chmod +x "$stubs"/*

say() { echo "[$(date +%H:%M:%S)] gpu-check: $*" >&2; }
t0=$(date +%s)
configure_s="" build_s="" status_build=not_run status_tests=not_run status_bench=not_run bench_note=""
step() {  # name, log, command...: runs it, logs to OUT/<log>, prints the log's tail on failure
    local name=$1 log=$out/$2; shift 2
    say "$name: $*"
    if "${run_env[@]}" "$@" >"$log" 2>&1; then return 0; fi
    tail -20 "$log" >&2
    say "$name failed (log: $log)"
    return 1
}

ts=$(date +%s)
if [ "$prebuilt" = 1 ]; then
    status_build=ok  # built elsewhere: configure_s and build_s stay empty
    say "prebuilt: $build (CUDA architectures: $cuda_arch)"
elif step configure configure.log "${configure[@]}"; then
    configure_s=$(( $(date +%s) - ts )); ts=$(date +%s)
    if step build build.log "${build_cmd[@]}"; then status_build=ok; else status_build=build_failed; fi
    build_s=$(( $(date +%s) - ts ))
else
    configure_s=$(( $(date +%s) - ts )); status_build=configure_failed
fi

if [ "$status_build" = ok ]; then
    if step test ctest.log "${ctest_cmd[@]}"; then status_tests=ok; else status_tests=failed; fi
    if [ -z "$parts" ]; then
        status_bench=not_run bench_note="no parts requested"
    elif [ ! -f "$data/models/stories260K.gguf" ]; then
        status_bench=skipped bench_note="no shared data at $data"
    elif ! "$build/bin/rest" bench --help 2>/dev/null | grep -q -- '--ngl'; then
        status_bench=skipped bench_note="rest bench has no --ngl option, so nothing would be offloaded"
    elif rm -f "$out/budget-trace.tsv" && step bench bench.log "${bench_cmd[@]}"; then
        status_bench=ok
    else
        status_bench=failed
    fi
    [ -z "$bench_note" ] || say "bench $status_bench: $bench_note"
    # What the budget saw, as the machine bench-policy-replay replays (--true-costs, and rebuild, jitter, cold pass).
    if [ -s "$out/budget-trace.tsv" ]; then
        "$root/bench/trace-costs.py" "$out/budget-trace.tsv" > "$out/budget-costs.txt" 2> "$out/budget-costs.log" \
            || say "budget trace: $(tail -1 "$out/budget-costs.log")"
    fi
fi

# The summary: one JSON file. Counts come from CTest's closing lines, ratios from each part's results.json.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1 || true)
GC_OUT=$out GC_BENCH=$bench_out GC_GPU=$gpu GC_PARTS=$parts GC_TEST_REGEX=$test_regex GC_STATUS_TESTS=$status_tests \
GC_STATUS_BUILD=$status_build GC_CUDA_ARCH=$cuda_arch GC_NVCC=$nvcc GC_JOBS=$jobs GC_CONFIGURE_S=$configure_s \
GC_BUILD_S=$build_s GC_BUILD=$build GC_STATUS_BENCH=$status_bench GC_BENCH_NOTE=$bench_note GC_NGL=$ngl \
GC_QUICK=$quick GC_PREBUILT=$prebuilt GC_PLOTS=$plots GC_ROOT=$root GC_TEST_DATA=$root/../shared/data GC_LLAMA=$llama GC_DATA=$data GC_T0=$t0 python3 - <<'PY'
import json, os, re, socket, time
e = os.environ
out = e["GC_OUT"]
def read(p):
    try:
        return open(p, errors="replace").read()
    except OSError:
        return ""
def num(s):
    return int(s) if s else None
cpu = re.search(r"model name\s*:\s*(.*)", read("/proc/cpuinfo"))
gpu = [s.strip() for s in e["GC_GPU"].split(",")] + [None] * 4
ctest = read(os.path.join(out, "ctest.log"))
m = re.search(r"\d+% tests passed, (\d+) tests? failed out of (\d+)", ctest)
failed, total = (int(m.group(1)), int(m.group(2))) if m else (None, None)
skipped = len(re.findall(r"\(Skipped\)", ctest))
parts = {}
for part in e["GC_PARTS"].split():
    try:
        with open(os.path.join(e["GC_BENCH"], part, "results.json")) as f:
            j = json.load(f)
    except (OSError, ValueError):
        parts[part] = None  # the part failed or was skipped: bench.log says why
        continue
    keys = ("speedup_median", "speedup_total", "tokens_per_second", "output_equals_plain")
    parts[part] = {x["name"]: {k: x.get(k) for k in keys} for x in j.get("methods", [])}
summary = {
    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "machine": {"host": socket.gethostname(), "cpu": cpu.group(1) if cpu else None, "cpus": os.cpu_count(),
                "kernel": os.uname().release},
    "gpu": {"name": gpu[0] or None, "driver": gpu[1], "memory": gpu[2], "compute_cap": gpu[3]},
    "build": {"status": e["GC_STATUS_BUILD"], "prebuilt": e["GC_PREBUILT"] == "1", "cuda_arch": e["GC_CUDA_ARCH"], "nvcc": e["GC_NVCC"],
              "jobs": int(e["GC_JOBS"]), "configure_s": num(e["GC_CONFIGURE_S"]), "build_s": num(e["GC_BUILD_S"]),
              "dir": e["GC_BUILD"], "configure_log": os.path.join(out, "configure.log"),
              "build_log": os.path.join(out, "build.log")},
    "tests": {"status": e["GC_STATUS_TESTS"], "regex": e["GC_TEST_REGEX"], "total": total, "failed": failed,
              "skipped": skipped, "passed": total - failed - skipped if m else None,
              # the tests read ../shared/data beside the repository (tests/CMakeLists.txt), not --data
              "data_seen": os.path.exists(os.path.join(e["GC_TEST_DATA"], "models", "stories260K.gguf")),
              "failed_names": re.findall(r"^\s*\d+ - (\S+) \((?!Skipped)", ctest, re.M),
              "log": os.path.join(out, "ctest.log")},
    "bench": {"status": e["GC_STATUS_BENCH"], "note": e["GC_BENCH_NOTE"] or None, "ngl": int(e["GC_NGL"]),
              "quick": e["GC_QUICK"] == "1", "parts": parts, "plots": e["GC_PLOTS"], "dir": e["GC_BENCH"],
              "log": os.path.join(out, "bench.log")},
    "paths": {"repo": e["GC_ROOT"], "llama_cpp": e["GC_LLAMA"], "data": e["GC_DATA"],
              "summary": os.path.join(out, "gpu-check.json")},
    "total_s": int(time.time()) - int(e["GC_T0"]),
}
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(summary, f, indent=2)
PY
say "wrote $out/gpu-check.json in $(( $(date +%s) - t0 )) s (build $status_build, tests $status_tests, bench $status_bench)"
[ "$status_build" = ok ] && [ "$status_tests" = ok ] && { [ "$status_bench" = ok ] || [ -z "$parts" ]; }
