"""The Python module `tpusim` (issue 41, a first slice): each call returns what the command
prints as JSON, as Python objects; bad input raises ValueError naming the path; calls run in
children, so a process may simulate as often as it likes. Run by ctest with PYTHONPATH set to
the module's folder and TPUSIM to the tpusim command."""
import json
import os
import subprocess

import pytest
import tpusim

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "tests", "cli", "round4", "tiny_v3_8.json")
CLI = os.environ["TPUSIM"]


def cli_json(*args):
    return json.loads(subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout)


def test_run_equals_the_commands_json():
    assert tpusim.run(TINY) == cli_json("run", TINY, "--json")


def test_run_takes_overrides_and_a_dict_and_runs_again_in_one_process():
    with_set = tpusim.run(TINY, set={"model.layers": 2, "schedule.remat": True})
    assert with_set == cli_json("run", TINY, "--json", "--set", "model.layers=2", "--set", "schedule.remat=true")
    study = json.load(open(TINY))
    assert tpusim.run(study)["step_time_s"] == pytest.approx(tpusim.run(TINY)["step_time_s"], rel=1e-12)
    assert with_set["step_time_s"] < tpusim.run(TINY)["step_time_s"]  # half the layers


def test_a_dict_study_over_hbm_is_rematerialized_as_its_file_is():
    bert = os.path.join(ROOT, "configs", "studies", "bert-large-lamb-v4-512.json")
    sets = {"slice": "v4-128", "batch": 3072}
    from_dict = tpusim.run(json.load(open(bert)), set=sets)
    assert from_dict["fits"] and from_dict["compiler_remat"]["policy"] == "save_dots"
    assert from_dict == tpusim.run(bert, set=sets)


def test_bad_input_raises_value_error_naming_the_path():
    with pytest.raises(ValueError, match=r"batch: found 0"):
        tpusim.run(TINY, set={"batch": 0})
    with pytest.raises(ValueError, match=r"schedule.mesh\[1\]\[0\]"):
        tpusim.check(TINY, set={"schedule": {"kind": "mesh", "mesh": [["batch", 4], ["batch", 2]],
                                            "layout": {"batch": "batch"}}})
    assert tpusim.check(TINY).startswith("(transformer")


def test_fit_and_validate_return_the_commands_json():
    assert tpusim.fit(TINY, "model.layers", max=64) == cli_json("fit", TINY, "--maximize", "model.layers",
                                                                 "--max", "64", "--json")
    report = tpusim.validate(["mlperf07-bert-v4-512"])
    assert [c["id"] for c in report["cases"]] == ["mlperf07-bert-v4-512"]
    assert report["summary"]["per_hardware"]["tpu-v4"]["cases"] == 1
    assert tpusim.describe_hardware("tpu-v4")["megacore"] is True


def test_sweep_and_plan_return_what_the_commands_write(tmp_path):
    points = tpusim.sweep(TINY, {"batch": [8, 16], "model.layers": [2]})
    assert [p["point"] for p in points] == [{"batch": 8, "model.layers": 2}, {"batch": 16, "model.layers": 2}]
    assert all(p["error"] is None for p in points)
    assert points[1]["result"]["step_time_s"] > points[0]["result"]["step_time_s"]  # twice the examples
    one = tpusim.run(TINY, set={"batch": 16, "model.layers": 2})
    assert points[1]["result"]["step_time_s"] == one["step_time_s"]
    space = os.path.join(ROOT, "tests", "cli", "round4", "tiny_plan_space.json")
    plan = tpusim.plan(TINY, space=space, jobs=2)
    assert plan == cli_json("plan", TINY, "--space", space, "-j", "2", "--json")
    assert plan["best"] is not None
