#!/usr/bin/env bash
# bench/trace-costs.py on synthetic budget traces whose machine is known: plain 100 us, 5 rows 300 us, 9 rows 450 us
# on one thread, a change of shape +50 us, each shape's first pass in a process +1000 us more, lines of another
# policy interleaved. The table, the rebuild and the cold pass must come back; a trace without plain passes is a
# one-line error and exit 2; so is a missing file.
# Usage: trace-costs.sh SOURCE_DIR TMP_DIR
set -euo pipefail
src=$1
dir=$2/trace-costs
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 - "$dir/trace.tsv" <<'PY'
import sys
steady = {1: 100.0, 5: 300.0, 9: 450.0}
out = open(sys.argv[1], "w")
for pid in (11, 12):  # two processes: each pays every first pass
    name = f"auto#{pid}.1"
    out.write(f"{name}\twarm-up\t2\n")
    seen, last, step = set(), None, 0
    for k in range(60):
        if k % 20 == 0:
            out.write(f"{name}\tother\n")
            last = None
        rows = (1, 1, 1, 5, 5, 5, 9, 9, 9)[k % 9]
        us = steady[rows] + (0 if last == rows else 50) + (0 if rows in seen else 1000)
        seen.add(rows)
        last = rows
        step += 1
        out.write(f"{name}\t{step}\t{rows}\t1\t1\t1\t{2 if rows == 1 else 1}\t{100 + k}\t{us:.1f}\t3.0\t2\t1\t0\n")
        out.write(f"fixed 2#{pid}.2\t{step}\t3\t1\t1\t1\t1\t50\t7777.0\t1.0\t2\t1\t0\n")  # filtered out below
out.close()
PY

"$src/bench/trace-costs.py" "$dir/trace.tsv" --policy auto > "$dir/costs.txt" 2> "$dir/err.txt" || fail "exit $?: $(cat "$dir/err.txt")"
read -r magic version attn rebuild n r1 r2 r3 t1 t2 t3 th1 th2 th3 batches rest < "$dir/costs.txt" || true
[ "$magic $version $n" = "rest-cost 4 3" ] || fail "not a 3-shape cost table: $(cat "$dir/costs.txt")"
[ "$r1 $r2 $r3" = "1 5 9" ] || fail "rows $r1 $r2 $r3"
[ "$t1 $t2 $t3" = "100.000 300.000 450.000" ] || fail "steady times $t1 $t2 $t3"
[ "$th1 $th2 $th3" = "2 1 1" ] || fail "threads $th1 $th2 $th3"
[ "$rebuild" = "50.000" ] || fail "rebuild $rebuild"
[ "$batches" = "0" ] && [ -z "${rest:-}" ] || fail "trailing fields: $batches $rest"
# Four cold samples, not six: each process's first 1-row pass follows a prompt's ('other'), whose aftermath it pays too.
grep -q "cold first pass +1000.0 us median over 4 " "$dir/err.txt" || fail "cold: $(cat "$dir/err.txt")"
grep -q "jitter sigma 0.000" "$dir/err.txt" || fail "jitter: $(cat "$dir/err.txt")"

# Requests that keep to their shape: each first pass after a prompt's pays 400 us for the prompt's aftermath, which is
# no change of shape; the two true changes (+50 us) are what the rebuild must be.
python3 - "$dir/prompts.tsv" <<'PY'
import sys
out = open(sys.argv[1], "w")
step, last = 0, None
def put(rows, us):
    global step
    step += 1
    out.write(f"auto#21.1\t{step}\t{rows}\t1\t1\t1\t1\t100\t{us:.1f}\t3.0\t2\t1\t0\n")
for rows in (1, 5):
    for k in range(4):
        put(rows, {1: 100.0, 5: 300.0}[rows] + (0 if k else 1000))  # first passes of the process, then steady
for i in range(12):
    rows = (1, 5)[i % 2]
    out.write("auto#21.1\tother\n")
    put(rows, {1: 100.0, 5: 300.0}[rows] + 400)
    for k in range(6):
        put(rows, {1: 100.0, 5: 300.0}[rows])
    if i in (3, 8):  # a change of shape within the request, and back
        other = 6 - rows
        put(other, {1: 100.0, 5: 300.0}[other] + 50)
        put(rows, {1: 100.0, 5: 300.0}[rows] + 50)
out.close()
PY
"$src/bench/trace-costs.py" "$dir/prompts.tsv" > "$dir/prompts.txt" 2> "$dir/err4.txt" || fail "prompts: exit $?: $(cat "$dir/err4.txt")"
read -r magic version attn rebuild n rest < "$dir/prompts.txt" || true
[ "$rebuild" = "50.000" ] || fail "prompts: rebuild $rebuild (the passes after prompts are no change of shape)"

# Without --policy the other policy's 3-row passes (after no pass of their shape in their instance... and then
# steadily) join the table.
"$src/bench/trace-costs.py" "$dir/trace.tsv" > "$dir/all.txt" 2>/dev/null || fail "all policies: exit $?"
grep -q "^rest-cost 4 0 [0-9.]* 4 1 3 5 9 " "$dir/all.txt" || fail "all policies: $(cat "$dir/all.txt")"

grep -v "	1	1	1	1	2	" "$dir/trace.tsv" | grep -v "^auto#1[12].1	[0-9]*	1	" > "$dir/noplain.tsv"
if "$src/bench/trace-costs.py" "$dir/noplain.tsv" --policy auto > /dev/null 2> "$dir/err2.txt"; then fail "no plain passes, yet a table"; fi
[ "$(wc -l < "$dir/err2.txt")" = 1 ] && grep -q "one-row passes" "$dir/err2.txt" || fail "error: $(cat "$dir/err2.txt")"
if "$src/bench/trace-costs.py" "$dir/missing.tsv" > /dev/null 2> "$dir/err3.txt"; then fail "a missing file, yet a table"; fi
[ "$(wc -l < "$dir/err3.txt")" = 1 ] || fail "missing file: $(cat "$dir/err3.txt")"
echo "trace-costs: ok"
