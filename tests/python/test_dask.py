"""tpusim.sweep on a Dask cluster: a LocalCluster of two worker processes gives the local sweep's
records, record for record; a failed point stays a failed record; a worker killed mid-sweep loses
no point (Dask reschedules it); to_dataframe makes one row per point."""

import atexit
import json
import os
import subprocess
import shutil
import signal
import sys
import tempfile
import threading
import time

import pytest
import tpusim

distributed = pytest.importorskip("distributed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "tests", "cli", "round4", "tiny_v3_8.json")
DEFAULT = os.path.join(ROOT, "configs", "studies", "default.json")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def test_a_12_point_sweep_on_the_cluster_equals_the_local_one(client):
    grid = {"batch": [8, 16, 32], "model.layers": [1, 2, 3, 4]}
    local = tpusim.sweep(TINY, grid, jobs=2)
    remote = tpusim.sweep(TINY, grid, client=client)
    assert len(remote) == 12
    assert remote == local
    frame = tpusim.to_dataframe(remote)
    assert list(frame["batch"]) == [r["point"]["batch"] for r in local]
    assert list(frame["step_time_s"]) == [r["result"]["step_time_s"] for r in local]


def test_a_failed_point_stays_a_failed_record(client):
    records = tpusim.sweep(TINY, {"batch": [8, 0]}, client=client)
    assert records[0]["error"] is None and records[0]["result"]["fits"]
    assert records[1]["result"] is None and "batch: found 0" in records[1]["error"]
    assert records == tpusim.sweep(TINY, {"batch": [8, 0]}, jobs=2)


def test_a_worker_killed_mid_sweep_loses_no_point(client):
    grid = {"model.layers": [1000, 1200, 1400, 1600, 1800, 2000, 2200, 2400]}  # 0.4 to 0.8 s each
    pids = list(client.run(os.getpid).values())

    killed_at = []

    def kill_one():
        time.sleep(0.8)
        os.kill(pids[0], signal.SIGKILL)
        killed_at.append(time.monotonic())

    killer = threading.Thread(target=kill_one)
    killer.start()
    remote = tpusim.sweep(DEFAULT, grid, client=client)
    finished_at = time.monotonic()
    killer.join()
    assert killed_at and killed_at[0] < finished_at, "the worker died while the sweep ran"
    assert pids[0] not in client.run(os.getpid).values()
    assert [r["point"]["model.layers"] for r in remote] == grid["model.layers"]
    assert all(r["error"] is None for r in remote), [r["error"] for r in remote]
    assert remote == tpusim.sweep(DEFAULT, grid, jobs=2)


def test_out_is_refused_with_a_client(client):
    with pytest.raises(tpusim.ConfigError, match="out:"):
        tpusim.sweep(TINY, {"batch": [8]}, client=client, out="/tmp/x")


def test_validate_on_the_cluster_equals_the_local_one(client):
    cases = ["mlperf05-resnet-v3-8", "gpipe-t1-transformer-p8", "memfit-bert-v4-128"]
    local = tpusim.validate(cases, jobs=2)
    remote = tpusim.validate(cases, client=client)
    assert [c["id"] for c in remote["cases"]] == cases
    assert remote == local
    with pytest.raises(tpusim.ConfigError):
        tpusim.validate(["no-such-case"], client=client)


def test_validate_intervals_spread_over_the_cluster_equal_the_local_ones(client):
    local = tpusim.validate(["gpipe-t1-transformer-p8"], jobs=2, intervals=True)
    remote = tpusim.validate(["gpipe-t1-transformer-p8"], intervals=True, client=client)
    assert "interval" in remote["cases"][0] and remote == local


# The command's --dask: its children run as tasks on the cluster (workflows/dask_runner.cpp and
# tpusim/_dask_runner.py); the outputs are the ones without it.
TPUSIM = os.environ.get("TPUSIM", os.path.join(ROOT, "build", "cli", "tpusim"))


def command(*args, cwd=ROOT):
    return subprocess.run([TPUSIM, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_sweep_dask_writes_the_local_sweeps_files(client, tmp_path):
    study = os.path.relpath(TINY, ROOT)  # relative: the tasks run in the caller's folder
    grid = ["--grid", "batch=8,16,0", "--grid", "model.layers=1,2"]
    remote = command("sweep", study, *grid, "--out", str(tmp_path / "remote"), "--dask",
                     client.scheduler.address)
    local = command("sweep", study, *grid, "--out", str(tmp_path / "local"), "-j", "2")
    assert remote.returncode == local.returncode == 1, remote.stderr  # the batch=0 points fail
    for name in ["results.jsonl", "results.csv", "report.md", "report.html"]:
        assert (tmp_path / "remote" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name


def test_a_point_timeout_kills_the_task_as_it_kills_a_local_point(client, tmp_path):
    remote = command("sweep", DEFAULT, "--grid", "model.layers=3000", "--point-timeout", "0.05", "--out",
                     str(tmp_path / "remote"), "--dask", client.scheduler.address)
    assert remote.returncode == 1
    record = json.loads((tmp_path / "remote" / "results.jsonl").read_text().splitlines()[0])
    assert record["error"] == "timed out after 0.05 s (killed)"


def test_plan_dask_and_plan_with_a_client_equal_the_local_plan(client):
    local = command("plan", TINY, "--json", "-j", "2")
    remote = command("plan", TINY, "--json", "--dask", client.scheduler.address)
    assert local.returncode == remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout
    assert tpusim.plan(TINY, client=client) == json.loads(local.stdout)


def test_validate_dask_equals_the_local_validate(client):
    cases = ["mlperf05-resnet-v3-8", "gpipe-t1-transformer-p8"]
    local = command("validate", *cases, "--json", "-j", "2")
    remote = command("validate", *cases, "--json", "--dask", client.scheduler.address)
    assert remote.returncode == local.returncode and remote.stdout == local.stdout


def test_an_address_that_is_no_scheduler_is_exit_2_naming_dask():
    done = command("sweep", TINY, "--grid", "batch=8", "--out", "/tmp/never", "--dask", "nonsense")
    assert done.returncode == 2
    assert "--dask" in done.stderr and "nonsense" in done.stderr and "cannot connect" in done.stderr


# Round 5 (issue 66): a sweep on the cluster interrupted, and a worker killed, leave no child
# of theirs computing (tests/cli/round5/signal_leaves_running_child.json: 30,000 layers, seconds).
# A private copy: tests/cli/signals.py, which ctest may run at the same time, runs the same study,
# and its children must not count as this module's.
_SLOW_DIR = tempfile.mkdtemp(prefix="tpusim-dask-test-")
_CREATOR = os.getpid()
atexit.register(lambda: os.getpid() == _CREATOR and shutil.rmtree(_SLOW_DIR, True))  # not a fork's
SLOW = os.path.join(_SLOW_DIR, "signal_leaves_running_child.json")
shutil.copy(os.path.join(ROOT, "tests", "cli", "round5", "signal_leaves_running_child.json"), SLOW)


def slow_runs():
    """Pids of the tpusim children running SLOW's study (as a sweep point's `tpusim run`)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            state = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if SLOW.encode() in cmd and b"run" in cmd and state != "Z":
            found.append(int(pid))
    return found


def wait_until(predicate, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_dask_sweep_stops_its_tasks_children(client, tmp_path, sig):
    # A slow run left by an earlier test would look like this sweep's points having started, and
    # the signal would reach the sweep before it handles one.
    assert wait_until(lambda: not slow_runs(), 60), slow_runs()
    sweep = subprocess.Popen([TPUSIM, "sweep", SLOW, "--grid", "model.layers=30000,30001", "--out",
                              str(tmp_path / "out"), "--dask", client.scheduler.address],
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_until(slow_runs), "no point started on the workers"
    sweep.send_signal(sig)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 128 + sig, err
    assert "interrupted by" in err and "--resume" in err
    assert wait_until(lambda: not slow_runs(), 30), slow_runs()
    assert (tmp_path / "out" / "results.jsonl").read_text() == ""  # the interrupted points: not recorded


def test_a_killed_workers_child_dies_with_it(client):
    token = "killed-worker-test"
    assert wait_until(lambda: not slow_runs(), 60), slow_runs()  # only this test's child is found
    future = client.submit(tpusim._point_record, SLOW, None,
                           {"index": 0, "settings": [["model.layers", 30001]]}, token, pure=False)
    children = wait_until(slow_runs)
    assert children, "the task started no child"
    workers = client.run(os.getpid)
    parents = {int(open("/proc/%d/stat" % c).read().rsplit(")", 1)[1].split()[1]) for c in children}
    victims = [pid for pid in workers.values() if pid in parents]
    assert victims, (parents, workers)
    os.kill(victims[0], signal.SIGKILL)
    assert wait_until(lambda: not [c for c in children if c in slow_runs()], 30)
    future.cancel()
    client.wait_for_workers(2, timeout=60)
    # The copy Dask rescheduled is not this test's to finish: cancelled on every worker, it stops
    # its child even if it starts it after this (a later test must see no slow run of this one).
    def stopped():  # a worker just restarted may not answer yet: asked again until none runs
        client.run(tpusim._cancel_points, token, on_error="ignore")
        return not slow_runs()
    assert wait_until(stopped, 30), slow_runs()


def test_ctrl_c_in_a_sweep_with_a_client_stops_its_running_points(client, tmp_path):
    # The killed worker's point, rescheduled by Dask onto a worker that restarted after the cancel
    # was sent, may still run: this test's points are the ones it looks for.
    assert wait_until(lambda: not slow_runs(), 60), slow_runs()
    script = tmp_path / "sweep.py"
    script.write_text("import distributed, tpusim\n"
                      "c = distributed.Client(%r)\n"
                      "try:\n"
                      "    tpusim.sweep(%r, {'model.layers': [30000, 30001]}, client=c)\n"
                      "    print('finished')\n"
                      "except KeyboardInterrupt:\n"
                      "    print('interrupted')\n" % (client.scheduler.address, SLOW))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert wait_until(slow_runs), "no point started on the workers"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert out.strip().endswith("interrupted"), out
    assert wait_until(lambda: not slow_runs(), 30), slow_runs()
