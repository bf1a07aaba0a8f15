#!/usr/bin/env bash
# Mixture of experts end to end: bad input is exit 2 naming its path; expert parallelism (a mesh
# splitting "experts" over the batch's mesh dimension) exchanges tokens by all-to-all where data
# parallelism holds every expert and exchanges nothing; plan's expert meshes round-trip through
# their labels; functional mode refuses the routing.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cat > "$work/moe.json" <<'JSON'
{"schema": "tpusim.study/1", "hardware": "tpu-v3", "slice": "v3-32",
 "model": {"kind": "transformer", "activation": "gelu", "layers": 4, "d_model": 512, "d_ff": 2048,
           "heads": 8, "vocab": 8000, "seq_len": 256,
           "moe": {"experts": 32, "every": 2, "top_k": 2, "capacity_factor": 1.25, "d_ff": 2048}},
 "batch": 64, "optimizer": {"kind": "adam"},
 "schedule": {"kind": "mesh", "mesh": [["batch", 32]], "layout": {"batch": "batch", "experts": "batch"}}}
JSON
bad() {  # expected text, arguments...
  local want="$1"; shift
  set +e
  "$tpusim" "$@" > /dev/null 2> "$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -qF -- "$want" "$work/err" || { echo "FAIL ($rc): $* (want: $want)"; cat "$work/err"; exit 1; }
}
bad "model.moe.top_k: found 2, expected at most experts (1)" check "$work/moe.json" --set 'model.moe={"experts": 1, "top_k": 2}'
bad "model.moe.capacity_factor: found 0" check "$work/moe.json" --set 'model.moe={"experts": 32, "capacity_factor": 0}'
bad "model.moe.top_k: found 33, expected at most experts (32)" check "$work/moe.json" --set 'model.moe={"experts": 32, "top_k": 33}'
bad "schedule.layout.experts: found \"batch\", expected a mesh dimension dividing experts (48)" check "$work/moe.json" --set 'model.moe={"experts": 48}'
bad "schedule.layout.experts: found \"model\", expected the mesh dimension that splits batch" check "$work/moe.json" \
  --set 'schedule={"kind": "mesh", "mesh": [["batch", 16], ["model", 2]], "layout": {"batch": "batch", "experts": "model"}}'
bad "model.moe.bogus: found an unknown key" check "$work/moe.json" --set 'model.moe={"experts": 32, "bogus": 1}'
bad "model.moe: found an unknown key" check "$root/configs/studies/resnet50-lars-v3-32.json" --set 'model.moe={"experts": 4}'
bad "schedule.layout.experts: found \"batch\", expected no \"experts\" in the layout of a model without experts" \
  check "$root/configs/studies/default.json" --set 'schedule={"kind": "mesh", "mesh": [["batch", 32]], "layout": {"batch": "batch", "experts": "batch"}}'
bad "model.moe: found mixture-of-experts layers" run "$work/moe.json" --functional --set 'schedule={"kind": "data_parallel"}'
bad "model.moe: found" check "$work/moe.json" --set model.encoder_layers=2
bad "model.moe.every: found 5, expected at most layers (4)" check "$work/moe.json" --set 'model.moe={"experts": 32, "every": 5}'

# Expert parallelism against data parallelism on the same model.
"$tpusim" run "$work/moe.json" --json > "$work/ep.json"
"$tpusim" run "$work/moe.json" --json --set 'schedule={"kind": "data_parallel"}' > "$work/dp.json"
python3 - "$work/ep.json" "$work/dp.json" <<'PY'
import json, sys
ep, dp = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert ep["breakdown"]["communication_by_phase_s"]["expert_all_to_all"] > 0, ep["breakdown"]
assert "expert_all_to_all" not in dp["breakdown"]["communication_by_phase_s"], dp["breakdown"]
assert ep["engine"]["collective_algorithms"]["all_to_all_by_dimension"] == 8, ep["engine"]
# Every expert on every core under data parallelism: far more weights per core.
w = lambda r: r["cores"][r["peak_hbm_core"]]["hbm_at_peak"]["weights"]
assert w(dp) > 4 * w(ep), (w(dp), w(ep))
print("moe: expert parallelism", ep["step_time_s"], "data parallelism", dp["step_time_s"])
PY
# plan's expert meshes: the best plan's label runs as the same schedule.
"$tpusim" plan "$work/moe.json" -j 2 --time-limit 60 --json > "$work/plan.json" 2> /dev/null
label=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$work/plan.json")
case "$label" in *experts*) ;; *) echo "FAIL: best plan without experts: $label"; exit 1;; esac
"$tpusim" run "$work/moe.json" --plan-label "$label" --json > "$work/again.json"
python3 - "$work/plan.json" "$work/again.json" <<'PY'
import json, sys
plan, again = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
best = plan["best"]["result"]["step_time_s"]
assert abs(best - again["step_time_s"]) <= 1e-12 * best, (best, again["step_time_s"])
PY
# Useful MFU: the experts' products counted for their routed tokens. With a capacity factor of 2
# (every expert's slots twice its 32 x 256 x 2 / 32 routed tokens) the useful FLOPs are exactly
# the model's at a capacity factor of 1, and the capacity-counted MFU is above them.
for cf in 1 2; do
  "$tpusim" run "$work/moe.json" --set model.moe.capacity_factor=$cf --json > "$work/cf$cf.json"
done
"$tpusim" run "$root/configs/studies/default.json" --json > "$work/dense.json"
python3 - "$work/cf1.json" "$work/cf2.json" "$work/dense.json" <<'PY'
import json, sys
one, two, dense = (json.load(open(f)) for f in sys.argv[1:])
useful = two["useful_mxu_utilization"] / two["mxu_utilization"] * two["model_flops_per_step"]
assert abs(useful - one["model_flops_per_step"]) <= 1e-9 * useful, (useful, one["model_flops_per_step"])
assert two["useful_mxu_utilization"] < two["mxu_utilization"]
assert one["useful_mxu_utilization"] == one["mxu_utilization"]
assert "useful_mxu_utilization" not in dense
PY
echo "moe: ok"
