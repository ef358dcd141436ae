#!/usr/bin/env python3
"""Does a long prompt stop the other streams? (issue 19: chunked prefill)

A fresh `rest serve --np 2` per run. Run 1: request A (greedy), and once it has streamed --warmup chunks, request B
arrives on the other slot with a prompt of --prompt-tokens tokens (max_tokens 1). Run 2: A alone, its gaps read
over the same stretch of its output as in run 1 (from the text A had streamed when B arrived to the text it had
when B's first token came; greedy, so the same text): a step's cost grows with the context (attention), so gaps at other lengths would not compare (A at
300 tokens: 63-72 ms a step; at ~1,500: 115 ms, TinyLlama-shaped Q4_0, 2 threads). Run 3: B alone; its time to the
first token is how long A would stall if B's prompt went in one piece. A's gaps between steps come from the
server's rest:inter_token_latency_seconds histogram, read at the window's ends (SSE arrival times also wait for
text the stream holds back), as median and p99 in ms.

  build/bin/rest fixture -o tl-q4.gguf --shape tinyllama-1.1b --type q4_0
  bench/prefill-stall.py --rest-bin build/bin/rest --model tl-q4.gguf --prompt-tokens 1500
"""
import argparse
import http.client
import json
import sys
import threading
import time

import rest_serve  # bench/rest_serve.py


def start_server(a):
    cmd = [a.rest_bin, "serve", "-m", a.model, "--port", "0", "--np", "2", "-c", str(a.ctx), "-t", str(a.threads)]
    cmd += a.server_arg
    return rest_serve.start(cmd, open(a.log, "a"))


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


def stream(port, body, on_chunk, conn=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    if conn is not None:
        conn.append(c)
    c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    buf = b""
    while True:
        try:
            chunk = r.read1(65536)
        except (OSError, http.client.HTTPException):  # closed by the caller
            break
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: {"):
                on_chunk(time.monotonic(), json.loads(ev[6:]))
    c.close()


def run(a, mode, span=None):
    """mode: "alone" (A only, its gaps over span = (first, last) characters of its output), "beside" (A, then B's
    long prompt), "b-alone" (B only). Returns (gaps, B's TTFT, A's characters at B's arrival and first token)."""
    p, port = start_server(a)
    try:
        stream(port, {"prompt": "Warm up", "max_tokens": 4, "temperature": 0}, lambda t, e: None)
        long_prompt = " ".join(["the cat sat on the mat and"] * (a.prompt_tokens // 7 + 1))
        b_body = {"prompt": long_prompt, "max_tokens": 1, "temperature": 0}
        a_body = {"prompt": "Once upon a time", "temperature": 0}
        if mode == "b-alone":
            t0 = time.monotonic()
            stream(port, b_body, lambda t, e: None)
            return None, time.monotonic() - t0, None
        if mode == "alone":  # A's gaps from the server's histogram (not SSE arrivals: text may be held back)
            marks, conn = [], []

            def on_chunk(t, e, n=[0]):
                n[0] += len(e["choices"][0].get("text", ""))
                while len(marks) < 2 and n[0] >= span[len(marks)]:
                    marks.append(itl_histogram(port))
                if len(marks) == 2 and conn:
                    conn[0].sock.shutdown(2)  # the window is read: the rest of A's output is not needed
                    conn.clear()
            stream(port, dict(a_body, max_tokens=a.max_tokens), on_chunk, conn)
            if len(marks) < 2:
                sys.exit("A alone did not reach the text it had at B's first token")
            return window(marks[0], marks[1]), 0.0, span
        # A streams in a thread; once it has produced --warmup chunks, B's prompt arrives; A's gaps are read from the
        # histogram between B's arrival and B's first token; then A's connection is closed (the server cancels it).
        events, conn = [], []  # A's chunks: characters of text each
        a_thread = threading.Thread(target=lambda: stream(port, dict(a_body, max_tokens=a.max_tokens),
                                                          lambda t, e: events.append(len(e["choices"][0].get("text", ""))),
                                                          conn), daemon=True)
        a_thread.start()
        while len(events) < a.warmup:
            time.sleep(0.05)
        h0 = itl_histogram(port)
        n0 = sum(events)
        t0 = time.monotonic()
        stream(port, b_body, lambda t, e: None)
        ttft = time.monotonic() - t0
        h1 = itl_histogram(port)
        n1 = sum(events)
        if not a_thread.is_alive():  # (its connection is closed: nothing to shut down)
            sys.exit("A ended before B's first token: raise --max-tokens")
        conn[0].sock.shutdown(2)
        a_thread.join(timeout=60)
        return window(h0, h1), ttft, (n0, n1)
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
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log", default="/tmp/prefill-stall.log")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `rest serve` argument (repeatable)")
    a = ap.parse_args()
    beside, ttft, span = run(a, "beside")
    alone, _, _ = run(a, "alone", span)
    if beside["n"] == 0 or alone["n"] == 0:
        sys.exit("no gap between A's steps was read during B's prefill (A stalled for all of it?): %s" % span)
    _, ttft_alone, _ = run(a, "b-alone")
    out = {"a_alone": alone, "a_during_b_prefill": beside, "a_output_chars_compared": span,
           "p99_during_over_median_alone": beside["p99_ms"] / alone["median_ms"],
           "p99_during_over_p99_alone": beside["p99_ms"] / alone["p99_ms"],
           "b_time_to_first_token_s": ttft, "b_alone_time_to_first_token_s": ttft_alone, "server_args": a.server_arg}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
