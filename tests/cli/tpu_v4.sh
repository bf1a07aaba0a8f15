#!/usr/bin/env bash
# A machine the model was not calibrated on, end to end: every command works on TPU-v4's 3D
# slices (run, megacore both ways, functional mode, sweep, fit, plan, validate with its
# sensitivity, describe), the representative-ring reduction stays exact in 3D, the v4 studies
# ship and run, and bad 3D input is exit 2 with its JSON path.
set -euo pipefail
tpusim=$(realpath "$1"); root=$(realpath "$2")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0
field() { python3 -c 'import json,sys; j=json.load(sys.stdin)
for k in sys.argv[1].split("."): j = j[int(k)] if isinstance(j, list) else j[k]
print(j)' "$1"; }

# 1. describe: the slice as the issue states it.
"$tpusim" describe slice v4-128 --json > "$work/slice.json"
python3 - "$work/slice.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["chips"] == [4, 4, 4] and j["wraparound"] == [True, True, True], j
assert j["ici_links_directed"] == 384 and j["diameter_hops"] == 6 and j["cores"] == 128, j
PY
"$tpusim" describe hardware tpu-v4 > "$work/hw.txt"; grep -q "megacore *yes" "$work/hw.txt" || { echo "FAIL: describe hardware shows no megacore"; exit 1; }
passed=$((passed + 1))

# 2. The shipped v4 studies run; megacore makes a device of a chip; the result names the
# collective algorithm and the 3D slice.
for s in resnet50-lars-v4-128 bert-large-lamb-v4-512 resnet50-lars-v4-8192 whatif-v3-pod-as-3d; do
  "$tpusim" run "$root/configs/studies/$s.json" --json > "$work/$s.json"
done
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/resnet50-lars-v4-128.json"))
assert r["slice"]["chips"] == [4, 4, 4] and r["slice"]["cores"] == 64 and r["slice"]["megacore"], r["slice"]
# The gradients' all-reduce on every dimension's rings at once; LARS's per-layer norms (a few
# bytes, under chip.latency_collective_max_bytes) by recursive doubling.
assert set(r["engine"]["collective_algorithms"]) == {"parallel_rings", "recursive_doubling"}, r["engine"]
assert r["engine"]["symmetric_collectives"] and r["fits"]
b = json.load(open(d + "/bert-large-lamb-v4-512.json"))
assert b["slice"]["cores"] == 512 and "megacore" not in b["slice"], b["slice"]
p = json.load(open(d + "/resnet50-lars-v4-8192.json"))
assert p["slice"]["cores"] == 4096 and p["study"]["schedule"]["batch_norm_group"] == 8, p["study"]["schedule"]
w = json.load(open(d + "/whatif-v3-pod-as-3d.json"))
assert w["slice"]["chips"] == [16, 8, 8] and w["slice"]["cores"] == 2048
PY
# The same chips without megacore: twice the devices, each with half the chip's HBM.
"$tpusim" run "$root/configs/studies/resnet50-lars-v4-128.json" --set megacore=false --json > "$work/split.json"
[ "$(field slice.cores < "$work/split.json")" = 128 ] || { echo "FAIL: megacore=false did not split the chips"; exit 1; }
[ "$(field hbm_capacity_bytes < "$work/split.json")" = "$(python3 -c 'print(float(16*2**30 - 530*2**20))')" ] ||
  { echo "FAIL: a TensorCore device's usable HBM"; exit 1; }
passed=$((passed + 1))

# 3. Functional mode on v4, megacore and not: the same gradients as one device.
tf='{"kind":"transformer","activation":"relu","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8}'
for mega in true false; do
  for sched in '{"kind":"data_parallel","weight_update":"sharded"}' '{"kind":"gpipe","stages":2,"microbatches":2,"replicas":2}'; do
    "$tpusim" run "$root/configs/studies/default.json" --set hardware=tpu-v4 --set slice=v4-8 --set megacore=$mega \
      --set batch=16 --set "model=$tf" --set optimizer.kind=momentum --set "schedule=$sched" --functional --json |
      python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["gradient_max_rel_diff"] <= 1e-5, f; assert f["replicas_identical"], f'
  done
done
passed=$((passed + 1))

# 4. Representative rings are exact on 3D slices, with and without wrap-around.
for slice in v4-128 v4-64 v4-256; do
  for mega in true false; do
    args=(--set hardware=tpu-v4 --set slice=$slice --set megacore=$mega --set batch=512 --set model.layers=2)
    a=$("$tpusim" run "$root/configs/studies/default.json" "${args[@]}" --json)
    b=$("$tpusim" run "$root/configs/studies/default.json" "${args[@]}" --json --no-symmetry)
    python3 - "$a" "$b" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert a["engine"]["symmetric_collectives"] and not b["engine"]["symmetric_collectives"]
# Within SimGrid's own timing precision (1e-9 s per event): a ring whose steps repeat plays one
# step and waits out the rest, where the full run resolves each step's events anew.
assert abs(a["step_time_s"] - b["step_time_s"]) <= 1e-9 * abs(b["step_time_s"]) + 1e-9, (a["step_time_s"], b["step_time_s"])
assert abs(a["peak_hbm_bytes"] - b["peak_hbm_bytes"]) <= 1e-9 * abs(b["peak_hbm_bytes"])
PY
  done
done
passed=$((passed + 1))

# 5. sweep, fit and plan on a 3D slice; a mesh placed over the x, y and z axes.
"$tpusim" sweep "$root/configs/studies/resnet50-lars-v4-128.json" --grid megacore=true,false \
  --grid slice=v4-64,v4-128 --out "$work/sweep" -j 2 > /dev/null 2>&1
[ "$(tail -n +2 "$work/sweep/results.csv" | grep -c ',true,$')" -eq 4 ] || { echo "FAIL: v4 sweep"; cat "$work/sweep/results.csv"; exit 1; }
"$tpusim" fit "$root/configs/studies/bert-large-lamb-v4-512.json" --maximize batch --min 512 --max 65536 --json > "$work/fit.json"
[ "$(field max_fitting < "$work/fit.json")" != None ] || { echo "FAIL: fit on v4"; exit 1; }
cat > "$work/lm.json" <<EOF
{"schema": "tpusim.study/1", "hardware": "tpu-v4", "slice": "v4-64", "batch": 64,
 "model": {"kind": "transformer", "activation": "relu", "layers": 8, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 8192, "seq_len": 256},
 "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}}
EOF
"$tpusim" plan "$work/lm.json" -j 2 --json > "$work/plan.json" 2> /dev/null
python3 - "$work/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["best"] is not None and p["best"]["result"]["step_time_s"] > 0, p.get("best")
PY
mesh='{"kind":"mesh","mesh":[["batch",4],["model",8]],"layout":{"batch":"batch","d_ff":"model","heads":"model"},"placement":{"model":["x","y"],"batch":["z"]}}'
"$tpusim" run "$work/lm.json" --set "schedule=$mesh" --json > "$work/mesh.json"
python3 - "$work/mesh.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
spans = {m["mesh_dim"]: m["spans"] for m in r["schedule"]["details"]["placement"]}
assert spans == {"batch": ["z"], "model": ["x", "y"]}, spans
PY
passed=$((passed + 1))

# 6. validate runs a user's own case on v4 (its sensitivity moves v4's assumed figures).
mkdir -p "$work/cases"
cat > "$work/cases/my-v4-resnet.json" <<EOF
{"schema": "tpusim.validation_case/1", "id": "my-v4-resnet", "description": "a made-up v4 figure",
 "study": "$root/configs/studies/resnet50-lars-v4-128.json", "set": [], "quantity": "step_time_s",
 "measured": {"value": 0.09, "unit": "s", "source": "made up for the test"},
 "tolerance": {"relative": 0.5, "source": "made up for the test"}}
EOF
"$tpusim" validate --cases-dir "$work/cases" --sensitivity --json > "$work/validate.json" 2> /dev/null || true
python3 - "$work/validate.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
case = j["cases"][0]
assert case["predicted"] > 0, case
assert all(a["hardware"] == "tpu-v4" for a in j["assumptions"]), j["assumptions"]
moved = case["sensitivity"]
assert "chip.collective_algorithms" in moved and "core.hbm_sustained_bandwidth_fraction" in moved, moved
PY
passed=$((passed + 1))

# 7. Bad 3D input: exit 2 naming the JSON path.
refuse() {  # what, expected text, command...
  local what="$1" text="$2"; shift 2
  set +e; "$@" > /dev/null 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: $what gave exit $rc"; cat "$work/err"; exit 1; }
  grep -q -- "$text" "$work/err" || { echo "FAIL: $what: no '$text' in"; cat "$work/err"; exit 1; }
}
study="$root/configs/studies/resnet50-lars-v4-128.json"
refuse "a zero dimension" "slice.chips\[1\]: found 0" \
  "$tpusim" check "$study" --set 'slice={"chips":[4,0,4],"wraparound":[true,true,true]}'
refuse "a mismatched wrap-around list" "slice.wraparound" \
  "$tpusim" check "$study" --set 'slice={"chips":[4,4,4],"wraparound":[true,true]}'
refuse "a 2D slice on a 3D pod" "3 dimensions, as the tpu-v4 pod's chips" \
  "$tpusim" check "$study" --set 'slice={"chips":[8,8],"wraparound":[true,true]}'
refuse "a 3D slice on a 2D pod" "2 dimensions, as the tpu-v3 pod's chips" \
  "$tpusim" check "$root/configs/studies/default.json" --set 'slice={"chips":[4,4,4],"wraparound":[true,true,true]}'
refuse "megacore on v3" "megacore: found true" \
  "$tpusim" check "$root/configs/studies/default.json" --set megacore=true
refuse "a placement naming axis z on a 2D slice" "schedule.placement.model\[1\]" \
  "$tpusim" check "$root/configs/studies/mesh-lm-s1.json" --set 'schedule.placement={"model":["core",["z",2]],"batch":[["x",2],"y"]}'
refuse "slices that are not whole cubes" "whole blocks" \
  "$tpusim" check "$study" --set 'slice={"chips":[6,6,6],"wraparound":[true,true,true]}'
passed=$((passed + 1))

echo "$passed passed, 0 failed"
