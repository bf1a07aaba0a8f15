#!/usr/bin/env bash
# The representative-ring reduction of collectives is exact: the same study simulated with
# every ring (--no-symmetry) gives the same step time and memory, on tori and on lines.
set -euo pipefail
tpusim="$1"; root="$2"
passed=0
for slice in v3-32 v3-128 v3-64; do
  batch=$(( $(echo "$slice" | cut -d- -f2) * 2 ))
  a=$("$tpusim" run "$root/configs/studies/default.json" --set slice=$slice --set batch=$batch --set model.layers=4 --json)
  b=$("$tpusim" run "$root/configs/studies/default.json" --set slice=$slice --set batch=$batch --set model.layers=4 --json --no-symmetry)
  python3 - "$a" "$b" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["engine"]["symmetric_collectives"] and not b["engine"]["symmetric_collectives"]
assert a["engine"]["flows_simulated"] < b["engine"]["flows_simulated"]
for key in ("step_time_s", "peak_hbm_bytes"):
    assert abs(a[key] - b[key]) <= 1e-9 * abs(b[key]), (key, a[key], b[key])
assert abs(a["breakdown"]["communication_s"] - b["breakdown"]["communication_s"]) <= 1e-9 * b["breakdown"]["communication_s"]
PY
  passed=$((passed + 1))
done
echo "$passed passed, 0 failed"
