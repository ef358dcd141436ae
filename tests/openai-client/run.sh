#!/usr/bin/env bash
# A real OpenAI client against `rest serve`: installs the npm package `openai` (pinned) into a cache directory,
# starts the server on a free loopback port with a fixture model that has a chat template, and runs client.cjs
# (non-streaming and streaming chat, a completion, the model list, a wrong key, streamed log probabilities against
# the unstreamed ones, predicted outputs compared with `rest generate --json`). The online store is off
# (--history-max 0), so that a request drafts as a fresh `rest generate` process does.
# Exit 77 (CTest: skipped) when node/npm are missing or the npm registry cannot be reached.
set -euo pipefail

OPENAI_VERSION=6.30.1
here=$(cd "$(dirname "$0")" && pwd)
rest=${REST_BIN:-$here/../../build/bin}/rest
tmp=${REST_TEST_TMP:-/tmp}
cache=${RESTCPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rest.cpp}/npm-openai-$OPENAI_VERSION

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "SKIP: node or npm not found"
    exit 77
fi
if [ ! -f "$cache/node_modules/openai/package.json" ]; then
    mkdir -p "$cache"
    if ! (cd "$cache" && timeout 240 npm install --prefix "$cache" --no-audit --no-fund --no-save --silent \
            "openai@$OPENAI_VERSION" >"$cache/npm-install.log" 2>&1); then
        echo "SKIP: npm install openai@$OPENAI_VERSION failed (registry unreachable?):"
        tail -5 "$cache/npm-install.log"
        exit 77
    fi
fi

mkdir -p "$tmp"
model=$tmp/openai-client-phi3.gguf
[ -f "$model" ] || "$rest" fixture -o "$model" --vocab phi-3 >/dev/null

key=openai-client-test-key
out=$tmp/openai-client-server.out
log=$tmp/openai-client-server.log
"$rest" serve -m "$model" --port 0 --np 2 -t 1 --draft-fixed 4 --history-max 0 --api-key "$key" >"$out" 2>"$log" &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
    grep -q "listening on" "$out" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "server exited:"; cat "$log"; exit 1; }
    sleep 0.1
done
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$out")
[ -n "$url" ] || { echo "no listening line"; cat "$log"; exit 1; }

rc=0
OPENAI_PREFIX=$cache REST_URL=$url REST_KEY=$key REST_CLI=$rest REST_MODEL=$model REST_TMP=$tmp \
    node "$here/client.cjs" || rc=$?

kill -TERM $pid
wait $pid || { echo "server exit code $?"; cat "$log"; exit 1; }
trap - EXIT
exit $rc
