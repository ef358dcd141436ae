#!/usr/bin/env python3
"""A budget trace turned into the machine bench-policy-replay replays.

REST_BUDGET_TRACE=FILE (src/decode/budget-trace.h) records every step each budget policy observed. From the
single-request passes of all policies in it this prints, on stdout, a cost table of that machine's steady pass times
("rest-cost 4 ..."; for --true-costs: shapes seen in at least --min-samples passes that followed a pass of their
own shape, medians), and on stderr what else the replay can be told:
  - rebuild: what a pass after another shape took beyond its shape's steady median (the table's change of shape;
    the first pass after a prompt's is no sample of it: it pays for what the prompt did to the caches);
  - jitter: the spread of steady passes around their shape's median, as a lognormal sigma (1.4826 x the median
    absolute deviation of log(time / median)), and their mean over median (heavy tails: preempted passes);
  - cold: what a shape's first pass in a process took beyond a change into it (--cold-us), median and count.

usage: bench/trace-costs.py TRACE.tsv [--policy PREFIX] [--min-samples N] > costs.txt
"""
import math
import statistics
import sys
from collections import defaultdict


def fail(msg):
    print(f"trace-costs: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    path, prefix, min_samples = None, "", 3
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        if a in ("--policy", "--min-samples"):
            if i + 1 >= len(argv):
                fail(f"{a} needs a value")
            if a == "--policy":
                prefix = argv[i + 1]
            else:
                try:
                    min_samples = max(1, int(argv[i + 1]))
                except ValueError:
                    fail(f"--min-samples wants a number, not '{argv[i + 1]}'")
            i += 2
            continue
        if path is not None:
            fail(f"unexpected argument '{a}' (see --help)")
        path = a
        i += 1
    if path is None:
        fail("no trace given (see --help)")
    return path, prefix, min_samples


def read_passes(path, prefix):
    """Per policy instance, its single-request passes in order: (rows, threads, us); None where another pass
    (prompt processing) came between."""
    seq = defaultdict(list)
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    with f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if not cols or not cols[0].startswith(prefix):
                continue
            if len(cols) == 2 and cols[1] == "other":
                seq[cols[0]].append(None)
                continue
            if len(cols) != 13:
                continue  # warm-up lines, or a line cut short
            try:
                rows, requests, n_equal, threads = int(cols[2]), int(cols[3]), int(cols[4]), int(cols[6])
                us = float(cols[8])
            except ValueError:
                continue
            if requests == 1 and n_equal == 1 and rows >= 1 and us > 0:
                seq[cols[0]].append((rows, threads, us))
    return seq


def main(argv):
    path, prefix, min_samples = parse_args(argv)
    seq = read_passes(path, prefix)
    steady, changed, first = defaultdict(list), defaultdict(list), defaultdict(list)
    threads_of = {}
    seen = set()  # (process, rows): a shape's first pass in a process is cold
    for name, passes in seq.items():
        process = name.split("#", 1)[1].split(".", 1)[0] if "#" in name else name
        last, after_other = None, False
        for p in passes:
            if p is None:
                last, after_other = None, True
                continue
            rows, threads, us = p
            if (process, rows) not in seen:
                seen.add((process, rows))
                if not after_other:  # a cold first pass, unless the prompt's aftermath is in it too
                    first[rows].append(us)
            elif after_other:
                pass  # pays for what the prompt did to the caches: neither a steady pass nor a change of shape
            elif last == rows:
                steady[rows].append(us)
                threads_of[rows] = threads
            else:
                changed[rows].append(us)
            last, after_other = rows, False
    med = {r: statistics.median(v) for r, v in steady.items() if len(v) >= min_samples}
    extra = [us - med[r] for r, v in changed.items() if r in med for us in v]
    rebuild = max(0.0, statistics.median(extra)) if extra else 0.0
    if 1 not in med:
        # A table starts from plain decoding's pass. A budget's one-row passes mostly follow drafting ones (plain
        # decoding itself runs without a policy): those, less what a change of shape adds.
        if len(changed[1]) < min_samples:
            fail(f"{path}: fewer than {min_samples} one-row passes (plain decoding), which a cost table starts from")
        med[1] = max(1e-3, statistics.median(changed[1]) - rebuild)
        print(f"trace-costs: one row from {len(changed[1])} passes after other shapes, less the rebuild",
              file=sys.stderr)
    logs = [math.log(us / med[r]) for r, v in steady.items() if r in med for us in v]
    center = statistics.median(logs)
    sigma = 1.4826 * statistics.median(abs(x - center) for x in logs)
    tail = statistics.mean(us / med[r] for r, v in steady.items() if r in med for us in v)
    cold = [us - med[r] - rebuild for r, v in first.items() if r in med for us in v]
    rows = sorted(med)
    print("rest-cost 4 0 %.3f %d %s %s %s 0" % (rebuild, len(rows), " ".join(str(r) for r in rows),
                                                 " ".join("%.3f" % med[r] for r in rows),
                                                 " ".join(str(max(0, threads_of.get(r, 0))) for r in rows)))
    n_steady = sum(len(steady[r]) for r in rows)
    print(f"trace-costs: {len(rows)} shapes from {n_steady} steady passes; rebuild {rebuild:.1f} us "
          f"({len(extra)} changes); jitter sigma {sigma:.3f}, mean/median {tail:.2f}", file=sys.stderr)
    if cold:
        print(f"trace-costs: cold first pass +{statistics.median(cold):.1f} us median over {len(cold)} "
              f"(max +{max(cold):.1f})", file=sys.stderr)
    else:
        print("trace-costs: no first pass of a shape with a steady figure", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
