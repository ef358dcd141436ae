#!/usr/bin/env bash
# Issue 6's benchmark acceptance for the cost model and the automatic budget, each measured against plain decoding
# in the same `rest bench` process (interleaved per prompt; medians of per-prompt ratios, plus total-time ratios):
#   (a) never slower: TinyLlama-1.1B-shaped Q4_0 fixture, a datastore of unrelated text, prompts it cannot match.
#       Goal: wall-clock >= 0.97x of plain.
#   (b) the upper bound: the Q8_0 fixture with a datastore built from its own greedy continuations of the same
#       prompts. Goal: >= 2.0x (ceiling about 2.6x at perfect acceptance with 8 nodes on this machine kind).
#   (c) automatic vs fixed: stories260K + tinystories-A on prompts B, automatic budget against fixed budgets
#       4, 8, 16, 32, 64. Goal: within 3% of the best fixed budget, or better.
# Writes OUT/{a-unrelated,b-own,c-budgets}/ (results.json, results.md, plots) and OUT/summary.md.
#
# Usage: bench/run-cost.sh [OUT]   (default /tmp/rest-bench-cost)
# Environment as bench/run-standard.sh: REST_BIN, REST_SHARED_DATA, REST_BENCH_THREADS (default 2),
#   REST_BENCH_CACHE, REST_COST_PARTS (default "a b c"), REST_COST_PROMPTS (1.1B parts, default 6),
#   REST_COST_N (tokens for the 1.1B parts, default 96), REST_COST_LAYOUT (--draft-layout of every bench: auto, chain
#   or tree; default auto), REST_COST_B_METHODS (part b's methods, default plain,rest,rest@8).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/rest-bench-cost}
bin=${REST_BIN:-$root/build/bin/rest}
data=${REST_SHARED_DATA:-$root/../shared/data}
threads=${REST_BENCH_THREADS:-2}
cache=${REST_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp/bench}
parts=${REST_COST_PARTS:-a b c}
np=${REST_COST_PROMPTS:-6}
ntok=${REST_COST_N:-96}
layout=${REST_COST_LAYOUT:-auto}
b_methods=${REST_COST_B_METHODS:-plain,rest,rest@8}

[ -x "$bin" ] || { echo "run-cost: no rest binary at $bin (set REST_BIN)" >&2; exit 1; }
[ -f "$data/models/stories260K.gguf" ] || { echo "run-cost: shared data not found at $data" >&2; exit 1; }
mkdir -p "$out" "$cache"
export RESTCPP_CACHE_DIR="$out/cost-cache"  # a cost table measured now, under the current machine load
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
log="$out/run.log"
: > "$log"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$log" >&2; }
t_start=$(date +%s)

fixture() {
    local f="$cache/$1.gguf"; shift
    [ -s "$f" ] || { say "writing fixture $f"; "$bin" fixture -o "$f" "$@" >>"$log" 2>&1; }
    echo "$f"
}
bench() {
    local part="$1" label="$2"; shift 2
    say "bench $part (load $(cut -d' ' -f1-3 /proc/loadavg)): $*"
    "$bin" bench --out "$out/$part" --label "$label" -t "$threads" --draft-layout "$layout" --quiet \
        --meta "commit=$commit" "$@" \
        >"$out/$part.stdout" 2>>"$log"
    "$root/bench/plot.sh" "$out/$part" "$label" 2>>"$log" || true
}

head -n "$np" "$data/prompts/tinystories-B.jsonl" > "$out/prompts.jsonl"

