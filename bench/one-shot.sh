#!/usr/bin/env bash
# One-shot runs, as a user runs `rest generate` once per prompt: N separate processes with speculation and N with
# --no-spec, alternated (which goes first swaps every prompt, so drift hits both alike), the first speculative one with an empty cache directory (cost
# table and budget state measured from nothing; later ones start warm). Prints per-process speed ratios and the
# median over all pairs and over the last 20; speed is rest's own "tok/s" (decode time, prompt excluded).
#
# Usage: bench/one-shot.sh MODEL INDEX PROMPTS.jsonl [N=40] [FIELD=prompt] [TOKENS=128] [extra generate flags...]
# Env: REST (build/bin/rest), ONE_SHOT_FROM (first prompt index, default 0).
set -euo pipefail
model=$1; index=$2; prompts=$3; n=${4:-40}; field=${5:-prompt}; tokens=${6:-128}; shift $(( $# < 6 ? $# : 6 ))
rest=${REST:-build/bin/rest}
from=${ONE_SHOT_FROM:-0}
tmp=$(mktemp -d /tmp/one-shot.XXXXXX); trap 'rm -rf "$tmp"' EXIT
export RESTCPP_CACHE_DIR="$tmp/cache"
case "$prompts" in *.gz) zcat "$prompts" ;; *) cat "$prompts" ;; esac | sed -n "$((from + 1)),$((from + n))p" > "$tmp/prompts.jsonl"
speed() { sed -n 's/.*(\([0-9.]*\) tok\/s).*/\1/p' "$1" | tail -n 1; }
positive() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ "$1" != 0 ] && [[ ! "$1" =~ ^0+(\.0+)?$ ]]; }
spec_run()  { "$rest" generate -m "$model" --index "$index" -f "$tmp/one.jsonl" --field "$field" -n "$tokens" --json "$@" </dev/null >/dev/null 2>"$tmp/spec.err"; }
plain_run() { "$rest" generate -m "$model" -f "$tmp/one.jsonl" --field "$field" -n "$tokens" --json --no-spec "$@" </dev/null >/dev/null 2>"$tmp/plain.err"; }
i=0
: > "$tmp/rows"
while IFS= read -r line; do
  printf '%s\n' "$line" > "$tmp/one.jsonl"
  : > "$tmp/spec.err"; : > "$tmp/plain.err"
  ok=1
  if [ $((i % 2)) = 0 ]; then spec_run "$@" && plain_run "$@" || ok=0; else plain_run "$@" && spec_run "$@" || ok=0; fi
  s=$(speed "$tmp/spec.err"); p=$(speed "$tmp/plain.err")
  m=$(sed -n 's/.*, \([0-9.]*\) tokens\/forward.*/\1/p' "$tmp/spec.err" | tail -n 1)
  if [ "$ok" = 0 ] || ! positive "$s" || ! positive "$p" || [ -z "$m" ]; then
    echo "run $i: skipped ($(cat "$tmp/spec.err" "$tmp/plain.err" | grep . | tail -n 1))"
    i=$((i + 1)); continue
  fi
  echo "$i $s $p $m" | tee -a "$tmp/rows" | awk '{ printf "run %d: rest %.0f tok/s, plain %.0f tok/s, ratio %.3f, M %.2f\n", $1, $2, $3, $2 / $3, $4 }'
  i=$((i + 1))
done < "$tmp/prompts.jsonl"
[ -s "$tmp/rows" ] || { echo "one-shot: no run succeeded" >&2; exit 1; }
python3 - "$tmp/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
r = [float(a[1]) / float(a[2]) for a in rows]
m = [float(a[3]) for a in rows]
q = lambda v: statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
print(f"all {len(r)}: median ratio {statistics.median(r):.3f} [p25 {q(r)[0]:.3f} - p75 {q(r)[2]:.3f}], median M {statistics.median(m):.2f}")
last = r[-20:]
print(f"last {len(last)}: median ratio {statistics.median(last):.3f} [p25 {q(last)[0]:.3f} - p75 {q(last)[2]:.3f}], median M {statistics.median(m[-20:]):.2f}")
PY
