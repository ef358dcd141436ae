#!/usr/bin/env python3
"""Load test for `rest serve`: N requests at C-way concurrency over loopback, mixed stream and non-stream,
completions and chat, some malformed, some with a wrong API key, some clients vanishing mid-stream or before the
reply. Passes when every request gets exactly the answer its kind expects (0 unexpected errors), the server is
healthy with every slot free afterwards, and it exits 0 on SIGTERM (under ASan/LSan that exit code includes the
leak check).

  bench/server-load.py --rest-bin build/bin/rest [--requests 1000] [--concurrency 16] [--slots 8]
  bench/server-load.py --url http://127.0.0.1:8080 --api-key KEY   # against a running server (no start/stop),
                                                                    # or nginx before replicas (serve-replicas.sh)

Bounded in count and time (--time-limit); loopback only. Standard library only.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import rest_serve  # bench/rest_serve.py

KINDS = [  # (name, weight)
    ("complete", 25), ("complete_stream", 15), ("chat", 10), ("chat_stream", 15),
    ("malformed", 10), ("bad_key", 5), ("vanish_stream", 12), ("vanish_blocking", 8),
]

MALFORMED = [  # (path, body, expected status)
    ("/v1/completions", b"{not json", 400),
    ("/v1/completions", b'{"prompt": 5}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "many"}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 100000}', 400),
    ("/v1/completions", b'{"prompt": "x", "n": 3}', 400),
    ("/v1/completions", b'{"prompt": "x", "unknown_field": true}', 400),
    ("/v1/chat/completions", b'{"messages": "hello"}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "robot", "content": "x"}]}', 400),
    ("/v1/chat/completions", b'[]', 400),
    ("/v1/corpus", b'{"text": 1}', 400),
    ("/v1/no-such-endpoint", b"{}", 404),
]

WORDS = "once upon a time there was a little robot who loved to count the stars in the night sky".split()


class Unexpected(Exception):
    pass


def prompt(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))


def body_for(kind, rng):
    chat = kind.startswith("chat")
    b = {"max_tokens": rng.randint(4, 32)}
    if rng.random() < 0.5:
        b["temperature"] = 0
    else:
        b["temperature"] = 0.8
        b["seed"] = rng.randint(0, 1 << 30)
    if chat:
        b["messages"] = [{"role": "user", "content": prompt(rng)}]
    else:
        b["prompt"] = prompt(rng)
    if rng.random() < 0.1:
        b["stop"] = [rng.choice(WORDS)]
    return b


def json_or_text(data):
    """A reply body as JSON, or its start as bytes when it is not JSON (a proxy's HTML error page, e.g. nginx's 502)."""
    try:
        return json.loads(data or b"null")
    except ValueError:
        return data[:200]


class Client:
    def __init__(self, host, port, key, timeout):
        self.host, self.port, self.key, self.timeout = host, port, key, timeout

    def headers(self, key=None):
        h = {"Content-Type": "application/json"}
        k = self.key if key is None else key
        if k:
            h["Authorization"] = "Bearer " + k
        return h

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method, path, body=None, key=None):
        c = self.conn()
        try:
            c.request(method, path, body=body, headers=self.headers(key))
            r = c.getresponse()
            data = r.read()
            return r.status, r.getheader("Content-Type", ""), data
        finally:
            c.close()

    def stream(self, path, body, max_events=None):
        """Returns (status, events, done). With max_events, closes the connection after that many events."""
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body).encode(), headers=self.headers())
            r = c.getresponse()
            if r.status != 200:
                return r.status, [json_or_text(r.read())], False
            events, done, buf = [], False, b""
            while True:
                chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    if not ev.startswith(b"data: "):
                        continue
                    payload = ev[6:]
                    if payload == b"[DONE]":
                        done = True
                    else:
                        events.append(json.loads(payload))
                if max_events is not None and len(events) >= max_events:
                    return 200, events, False  # hang up mid-stream
                if done:
                    break
            return 200, events, done
        finally:
            c.close()

    def vanish_blocking(self, body):
        """Sends a non-streaming request and closes the socket before any reply."""
        data = json.dumps(body).encode()
        s = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + ("Authorization: Bearer %s\r\n" % self.key if self.key else "")
                    + "Content-Length: %d\r\n\r\n" % len(data)).encode()
            s.sendall(head + data)
            time.sleep(0.005)
        finally:
            s.close()


def check_completion(obj, chat):
    if not isinstance(obj, dict) or "choices" not in obj or "usage" not in obj or "rest" not in obj:
        raise Unexpected("bad completion object: %r" % (obj,))
    ch = obj["choices"][0]
    if ch["finish_reason"] not in ("stop", "length"):
        raise Unexpected("finish_reason %r" % ch["finish_reason"])
    text = ch["message"]["content"] if chat else ch["text"]
    if not isinstance(text, str):
        raise Unexpected("no text")
    return obj["usage"]["completion_tokens"]


def run_one(cl, kind, rng):
    """Runs one request of `kind`; returns generated tokens (0 when none). Raises Unexpected."""
    if kind in ("complete", "chat"):
        path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        st, ct, data = cl.request("POST", path, json.dumps(body_for(kind, rng)).encode())
        if st != 200:
            raise Unexpected("%s: HTTP %d %s" % (kind, st, data[:200]))
        return check_completion(json.loads(data), kind == "chat")
    if kind in ("complete_stream", "chat_stream"):
        chat = kind == "chat_stream"
        b = body_for(kind, rng)
        b["stream"] = True
        st, events, done = cl.stream("/v1/chat/completions" if chat else "/v1/completions", b)
        if st != 200 or not done or not events:
            raise Unexpected("%s: status %d, done %s, %d events" % (kind, st, done, len(events)))
        last = events[-1]
        if last["choices"][0]["finish_reason"] not in ("stop", "length") or "usage" not in last:
            raise Unexpected("%s: bad final chunk %r" % (kind, last))
        return last["usage"]["completion_tokens"]
    if kind == "malformed":
        path, body, want = rng.choice(MALFORMED)
        st, ct, data = cl.request("POST", path, body)
        err = json_or_text(data)
        if st != want or not isinstance(err, dict) or not err.get("error", {}).get("message"):
            raise Unexpected("malformed %s %r: HTTP %d %s" % (path, body[:60], st, data[:200]))
        return 0
    if kind == "bad_key":
        st, ct, data = cl.request("GET" if rng.random() < 0.5 else "POST",
                                  rng.choice(["/v1/models", "/v1/completions", "/metrics"]),
                                  b'{"prompt": "x"}', key="wrong-" + str(rng.randint(0, 999)))
        if cl.key and st != 401:
            raise Unexpected("bad key: HTTP %d" % st)
        return 0
    if kind == "vanish_stream":
        b = body_for("complete_stream", rng)
        b["stream"] = True
        b["max_tokens"] = rng.randint(40, 120)
        st, events, done = cl.stream("/v1/completions", b, max_events=rng.randint(1, 3))
        if st != 200:
            raise Unexpected("vanish_stream: HTTP %d" % st)
        return 0
    if kind == "vanish_blocking":
        b = body_for("complete", rng)
        b["max_tokens"] = rng.randint(40, 120)
        cl.vanish_blocking(b)
        return 0
    raise AssertionError(kind)


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rest-bin", default=os.path.join(os.environ.get("REST_BIN", "build/bin"), "rest"))
    ap.add_argument("--model", default="", help="GGUF model (default: a phi-3-vocabulary fixture, built once)")
    ap.add_argument("--url", default="", help="use this running server instead of starting one")
    ap.add_argument("--api-key", default="load-test-key")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="server compute threads")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-chat", action="store_true",
                    help="no chat requests (for a model without a chat template, e.g. stories260K with a datastore)")
    ap.add_argument("--time-limit", type=float, default=600, help="seconds for the whole run")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `rest serve` argument (repeatable)")
    a = ap.parse_args()
    a.requests = min(a.requests, 100000)
    t_start = time.time()

    proc = None
    if a.url:
        u = urllib.parse.urlparse(a.url)
        host, port = u.hostname, u.port
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.exit("loopback only: %s" % host)
    else:
        tmp = os.environ.get("REST_TEST_TMP", "/tmp")
        os.makedirs(tmp, exist_ok=True)
        model = a.model
        if not model:
            model = os.path.join(tmp, "server-load-phi3.gguf")
            if not os.path.exists(model):
                subprocess.run([a.rest_bin, "fixture", "-o", model, "--vocab", "phi-3"], check=True,
                               stdout=subprocess.DEVNULL)
        log = open(os.path.join(tmp, "server-load.log"), "w")
        cmd = [a.rest_bin, "serve", "-m", model, "--port", "0", "--np", str(a.slots), "-t", str(a.threads),
               "-c", str(256 * a.slots), "--api-key", a.api_key] + a.server_arg
        proc, port = rest_serve.start(cmd, log)
        host = "127.0.0.1"

    cl = Client(host, port, a.api_key, timeout=120)
    rng = random.Random(a.seed)
    kinds = [k for k, w in KINDS for _ in range(w) if not (a.no_chat and k.startswith("chat"))]
    plan = [(i, rng.choice(kinds), rng.randint(0, 1 << 30)) for i in range(a.requests)]
    counts, failures, latencies, tokens = {}, [], [], [0]
    lock = threading.Lock()
    deadline = t_start + a.time_limit

    def task(item):
        i, kind, seed = item
        if time.time() > deadline:
            return
        t0 = time.time()
        try:
            n = run_one(cl, kind, random.Random(seed))
            with lock:
                counts[kind] = counts.get(kind, 0) + 1
                tokens[0] += n
                latencies.append(time.time() - t0)
        except Exception as e:  # noqa: BLE001 -- every failure is reported
            with lock:
                failures.append("request %d (%s): %s: %s" % (i, kind, type(e).__name__, e))

    t_load = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.concurrency) as ex:
        list(ex.map(task, plan))
    t_load = time.time() - t_load
    done = sum(counts.values())

    # Afterwards: healthy, every slot free, nothing queued (a vanished client's slot frees within a step).
    healthy = False
    for _ in range(250):
        st, ct, data = cl.request("GET", "/health")
        h = json.loads(data)
        if st == 200 and h["slots_busy"] == 0 and h["queue"] == 0:
            healthy = True
            break
        time.sleep(0.02)
    st, ct, mtext = cl.request("GET", "/metrics")
    mtext = mtext.decode()

    rc = None
    if proc:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"

    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0  # noqa: E731
    print("requests: %d planned, %d completed as expected, %d unexpected, %d not run (time limit)"
          % (a.requests, done, len(failures), a.requests - done - len(failures)))
    print("by kind: " + ", ".join("%s %d" % (k, counts.get(k, 0)) for k, _ in KINDS))
    print("wall %.1f s, %.1f req/s, %d tokens generated (%.0f tok/s), latency p50 %.0f ms p90 %.0f ms p99 %.0f ms"
          % (t_load, done / t_load if t_load else 0, tokens[0], tokens[0] / t_load if t_load else 0,
             pct(0.5), pct(0.9), pct(0.99)))
    print("server: healthy and idle afterwards: %s; cancelled generations %s; tokens/forward %s; exit code %s"
          % (healthy, metric(mtext, 'rest_generations_total{reason="cancelled"}'),
             metric(mtext, "rest_tokens_per_forward"), rc))
    for f in failures[:20]:
        print("UNEXPECTED: " + f)
    ok = not failures and healthy and done == a.requests and (proc is None or rc == 0)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
