#!/usr/bin/env bash
# Issue 21's RPC benchmark: the TinyLlama-1.1B-shaped Q4_0 (and Q8_0) fixture, its layers split over two llama.cpp
# rpc-server processes on loopback (`--rpc A,B -ngl 99`), against the same model run locally. Each side is one
# `rest bench` process (plain, rest automatic, rest@8, interleaved per prompt), so every speed-up is against plain
# decoding on the same side; the two sides' plain tokens/s give the RPC overhead, and their cost tables give the
# per-step network cost the cost model measured (t(N) over RPC minus t(N) locally).
# The datastore holds each side's own greedy continuations of the prompts (drafts pay, as in bench/run-cost.sh b).
# Compute threads: -t THREADS locally; each rpc-server gets THREADS too (the two servers run one after the other,
# layer by layer, so they never compute at the same time).
#
# Usage: bench/rpc.sh [OUT]   (default /tmp/rest-bench-rpc)
# Environment: REST_BIN (dir holding rest and rpc-server, default build/bin), REST_SHARED_DATA, REST_BENCH_CACHE,
#   REST_BENCH_THREADS (default 1), REST_RPC_PROMPTS (default 4), REST_RPC_N (tokens per prompt, default 64),
#   REST_RPC_TYPES (default "q4_0 q8_0 tiny": the 1.1B shape in Q4_0 and Q8_0, and a 4-layer F32 fixture of next to
#   no compute, whose RPC-minus-local cost is the transport's own per step. On x86 the local CPU backend repacks Q4_0
#   for faster kernels and an rpc-server does not; Q8_0 has no repacked x86 kernel).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/rest-bench-rpc}
bindir=${REST_BIN:-$root/build/bin}
data=${REST_SHARED_DATA:-$root/../shared/data}
cache=${REST_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp/bench}
threads=${REST_BENCH_THREADS:-1}
np=${REST_RPC_PROMPTS:-4}
types=${REST_RPC_TYPES:-q4_0 q8_0 tiny}
ntok=${REST_RPC_N:-64}
rest="$bindir/rest"

for b in "$rest" "$bindir/rpc-server"; do
    [ -x "$b" ] || { echo "rpc.sh: $b not found (build rest.cpp; rpc-server needs -DRESTCPP_RPC=ON)" >&2; exit 1; }
done
[ -f "$data/prompts/tinystories-B.jsonl" ] || { echo "rpc.sh: shared data not found at $data" >&2; exit 1; }
mkdir -p "$out" "$cache"
export RESTCPP_CACHE_DIR="$out/cost-cache"  # tables measured now, under the current load
log="$out/run.log"
: > "$log"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$log" >&2; }

head -n "$np" "$data/prompts/tinystories-B.jsonl" > "$out/prompts.jsonl"

pids=()
cleanup() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
endpoints=""
for port in 50252 50253; do
    "$bindir/rpc-server" -H 127.0.0.1 -p "$port" -t "$threads" >"$out/rpc-server-$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    endpoints+="${endpoints:+,}127.0.0.1:$port"
done

for type in $types; do
    if [ "$type" = tiny ]; then
        model="$cache/tiny-f32-4-layers.gguf"  # next to no compute: RPC minus local is the per-step overhead
        [ -s "$model" ] || "$rest" fixture -o "$model" --layers 4 >>"$log" 2>&1
    else
        model="$cache/tinyllama-1.1b-$type.gguf"
        [ -s "$model" ] || { say "writing fixture $model"; "$rest" fixture -o "$model" --shape tinyllama-1.1b --type "$type" >>"$log" 2>&1; }
    fi
    for side in local rpc; do
        extra=()
        [ "$side" = rpc ] && extra=(--rpc "$endpoints" -ngl 99)
        run="$out/$type-$side"
        mkdir -p "$run"
        # Each side's own greedy continuations: an rpc-server computes with plain CPU kernels where the local
        # backend may use repacked ones (Q4_0 on AVX2), so the two sides' greedy outputs can differ.
        say "$type $side: generating the fixture's own continuations (the datastore)"
        "$rest" generate -m "$model" -f "$out/prompts.jsonl" --field prompt -n "$ntok" --no-spec -t "$threads" --json \
            "${extra[@]}" 2>>"$log" |
            python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(json.dumps({"tokens": r["prompt_tokens"] + r["tokens"]}))' > "$run/own.jsonl"
        "$rest" index build -m "$model" -o "$run/own.idx" --format jsonl --field tokens "$run/own.jsonl" >>"$log" 2>&1
        say "$type $side: bench (load $(cut -d' ' -f1-3 /proc/loadavg))"
        "$rest" bench -m "$model" --index "$run/own.idx" --prompts "$out/prompts.jsonl" -n "$ntok" -t "$threads" \
            --methods plain,rest,rest@8 --draft-layout chain --out "$run" --label "$type 1.1B fixture, $side" --quiet \
            "${extra[@]}" >"$run/stdout" 2>>"$log"
    done
done

python3 - "$out" "$threads" $types <<'PY' | tee "$out/summary.md"
import json, sys
out, threads, types = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"## RPC: fixtures split over 2 rpc-servers on loopback, -t {threads} (bench/rpc.sh)\n")
for t in types:
    j = {s: json.load(open(f"{out}/{t}-{s}/results.json")) for s in ("local", "rpc")}
    m = {s: {x["name"]: x for x in j[s]["methods"]} for s in j}
    mc = j["rpc"]["machine"]
    name = "4-layer F32 fixture (next to no compute)" if t == "tiny" else f"TinyLlama-1.1B-shaped {t.upper()} fixture"
    print(f"### {name}\n\n{mc.get('cpu', '')}, {mc.get('n_cpu', '?')} CPUs; load {j['local']['machine']['load1_mean_during']:.1f}"
          f" during the local run, {mc['load1_mean_during']:.1f} during the RPC run\n")
    print("| side | method | tokens/s | vs plain (median, p25-p75) | M | output = plain |")
    print("|---|---|---|---|---|---|")
    for s in ("local", "rpc"):
        for name in ("plain", "rest", "rest@8"):
            x = m[s][name]
            sp = "1.00" if name == "plain" else f"{x['speedup_median']:.2f}x ({x['speedup_p25']:.2f}-{x['speedup_p75']:.2f})"
            eq = f"{x['n_equal_plain']}/{x['n_cases']}"
            print(f"| {s} | {name} | {x['tokens_per_second']:.2f} | {sp} | {x['M']:.2f} | {eq} |")
    pl, pr = m["local"]["plain"]["tokens_per_second"], m["rpc"]["plain"]["tokens_per_second"]
    rl, rr = m["local"]["rest"]["tokens_per_second"], m["rpc"]["rest"]["tokens_per_second"]
    print(f"\nplain over RPC: {pr / pl:.2f}x local plain; rest over RPC: {rr / rl:.2f}x local rest\n")
    cl, cr = j["local"]["cost_table"], j["rpc"]["cost_table"]
    print("| rows N | t(N) local ms | t(N) over RPC ms | RPC minus local, ms per step |")
    print("|---|---|---|---|")
    for n, a, b in zip(cl["rows"], cl["t_us"], cr["t_us"]):
        if n in (1, 2, 4, 8, 16):
            print(f"| {n} | {a / 1000:.2f} | {b / 1000:.2f} | {(b - a) / 1000:+.2f} |")
    print()
PY
