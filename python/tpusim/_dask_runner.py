"""The tpusim command's helper for `--dask ADDRESS` (workflows/dask_runner.cpp starts it).

    python3 -m tpusim._dask_runner ADDRESS

Connects to the Dask scheduler at ADDRESS and says {"threads": N} (the cluster's worker threads)
or {"error": why} on its first line. Then reads requests from stdin, one JSON object a line:
{"id", "args", "cwd", "timeout_s"} runs `tpusim ARGS` as a Dask task on a worker (in `cwd` when
the worker has that folder) and answers {"id", "exit_code", "out", "err", "timed_out"} when it
is done, in the order they finish; {"cancel": id} cancels one. At the end of stdin it cancels
what is left and exits.
"""

import json
import os
import subprocess
import sys
import threading


def run_child(args, cwd, timeout_s):
    """One child on a worker: the tpusim command its own module was built with (a process, so
    SimGrid's one engine per process holds). What run_self gives: exit code (128 + signal when
    killed), stdout, stderr, whether the time limit killed it."""
    from tpusim import _tpusim
    command = [_tpusim._command()] + list(args)
    limit = timeout_s if 0 < timeout_s <= 1e9 else None
    try:
        done = subprocess.run(command, cwd=cwd if os.path.isdir(cwd) else None, capture_output=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        return {"exit_code": 128 + 9, "out": "", "err": "timed out after %g s (killed)" % timeout_s,
                "timed_out": True}
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    return {"exit_code": code, "out": done.stdout.decode("utf-8", "replace"),
            "err": done.stderr.decode("utf-8", "replace"), "timed_out": False}


def main():
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

    for line in sys.stdin:
        request = json.loads(line)
        if "cancel" in request:
            future = futures.pop(request["cancel"], None)
            if future is not None:
                future.cancel()
            continue
        id = request["id"]
        future = client.submit(run_child, request["args"], request["cwd"], request["timeout_s"], pure=False)
        futures[id] = future
        future.add_done_callback(lambda f, id=id: answer(id, f))
    for future in list(futures.values()):
        future.cancel()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
