#!/usr/bin/env bash
# Prediction intervals end to end: `run --intervals` brackets its point estimate, moves each ranged
# assumption to both ends (a range that does not vary moves nothing), prints the interval in the
# summary; a value the study sets is no longer an assumption; `fit --intervals` brackets the
# largest fitting value and moves the study's own micro-batch assumption.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/gpipe-transformer-v3-k8.json"
"$tpusim" run "$study" --set model.layers=16 --intervals -j 2 --json > "$work/run.json" 2> /dev/null
"$tpusim" run "$study" --set model.layers=16 --json > "$work/plain.json" 2> /dev/null
python3 - "$work/run.json" "$work/plain.json" <<'PY'
import json, sys
j, plain = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
iv = j.pop("intervals")
assert j == plain, "the point estimate is what run gives without --intervals"
j["activation_bytes_total"] = sum(c["hbm_at_peak"].get("activations", 0) + c["hbm_at_peak"].get("workspace", 0) for c in j["cores"])
for q in ("step_time_s", "examples_per_s", "mxu_utilization", "peak_hbm_bytes", "activation_bytes_total"):
    lo, hi = iv[q]
    assert lo <= j[q] <= hi, (q, lo, j[q], hi)
lo, hi = iv["step_time_s"]
assert lo < j["step_time_s"] < hi, iv["step_time_s"]
names = {a["name"]: a for a in iv["assumptions"]}
assert "schedule.microbatches" in names and names["schedule.microbatches"]["kind"] == "study", names.keys()
assert "core.hbm_sustained_bandwidth_fraction" in names
fixed = names["core.fuse_elementwise"]  # a range that does not vary: no run, no shift
assert fixed["range"] == [True, True] and fixed["at_low"] is None and fixed["at_high"] is None, fixed
hbm = names["core.hbm_sustained_bandwidth_fraction"]
assert hbm["at_low"]["step_time_s"] > j["step_time_s"] > hbm["at_high"]["step_time_s"], hbm  # slower HBM, longer step
m = names["schedule.microbatches"]
assert m["at_low"]["activation_bytes_total"] > j["activation_bytes_total"] > m["at_high"]["activation_bytes_total"], m
# The interval combines each assumption's log-ratios to the point in quadrature.
import math
for q in ("step_time_s", "peak_hbm_bytes"):
    down = up = 0.0
    for a in iv["assumptions"]:
        r = [a[e][q] / j[q] for e in ("at_low", "at_high") if isinstance(a[e], dict) and q in a[e]]
        down += math.log(min([1.0] + r)) ** 2
        up += math.log(max([1.0] + r)) ** 2
    low, high = j[q] * math.exp(-math.sqrt(down)), j[q] * math.exp(math.sqrt(up))
    assert abs(iv[q][0] - low) <= 1e-9 * abs(j[q]) and abs(iv[q][1] - high) <= 1e-9 * abs(j[q]), q
    assert iv[q][0] > 0, q
# The model's own validated error on its family (language models) widens the step's interval.
m = iv["with_model_error"]
assert m["family"] == "language models" and len(m["cases"]) >= 3, m
e = m["error_bound"]
assert abs(m["step_time_s"][0] - iv["step_time_s"][0] / (1 + e)) <= 1e-12 * iv["step_time_s"][0], m
assert abs(m["step_time_s"][1] - iv["step_time_s"][1] / (1 - e)) <= 1e-12 * iv["step_time_s"][1], m
n, k = m["of_cases"], m["rank"]
assert k == min(n, math.ceil(0.8 * (n + 1))) and abs(m["coverage"] - k / (n + 1)) < 1e-12, m
PY
# The summary shows it; a value the user sets is a choice, not an assumption.
"$tpusim" run "$study" --set model.layers=16 --set schedule.microbatches=4 --intervals -j 2 > "$work/run.txt" 2> /dev/null
grep -qE "step time +[0-9.]+ m?s \([0-9.]+–[0-9.]+\)" "$work/run.txt" || { echo "FAIL: no interval in the summary"; cat "$work/run.txt"; exit 1; }
grep -q "intervals .* over the ranges of 21 assumptions, one at a time, combined in quadrature" "$work/run.txt" || { echo "FAIL: the set M still counted"; cat "$work/run.txt"; exit 1; }
grep -q "^  with model error  .* with the model's validated error on language models ([0-9]* cases" "$work/run.txt" ||
  { echo "FAIL: no interval with the model's error"; cat "$work/run.txt"; exit 1; }
# With --out the report carries the intervals too.
"$tpusim" run "$study" --set model.layers=16 --intervals -j 2 --out "$work/out" > /dev/null 2>&1
grep -qE "^\| step time interval \| [0-9.]+ m?s – [0-9.]+ m?s \|" "$work/out/report.md" || { echo "FAIL: no interval in report.md"; exit 1; }
# fit --intervals: the largest L that fits and its spread (M moves the kept activations).
"$tpusim" fit "$root/configs/studies/gpipe-transformer-v3-k1.json" --maximize model.layers --min 1 --max 24 \
  --intervals -j 2 --json > "$work/fit.json" 2> /dev/null
python3 - "$work/fit.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))
lo, hi = f["intervals"]["max_fitting"]
assert lo <= f["max_fitting"] <= hi and lo < hi, (lo, f["max_fitting"], hi)
m = [a for a in f["intervals"]["assumptions"] if a["name"] == "schedule.microbatches"][0]
assert m["at_low"]["max_fitting"] < f["max_fitting"] < m["at_high"]["max_fitting"], m
PY
echo "intervals: ok"
