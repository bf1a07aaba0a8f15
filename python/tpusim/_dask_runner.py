"""The tpusim command's helper for `--dask ADDRESS` (workflows/dask_runner.cpp starts it).

    python3 -m tpusim._dask_runner ADDRESS

Connects to the Dask scheduler at ADDRESS and says {"threads": N} (the cluster's worker threads)
or {"error": why} on its first line. Then reads requests from stdin, one JSON object a line:
{"id", "args", "cwd", "timeout_s"} runs `tpusim ARGS` as a Dask task on a worker (in `cwd` when
the worker has that folder) and answers {"id", "exit_code", "out", "err", "timed_out"} when it
is done, in the order they finish; {"cancel": id} cancels one (and kills its child where it
already runs). At the end of stdin it cancels what is left the same way and exits.
"""

import json
import os
import signal
import subprocess
import sys
import threading


# The children running on this worker, by the token their request gave (for _kill).
_running = {}
_running_lock = threading.Lock()


def run_child(args, cwd, timeout_s, token=None):
    """One child on a worker: the tpusim command its own module was built with (a process, so
    SimGrid's one engine per process holds; it dies with this worker, tpusim's parent-death
    signal). What run_self gives: exit code (128 + signal when killed), stdout, stderr, whether
    the time limit killed it."""
    from tpusim import _tpusim
    command = [_tpusim._command()] + list(args)
    limit = timeout_s if 0 < timeout_s <= 1e9 else None
    env = dict(os.environ, TPUSIM_PARENT_PID=str(os.getpid()))
    proc = subprocess.Popen(command, cwd=cwd if os.path.isdir(cwd) else None, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    with _running_lock:
        _running[token] = proc
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"exit_code": 128 + 9, "out": "", "err": "timed out after %g s (killed)" % timeout_s,
                "timed_out": True}
    finally:
        with _running_lock:
            _running.pop(token, None)
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return {"exit_code": code, "out": out.decode("utf-8", "replace"), "err": err.decode("utf-8", "replace"),
            "timed_out": False}


def _kill(tokens):
    """Run on every worker (Client.run): kills the children of these tokens running there."""
    with _running_lock:
        procs = [_running[t] for t in tokens if t in _running]
    for proc in procs:
        proc.kill()
    return len(procs)


def main():
    # A Ctrl-C reaches the sweep that started this helper too: the sweep stops, asks to cancel
    # and closes stdin, and this helper then stops what is left (dying at once would leave the
    # tasks running on the workers).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    address = sys.argv[1]
    say_lock = threading.Lock()

    def say(message):
        with say_lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    try:
        from distributed import Client
        client = Client(address, timeout="20s")
        threads = sum(client.nthreads().values())
    except Exception as e:  # noqa: BLE001: whatever stops the connection is the answer
        say({"error": "cannot connect: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__)})
        return 0
    say({"threads": threads})
    futures = {}

    def answer(id, future):
        futures.pop(id, None)
        if future.cancelled():
            return
        try:
            result = future.result()
        except Exception as e:  # noqa: BLE001: a task that failed on the cluster is that child's error
            result = {"exit_code": 1, "out": "", "err": "the Dask task failed: %s" % e, "timed_out": False}
        result["id"] = id
        say(result)

    token_base = "%d-%d" % (os.getpid(), id(futures))
    # Run as `python3 -m`, this file is __main__: the workers get its functions by reference to
    # the installed module (its lock and table of children stay theirs).
    from tpusim import _dask_runner as here

    def stop(ids):
        """Cancels these requests' tasks, and kills their children where they already run."""
        stopped = [futures.pop(i) for i in ids if i in futures]
        for future in stopped:
            future.cancel()
        if stopped:
            try:
                client.run(here._kill, ["%s-%s" % (token_base, i) for i in ids])
            except Exception:  # noqa: BLE001: a worker gone already took its children with it
                pass

    for line in sys.stdin:
        request = json.loads(line)
        if "cancel" in request:
            stop([request["cancel"]])
            continue
        id_ = request["id"]
        future = client.submit(here.run_child, request["args"], request["cwd"], request["timeout_s"],
                               "%s-%s" % (token_base, id_), pure=False)
        futures[id_] = future
        future.add_done_callback(lambda f, i=id_: answer(i, f))
    stop(list(futures))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
