#!/usr/bin/env python3
"""llama.cpp's own decoders as external processes, on the same prompts as `rest bench`: llama-server (plain, and
its n-gram speculative types) and llama-lookahead (lookahead decoding). Built by bench/build-llama-tools.sh.

Each configuration runs every prompt (greedy, n tokens); llama-server's speed is its own decode timing
(timings.predicted_per_second), lookahead's its "decoded ... speed" line. Ratios are against llama-server's plain
decoding measured in the same run, alternating configuration blocks per prompt so that drift hits all alike.
Writes OUT/peers.json and prints a Markdown table.

Usage: bench/peers.py --tools DIR -m MODEL --prompts B.jsonl [--field prompt] [--n-prompts 30] [-n 128] [-t 2]
                      [--lookup-static CACHE.bin] [--out DIR]
"""
import argparse, gzip, json, os, re, socket, statistics, subprocess, sys, time, urllib.request


def read_prompts(path, field, n):
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                v = json.loads(line)
                for k in field.split("."):
                    v = v[k]
                out.append(v[0] if isinstance(v, list) else v)
            if len(out) >= n:
                break
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class server:
    def __init__(self, tools, model, threads, extra, log):
        self.port = free_port()
        cmd = [os.path.join(tools, "llama-server"), "-m", model, "-t", str(threads), "--port", str(self.port),
               "--host", "127.0.0.1", "-np", "1", "-c", "2048"] + extra
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        self.healthy_self()
                        return
            except Exception:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({' '.join(cmd)})")
        raise RuntimeError("llama-server did not become healthy")

    def healthy_self(self):
        # The port was free when chosen; a server that could not bind it has exited by now.
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise RuntimeError("llama-server exited after start (port taken?)")

    def complete(self, prompt, n):
        body = json.dumps({"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": False,
                           "samplers": ["top_k"], "top_k": 1}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            j = json.load(r)
        t = j["timings"]
        return t["predicted_per_second"], j.get("content", ""), t.get("draft_n", 0), t.get("draft_n_accepted", 0)

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def lookahead(tools, model, prompt, n, threads, log):
    r = subprocess.run([os.path.join(tools, "llama-lookahead"), "-m", model, "-p", prompt, "-n", str(n), "-t",
                        str(threads), "--temp", "0", "-c", "2048"], capture_output=True, text=True, timeout=600)
    log.write(r.stderr)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", r.stderr)
    a = re.search(r"n_accept\s*=\s*(\d+)", r.stderr)
    if not m:
        raise RuntimeError("llama-lookahead printed no speed line")
    return float(m.group(3)), int(m.group(1)), int(a.group(1)) if a else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--field", default="prompt")
    ap.add_argument("--n-prompts", type=int, default=30)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--lookup-static", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    prompts = read_prompts(a.prompts, a.field, a.n_prompts)
    configs = [("llama-server plain", [])]
    if a.lookup_static:
        configs.append(("llama-server ngram-cache", ["--spec-type", "ngram-cache", "-lcs", a.lookup_static]))
    configs += [("llama-server ngram-simple", ["--spec-type", "ngram-simple"]),
                ("llama-server ngram-mod", ["--spec-type", "ngram-mod"])]
    out_dir = a.out or "."
    os.makedirs(out_dir, exist_ok=True)
    log = open(os.path.join(out_dir, "peers.log"), "w")
    speeds = {name: [] for name, _ in configs}
    texts = {name: [] for name, _ in configs}
    speeds["llama-lookahead"] = []
    servers = {}
    try:
        for name, extra in configs:
            servers[name] = server(a.tools, a.model, a.t, extra, log)
        for i, p in enumerate(prompts):
            order = list(servers.items())
            order = order[i % len(order):] + order[:i % len(order)]
            for name, s in order:
                tps, text, _, _ = s.complete(p, a.n)
                speeds[name].append(tps)
                texts[name].append(text)
            try:
                speeds["llama-lookahead"].append(lookahead(a.tools, a.model, p, a.n, a.t, log)[0])
            except Exception as e:  # one failed prompt does not end the run; it is logged
                log.write(f"lookahead prompt {i}: {e}\n")
                speeds["llama-lookahead"].append(float("nan"))
    finally:
        for s in servers.values():
            s.close()
    base = speeds["llama-server plain"]
    rows = []
    print("| method | tokens/s (median) | vs llama-server plain (median of per-prompt ratios) | output = plain |")
    print("|---|---:|---:|---:|")
    for name, v in speeds.items():
        pairs = [(x, b) for x, b in zip(v, base) if x == x and x > 0 and b > 0]
        ratio = statistics.median([x / b for x, b in pairs]) if pairs else float("nan")
        same = sum(t == b for t, b in zip(texts.get(name, []), texts["llama-server plain"])) if name in texts else None
        rows.append({"method": name, "tokens_per_s_median": statistics.median([x for x, _ in pairs]) if pairs else None,
                     "ratio_median": ratio, "output_equals_plain": same, "per_prompt": v})
        print(f"| {name} | {rows[-1]['tokens_per_s_median'] or 0:.0f} | {ratio:.2f}x | "
              f"{'' if same is None else f'{same}/{len(prompts)}'} |")
    with open(os.path.join(out_dir, "peers.json"), "w") as f:
        json.dump({"model": a.model, "prompts": a.prompts, "n_prompts": len(prompts), "n_predict": a.n,
                   "threads": a.t, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
