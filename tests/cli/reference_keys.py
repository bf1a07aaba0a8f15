#!/usr/bin/env python3
"""docs/reference.md covers every key the study and hardware parsers know. Each object's known keys
are asked of the parser itself: a study (or hardware file) with an unknown key at that place is
refused with the object's known keys listed. Every one must appear in the reference as `key` or
in one of its JSON examples as "key": so a key added to a parser without its line here fails.

Usage: reference_keys.py TPUSIM ROOT"""
import json, os, re, subprocess, sys, tempfile

tpusim, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
default = json.load(open(os.path.join(root, "configs", "studies", "default.json")))
work = tempfile.mkdtemp()
UNKNOWN = "zzz_unknown"


def refusal(study, hardware=None):
    """The parser's message for `study` (its hardware `hardware` when given, written beside it)."""
    if hardware is not None:
        json.dump(hardware, open(os.path.join(work, "hw.json"), "w"))
        study = dict(study, hardware="hw.json")
    json.dump(study, open(os.path.join(work, "study.json"), "w"))
    return subprocess.run([tpusim, "check", os.path.join(work, "study.json")], capture_output=True, text=True).stderr


def known(study, path, hardware=None):
    """The known keys the parser lists for the object at `path` (of the hardware when given)."""
    obj = hardware if hardware is not None else study
    for part in path:
        obj = obj[part]
    obj[UNKNOWN] = 1
    err = refusal(study, hardware)
    m = re.search(UNKNOWN + r": found an unknown key, expected no such key; known keys: ([^\n]*)", err)
    assert m, (path, err[-2000:])
    return set(m.group(1).split())


def kinds(study):
    """The kinds the parser lists for a "kind" it does not know (the study has "zzz" there)."""
    err = refusal(study)
    assert "found \"zzz\", expected" in err, err
    return re.findall(r'"([a-z_0-9]+)"', err.split("expected", 1)[1])


def with_(**changes):
    return dict(json.loads(json.dumps(default)), **changes)


keys = {}  # key -> where the parser knows it


def add(where, names):
    for k in names:
        keys.setdefault(k, where)


add("study", known(with_(), []))
for section in ("model", "optimizer", "schedule"):
    found = kinds(with_(**{section: {"kind": "zzz"}}))
    assert len(found) >= 4, (section, found)
    for kind in found:
        add(f"{section} {kind}", known(with_(**{section: {"kind": kind}}), [section]))
for kind in kinds(with_(model={"kind": "sequential", "layers": [{"kind": "zzz"}]})):
    add("sequential layer " + kind, known(with_(model={"kind": "sequential", "layers": [{"kind": kind}]}),
                                          ["model", "layers", 0]))
tf = {"kind": "transformer", "activation": "relu", "layers": 2, "d_model": 256, "d_ff": 1024, "heads": 4,
      "vocab": 1000, "seq_len": 64}
nested = [
    (with_(model=dict(tf, moe={"experts": 4, "every": 2, "top_k": 1, "capacity_factor": 1, "d_ff": 1024})),
     ["model", "moe"]),
    (with_(input_pipeline={"examples_per_s_per_host": 1000}), ["input_pipeline"]),
    (with_(training_loop={"steps_per_loop": 10, "host_seconds_per_loop": 0.1}), ["training_loop"]),
    (with_(perturbations={"chips": [{"chip": [0, 0], "compute_scale": 0.5}]}), ["perturbations"]),
    (with_(perturbations={"chips": [{"chip": [0, 0], "compute_scale": 0.5}]}), ["perturbations", "chips", 0]),
    (with_(perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0.5}]}),
     ["perturbations", "links", 0]),
    (with_(perturbations={"random": {"seed": 1, "slow_chip_fraction": 0.5, "compute_scale": 0.5}}),
     ["perturbations", "random"]),
    (with_(assumptions=[{"key": "batch", "range": [128, 512], "source": "a test"}]), ["assumptions", 0]),
]
for study, path in nested:
    add(".".join(map(str, path)), known(study, path))
# The hardware file: its top level, each section, a slice and a figure, asked of a copy of tpu-v3.
shipped = json.load(open(os.path.join(root, "configs", "hardware", "tpu-v3.json")))
sections = [[]] + [[k] for k, v in shipped.items() if isinstance(v, dict) and k != "slices"]
sections += [["slices", "v3-8"], ["core", "op_overhead_s"]]
for section in sections:
    add("hardware " + (".".join(section) or "top level"), known(with_(), section, json.loads(json.dumps(shipped))))

text = open(os.path.join(root, "docs", "reference.md")).read()
# `key`, `section.key` (each part counted), or "key": in a JSON example.
covered = {part for path in re.findall(r'`"?([A-Za-z_][A-Za-z_0-9.]*)', text) for part in path.split(".")}
covered |= set(re.findall(r'"([A-Za-z_][A-Za-z_0-9]*)"\s*:', text))
missing = sorted(f"{k} ({where})" for k, where in keys.items() if k not in covered)
assert len(keys) >= 150, f"only {len(keys)} keys asked of the parsers"
if missing:
    print(f"FAIL: {len(missing)} of {len(keys)} keys the parsers know are not in docs/reference.md: " + ", ".join(missing))
    sys.exit(1)
print(f"reference keys: all {len(keys)} keys the parsers know are in docs/reference.md")
