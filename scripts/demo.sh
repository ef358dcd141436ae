#!/usr/bin/env bash
# README command 1: build rest.cpp, index the local Python standard library with the demo model's tokenizer
# (models/README.md), then complete a few Python prompts with plain greedy decoding and with REST, and compare.
# Env: BUILD_DIR (build), CACHE (~/.cache/rest.cpp/demo), MODEL (models/pystdlib-demo-f16.gguf), PYLIB (the
#      /usr/lib/python3.N directories), N_PREDICT (128), THREADS (all cores), DRAFT (-1: the adaptive budget, the
#      default; N >= 0: a fixed draft of N nodes per step), REPS (5 alternating plain/REST rounds; medians).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
CACHE=${CACHE:-${RESTCPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp}/demo}
MODEL=${MODEL:-models/pystdlib-demo-f16.gguf}
N_PREDICT=${N_PREDICT:-128}
THREADS=${THREADS:-0}
PYLIB=${PYLIB:-$(ls -d /usr/lib/python3.[0-9]*/ 2>/dev/null | tr '\n' ' ')}
t0=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - t0 ))s] $*"; }

[ -f "$MODEL" ] || { echo "demo: $MODEL is missing (git lfs? a partial clone?); scripts/train-demo-model.sh remakes it" >&2; exit 1; }
[ -n "$PYLIB" ] || { echo "demo: no /usr/lib/python3.N directory: install python3 (apt-get install python3)" >&2; exit 1; }

step "dependencies"
scripts/setup-deps.sh python3 || echo "demo: scripts/setup-deps.sh failed; continuing (the build names anything missing)" >&2
step "build rest ($BUILD_DIR; the first build compiles llama.cpp too)"
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$BUILD_DIR/demo-configure.log" 2>&1 \
    || { tail -20 "$BUILD_DIR/demo-configure.log"; exit 1; }
ninja -C "$BUILD_DIR" -j "$(nproc)" rest-cli
REST="$BUILD_DIR/bin/rest"

mkdir -p "$CACHE"
IDX="$CACHE/pystdlib.idx"
step "index the Python standard library ($PYLIB) with the demo model's tokenizer -> $IDX"
if [ -f "$IDX" ] && [ "$IDX" -nt "$MODEL" ]; then
    echo "(reusing $IDX; delete it to rebuild)"
else
    # shellcheck disable=SC2086  # PYLIB is a list of directories
    "$REST" index build -m "$MODEL" -o "$IDX" --include '*.py' $PYLIB
fi
"$REST" index inspect "$IDX" || true

PROMPTS="$CACHE/prompts.jsonl"
python3 - "$PROMPTS" <<'EOF'
import json, sys
prompts = [
    "import os\nimport sys\n\n\ndef main():\n",
    "class Error(Exception):\n    \"\"\"Base class for exceptions in this module.\"\"\"\n\n    def __init__(self, msg):\n",
    "    def __repr__(self):\n        return ",
    "def _get_default_tempdir():\n    \"\"\"Calculate the default directory to use for temporary files.\n",
    "if __name__ == '__main__':\n",
]
with open(sys.argv[1], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p}) + "\n")
EOF

run() {  # $1 = label, rest = extra args; writes $CACHE/$1.jsonl
    "$REST" generate -m "$MODEL" -f "$PROMPTS" --field prompt -n "$N_PREDICT" -t "$THREADS" --json "${@:2}" \
        > "$CACHE/$1.jsonl"
}
# The adaptive budget (rest's default) learns how often this model accepts drafts and sizes each step's chain from
# the measured verify cost; DRAFT=N forces N nodes per step instead.
DRAFT=${DRAFT:--1}
REST_ARGS=(--index "$IDX")
[ "$DRAFT" -ge 0 ] && REST_ARGS+=(--draft-fixed "$DRAFT")
# A run takes a fraction of a second here, so one run's time is mostly the machine's mood: plain and REST alternate
# REPS times and the summary takes each one's median.
REPS=${REPS:-5}
for r in $(seq 1 "$REPS"); do
    step "round $r/$REPS: complete $(wc -l < "$PROMPTS") prompts, $N_PREDICT tokens each, plain greedy (--no-spec), then REST (${REST_ARGS[*]})"
    run "plain-$r" --no-spec
    run "rest-$r" "${REST_ARGS[@]}"
done

step "results"
python3 - "$PROMPTS" "$CACHE" "$REPS" <<'EOF'
import json, statistics, sys
prompts = [json.loads(l)["prompt"] for l in open(sys.argv[1])]
reps = int(sys.argv[3])
load = lambda name: [json.loads(l) for l in open(f"{sys.argv[2]}/{name}.jsonl")]
plains = [load(f"plain-{r}") for r in range(1, reps + 1)]
rests = [load(f"rest-{r}") for r in range(1, reps + 1)]
plain, rest = plains[-1], rests[-1]
same = all(a["tokens"] == b["tokens"] for p_, r_ in zip(plains, rests) for a, b in zip(plains[0], r_)) and \
       all(a["tokens"] == b["tokens"] for p_ in plains for a, b in zip(plains[0], p_))
for i, (p, a, b) in enumerate(zip(prompts, plain, rest)):
    ok = a["tokens"] == b["tokens"]
    print(f"--- prompt {i + 1} " + "-" * 60)
    print(p + "\x1b[1m" + b["text"] + "\x1b[0m")
    print(f"--- plain {a['tokens_per_forward']:.2f} tok/forward {a['ms_per_token']:.2f} ms/tok | "
          f"REST {b['tokens_per_forward']:.2f} tok/forward {b['ms_per_token']:.2f} ms/tok | "
          f"greedy output {'identical' if ok else 'DIFFERENT'}")
def total(rs, k):
    return sum(r[k] for r in rs)
def ms(rs):
    return sum(r["ms_per_token"] * r["n_tokens"] for r in rs)
ms_plain = statistics.median(ms(rs) for rs in plains)
ms_rest = statistics.median(ms(rs) for rs in rests)
tpf = total(rest, "n_tokens") / max(1, total(rest, "n_forward"))
print()
print(f"plain: {total(plain, 'n_tokens')} tokens in {total(plain, 'n_forward')} forward passes, median {ms_plain / 1000:.3f} s "
      f"(runs: {', '.join(f'{ms(rs) / 1000:.3f}' for rs in plains)})")
print(f"REST:  {total(rest, 'n_tokens')} tokens in {total(rest, 'n_forward')} forward passes, median {ms_rest / 1000:.3f} s "
      f"(runs: {', '.join(f'{ms(rs) / 1000:.3f}' for rs in rests)})")
print(f"REST tokens per forward: {tpf:.2f}   wall-clock speedup (medians of {reps} alternating runs): "
      f"{ms_plain / ms_rest:.2f}x   greedy outputs identical: {'yes' if same else 'NO'}")
sys.exit(0 if same else 1)
EOF
echo "demo done in $(( $(date +%s) - t0 )) s"
