#!/usr/bin/env bash
# --approximate-sharing: where collectives sharing links run at once (ResNet-50's gradient
# reduce-scatter overlapping the backward's batch-norm statistics on a v4 torus), no exact
# reduction holds and the step is simulated flow by flow; the approximation simulates the
# representative rings anyway. Here it is measured against the full simulation (step time and
# communication within 1 %), said in result.json (engine.approximate) and changes nothing where
# an exact reduction holds; --intervals' children use it, and the summary names such ends.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/resnet50-lars-v4-8192.json"
python3 - "$root/configs/hardware/tpu-v4.json" "$work/overlap.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
h["core"]["gradient_collectives_overlap_backward"]["value"] = True
json.dump(h, open(sys.argv[2], "w"))
PY
for slice in v4-128 v4-256; do
  set_args=(--set "hardware=\"$work/overlap.json\"" --set "slice=\"$slice\"" --set batch=8192)
  "$tpusim" run "$study" "${set_args[@]}" --json > "$work/full.json"
  "$tpusim" run "$study" "${set_args[@]}" --json --approximate-sharing > "$work/approx.json"
  python3 - "$work/full.json" "$work/approx.json" "$slice" <<'PY'
import json, sys
full, approx, slice_ = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert "approximate" not in full["engine"], full["engine"]
assert "collectives sharing links may run at once" in full["engine"]["simulation"], full["engine"]
assert approx["engine"]["approximate"] is True, approx["engine"]
assert "approximate" in approx["engine"]["simulation"], approx["engine"]
assert approx["engine"]["flows_simulated"] * 5 < full["engine"]["flows_simulated"], (approx["engine"], full["engine"])
near = lambda a, b: abs(a - b) <= 0.01 * abs(b)
assert near(approx["step_time_s"], full["step_time_s"]), (slice_, approx["step_time_s"], full["step_time_s"])
for key in ("communication_s", "exposed_communication_s"):
    assert near(approx["breakdown"][key], full["breakdown"][key]), (slice_, key)
assert approx["peak_hbm_bytes"] == full["peak_hbm_bytes"]
print(slice_, "full", full["step_time_s"], "approximate", approx["step_time_s"])
PY
done
# Where the exact reduction holds the flag changes nothing: the same result, byte for byte.
"$tpusim" run "$study" --set 'slice="v4-128"' --set batch=8192 --json > "$work/a.json"
"$tpusim" run "$study" --set 'slice="v4-128"' --set batch=8192 --json --approximate-sharing > "$work/b.json"
cmp "$work/a.json" "$work/b.json"
# The pod's intervals: the overlapping end is approximate and said to be, in the summary and the JSON.
"$tpusim" run "$study" --set 'slice="v4-1024"' --set batch=8192 --intervals -j 2 > "$work/summary.txt"
grep -q "range ends simulated approximately" "$work/summary.txt"
grep -q "core.gradient_collectives_overlap_backward at high" "$work/summary.txt"
"$tpusim" run "$study" --set 'slice="v4-1024"' --set batch=8192 --intervals -j 2 --json > "$work/iv.json"
python3 - "$work/iv.json" <<'PY'
import json, sys
iv = json.load(open(sys.argv[1]))["intervals"]
assert iv["approximate_ends"] == ["core.gradient_collectives_overlap_backward at high"], iv.get("approximate_ends")
PY
# plan's search runs take the approximation, and confirms its top plans exactly: none of the top
# is approximate, and the best's step is what an exact run of its label gives.
cat > "$work/space.json" <<'JSON'
{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "weight_update": ["sharded"],
 "gradient_dtype": ["fp32"], "accumulation_steps": [1], "remat": [false]}
JSON
overlap=(--set "hardware=\"$work/overlap.json\"" --set 'slice="v4-128"' --set batch=8192)
"$tpusim" plan "$study" "${overlap[@]}" --space "$work/space.json" -j 2 --json > "$work/plan.json" 2> "$work/plan.err"
grep -q "confirming .* without the approximation" "$work/plan.err" || { echo "FAIL: nothing confirmed"; exit 1; }
label=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$work/plan.json")
"$tpusim" run "$study" "${overlap[@]}" --plan-label "$label" --json > "$work/exact.json"
python3 - "$work/plan.json" "$work/exact.json" <<'PY'
import json, sys
plan, exact = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for c in [plan["best"]] + plan["top"]:
    assert "approximate" not in c, c["plan"]
assert "approximate" not in plan["best"]["result"]["engine"], plan["best"]["result"]["engine"]
assert plan["best"]["result"]["step_time_s"] == exact["step_time_s"], (plan["best"]["result"]["step_time_s"], exact["step_time_s"])
PY
echo "approximate sharing: ok"
