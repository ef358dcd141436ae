#!/usr/bin/env bash
# Reproduces rest.cpp's headline benchmark table from ../shared/data (see docs/benchmarks.md):
#   stories260K  stories260K + a datastore of tinystories-A, on the tinystories-B prompts (the REST-style result)
#   tinyllama    a TinyLlama-1.1B-shaped Q4_0 fixture (random weights) with an unrelated datastore: cost and
#                never-slower (its outputs match nothing, so drafting must switch itself off)
#   humaneval    HumanEval prompts, a Python-standard-library datastore, a code-shaped fixture (qwen2 tokenizer,
#                random weights): mechanics only, the outputs are not meaningful
#   mtbench      MT-Bench, turn 1 then turn 2 on the model's own answer through the chat template (same fixture)
#   llamacpp     llama.cpp's own tools on stories260K, when built (bench/build-llama-tools.sh): llama-bench's plain
#                decode speed, llama-lookup's M with a static cache from tinystories-A and a dynamic cache grown
#                prompt by prompt (first 40 prompts of B), and
#                bench/peers.py: llama-server (plain, ngram-cache, ngram-simple, ngram-mod) and llama-lookahead as
#                external processes on 30 prompts of B
#   panel        issue 23's workload panel, each run with rest (automatic and fixed budgets) and every llama.cpp
#                n-gram type at several caps, verified alike (bench/panel.py summarizes: M, rows per step, speed,
#                rest's M at equal rows over each llama.cpp point's): stories260K on B; the demo model on HumanEval
#                with a Python-stdlib index; the demo model completing its 33 held-out stdlib files (prompt: a
#                file's first lines) with an index of its 633 training files only; and a repetition workload
#                (HumanEval prompts asked twice, so past outputs matter). OUT/panel/results.md holds the tables.
# Each part runs every method in one `rest bench` process, interleaved per prompt, and writes results.json,
# results.md and PNG plots into OUT/<part>/; OUT/headline.md collects the tables with the machine description.
#
# Usage: bench/run-standard.sh [OUT]        (default OUT: /tmp/rest-bench-standard)
# Environment: REST_BIN (default build/bin/rest), REST_SHARED_DATA (default ../shared/data),
#   REST_BENCH_THREADS (default 2, as llama.cpp's reference figures in ../shared/data/README.md: decode threads,
#   the same for every method; use 1 on a busy machine, where ggml's spinning thread pool degrades badly),
#   REST_BENCH_CACHE (fixtures and indexes, default ~/.cache/rest.cpp/bench), REST_BENCH_PARTS (default all six),
#   REST_LLAMA_TOOLS (llama-bench etc., default ~/.cache/rest.cpp/llama-tools/bin),
#   REST_BENCH_QUICK=1 (fewer prompts, for a smoke test), REST_BENCH_NGL=N (adds --ngl N to every `rest bench`:
#   layers offloaded to a GPU; bench/gpu-check.sh sets it).
# Takes about 10 minutes on an idle 2-core machine (plus a few minutes once to write the fixtures).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/rest-bench-standard}
bin=${REST_BIN:-$root/build/bin/rest}
data=${REST_SHARED_DATA:-$root/../shared/data}
threads=${REST_BENCH_THREADS:-2}
cache=${REST_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp/bench}
parts=${REST_BENCH_PARTS:-stories260K tinyllama humaneval mtbench llamacpp panel}
tools=${REST_LLAMA_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp/llama-tools/bin}
quick=${REST_BENCH_QUICK:-0}
ngl=${REST_BENCH_NGL:-}

[ -x "$bin" ] || { echo "run-standard: no rest binary at $bin (cmake -S . -B build -G Ninja && ninja -C build rest-cli, or set REST_BIN)" >&2; exit 1; }
[ -f "$data/models/stories260K.gguf" ] || { echo "run-standard: shared data not found at $data (set REST_SHARED_DATA)" >&2; exit 1; }
mkdir -p "$out" "$cache"
t_start=$(date +%s)
# A fresh cost table per run: a table measured earlier under a different machine load would mislead the budget.
export RESTCPP_CACHE_DIR="$out/cost-cache"
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
log="$out/run.log"
: > "$log"
say() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$log" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

n() { if [ "$quick" = 1 ]; then echo "$2"; else echo "$1"; fi; }

