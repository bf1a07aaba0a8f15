#!/usr/bin/env bash
# sweep --plan and fit --plan. sweep --plan re-plans each point: a point's result is what `tpusim plan` answers for that point
# (its best plan's run), the plan's label in results.csv, results.jsonl and the report; a point no
# plan can run is that point's error and the others stay; the --plan options alone are exit 2.
# fit --plan searches the largest value some plan runs in HBM: at least the study's own schedule's
# answer, and the plan it names for it fits when run.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/tests/cli/round4/tiny_v3_8.json"
cat > "$work/space.json" <<EOF2
{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel", "mesh"], "remat": [false], "meshes_3d": false}
EOF2
set +e
"$tpusim" sweep "$study" --grid batch=8,64,3 --plan --plan-space "$work/space.json" --out "$work/s" -j 2 \
  > "$work/out" 2> "$work/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: sweep --plan with a failing point exited $rc, expected 1"; cat "$work/err"; exit 1; }
grep -q "3 points (1 failed)" "$work/out" || { echo "FAIL: summary"; cat "$work/out"; exit 1; }
head -1 "$work/s/results.csv" | grep -q ",fits,plan,error$" || { echo "FAIL: no plan column"; head -1 "$work/s/results.csv"; exit 1; }
for batch in 8 64; do
  "$tpusim" plan "$study" --json -j 1 --space "$work/space.json" --set batch=$batch > "$work/plan$batch.json" 2> /dev/null
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
records = {r["point"]["batch"]: r for r in map(json.loads, open(f"{work}/s/results.jsonl"))}
for batch in (8, 64):
    plan = json.load(open(f"{work}/plan{batch}.json"))
    result = dict(records[batch]["result"])
    assert result.pop("plan") == plan["best"]["plan"], (batch, records[batch]["result"]["plan"])
    assert result.pop("plan_complete") is True
    assert result == plan["best"]["result"], batch
    assert records[batch]["error"] is None
assert records[3]["result"] is None and "batch" in records[3]["error"], records[3]
csv = open(f"{work}/s/results.csv").read().splitlines()
labels = [json.load(open(f"{work}/plan{b}.json"))["best"]["plan"] for b in (8, 64)]
assert all(any(label in line for line in csv) for label in labels), csv
report = open(f"{work}/s/report.md").read()
assert all(label in report for label in labels), "the report names each point's plan"
PY
# The --plan options alone, and a plan space that cannot be read, are bad input.
for args in "--plan-time-limit 5" "--plan-space $work/space.json" "--plan --plan-space $work/none.json" \
            "--plan --plan-time-limit -1"; do
  set +e; "$tpusim" sweep "$study" --grid batch=8 --out "$work/bad" $args > /dev/null 2> "$work/err"; rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: sweep $args exited $rc, expected 2"; cat "$work/err"; exit 1; }
done
# fit --plan: data parallelism that may accumulate gradients (and not re-materialize) fits a larger
# batch than the study's own one-micro-batch step.
fixed=(--set slice=v3-8 --set model.layers=4 --set compiler_remat=false --maximize batch --min 256 --step 256)
cat > "$work/dp.json" <<EOF2
{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "remat": [false], "weight_update": ["replicated"],
 "gradient_dtype": ["fp32"], "attention": ["standard"]}
EOF2
default="$root/configs/studies/default.json"
"$tpusim" fit "$default" "${fixed[@]}" --json > "$work/fit.json" 2> /dev/null
"$tpusim" fit "$default" "${fixed[@]}" --json --plan --plan-space "$work/dp.json" -j 2 > "$work/fitplan.json" 2> /dev/null
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
own, planned = (json.load(open(f"{work}/{n}.json")) for n in ("fit", "fitplan"))
assert planned["max_fitting"] > own["max_fitting"], (planned["max_fitting"], own["max_fitting"])
assert "accum" in planned["result"]["plan"] and planned["result"]["fits"], planned["result"]["plan"]
assert all("plan" in p for p in planned["probes"] if "error" not in p)
open(f"{work}/label", "w").write(planned["result"]["plan"])
open(f"{work}/batch", "w").write(str(int(planned["max_fitting"])))
PY
"$tpusim" run "$default" --set slice=v3-8 --set model.layers=4 --set compiler_remat=false \
  --set batch="$(cat "$work/batch")" --plan-label "$(cat "$work/label")" --require-fit > /dev/null
set +e; "$tpusim" fit "$default" "${fixed[@]}" --plan --intervals > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q -- "--intervals" "$work/err" || { echo "FAIL: fit --plan --intervals gave $rc"; exit 1; }
echo "sweep --plan, fit --plan: ok"
