#!/usr/bin/env bash
# A real OpenAI client against `rest serve`: installs the npm package `openai` (pinned) into a cache directory,
# starts the server on a free loopback port with a fixture model whose GGUF carries a Jinja chat template (phi-3's),
# and runs client.cjs (non-streaming and streaming chat, the rendered prompt, a completion, the model list, a wrong
# key, streamed log probabilities against the unstreamed ones, predicted outputs compared with `rest generate
# --json`). Then chat on stories260K, which has no template: with --chat-template chatml, and with no flag (the
# ChatML fallback, warned about once at start-up). The online store is off (--history-max 0), so that a request
# drafts as a fresh `rest generate` process does.
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
stories=${REST_SHARED_DATA:-$here/../../../shared/data}/models/stories260K.gguf

key=openai-client-test-key
pid=
trap '[ -z "$pid" ] || kill -9 $pid 2>/dev/null || true' EXIT

# start_server TAG ARGS...: `rest serve ARGS` on a free port; sets pid, url and log.
start_server() {
    local tag=$1
    shift
    local out=$tmp/openai-client-$tag.out
    log=$tmp/openai-client-$tag.log
    "$rest" serve "$@" --port 0 --np 2 -t 1 --draft-fixed 4 --history-max 0 --api-key "$key" >"$out" 2>"$log" &
    pid=$!
    for _ in $(seq 1 600); do
        grep -q "listening on" "$out" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || { echo "server exited:"; cat "$log"; exit 1; }
        sleep 0.1
    done
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$out")
    [ -n "$url" ] || { echo "no listening line"; cat "$log"; exit 1; }
}

stop_server() {
    kill -TERM $pid
    wait $pid || { echo "server exit code $?"; cat "$log"; exit 1; }
    pid=
}

# run_client MODE MODEL: client.cjs against the running server (MODE says which checks and which template).
run_client() {
    OPENAI_PREFIX=$cache REST_URL=$url REST_KEY=$key REST_CLI=$rest REST_MODEL=$2 REST_TMP=$tmp REST_MODE=$1 \
        node "$here/client.cjs"
}

# The fixture whose GGUF carries a Jinja template (phi-3's): every check, predicted outputs included.
start_server phi3 -m "$model"
run_client phi3 "$model"
stop_server
grep -q "no chat template" "$log" && { echo "FAIL: warning on a model that has a template"; cat "$log"; exit 1; }

if [ ! -f "$stories" ]; then
    echo "SKIP: stories260K.gguf not found (../shared/data); the chat-template checks on it did not run"
    exit 77
fi
# stories260K has no template: ChatML by name, then ChatML as the fallback with its one-line warning.
start_server chatml -m "$stories" --chat-template chatml
run_client chatml "$stories"
stop_server
grep -q "no chat template" "$log" && { echo "FAIL: fallback warning with --chat-template"; cat "$log"; exit 1; }

start_server fallback -m "$stories"
run_client chatml "$stories"
stop_server
n=$(grep -c "warning: the model has no chat template" "$log" || true)
[ "$n" = 1 ] || { echo "FAIL: expected one fallback warning, got $n"; cat "$log"; exit 1; }
trap - EXIT
exit 0
