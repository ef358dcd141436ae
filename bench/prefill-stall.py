#!/usr/bin/env python3
"""Does a long prompt stop the other streams? (issue 19: chunked prefill)

A fresh `rest serve --np 2` streams request A (greedy). Run 1: A alone. Run 2: the same A, and once A has produced
--warmup chunks, request B arrives on the other slot with a prompt of --prompt-tokens tokens (max_tokens 1).
Reports A's gaps between steps (median, p99, from the server's rest:inter_token_latency_seconds histogram, read
before and after the window) during B's prefill against run 1, and B's time to its first token. Run 3: B alone, whose time to its first token is the stall A would see if B's prompt went
in one piece. With chunking each of A's steps carries a chunk the pacer sizes to about one plain step.

  build/bin/rest fixture -o tl-q4.gguf --shape tinyllama-1.1b --type q4_0
  bench/prefill-stall.py --rest-bin build/bin/rest --model tl-q4.gguf --prompt-tokens 1500
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time


def start_server(a):
    cmd = [a.rest_bin, "serve", "-m", a.model, "--port", "0", "--np", "2", "-c", str(a.ctx), "-t", str(a.threads)]
    cmd += a.server_arg
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(a.log, "a"), text=True)
    line = p.stdout.readline()
    if "listening on http://" not in line:
        p.kill()
        sys.exit("server did not start: %r (%s)" % (line, " ".join(cmd)))
    return p, int(line.strip().rsplit(":", 1)[1])


def itl_histogram(port):
    """rest:inter_token_latency_seconds from /metrics: [(upper bound, cumulative count)]."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    out = []
    for line in text.splitlines():
        if line.startswith('rest:inter_token_latency_seconds_bucket{le="'):
            le, v = line[len('rest:inter_token_latency_seconds_bucket{le="'):].split('"} ')
            out.append((float("inf") if le == "+Inf" else float(le), float(v)))
    return out


def window(h0, h1):
    """Quantiles (ms) of the gaps observed between two scrapes, linear within a bucket."""
    counts = [(b1[0], b1[1] - b0[1]) for b0, b1 in zip(h0, h1)]
    total = counts[-1][1]

    def q(f):
        lo = 0.0
        prev = 0.0
        for ub, cum in counts:
            if cum >= f * total and cum > prev:
                ub = lo * 1.2 if ub == float("inf") else ub
                return 1e3 * (lo + (ub - lo) * (f * total - prev) / (cum - prev))
            lo, prev = ub, cum
        return float("nan")
    return {"n": int(total), "median_ms": q(0.5), "p99_ms": q(0.99), "max_bucket_ms": 1e3 * max(
        (ub for (ub, c), (_, p) in zip(counts, [(0, 0)] + counts) if c > p), default=0)}


def stream(port, body, on_chunk):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: {"):
                on_chunk(time.monotonic(), json.loads(ev[6:]))
    c.close()


class Done(Exception):
    pass


def run(a, with_b):
    p, port = start_server(a)
    try:
        stream(port, {"prompt": "Warm up", "max_tokens": 4, "temperature": 0}, lambda t, e: None)
        times, b_times, started = [], {}, threading.Event()
        long_prompt = " ".join(["the cat sat on the mat and"] * (a.prompt_tokens // 7 + 1))

        hist = {}

        def b():
            started.wait()
            hist["0"] = itl_histogram(port)
            b_times["sent"] = time.monotonic()
            body = {"prompt": long_prompt, "max_tokens": 1, "temperature": 0, "return_tokens": True}
            stream(port, body, lambda t, e: b_times.setdefault("first", t) if e["choices"][0].get("text") else None)
            b_times["done"] = time.monotonic()
            hist["1"] = itl_histogram(port)

        def on_a(t, e):
            times.append(t)
            if len(times) == a.warmup:
                if with_b:
                    started.set()
                else:
                    hist["0"] = itl_histogram(port)
            if not with_b and len(times) >= a.warmup + a.alone_chunks:
                hist["1"] = itl_histogram(port)
            if (with_b and "done" in b_times) or (not with_b and len(times) >= a.warmup + a.alone_chunks):
                raise Done()  # A has shown what it had to: closing the stream cancels it

        tb = threading.Thread(target=b)
        tb.start()
        if with_b == "alone":  # B with nobody else generating: its prefill in whole batches
            started.set()
            tb.join()
            return [], b_times.get("first", b_times["done"]) - b_times["sent"]
        try:
            stream(port, {"prompt": "Once upon a time", "max_tokens": a.max_tokens, "temperature": 0}, on_a)
        except Done:
            pass
        started.set()
        tb.join()
        # Gaps between A's steps as the server measured them (SSE chunks also wait for text that is held back).
        steps = window(hist["0"], hist["1"])
        return steps, (b_times.get("first", b_times["done"]) - b_times["sent"]) if with_b else 0.0
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rest-bin", default="build/bin/rest")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--max-tokens", type=int, default=2000, help="A's length: it must outlast B's prefill")
    ap.add_argument("--warmup", type=int, default=20, help="A's chunks before B arrives")
    ap.add_argument("--alone-chunks", type=int, default=100, help="A's chunks measured in the run without B")
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", default="/tmp/prefill-stall.log")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `rest serve` argument (repeatable)")
    a = ap.parse_args()
    alone, _ = run(a, False)
    beside, ttft = run(a, True)
    _, ttft_alone = run(a, "alone")
    s0, s1 = alone, beside
    out = {"a_alone": s0, "a_during_b_prefill": s1, "p99_ratio": s1["p99_ms"] / s0["p99_ms"],
           "b_time_to_first_token_s": ttft, "b_alone_time_to_first_token_s": ttft_alone,
           "server_args": a.server_arg}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
