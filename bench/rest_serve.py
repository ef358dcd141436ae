"""Starting `rest serve` for the bench scripts. On `--port 0` the server binds a free port and names it on its first
line of stdout ("listening on http://HOST:PORT"), so no free-port probe races another process for the port and no
health poll waits for the bind."""
import subprocess
import sys


def start(cmd, log):
    """Runs cmd (a `rest serve ... --port 0` command line) with stderr to the open file `log`; returns (process,
    port). Exits with a one-line message where the server does not say it is listening."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    line = p.stdout.readline()
    if "listening on http://" not in line:
        p.kill()
        sys.exit("rest serve did not start: %r (%s; see %s)" % (line, " ".join(cmd), getattr(log, "name", "its log")))
    return p, int(line.strip().rsplit(":", 1)[1])
