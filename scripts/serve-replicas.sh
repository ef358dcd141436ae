#!/usr/bin/env bash
# N `rest serve` replicas on loopback behind nginx on one port. Every replica maps the same model and index files
# (read-only mmaps: the page cache holds one copy for all of them) and keeps its own online store file. See
# docs/deployment.md.
#
#   scripts/serve-replicas.sh N [--port 8080] [--host 127.0.0.1] [--rest-bin PATH] [--nginx PATH]
#                             [--state-dir DIR] [--start-timeout S] -- -m MODEL [--index IDX] [rest serve options]
#
# The options after -- go to every replica; --host, --port and --history-file are this script's. Replicas listen
# on free loopback ports; their logs and store files (replica-I.log, replica-I.history) and nginx's config and log
# live in --state-dir (default ${XDG_STATE_HOME:-~/.local/state}/rest.cpp/replicas-PORT), so a restart on the same
# port reloads each store. SIGINT/SIGTERM: nginx stops taking connections and finishes the open ones, each replica
# drains and saves its store; a second signal cancels what is still in flight.
set -euo pipefail

die() { echo "serve-replicas: $*" >&2; exit 2; }

usage="usage: scripts/serve-replicas.sh N [--port P] [--host H] [--rest-bin PATH] [--nginx PATH] [--state-dir DIR] [--start-timeout S] -- -m MODEL [rest serve options]"
[ $# -ge 1 ] || die "$usage"
n=$1
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
port=8080 host=127.0.0.1 state="" start_timeout=600
here=$(cd "$(dirname "$0")" && pwd)
rest=${REST_BIN:-$here/../build/bin}/rest
nginx=$(command -v nginx || echo /usr/sbin/nginx)
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ $# -ge 2 ] || die "$1 needs a value ($usage)"
    case $1 in
        --port) port=$2 ;;
        --host) host=$2 ;;
        --rest-bin) rest=$2 ;;
        --nginx) nginx=$2 ;;
        --state-dir) state=$2 ;;
        --start-timeout) start_timeout=$2 ;;
        *) die "unknown option '$1' ($usage)" ;;
    esac
    shift 2
