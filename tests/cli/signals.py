"""Signals (issue 66): SIGINT and SIGTERM to each command that starts children (sweep, sweep
--plan, fit, fit --plan, plan, validate --intervals) and to run. Each command is started in a
session of its own (SIGINT at its default disposition, as a terminal's Ctrl-C finds it); once it
has a child, the signal. Checked: the exit code is 128 + the signal, stderr says what the
interrupt kept, and no child it had is left running. The time bounds only keep a regression from
hanging the suite. The study is tests/cli/round5/signal_leaves_running_child.json (a 30,000-layer
step: each child computes for seconds)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from process_tree import alive, descendants

tpusim, root = sys.argv[1], sys.argv[2]
here = os.path.join(root, "tests", "cli", "round5")
slow = os.path.join(here, "signal_leaves_running_child.json")
run_study = os.path.join(here, "run_sigint_exits_1_silently.json")
work = tempfile.mkdtemp()
failures = []


def interrupt(name, args, sig, kept, wait_child=True, settle=1.0):
    """Starts `tpusim ARGS`, waits for a child (or `settle` s without), sends `sig`; checks."""
    proc = subprocess.Popen([tpusim] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while wait_child and not descendants(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(settle)
    children = descendants(proc.pid)
    if wait_child and not children:
        failures.append("%s: no child was started" % name)
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        failures.append("%s: still running 120 s after %s" % (name, sig.name))
        return None, ""
    time.sleep(1.0)  # the kernel's parent-death signal: delivered, the children reaped by init
    left = [c for c in children if alive(c)]
    if proc.returncode != 128 + sig:
        failures.append("%s %s: exit %d, expected %d (%s)" % (name, sig.name, proc.returncode, 128 + sig,
                                                              err.strip()[-300:]))
    if kept not in err:
        failures.append("%s %s: stderr lacks %r: %s" % (name, sig.name, kept, err.strip()[-300:]))
    if left:
        failures.append("%s %s: children left running: %s" % (name, sig.name, left))
    return proc.returncode, out


for sig in (signal.SIGINT, signal.SIGTERM):
    tag = sig.name
    out = os.path.join(work, "sweep-" + tag)
    interrupt("sweep", ["sweep", slow, "--grid", "model.layers=30000,30001", "-j", "1", "--out", out], sig,
              "--resume runs the rest")
    lines = open(os.path.join(out, "results.jsonl")).read().splitlines()
    if any(json.loads(l)["error"] is not None for l in lines):
        failures.append("sweep %s: an interrupted point was recorded as failed: %s" % (tag, lines))
    interrupt("sweep --plan", ["sweep", slow, "--grid", "model.layers=30000,30001", "--plan", "-j", "1",
                               "--out", os.path.join(work, "sweep-plan-" + tag)], sig, "points recorded")
    # fit from 1,000 layers (they fit: its first probe simulates for a second or more; at 30,000 the
    # resident state alone is over HBM, answered at once).
    interrupt("fit", ["fit", slow, "--maximize", "model.layers", "--min", "1000", "--max", "100000"], sig,
              "the search was not finished")
    interrupt("fit --plan", ["fit", slow, "--maximize", "model.layers", "--min", "1000", "--max", "100000",
                             "--plan"], sig, "the search was not finished")
    interrupt("plan", ["plan", slow, "-j", "1"], sig, "incomplete, stopped by " + tag, wait_child=False,
              settle=3.0)
    interrupt("validate --intervals", ["validate", "--intervals", "-j", "1"], sig, "no report written")
    run_out = os.path.join(work, "run-" + tag)
    interrupt("run", ["run", run_study, "--out", run_out], sig, "nothing was written to --out",
              wait_child=False, settle=4.0)
    if os.path.exists(os.path.join(run_out, "result.json")):
        failures.append("run %s: wrote result.json though interrupted" % tag)

for f in failures:
    print("FAIL:", f)
print("signals: %s" % ("ok" if not failures else "%d failures" % len(failures)))
sys.exit(1 if failures else 0)
