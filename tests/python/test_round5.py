"""Robustness round 5 (issue 66) in Python: Ctrl-C stops a call and the child it forked (and that
child's own children); every value JSON cannot hold, and every argument of the wrong kind, is
ConfigError naming where it is; a Dask sweep interrupted stops its tasks' children on the workers.
The reproducers are tests/cli/round5/*.json."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tpusim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "cli", "round5")
TINY = os.path.join(ROOT, "tests", "cli", "round4", "tiny_v3_8.json")
SLOW = os.path.join(HERE, "python_ctrl_c_does_not_stop.json")  # a 30,000-layer step: many seconds
CLI = os.environ["TPUSIM"]
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
from process_tree import alive, descendants  # noqa: E402


def wait_for_descendant(pid, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = descendants(pid)
        if found:
            return found
        time.sleep(0.05)
    return []


CALLS = {
    "run": "tpusim.run(%r)" % SLOW,
    "sweep": "tpusim.sweep(%r, {'model.layers': [30000, 30001]})" % SLOW,
    "fit": "tpusim.fit(%r, 'model.layers', min=1000, max=30000)" % SLOW,  # 30,000: answered at once
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_ctrl_c_raises_keyboard_interrupt_and_stops_the_children(call, tmp_path):
    script = tmp_path / "call.py"
    script.write_text(textwrap.dedent("""
        import sys, tpusim
        try:
            %s
            print("finished")
        except KeyboardInterrupt:
            print("interrupted")
    """) % CALLS[call])
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    children = wait_for_descendant(proc.pid)
    assert children, "the call started no child"
    time.sleep(0.5)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "interrupted"
    time.sleep(0.5)
    assert [c for c in children if alive(c)] == []


def test_a_sweep_interrupted_records_no_point_it_did_not_finish(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text("import tpusim\ntpusim.sweep(%r, {'model.layers': [30000, 4]}, out=%r)\n"
                      % (SLOW, str(tmp_path / "out")))
    proc = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not any(b"run" in open("/proc/%d/cmdline" % c, "rb").read().split(b"\0")
                  for c in descendants(proc.pid) if alive(c)) and time.monotonic() < deadline:
        time.sleep(0.05)  # until the point's `tpusim run` computes
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    proc.communicate(timeout=60)
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert all(json.loads(l)["error"] is None for l in lines), lines


@pytest.mark.parametrize("value,where", [
    (float("nan"), "study.batch"), (float("inf"), "study.batch"), (-float("inf"), "study.batch")])
def test_a_number_json_cannot_hold_is_config_error_naming_its_path(value, where):
    study = json.load(open(TINY))
    with pytest.raises(tpusim.ConfigError, match=r"^%s: found .*finite number" % where.replace(".", r"\.")):
        tpusim.run(dict(study, batch=value))
    with pytest.raises(tpusim.ConfigError, match=r"set\.model\.layers: found"):
        tpusim.run(TINY, set={"model.layers": value})


def test_a_lone_surrogate_is_config_error_naming_its_path():
    study = json.load(open(TINY))
    with pytest.raises(tpusim.ConfigError, match=r"^study\.description: found .*Unicode"):
        tpusim.run(dict(study, description="\ud800"))


def test_arguments_of_the_wrong_kind_are_config_errors_naming_them():
    with pytest.raises(tpusim.ConfigError, match="^client: found 1"):
        tpusim.sweep(TINY, {"batch": [32]}, client=1)
    with pytest.raises(tpusim.ConfigError, match=r"^grid\.batch: found \[\]"):
        tpusim.sweep(TINY, {"batch": []})
    with pytest.raises(tpusim.ConfigError, match="^study: found 3"):
        tpusim.check(3)
    with pytest.raises(tpusim.ConfigError, match=r"^cases\[0\]: found 1"):
        tpusim.validate([1])


def test_a_path_object_and_a_single_case_name_are_taken_whole():
    assert tpusim.run(pathlib.Path(TINY)) == tpusim.run(TINY)
    assert tpusim.check(pathlib.Path(TINY)) == tpusim.check(TINY)
    # One case id as a str is one case, not its characters.
    with pytest.raises(tpusim.ConfigError, match="no-such-case"):
        tpusim.validate("no-such-case")
