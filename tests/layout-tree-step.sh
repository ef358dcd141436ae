#!/usr/bin/env bash
# `--draft-layout auto` and its cached tree step (apps/cost-cache.cpp), end to end on a fixture model. A CPU table is
# not flat, so the test makes the cached chain table flat: auto then measures a tree step and caches it; a cached
# ratio <= 2 keeps trees and > 2 chains without measuring; a malformed cache line is measured again.
# Args: REST_BINARY WORK_DIR
set -euo pipefail
rest=$1 work=$2
dir="$work/layout-tree-step"
rm -rf "$dir"
mkdir -p "$dir"
export RESTCPP_CACHE_DIR="$dir/cache"
fail() { echo "layout-tree-step: $*"; exit 1; }
"$rest" fixture -o "$dir/m.gguf" > /dev/null 2>&1 || fail "fixture failed"
gen() { "$rest" generate -m "$dir/m.gguf" -p "Once upon a time" -n 4 -t 1 --verbose "$@" 2> "$dir/err" > /dev/null \
            || fail "generate failed: $(cat "$dir/err")"
        grep 'rest: verifying' "$dir/err" || true; }
step_file() { ls "$RESTCPP_CACHE_DIR"/costs/*.tree-step.txt 2>/dev/null | head -1; }

gen > /dev/null
table=$(ls "$RESTCPP_CACHE_DIR"/costs/*.txt | grep -v '\.tree-step\.txt$') || fail "no cost table cached"
[ "$(echo "$table" | wc -l)" = 1 ] || fail "more than one table: $table"
[ -z "$(step_file)" ] || fail "a tree step was measured for a table that is not flat"
# Every size at the same time: flat.
awk 'NR == 1 { n = $5; for (i = 6 + n; i < 6 + 2 * n; ++i) $i = 100 } { print }' "$table" > "$dir/flat" && mv "$dir/flat" "$table"

out=$(gen)
f=$(step_file)
[ -n "$f" ] || fail "no tree step cached after a flat table: $out"
grep -Eq '^rest-tree-step 2 17 4 [0-9]+\.[0-9]{4}$' "$f" || fail "cache line: $(head -1 "$f")"
[[ $out == *"17-row tree step"* ]] || fail "the layout line does not give the tree step: $out"

sed -i '1s/.*/rest-tree-step 2 17 4 1.5000/' "$f"
out=$(gen)
[[ $out == *"verifying trees"*"tree step 1.5 x"* ]] || fail "a cached 1.5 did not keep trees: $out"
sed -i '1s/.*/rest-tree-step 2 17 4 5.0000/' "$f"
out=$(gen)
[[ $out == *"verifying chains"*"tree step 5.0 x"* ]] || fail "a cached 5.0 did not keep chains: $out"
# Malformed (trailing text), another tree, another version: measured again and rewritten.
for bad in 'rest-tree-step 2 17 4 1.5xyz' 'rest-tree-step 2 9 4 1.5000' 'rest-tree-step 1 1.5000'; do
    sed -i "1s/.*/$bad/" "$f"
    gen > /dev/null
    grep -Eq '^rest-tree-step 2 17 4 [0-9]+\.[0-9]{4}$' "$f" || fail "'$bad' was not measured again: $(head -1 "$f")"
    [ "$(head -1 "$f")" != "rest-tree-step 2 17 4 1.5000" ] || fail "'$bad' was read as 1.5"
done
rm -rf "$dir"
echo "layout tree step: ok"
