#!/usr/bin/env python3
"""Aggregate throughput of `rest serve` with speculation on vs off, at several client concurrencies.

For each repetition, concurrency C and mode (spec: --index IDX with the default cost-model budget; plain:
--no-spec), a fresh server (so the online store starts empty) serves the same prompt list through C concurrent
streaming clients (greedy, up to the slot's context end by default). Aggregate tokens/s = completion tokens of all requests / wall time
from the first request to the last [DONE]. Modes alternate within a repetition so machine noise hits both alike;
the table reports medians over repetitions, the ratio spec/plain, and whether the greedy outputs were identical.
On a shared machine wall time is noisy, so it also reports tokens per CPU-second of the server process (user +
system), which time slices lost to other processes do not inflate.

  bench/server-bench.py --rest-bin build/bin/rest --model ../shared/data/models/stories260K.gguf \\
      --index tinystories-A.idx --prompts ../shared/data/prompts/tinystories-B.jsonl
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import statistics
import time

import rest_serve  # bench/rest_serve.py


def start_server(a, spec):
    cmd = [a.rest_bin, "serve", "-m", a.model, "--port", "0", "--np", str(a.slots), "-t", str(a.threads)]
    cmd += ["--index", a.index] + a.spec_arg if spec else ["--no-spec"]
    cmd += a.server_arg
    return rest_serve.start(cmd, open(os.path.join(a.tmp, "server-bench.log"), "a"))


def stream_one(port, prompt, max_tokens):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": prompt, "temperature": 0, "stream": True, "return_tokens": True}
    if max_tokens > 0:
        body["max_tokens"] = max_tokens
    c.request("POST", "/v1/completions", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    buf, last = b"", None
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: {"):
                last = json.loads(ev[6:])
    c.close()
    return last["usage"]["completion_tokens"], last["rest"]["tokens"], last["rest"]["tokens_per_forward"]


def cpu_seconds(pid):
    """user + system CPU time of a process so far (from /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(a, spec, conc, prompts):
    p, port = start_server(a, spec)
    try:
        stream_one(port, "Warm up", 8)
        cpu0 = cpu_seconds(p.pid)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=conc) as ex:
            res = list(ex.map(lambda q: stream_one(port, q, a.max_tokens), prompts))
        wall = time.time() - t0
        cpu = cpu_seconds(p.pid) - cpu0
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/metrics")
        metrics = c.getresponse().read().decode()
        c.close()
    finally:
        p.terminate()
        p.wait(timeout=60)
    n_tokens = sum(r[0] for r in res)
    tpf = next((float(l.split()[1]) for l in metrics.splitlines() if l.startswith("rest_tokens_per_forward ")), 0.0)
    drafted = next((float(l.split()[1]) for l in metrics.splitlines() if l.startswith("rest_draft_tokens_total ")), 0.0)
    return {"tok_s": n_tokens / wall, "cpu_tok_s": n_tokens / max(cpu, 1e-3), "wall": wall, "tokens": [r[1] for r in res], "tpf": tpf, "drafted": drafted}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rest-bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--index", required=True)
    ap.add_argument("--prompts", required=True, help="JSONL with a 'prompt' field")
    ap.add_argument("--n-prompts", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="tokens per request (0: until the slot's context ends, as `rest generate -n 128` does on "
                         "stories260K, whose context is 128)")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--server-arg", action="append", default=[], help="extra `rest serve` argument, both modes")
    ap.add_argument("--spec-arg", action="append", default=[], help="extra argument for the spec mode only, e.g. "
                    "--spec-arg=--draft-fixed --spec-arg=8")
    ap.add_argument("--tmp", default=os.environ.get("REST_TEST_TMP", "/tmp"))
    a = ap.parse_args()
    prompts = [json.loads(l)["prompt"] for l in open(a.prompts) if l.strip()][: a.n_prompts]
    concs = [int(c) for c in a.concurrency.split(",")]

    results = {}  # (conc, spec) -> list of runs
    for rep in range(a.reps):
        for conc in concs:
            for spec in ((False, True) if rep % 2 == 0 else (True, False)):
                r = run(a, spec, conc, prompts)
                results.setdefault((conc, spec), []).append(r)
                print("rep %d conc %d %-5s %8.0f tok/s  %8.0f tok/cpu-s  (%.2f s, tokens/forward %.2f)"
                      % (rep, conc, "spec" if spec else "plain", r["tok_s"], r["cpu_tok_s"], r["wall"], r["tpf"]),
                      flush=True)

    print()
    print("| streams | plain tok/s | spec tok/s | spec/plain (wall) | plain tok/cpu-s | spec tok/cpu-s | "
          "spec/plain (cpu) | tokens/forward (spec) | greedy outputs identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for conc in concs:
        plain = [r["tok_s"] for r in results[(conc, False)]]
        spec = [r["tok_s"] for r in results[(conc, True)]]
        same = all(rs["tokens"] == rp["tokens"] for rs in results[(conc, True)] for rp in results[(conc, False)])
        n_same = sum(x == y for x, y in zip(results[(conc, True)][0]["tokens"], results[(conc, False)][0]["tokens"]))
        cplain = statistics.median(r["cpu_tok_s"] for r in results[(conc, False)])
        cspec = statistics.median(r["cpu_tok_s"] for r in results[(conc, True)])
        print("| %d | %.0f | %.0f | %.3f | %.0f | %.0f | %.3f | %.2f | %s (%d/%d) |"
              % (conc, statistics.median(plain), statistics.median(spec),
                 statistics.median(spec) / statistics.median(plain), cplain, cspec, cspec / cplain,
                 statistics.median(r["tpf"] for r in results[(conc, True)]), same, n_same, len(prompts)))


if __name__ == "__main__":
    main()
