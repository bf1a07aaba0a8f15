"""A 48-point sweep through a 2-worker Dask LocalCluster against `tpusim sweep -j 2` on this
machine: wall times and their ratio (the sweep call with the cluster up, and with its start-up),
and the command's `sweep --dask` on the same cluster.

    PYTHONPATH=build/python python3 bench/dask_sweep.py build/cli/tpusim
"""

import os
import subprocess
import sys
import tempfile
import time

import tpusim
from dask.distributed import Client, LocalCluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDY = os.path.join(ROOT, "configs", "studies", "default.json")
LAYERS = list(range(200, 200 + 48 * 25, 25))  # 48 points, about 0.1 to 0.4 s each


def main():
    cli = sys.argv[1]
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        subprocess.run([cli, "sweep", STUDY, "--grid", "model.layers=" + ",".join(map(str, LAYERS)), "-j", "2",
                        "--out", out], check=True, capture_output=True)
        local = time.monotonic() - start
    start = time.monotonic()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        up = time.monotonic()
        records = tpusim.sweep(STUDY, {"model.layers": LAYERS}, client=client)
        swept = time.monotonic()
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([cli, "sweep", STUDY, "--grid", "model.layers=" + ",".join(map(str, LAYERS)), "--dask",
                            cluster.scheduler_address, "--out", out], check=True, capture_output=True)
        command = time.monotonic() - swept
    assert len(records) == 48 and all(r["error"] is None for r in records)
    print(f"sweep -j 2: {local:.2f} s; Dask, 2 workers: {swept - up:.2f} s ({(swept - up) / local:.2f}x), "
          f"{swept - start:.2f} s with the cluster's start-up ({(swept - start) / local:.2f}x); "
          f"sweep --dask: {command:.2f} s ({command / local:.2f}x)")


if __name__ == "__main__":
    main()
