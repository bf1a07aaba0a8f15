#!/usr/bin/env bash
# Robustness round 4, item 8 (issue 39): the 175B Transformer's batch:512 x model:8 mesh on a full
# TPU-v4 pod (4,096 devices, 2.8 M tasks) runs within a 2.5 GB host-memory budget (the estimate,
# 512 bytes per task, is what refuses or admits it; its time and measured peak are bench/'s:
# `make bench`), simulating one device for all of them; under 1 GB it is refused as the graph
# passes the budget.
set -euo pipefail
tpusim="$1"; root="$2"
study="$root/bench/studies/transformer-175b-mesh-v4-8192.json"
"$tpusim" run "$study" --max-host-memory 2.5e9 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
e = r["engine"]
assert r["step_time_s"] > 0 and len(r["cores"]) == 4096, (r["step_time_s"], len(r["cores"]))
assert e["simulation"].startswith("one of 4096 congruent clusters of 1 cores"), e["simulation"]
assert e["tasks_simulated"] < 10000, e["tasks_simulated"]
print("pod mesh:", r["step_time_s"], "s per step,", e["tasks_simulated"], "tasks simulated")'
err=$(mktemp); trap 'rm -f "$err"' EXIT
set +e; "$tpusim" run "$study" --max-host-memory 1e9 > /dev/null 2> "$err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q "still growing" "$err" && grep -q -- "--max-host-memory" "$err" ||
  { echo "FAIL: a 1 GB budget gave exit $rc"; cat "$err"; exit 1; }
echo "pod mesh: ok"
