#!/usr/bin/env bash
# scripts/serve-replicas.sh end to end: two `rest serve` replicas behind nginx on a fixture model (phi-3 vocabulary,
# chat template included). 1) bench/server-load.py's mixed load through nginx passes with 0 errors and both
# replicas generate. 2) One replica is SIGKILLed while it generates, mid-load: every request ends before the time
# limit (no hang), the ones in flight on it fail (at least one, at most the concurrency) and each fails cleanly (a
# 502 or a cut stream), the rest succeed. 3) A new load passes with 0 errors on the survivor. 4) SIGTERM stops everything, exit 0, and the
# survivor saved its store.
# Exit 77 (CTest: skipped) when nginx, curl or python3 is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$here/..
rest=${REST_BIN:-$root/build/bin}/rest
tmp=${REST_TEST_TMP:-/tmp}/serve-replicas
nginx=$(command -v nginx || echo /usr/sbin/nginx)
key=replicas-test-key
conc=8

[ -x "$nginx" ] || { echo "SKIP: nginx not found (apt-get install nginx)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }

fail() { echo "FAIL: $*"; echo "--- serve-replicas output:"; cat "$tmp/script.out"; exit 1; }

rm -rf "$tmp/state"
mkdir -p "$tmp"
model=$tmp/phi3.gguf
[ -f "$model" ] || "$rest" fixture -o "$model" --vocab phi-3 >/dev/null
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$root/scripts/serve-replicas.sh" 2 --port "$port" --rest-bin "$rest" --state-dir "$tmp/state" -- \
    -m "$model" --np 4 -t 1 -c 1024 --api-key "$key" --history-save-interval 0 >"$tmp/script.out" 2>&1 &
script=$!
trap 'kill -TERM $script 2>/dev/null || true; wait $script 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do
    grep -q "replicas behind" "$tmp/script.out" && break
    kill -0 $script 2>/dev/null || fail "serve-replicas.sh exited"
    sleep 0.1
done
grep -q "replicas behind" "$tmp/script.out" || fail "not serving after 120 s"
url=http://127.0.0.1:$port
replica_pid() { sed -n "s/.*replica $1: pid \([0-9]*\),.*/\1/p" "$tmp/script.out"; }
replica_url() { sed -n "s/.*replica $1: pid [0-9]*, \(http[^,]*\),.*/\1/p" "$tmp/script.out"; }
generated() {
    curl -sf --noproxy '*' -H "Authorization: Bearer $key" "$(replica_url "$1")/metrics" |
        sed -n 's/^rest_generated_tokens_total \([0-9.e+]*\)$/\1/p'
}
load() { python3 "$root/bench/server-load.py" --url "$url" --api-key "$key" --concurrency $conc --time-limit 150 "$@"; }

echo "== 1: 100 requests through nginx, 2 replicas"
load --requests 100 --seed 1 >"$tmp/load1.out" || { cat "$tmp/load1.out"; fail "load through nginx"; }
tail -4 "$tmp/load1.out"
for r in 1 2; do
    g=$(generated $r)
    echo "replica $r generated $g tokens"
    python3 -c "import sys; sys.exit(0 if float('${g:-0}') > 0 else 1)" || fail "replica $r got no generation"
done

echo "== 2: SIGKILL replica 1 while it generates, mid-load"
load --requests 600 --seed 2 >"$tmp/load2.out" &
loader=$!
victim=$(replica_pid 1)
busy=0
# Poll for as long as the load runs (not a fixed count: on a loaded machine each poll is slow and the load may
# start late), with a cheap probe: one curl and a pattern, no interpreter per poll.
health1="$(replica_url 1)/health"
while kill -0 $loader 2>/dev/null; do
    busy=$(curl -s --max-time 5 --noproxy '*' "$health1" | sed -n 's/.*"slots_busy": *\([0-9]*\).*/\1/p' || true)
    [ "${busy:-0}" -ge 1 ] && break
    sleep 0.02
done
busy=${busy:-0}
[ "$busy" -ge 1 ] || { cat "$tmp/load2.out"; fail "replica 1 never busy while the load ran"; }
# Frozen first, so that requests are surely in flight on it when it dies (its kernel still accepts connections):
# a generation on this small model ends in milliseconds, too soon to be caught by a kill alone.
kill -STOP "$victim"
sleep 1
kill -9 "$victim"
echo "froze replica 1 (pid $victim) with $busy slot(s) busy, killed it 1 s later"
rc=0
wait $loader || rc=$?
cat "$tmp/load2.out"  # its FAIL is expected: it counts the requests cut by the kill, checked below
read -r planned ok unexpected notrun < <(sed -n \
    's/^requests: \([0-9]*\) planned, \([0-9]*\) completed as expected, \([0-9]*\) unexpected, \([0-9]*\) not run.*/\1 \2 \3 \4/p' \
    "$tmp/load2.out")
[ -n "${planned:-}" ] || fail "no summary from server-load.py (exit $rc)"
[ "$notrun" = 0 ] || fail "$notrun requests not run before the time limit (a hang?)"
[ $((ok + unexpected)) = "$planned" ] || fail "completed $ok + failed $unexpected != planned $planned"
[ "$unexpected" -ge 1 ] || fail "no request failed, though some were in flight on the killed replica"
[ "$unexpected" -le $conc ] || fail "$unexpected failures: more than the $conc requests that can be in flight"
# A request in flight on the killed replica: nginx answers 502 (reply not started) or cuts the stream.
clean='HTTP 502|status 502|IncompleteRead|RemoteDisconnected|ConnectionResetError|done False'
if grep "^UNEXPECTED" "$tmp/load2.out" | grep -Ev "$clean"; then
    fail "a failure that is not a 502 or a cut stream"
fi
kill -0 "$victim" 2>/dev/null && fail "replica 1 still alive"
echo "after the kill: $ok succeeded, $unexpected failed cleanly, 0 hung"

echo "== 3: 100 new requests: all on the survivor"
before=$(generated 2)
load --requests 100 --seed 3 >"$tmp/load3.out" || { cat "$tmp/load3.out"; fail "load after the kill"; }
tail -4 "$tmp/load3.out"
after=$(generated 2)
python3 -c "import sys; sys.exit(0 if float('$after') > float('$before') else 1)" || fail "the survivor generated nothing"
grep -q "replica 1 (pid $victim) exited" "$tmp/script.out" || fail "serve-replicas.sh did not report the dead replica"

echo "== 4: SIGTERM"
kill -TERM $script
rc=0
timeout 90 tail --pid=$script -f /dev/null || fail "serve-replicas.sh still running 90 s after SIGTERM"
wait $script || rc=$?
trap - EXIT
[ "$rc" = 0 ] || fail "serve-replicas.sh exit code $rc after SIGTERM"
[ -s "$tmp/state/replica-2.history" ] || fail "the survivor did not save its store"
grep -q "saved the online store" "$tmp/state/replica-2.log" || fail "no save line in replica 2's log"
if pgrep -f "serve -m $model" >/dev/null; then fail "a replica outlived the script"; fi
echo "PASS"