# Fixtures and indexes are cached: they depend only on the data and the fixture parameters.
fixture() {  # name, args...
    local f="$cache/$1.gguf"; shift
    if [ ! -s "$f" ]; then
        say "writing fixture $f ($*)"
        "$bin" fixture -o "$f" "$@" >>"$log" 2>&1
    fi
    echo "$f"
}
index() {  # name, model, build args...
    local f="$cache/$1.idx" m="$2"; shift 2
    if [ ! -s "$f" ]; then
        say "building index $f"
        "$bin" index build -m "$m" -o "$f" -t 2 "$@" >>"$log" 2>&1
    fi
    echo "$f"
}
bench() {  # part, label, args...
    local part="$1" label="$2"; shift 2
    say "bench $part (load $(load)): $*"
    "$bin" bench --out "$out/$part" --label "$label" -t "$threads" --quiet \
        --meta "commit=$commit" --meta "uncommitted_changes=$dirty" ${ngl:+--ngl "$ngl"} "$@" >"$out/$part.stdout" 2>>"$log"
    "$root/bench/plot.sh" "$out/$part" "$label" 2>>"$log"
}

# The newest Python standard library on this machine (the code datastores' corpus), or nothing.
python_lib() { ls -d /usr/lib/python3.[0-9]* 2>/dev/null | sort -V | tail -1 || true; }

all_methods=plain,llama-plain,rest,rest-datastore,rest-context,rest@2,rest@4,rest@8,rest@16,ngram-cache,ngram-simple,ngram-mod
# The panel's methods: rest's points and each llama.cpp type at the caps where it can be best.
panel_methods=plain,rest,rest@1,rest@2,rest@4,rest@8,rest@16
panel_methods+=,ngram-cache@2,ngram-cache@4,ngram-cache@8,ngram-cache@16
panel_methods+=,ngram-cache-nostatic@2,ngram-cache-nostatic@4,ngram-cache-nostatic@8,ngram-simple@4,ngram-simple@16
panel_methods+=,ngram-mod@16,ngram-mod@64,ngram-map-k@4,ngram-map-k@16,ngram-map-k4v@4,ngram-map-k4v@16

