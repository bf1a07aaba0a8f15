#!/usr/bin/env python3
"""Golden studies, like SimGrid's tesh files but structured: each tests/golden/<name>.json names
a tpusim command (paths relative to the repository) and the result fields it must reproduce,
each with its value and a relative tolerance. Field paths are dotted (numbers index arrays).
The figures the README quotes are pinned here, so a change of mechanism that moves them fails
until the README and the golden value are updated together (UPDATE=1 rewrites the values).

Usage: golden.py TPUSIM ROOT"""
import json, os, subprocess, sys, glob

tpusim, root = sys.argv[1], sys.argv[2]
update = os.environ.get("UPDATE") == "1"
failed = passed = 0
for path in sorted(glob.glob(os.path.join(root, "tests", "golden", "*.json"))):
    case = json.load(open(path))
    args = [a.replace("{root}", root) for a in case["command"]]
    run = subprocess.run([tpusim] + args, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {os.path.basename(path)}: exit {run.returncode}: {run.stderr.strip()[:300]}")
        failed += 1
        continue
    result = json.loads(run.stdout)
    bad = []
    for field, want in case["fields"].items():
        node = result
        for key in field.split("."):
            node = node[int(key)] if isinstance(node, list) else node[key]
        if update:
            want["value"] = node
            continue
        if isinstance(want["value"], (bool, str)) or want["value"] is None:
            ok = node == want["value"]
        else:
            ok = abs(node - want["value"]) <= want["relative_tolerance"] * abs(want["value"])
        if not ok:
            bad.append(f"{field}: {node} (expected {want['value']} within {want.get('relative_tolerance', 0)})")
    if update:
        open(path, "w").write(json.dumps(case, indent=2) + "\n")
    if bad:
        print(f"FAIL {os.path.basename(path)}: " + "; ".join(bad))
        failed += 1
    else:
        passed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