done
[ "${1:-}" = "--" ] || die "missing -- before the rest serve options ($usage)"
shift
if ! [[ $port =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
    die "--port must be 1-65535, got '$port'"
fi
[[ $start_timeout =~ ^[0-9]+$ ]] || die "--start-timeout must be whole seconds, got '$start_timeout'"
for a in "$@"; do
    case $a in
        --host|--host=*|--port|--port=*|--history-file|--history-file=*)
            die "${a%%=*} is set by this script for each replica; leave it out of the rest serve options" ;;
    esac
done
[ -x "$rest" ] || die "rest binary not found at $rest (build it, or pass --rest-bin PATH)"
[ -x "$nginx" ] || die "nginx not found (Debian: apt-get install nginx; or pass --nginx PATH)"
command -v curl >/dev/null || die "curl not found (Debian: apt-get install curl)"
curl() { command curl --noproxy '*' "$@"; }  # loopback: never through an http_proxy from the environment
if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    die "$host:$port is in use (choose another --port)"
fi
state=${state:-${XDG_STATE_HOME:-$HOME/.local/state}/rest.cpp/replicas-$port}
mkdir -p "$state" || die "cannot create the state directory $state"
# nginx's workers drop root to nobody, who cannot enter /root: their temp directories go where anyone can.
run=$(mktemp -d "${TMPDIR:-/tmp}/rest-replicas.XXXXXX")
chmod 755 "$run"

pids=() urls=() nginx_pid="" stopping=0

# stop: the first call lets in-flight requests finish (nginx QUIT is its graceful stop; a replica's first SIGTERM
# drains); a second one cuts them (nginx TERM; a replica's second SIGTERM cancels).
stop() {
    stopping=$((stopping + 1))
    [ -z "$nginx_pid" ] || kill -s "$([ $stopping = 1 ] && echo QUIT || echo TERM)" "$nginx_pid" 2>/dev/null || true
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
}
cleanup() {
    local rc=$?
    [ $stopping -gt 0 ] || stop
    until wait; do :; done  # a second signal interrupts wait (and cancels in-flight requests): wait again
    rm -rf "$run"
    exit $rc
}
trap cleanup EXIT
trap 'stop' INT TERM

# fail_start WHAT LOG: a one-line error, then the log's tail, and exit (the EXIT trap stops what was started).
fail_start() {
    echo "serve-replicas: $1 failed to start; last lines of $2:" >&2
    tail -n 15 "$2" >&2
    exit 1
}

# One replica at a time: the first start measures the verify-cost table and caches it, the others read it (several
# calibrating at once would measure each other's load). setsid keeps them out of the terminal's process group, so a
# Ctrl-C reaches only this script, which drains them once instead of each seeing SIGINT and then SIGTERM.
for i in $(seq 1 "$n"); do
    [ $stopping = 0 ] || exit 130
    log=$state/replica-$i.log out=$run/replica-$i.out
    setsid "$rest" serve "$@" --host 127.0.0.1 --port 0 --history-file "$state/replica-$i.history" \
        >"$out" 2>"$log" </dev/null &
    pids+=($!)
    url=""
    for _ in $(seq 1 $((start_timeout * 10))); do
        [ $stopping = 0 ] || exit 130
        kill -0 "${pids[-1]}" 2>/dev/null || fail_start "replica $i" "$log"
        url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$out")
        [ -n "$url" ] && curl -sf -o /dev/null "$url/health" && break
        url=""
        sleep 0.1
    done
    [ -n "$url" ] || { echo "serve-replicas: replica $i not healthy after $start_timeout s" >&2; fail_start "replica $i" "$log"; }
    urls+=("$url")
    echo "serve-replicas: replica $i: pid ${pids[-1]}, $url, store $state/replica-$i.history, log $log"
done

{
    cat <<EOF
# Written by scripts/serve-replicas.sh; rewritten at each start.
worker_processes 1;  # proxying is cheap next to generation: one worker, one pool of upstream connections
pid $state/nginx.pid;
error_log $state/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $run/body;
    proxy_temp_path $run/proxy;
    fastcgi_temp_path $run/fastcgi;
    uwsgi_temp_path $run/uwsgi;
    scgi_temp_path $run/scgi;
    client_max_body_size 0;        # each replica enforces its own limit, with an OpenAI-style 413
    client_body_buffer_size 1m;    # request bodies stay in memory

    upstream rest_replicas {
        least_conn;                # a generation holds its connection for its whole length
        # max_fails/fail_timeout: after 3 failed attempts (refused connection, 502, 503) a replica is skipped for
        # 10 s, then tried again. A request whose connection was refused goes to the next replica.
EOF
    for u in "${urls[@]}"; do echo "        server ${u#http://} max_fails=3 fail_timeout=10s;"; done
    cat <<EOF
    }
    server {
        listen $host:$port;
        location / {
            proxy_pass http://rest_replicas;
            # A new connection to the replica per request (nginx sends "Connection: close"): an idle kept-alive
            # connection would hold one of the replica's HTTP threads, and a loopback connect costs little. (Before
            # rest serve set TCP_NODELAY, a reused connection also stalled each reply ~40 ms on delayed ACKs.)
            proxy_http_version 1.1;
            proxy_buffering off;         # SSE events reach the client as they are generated
            proxy_read_timeout 3600s;    # a long generation (or a long queue wait) is not an error
            proxy_send_timeout 3600s;
            proxy_connect_timeout 5s;
            # Retried on another replica only while the request has not been sent: nginx does not resend a POST
            # (not idempotent), so a generation in flight on a replica that dies fails (502, or a cut stream)
            # instead of being generated twice.
            proxy_next_upstream error timeout http_502 http_503;
        }
    }
}
EOF
} >"$state/nginx.conf"

# -e: nginx's own messages go to the log from the start (Debian's default is stderr, the config's error_log applies
# once it is read); it prints them on stderr too, hence 2>/dev/null.
"$nginx" -t -q -p "$run" -e "$state/nginx-error.log" -c "$state/nginx.conf" 2>/dev/null ||
    fail_start "nginx (config test)" "$state/nginx-error.log"
setsid "$nginx" -p "$run" -e "$state/nginx-error.log" -c "$state/nginx.conf" -g "daemon off;" </dev/null 2>/dev/null &
nginx_pid=$!
for _ in $(seq 1 100); do
    kill -0 "$nginx_pid" 2>/dev/null || fail_start "nginx" "$state/nginx-error.log"
    curl -sf -o /dev/null "http://$host:$port/health" && break
    sleep 0.1
done
curl -sf -o /dev/null "http://$host:$port/health" || fail_start "nginx" "$state/nginx-error.log"
echo "serve-replicas: $n replicas behind http://$host:$port (nginx pid $nginx_pid, config $state/nginx.conf)"

# Until a signal: a replica that dies is reported (nginx routes around it); nginx dying, or the last replica, ends
# everything with exit 1 (for a supervisor to restart).
declare -A reported=()
while [ $stopping = 0 ]; do
    wait -n || true
    [ $stopping = 0 ] || break
    if ! kill -0 "$nginx_pid" 2>/dev/null; then
        echo "serve-replicas: nginx exited; stopping the replicas (see $state/nginx-error.log)" >&2
        exit 1
    fi
    for i in "${!pids[@]}"; do
        if [ -z "${reported[$i]:-}" ] && ! kill -0 "${pids[$i]}" 2>/dev/null; then
            reported[$i]=1
            echo "serve-replicas: replica $((i + 1)) (pid ${pids[$i]}) exited; nginx routes around it (log $state/replica-$((i + 1)).log)" >&2
        fi
    done
    if [ ${#reported[@]} = "$n" ]; then
        echo "serve-replicas: every replica exited; stopping nginx" >&2
        exit 1
    fi
done
