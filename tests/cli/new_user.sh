#!/usr/bin/env bash
# The rough edges a new user hit planning a 2.7B-parameter model (issue 31), one check each:
# the shipped plan spaces run and a wrong schedule kind lists the valid ones; a study that does
# not fit names its worst overflow and its first, and marks its step time hypothetical; the
# memory-aware cut of a tensor-parallel pipeline counts each core's share of the weights; a
# hardware what-if that moves a cost-balanced cut says so, and one on a figure the schedule
# never reads says that; describe hardware shows the dotted keys overrides use, and its JSON
# every figure; an error caused by a default says it is one; a vocabulary a tensor-parallel
# split does not divide is padded, and the padding reported.
set -euo pipefail
tpusim=$(realpath "$1"); root=$(realpath "$2")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0
study="$root/configs/studies/transformer-2.7b-v3-512.json"
small=(--set slice=v3-32 --set batch=64 --set model.layers=8 --set model.seq_len=512)
big=(--set slice=v3-32 --set batch=64 --set model.layers=16 --set model.seq_len=512)
tp='schedule={"kind":"one_f_one_b","stages":2,"microbatches":4,"replicas":4,"tensor_parallel":4}'

# 1. The plan spaces shipped, each on a small study; a wrong kind lists the registered ones.
for space in "$root"/configs/plan-spaces/*.json; do
  "$tpusim" plan "$root/configs/studies/default.json" --set model.layers=4 --space "$space" -j 2 --json \
    > "$work/plan.json" 2> /dev/null || { echo "FAIL: plan with $space"; exit 1; }
done
echo '{"schema": "tpusim.plan_space/1", "kinds": ["pipeline"]}' > "$work/bad.json"
set +e; "$tpusim" plan "$study" --space "$work/bad.json" > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q 'kinds\[0\]: found "pipeline", expected "data_parallel", "gpipe", "mesh" or "one_f_one_b"' "$work/err" ||
  { echo "FAIL: a wrong kind"; cat "$work/err"; exit 1; }
passed=$((passed + 1))

# 2. Not fitting: the worst overflow and the first, the step time hypothetical (summary, JSON).
"$tpusim" run "$study" "${big[@]}" > "$work/run.txt" 2> /dev/null
"$tpusim" run "$study" "${big[@]}" --json > "$work/run.json" 2> /dev/null
grep -q "step time .*(hypothetical: the step does not fit in HBM" "$work/run.txt" || { echo "FAIL: not marked hypothetical"; cat "$work/run.txt"; exit 1; }
grep -q "fits              NO: worst core [0-9]* over by .*; first core" "$work/run.txt" || { echo "FAIL: no worst overflow"; cat "$work/run.txt"; exit 1; }
python3 - "$work/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["timing"].startswith("hypothetical"), r["timing"]
worst, first = r["worst_overflow"], r["overflow"]
assert worst["bytes_over"] >= first["bytes_over"] > 0, (worst, first)
assert abs(worst["bytes_over"] - (r["peak_hbm_bytes"] - r["hbm_capacity_bytes"])) < 1e-6 * worst["bytes_over"], r["peak_hbm_bytes"]
PY
passed=$((passed + 1))

# 3. A tensor-parallel pipeline that fits is cut by cost, not reported as fitting no partition.
"$tpusim" run "$study" "${small[@]}" --set "$tp" --json > "$work/tp.json" 2> /dev/null
python3 - "$work/tp.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["fits"], r["peak_hbm_bytes"]
assert r["schedule"]["details"]["partition_set_by"] == "cost", r["schedule"]["details"]["partition_set_by"]
PY
passed=$((passed + 1))

# 4. A what-if that moves the cut, and a figure the schedule never reads, are noted.
hw='hardware={"base":"tpu-v3","override":{"core.hbm_bandwidth_bytes_per_s_per_core":900e9,"core.gradient_collectives_overlap_backward":true}}'
"$tpusim" run "$study" --set 'schedule={"kind":"one_f_one_b","stages":2,"microbatches":8,"replicas":64,"tensor_parallel":4,"remat":false}' \
  --set "$hw" --json > "$work/whatif.json" 2> /dev/null
python3 - "$work/whatif.json" <<'PY'
import json, sys
notes = json.load(open(sys.argv[1]))["notes"]
assert any(n.startswith("core.gradient_collectives_overlap_backward cannot affect this one_f_one_b schedule") for n in notes), notes
assert any(n.startswith("the hardware what-if moved the cost-balanced cut from 17|17") for n in notes), notes
PY
passed=$((passed + 1))

# 5. describe hardware: the dotted keys overrides use, every figure in its JSON.
"$tpusim" describe hardware tpu-v3 > "$work/hw.txt"
grep -q "HBM sustained .* core.hbm_sustained_bandwidth_fraction  assumption" "$work/hw.txt" || { echo "FAIL: no dotted key"; exit 1; }
"$tpusim" describe hardware tpu-v3 --json | python3 -c '
import json, sys
f = json.load(sys.stdin)["figures"]
assert f["core.hbm_sustained_bandwidth_fraction"]["value"] == 0.9, f["core.hbm_sustained_bandwidth_fraction"]
assert f["chip.collective_algorithms"]["source"].startswith("assumption")'
passed=$((passed + 1))

# 6. An error caused by a default says it is one; an indivisible vocabulary is padded.
set +e; "$tpusim" check "$study" --set model.heads=20 --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"tensor_parallel":8}' \
  > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q 'tensor_layout was not given and defaults to \["d_ff","heads","vocab"\]' "$work/err" ||
  { echo "FAIL: a default's error"; cat "$work/err"; exit 1; }
python3 - "$work/tp.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schedule"]["details"]["padded"]["vocab"] == {"size": 50257, "padded_to": 50260, "cores": 4}, r["schedule"]["details"].get("padded")
assert any(n.startswith("vocab padded from 50257 to 50260") for n in r["notes"]), r["notes"]
PY
passed=$((passed + 1))
echo "$passed passed, 0 failed"
