#!/usr/bin/env bash
# Aggregate throughput of replicas behind nginx (scripts/serve-replicas.sh) against one server, with
# bench/server-load.py's mixed load, and the resident memory of the index and model mappings in each replica
# (RSS against PSS: PSS divides each shared page among the processes that map it).
#
#   bench/replicas-load.sh [--rest-bin PATH] [--configs "1:2 2:1"] [--reps 3] [--requests 1000] [--concurrency 16]
#                          -- -m MODEL [--index IDX] [rest serve options]
#
# A config N:T is N replicas of `rest serve -t T`; with N = 1 the load also goes to the replica directly (no nginx).
# Prints one line per run, then the mapping sizes per replica after the config's last run.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rest=${REST_BIN:-$here/../build/bin}/rest
configs="1:2 2:1" reps=3 requests=1000 conc=16 key=load-test-key
die() { echo "replicas-load: $*" >&2; exit 2; }
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    case $1 in
        --rest-bin) rest=$2 ;;
        --configs) configs=$2 ;;
        --reps) reps=$2 ;;
        --requests) requests=$2 ;;
        --concurrency) conc=$2 ;;
        *) die "unknown option '$1'" ;;
    esac
    shift 2
done
[ "${1:-}" = "--" ] || die "missing -- before the rest serve options"
shift
model="" index=""
args=("$@")
for i in "${!args[@]}"; do
    case ${args[$i]} in
        -m|--model) model=$(realpath "${args[$((i + 1))]}") ;;
        --index) index=$(realpath "${args[$((i + 1))]}") ;;
    esac
done
[ -n "$model" ] || die "-m MODEL is required"

# mapping_kb PID FILE: "RSS PSS" in kB of PID's mappings of FILE (/proc/PID/smaps).
mapping_kb() {
    awk -v f="$2" '/^[0-9a-f]+-[0-9a-f]+ / { on = ($6 == f) } on && /^Rss:/ { r += $2 } on && /^Pss:/ { p += $2 }
                   END { printf "%d %d\n", r, p }' "/proc/$1/smaps"
}

# summary LABEL OUT: one line from server-load.py's output.
summary() {
    awk -v l="$1" '/^requests:/ { ok = $4; bad = $8 } /^wall/ { w = $2; rps = $4; tps = $9 }
                   END { gsub(/\(/, "", tps); printf "%-34s %5s ok %3s errors  %6s s  %6s req/s  %6s tok/s\n", l, ok, bad, w, rps, tps }' "$2"
}

tmp=$(mktemp -d)
trap 'kill -TERM "${sr:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"' EXIT
echo "$(date -u '+%F %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $configs; do
    n=${c%%:*} t=${c##*:}
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$here/../scripts/serve-replicas.sh" "$n" --port "$port" --rest-bin "$rest" --state-dir "$tmp/state-$c" -- \
        "$@" -t "$t" --api-key "$key" >"$tmp/sr.out" 2>&1 &
    sr=$!
    until grep -qs "replicas behind" "$tmp/sr.out"; do
        kill -0 $sr 2>/dev/null || { cat "$tmp/sr.out"; die "serve-replicas.sh exited"; }
        sleep 0.2
    done
    direct=$(sed -n 's/.*replica 1: pid [0-9]*, \(http[^,]*\),.*/\1/p' "$tmp/sr.out")
    for r in $(seq 1 "$reps"); do
        for via in nginx direct; do
            [ $via = direct ] && [ "$n" != 1 ] && continue
            url=http://127.0.0.1:$port
            [ $via = direct ] && url=$direct
            python3 "$here/server-load.py" --url "$url" --api-key "$key" --requests "$requests" \
                --concurrency "$conc" --seed "$r" >"$tmp/load.out" || true
            summary "$n x -t $t via $via, run $r" "$tmp/load.out"
            grep "^UNEXPECTED" "$tmp/load.out" | head -3 | cut -c1-300 || true
        done
    done
    mapfile -t pids < <(sed -n 's/.*replica [0-9]*: pid \([0-9]*\),.*/\1/p' "$tmp/sr.out")
    for p in "${pids[@]}"; do
        read -r mr mp < <(mapping_kb "$p" "$model")
        line="  replica pid $p: model RSS $mr kB PSS $mp kB"
        if [ -n "$index" ]; then
            read -r ir ip < <(mapping_kb "$p" "$index")
            line="$line; index RSS $ir kB PSS $ip kB"
        fi
        echo "$line; process RSS $(awk '/^VmRSS/ { print $2 }' "/proc/$p/status") kB"
    done
    kill -TERM $sr
    wait $sr || true
    sr=""
done
