#!/usr/bin/env python3
"""Mutation fuzzing of the shipped inputs, kept as a test: a fixed seed makes a few hundred
mutants of the shipped studies and hardware files (values replaced by out-of-range numbers,
other types, huge integers; keys dropped or repeated; text truncated; deep nesting) and runs
each through `tpusim check` (a hardware mutant through a study naming it by path). Every mutant
must exit 0 or 2, and exit 2 with a message naming what was expected; never a signal, never
exit 1 ("internal error"), never a hang.

Usage: fuzz.py TPUSIM ROOT [MUTANTS]"""
import glob, json, os, random, subprocess, sys, tempfile

tpusim, root = sys.argv[1], sys.argv[2]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 400
rng = random.Random(20261123)

REPLACEMENTS = [-1, 0, 0.5, 1e-320, 1e308, 2**31, 2**32 + 8, 2**63 - 1, -2**63, 10**30, "", "x",
                None, True, [], {}, [1, 2], {"a": 1}, "NaN", 3.5]


def paths(node, prefix=()):
    """Every (path, value) in a JSON tree."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


def set_at(node, path, value):
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def drop_at(node, path):
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]


def mutate(text):
    """One mutant of a JSON document, as text."""
    doc = json.loads(text)
    kind = rng.choice(["replace", "replace", "replace", "drop", "repeat", "truncate", "nest"])
    every = [p for p, _ in paths(doc) if p]
    if kind == "replace" and every:
        set_at(doc, rng.choice(every), rng.choice(REPLACEMENTS))
    elif kind == "drop" and every:
        path = rng.choice(every)
        try:
            drop_at(doc, path)
        except (IndexError, KeyError, TypeError):
            pass
    elif kind == "repeat":
        out = json.dumps(doc, indent=1)
        lines = out.split("\n")
        keyed = [i for i, l in enumerate(lines) if l.strip().startswith('"') and l.rstrip().endswith(",")]
        if keyed:
            i = rng.choice(keyed)
            lines.insert(i, lines[i])
        return "\n".join(lines)
    elif kind == "truncate":
        out = json.dumps(doc, indent=1)
        return out[: rng.randrange(1, len(out))]
    elif kind == "nest" and every:
        depth = rng.choice([10, 70, 5000])  # spliced in as text: too deep for Python's json
        set_at(doc, rng.choice(every), "@NEST@")
        return json.dumps(doc, indent=1).replace('"@NEST@"', "[" * depth + "1" + "]" * depth)
    return json.dumps(doc, indent=1)


studies = sorted(glob.glob(os.path.join(root, "configs", "studies", "*.json")))
hardware = sorted(glob.glob(os.path.join(root, "configs", "hardware", "*.json")))
failures = 0
exits = {0: 0, 2: 0}
with tempfile.TemporaryDirectory() as work:
    for n in range(count):
        if n % 4 == 3:  # a hardware mutant, through a small study that names it by path
            source = rng.choice(hardware)
            hw = os.path.join(work, f"hw{n}.json")
            open(hw, "w").write(mutate(open(source).read()))
            study = os.path.join(work, f"s{n}.json")
            json.dump({"schema": "tpusim.study/1", "hardware": hw, "slice": {"chips": [2, 2], "wraparound": [False, False]},
                       "model": {"kind": "mlp", "layers": 2, "width": 64, "input": 32, "classes": 8},
                       "batch": 64, "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}}, open(study, "w"))
            what = f"{os.path.basename(source)} mutant {n}"
        else:
            source = rng.choice(studies)
            study = os.path.join(work, f"s{n}.json")
            open(study, "w").write(mutate(open(source).read()))
            what = f"{os.path.basename(source)} mutant {n}"
        try:
            run = subprocess.run([tpusim, "check", study], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"FAIL {what}: check hung (60 s)")
            failures += 1
            continue
        ok = run.returncode == 0 or (run.returncode == 2 and "expected" in run.stderr)
        if ok:
            exits[run.returncode] += 1
        if not ok:
            failures += 1
            print(f"FAIL {what}: exit {run.returncode}: {run.stderr.strip()[:300]}")
print(f"fuzz: {count} mutants: {exits[2]} refused (exit 2), {exits[0]} valid, {failures} failed")
# The mutants must exercise the checks: most are refused, some still valid (a dropped optional key).
if exits[2] < count // 2 or exits[0] == 0:
    print("FAIL: the mutants do not exercise both outcomes")
    failures += 1
sys.exit(1 if failures else 0)
