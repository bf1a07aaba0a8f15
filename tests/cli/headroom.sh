#!/usr/bin/env bash
# Headroom: the study's hbm_margin (and fit's and plan's --hbm-margin) leaves HBM free on every
# device in every verdict; run --intervals says whether the step fits at each end of its peak's
# interval; a bad margin is exit 2 naming hbm_margin.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bert=("$root/configs/studies/bert-large-lamb-v4-512.json" --set 'slice="v4-128"' --set compiler_remat=false)
tiny="$root/tests/cli/round4/tiny_v3_8.json"; space="$root/tests/cli/round4/tiny_plan_space.json"

"$tpusim" run "${bert[@]}" --set batch=1536 --json > "$work/plain.json"
"$tpusim" run "${bert[@]}" --set batch=1536 --set 'hbm_margin="25%"' --json > "$work/margin.json"
"$tpusim" run "${bert[@]}" --set batch=1536 --set hbm_margin=2e9 --json > "$work/bytes.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
p, m, b = (json.load(open(f"{w}/{x}.json")) for x in ("plain", "margin", "bytes"))
close = lambda x, y: abs(x - y) <= 1e-9 * abs(y)
assert close(m["hbm_capacity_bytes"], 0.75 * p["hbm_capacity_bytes"]), (m["hbm_capacity_bytes"], p["hbm_capacity_bytes"])
assert close(b["hbm_capacity_bytes"], p["hbm_capacity_bytes"] - 2e9)
assert any("margin" in n and "hbm_margin" in n for n in m["notes"]), m["notes"]
assert p["step_time_s"] == m["step_time_s"] and p["peak_hbm_bytes"] == m["peak_hbm_bytes"]  # only the verdict moves
assert p["fits"] and not m["fits"], "11.6 GiB fits 15.5 GiB, not 11.6"
PY
# fit: the margin lowers the largest batch that fits.
plain=$("$tpusim" fit "${bert[@]}" --maximize batch --min 128 --max 8192 --step 128 --json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_fitting"])')
kept=$("$tpusim" fit "${bert[@]}" --maximize batch --min 128 --max 8192 --step 128 --hbm-margin 4e9 --json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_fitting"])')
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert 128 <= b < a, (a, b)" "$plain" "$kept"
# plan: the best plan leaves the margin free; a margin that leaves no room leaves no plan (exit 1).
"$tpusim" plan "$tiny" --space "$space" -j 2 --hbm-margin "99%" --json 2> /dev/null > "$work/plan.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["best"]["result"]; assert r["peak_hbm_bytes"] <= r["hbm_capacity_bytes"] < 2e8, r["hbm_capacity_bytes"]' "$work/plan.json"
status=0; "$tpusim" plan "$tiny" --space "$space" -j 2 --hbm-margin "99.99%" > /dev/null 2>&1 || status=$?
test "$status" -eq 1
# A bad margin: exit 2 naming the key and what is expected.
for bad in '"120%"' '-1' '"lots"'; do
  status=0; "$tpusim" run "$tiny" --set "hbm_margin=$bad" > /dev/null 2> "$work/err" || status=$?
  test "$status" -eq 2 && grep -q 'hbm_margin: found .*expected bytes of HBM to leave free' "$work/err"
done
status=0; "$tpusim" fit "$tiny" --maximize model.layers --hbm-margin lots > /dev/null 2> "$work/err" || status=$?
test "$status" -eq 2 && grep -q 'hbm_margin: found "lots"' "$work/err"
# run --intervals: the verdict over the peak's interval.
"$tpusim" run "${bert[@]}" --set batch=2048 --intervals -j 2 --json 2> /dev/null > "$work/iv.json"
python3 - "$work/iv.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); iv = j["intervals"]; lo, hi = iv["peak_hbm_bytes"]; cap = j["hbm_capacity_bytes"]
assert iv["fits"] == ("yes" if hi <= cap else "only at the low end" if lo <= cap else "no"), (iv["fits"], lo, hi, cap)
PY
echo "headroom: passed"