for part in $parts; do
    case $part in
    stories260K)
        m="$data/models/stories260K.gguf"
        idx=$(index stories260K-tinystories-A "$m" --split-paragraphs "$data/corpora/tinystories-A.txt")
        bench stories260K "stories260K + tinystories-A, prompts B" -m "$m" --index "$idx" \
            --prompts "$data/prompts/tinystories-B.jsonl" --n-prompts "$(n -1 10)" -n 128 --methods "$all_methods"
        ;;
    tinyllama)
        m=$(fixture tinyllama-1.1b-q4_0 --shape tinyllama-1.1b --type q4_0)
        idx=$(index tinyllama-spm-tinystories-A "$m" --split-paragraphs "$data/corpora/tinystories-A.txt")
        bench tinyllama "TinyLlama-1.1B-shaped Q4_0 fixture, unrelated datastore" -m "$m" --index "$idx" \
            --prompts "$data/prompts/tinystories-B.jsonl" --n-prompts "$(n 6 2)" -n "$(n 64 16)" \
            --methods plain,llama-plain,rest,ngram-cache
        ;;
    humaneval)
        m=$(fixture code-qwen2-l4 --vocab qwen2 --layers 4 --type q8_0)
        pylib=$(python_lib)
        [ -n "$pylib" ] || { say "no /usr/lib/python3.* found; skipping humaneval"; continue; }
        idx=$(index code-qwen2-pystdlib "$m" "$pylib"/*.py)
        bench humaneval "HumanEval, Python stdlib datastore, code-shaped fixture (mechanics)" -m "$m" \
            --index "$idx" --prompts "$data/prompts/HumanEval.jsonl.gz" --n-prompts "$(n 20 3)" -n 128 \
            --methods plain,llama-plain,rest,rest-datastore,rest-context,ngram-cache,ngram-simple,ngram-mod
        ;;
    mtbench)
        m=$(fixture code-qwen2-l4 --vocab qwen2 --layers 4 --type q8_0)
        pylib=$(python_lib)
        [ -n "$pylib" ] || { say "no /usr/lib/python3.* found; skipping mtbench"; continue; }
        idx=$(index code-qwen2-pystdlib "$m" "$pylib"/*.py)
        bench mtbench "MT-Bench 2 turns, chat template, code-shaped fixture (mechanics)" -m "$m" --index "$idx" \
            --prompts "$data/prompts/mt_bench_question.jsonl" --field turns --n-prompts "$(n 10 2)" -n 64 \
            --methods plain,llama-plain,rest,rest-context,ngram-cache,ngram-simple
        ;;
    llamacpp)
        if [ ! -x "$tools/llama-bench" ] || [ ! -x "$tools/llama-lookup" ]; then
            say "llama.cpp tools not found in $tools (bench/build-llama-tools.sh builds them); skipping llamacpp"
            continue
        fi
        m="$data/models/stories260K.gguf"
        mkdir -p "$out/llamacpp"
        say "llama.cpp tools (load $(load)): llama-bench tg128, llama-lookup"
        [ -s "$cache/lookup-tinystories-A.bin" ] || "$tools/llama-lookup-create" -m "$m" \
            -f "$data/corpora/tinystories-A.txt" -lcs "$cache/lookup-tinystories-A.bin" >>"$log" 2>&1
        python3 - "$tools" "$m" "$data/prompts/tinystories-B.jsonl" "$cache/lookup-tinystories-A.bin" "$threads" \
            "$(n 40 3)" "$out/stories260K/results.json" "$out/llamacpp/lookup-dynamic.bin" \
            > "$out/llamacpp/results.md" 2>>"$log" <<'PY'
import json, os, re, statistics, subprocess, sys
tools, model, prompts, cache, threads, n, rest_json, dynamic = sys.argv[1:]
if os.path.exists(dynamic):
    os.remove(dynamic)
out = subprocess.run([tools + "/llama-bench", "-m", model, "-p", "0", "-n", "128", "-t", threads, "-r", "10", "-o", "json"],
                     capture_output=True, text=True, check=True).stdout
tg = json.loads(out)[0]
print("| llama.cpp tool (pinned 80fb11a) | figure |\n|---|---:|")
print(f"| llama-bench tg128, stories260K, {threads} thread(s), 10 reps | {tg['avg_ts']:.0f} +- {tg['stddev_ts']:.0f} tokens/s |")
Ms, speeds, failed = [], [], []
for line in list(open(prompts))[: int(n)]:
    p = json.loads(line)["prompt"]
    # A dynamic cache that grows from prompt to prompt (-lcd), as rest bench's ngram-cache keeps one.
    e = subprocess.run([tools + "/llama-lookup", "-m", model, "-p", p, "-n", "128", "--spec-draft-n-max", "16",
                        "-lcs", cache, "-lcd", dynamic, "--temp", "0", "-t", threads, "-c", "512"],
                       capture_output=True, text=True).stderr
    mp, ma = re.search(r"n_predict\s*=\s*(\d+)", e), re.search(r"n_accept\s*=\s*(\d+)", e)
    if not (mp and ma):  # llama-lookup failed on this prompt (its stderr is in the log): count it, go on
        failed.append(e.strip().splitlines()[-1:] or ["(no output)"])
        continue
    npred, nacc = int(mp.group(1)), int(ma.group(1))
    Ms.append(npred / (npred - nacc))
    sp = re.search(r"decoded\s+\d+\s+tokens in\s+[\d.]+\s*seconds, speed:\s*([\d.]+)", e)
    if sp: speeds.append(float(sp.group(1)))
print(f"| llama-lookup, static cache from tinystories-A + context cache + dynamic cache (-lcd, grown prompt by prompt), --spec-draft-n-max 16, first {n} prompts of B: "
      f"M = n_predict / (n_predict - n_accept), mean per prompt | {statistics.mean(Ms) if Ms else float('nan'):.2f} |")
if failed:
    print(f"| llama-lookup runs that failed (skipped) | {len(failed)}: {failed[0][0][:80]} |")
if speeds:
    print(f"| llama-lookup decode speed, median per prompt | {statistics.median(speeds):.0f} tokens/s |")
try:
    j = json.load(open(rest_json))
    for m in j["methods"]:
        if m["name"] in ("plain", "llama-plain", "rest", "ngram-cache"):
            print(f"| rest bench (same run) {m['name']}: tokens/s over all prompts | {m['tokens_per_second']:.0f} |")
except Exception:
    pass
PY
        if [ -x "$tools/llama-server" ] && [ -x "$tools/llama-lookahead" ]; then
            # Peers as external processes on the same prompts: llama-server (plain and n-gram types) and lookahead.
            say "llama-server and llama-lookahead (load $(load))"
            python3 "$root/bench/peers.py" --tools "$tools" -m "$m" --prompts "$data/prompts/tinystories-B.jsonl" \
                --n-prompts "$(n 30 3)" -n 128 -t "$threads" --lookup-static "$cache/lookup-tinystories-A.bin" \
                --out "$out/llamacpp" > "$out/llamacpp/peers.md" 2>>"$log" || say "peers.py failed (see $log)"
            { echo; cat "$out/llamacpp/peers.md"; } >> "$out/llamacpp/results.md" 2>/dev/null || true
        else
            say "llama-server or llama-lookahead not built (bench/build-llama-tools.sh); no peer rows"
        fi
        ;;
    panel)
        demo="$root/models/pystdlib-demo-f16.gguf"
        pylib=$(python_lib)
        [ -n "$pylib" ] && [ -f "$demo" ] || { say "no /usr/lib/python3.* or demo model; skipping panel"; continue; }
        m="$data/models/stories260K.gguf"
        idx=$(index stories260K-tinystories-A "$m" --split-paragraphs "$data/corpora/tinystories-A.txt")
        bench panel-stories260K "panel: stories260K + tinystories-A, prompts B" -m "$m" --index "$idx" \
            --prompts "$data/prompts/tinystories-B.jsonl" --n-prompts "$(n 40 6)" -n 128 --methods "$panel_methods"
        # The demo model's split (as scripts/train-demo-model.sh makes it): files sorted by path, every 20th held out.
        find "$pylib" -name '*.py' -type f | LC_ALL=C sort > "$out/panel-files.txt"
        awk 'NR % 20 == 0' "$out/panel-files.txt" > "$out/panel-heldout.txt"
        awk 'NR % 20 != 0' "$out/panel-files.txt" > "$out/panel-train.txt"
        mapfile -t files_all < "$out/panel-files.txt"
        mapfile -t files_train < "$out/panel-train.txt"
        idx_all=$(index demo-pystdlib "$demo" "${files_all[@]}")
        bench panel-humaneval "panel: demo model + Python-stdlib index, HumanEval" -m "$demo" --index "$idx_all" \
            --prompts "$data/prompts/HumanEval.jsonl.gz" --n-prompts "$(n 40 6)" -n 128 --methods "$panel_methods"
        # The committed demo model was trained on Debian 12's Python 3.11.2 library, 666 files (models/README.md):
        # another version's, or one with more packages installed, splits into other files.
        rm -rf "$out/panel-heldout"
        if [ "$(basename "$pylib")" = python3.11 ] && [ "${#files_all[@]}" -eq 666 ]; then
            idx_train=$(index demo-pystdlib-train "$demo" "${files_train[@]}")
            python3 "$root/bench/panel.py" heldout-prompts "$out/panel-heldout.txt" "$out/panel-heldout.jsonl"
            bench panel-heldout "panel: demo model completing its held-out stdlib files, index of its training files" \
                -m "$demo" --index "$idx_train" --prompts "$out/panel-heldout.jsonl" --n-prompts "$(n -1 6)" -n 128 \
                --methods "$panel_methods"
        else
            say "$pylib (${#files_all[@]} files) is not the demo model's python3.11 (666 files): no held-out workload"
        fi
        python3 "$root/bench/panel.py" repeat-prompts "$data/prompts/HumanEval.jsonl.gz" "$(n 20 3)" \
            "$out/panel-repeat.jsonl"
        bench panel-repeat "panel: demo model + Python-stdlib index, HumanEval prompts asked twice" -m "$demo" \
            --index "$idx_all" --prompts "$out/panel-repeat.jsonl" -n 128 --methods "$panel_methods"
        mkdir -p "$out/panel"
        panel_dirs=()
        for w in stories260K humaneval heldout repeat; do
            if [ -d "$out/panel-$w" ]; then panel_dirs+=("$out/panel-$w"); fi
        done
        python3 "$root/bench/panel.py" summarize "${panel_dirs[@]}" \
            > "$out/panel/results.md" 2>>"$log" || say "panel.py summarize failed (see $log)"
        ;;
    *) echo "run-standard: unknown part '$part'" >&2; exit 1 ;;
    esac
done

# The headline: machine, commit, and every part's table.
{
    echo "## Headline table ($(date -u +%Y-%m-%dT%H:%MZ), commit $commit$( [ "$dirty" != 0 ] && echo ", $dirty uncommitted changes" ))"
    echo
    echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs," \
         "$(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo) RAM, $(uname -sr);" \
         "decode threads: $threads; load average at the end: $(load)."
    echo "Command: \`bench/run-standard.sh\` ($(( $(date +%s) - t_start )) s)."
    for part in $parts; do
        [ -f "$out/$part/results.md" ] || continue
        echo
        echo "### $part"
        echo
        cat "$out/$part/results.md"
    done
} > "$out/headline.md"
say "done in $(( $(date +%s) - t_start )) s: $out/headline.md"
cat "$out/headline.md"