for part in $parts; do
    case $part in
    a)
        m=$(fixture tinyllama-1.1b-q4_0 --shape tinyllama-1.1b --type q4_0)
        idx="$cache/tinyllama-spm-tinystories-A.idx"
        [ -s "$idx" ] || "$bin" index build -m "$m" -o "$idx" --split-paragraphs "$data/corpora/tinystories-A.txt" >>"$log" 2>&1
        bench a-unrelated "(a) Q4_0 1.1B fixture, unrelated datastore" -m "$m" --index "$idx" \
            --prompts "$out/prompts.jsonl" -n "$ntok" --methods plain,rest
        ;;
    b)
        m=$(fixture tinyllama-1.1b-q8_0 --shape tinyllama-1.1b --type q8_0)
        # The datastore: each prompt's tokens followed by the model's own greedy continuation, one document each, as
        # token ids (`rest generate --json`), so it holds exactly the sequences plain decoding produces.
        say "generating the Q8_0 fixture's own greedy continuations"
        "$bin" generate -m "$m" -f "$out/prompts.jsonl" --field prompt -n "$ntok" --no-spec -t "$threads" --json \
            2>>"$log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print(json.dumps({"tokens": r["prompt_tokens"] + r["tokens"]}))' > "$out/b-own-corpus.jsonl"
        "$bin" index build -m "$m" -o "$out/b-own.idx" --format jsonl --field tokens "$out/b-own-corpus.jsonl" \
            >>"$log" 2>&1
        bench b-own "(b) Q8_0 1.1B fixture, datastore of its own continuations" -m "$m" --index "$out/b-own.idx" \
            --prompts "$out/prompts.jsonl" -n "$ntok" --methods "$b_methods"
        ;;
    c)
        m="$data/models/stories260K.gguf"
        idx="$cache/stories260K-tinystories-A.idx"
        [ -s "$idx" ] || "$bin" index build -m "$m" -o "$idx" --split-paragraphs "$data/corpora/tinystories-A.txt" >>"$log" 2>&1
        bench c-budgets "(c) stories260K, automatic vs fixed budgets" -m "$m" --index "$idx" \
            --prompts "$data/prompts/tinystories-B.jsonl" -n 128 \
            --methods plain,rest,rest@4,rest@8,rest@16,rest@32,rest@64
        ;;
    *) echo "run-cost: unknown part '$part'" >&2; exit 1 ;;
    esac
done

python3 - "$out" $parts > "$out/summary.md" <<'EOF'
import json, os, sys
out, parts = sys.argv[1], sys.argv[2:]
dirs = {"a": "a-unrelated", "b": "b-own", "c": "c-budgets"}
def load(p):
    f = os.path.join(out, dirs[p], "results.json")
    return json.load(open(f)) if os.path.exists(f) else None
def m(j, name):
    return next((x for x in j["methods"] if x["name"] == name), None)
print("## Issue 6 cost-model acceptance (bench/run-cost.sh)\n")
for p in parts:
    j = load(p)
    if not j:
        print(f"- ({p}) no results"); continue
    r = m(j, "rest")
    if not r:
        print(f"- ({p}) no automatic `rest` among the methods"); continue
    mc = j["machine"]
    load_s = f"load {mc['loadavg_start'][0]:.1f} at start, {mc['load1_mean_during']:.1f} mean during"
    fixed = [x for x in j["methods"] if x["name"].startswith("rest@")]
    if p in ("a", "b"):
        goal = 0.97 if p == "a" else 2.0
        med, tot = r["speedup_median"], r["speedup_total"]
        ok = "meets" if med >= goal else "MISSES"
        extra = ""
        if p == "b":
            extra = "".join(f"; {x['name']} {x['speedup_median']:.2f}x (M {x['M']:.2f})" for x in fixed)
        print(f"- ({p}) {j['label']}: rest {med:.2f}x median per prompt, {tot:.2f}x total time, M {r['M']:.2f}, "
              f"output = plain {r['n_equal_plain']}/{r['n_compared']}{extra}; goal >= {goal}x: {ok} ({load_s}; "
              f"{j['prompts']['n_run']} prompts x {j['n_predict']} tokens, {j['threads']} threads, "
              f"{j.get('draft_layout', '?')} layout)")
    else:
        best = max(fixed, key=lambda x: x["speedup_total"])
        best_med = max(fixed, key=lambda x: x["speedup_median"])
        ratio = r["speedup_total"] / best["speedup_total"]
        ratio_med = r["speedup_median"] / best_med["speedup_median"]
        ok = "meets" if min(ratio, ratio_med) >= 0.97 else "MISSES"
        rows = ", ".join(f"{x['name']} {x['speedup_total']:.2f}x (M {x['M']:.2f})" for x in fixed)
        print(f"- (c) {j['label']}: automatic {r['speedup_total']:.2f}x total time / {r['speedup_median']:.2f}x median "
              f"(M {r['M']:.2f}); fixed: {rows}. Best fixed by total time {best['name']}: auto/best = {ratio:.3f}; "
              f"by median {best_med['name']}: {ratio_med:.3f}; goal >= 0.97: {ok} ({load_s})")
print()
for p in parts:
    f = os.path.join(out, dirs[p], "results.md")
    if os.path.exists(f):
        print(f"### ({p})\n")
        print(open(f).read())
EOF
say "done in $(( $(date +%s) - t_start )) s: $out/summary.md"
cat "$out/summary.md"
