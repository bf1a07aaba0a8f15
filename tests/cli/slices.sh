#!/usr/bin/env bash
# Training across slices (issue 43): "slices": N joins N identical slices over the data-center
# network, data parallelism across them. One slice is exactly the study without the key; two
# slices keep each core's state and compute (a gradient held longer for its slower reduction
# aside), double the examples per second less the exposed DCN phase, and report that phase
# apart (result, summary, report, trace); every schedule kind
# (data parallel, a mesh, a pipeline) reduces across them; a sweep over slices shows the scaling;
# bad slice counts and DCN figures are exit 2 naming the path.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/llama-7b-gqa-v4-128.json"
small=(--set slice=v4-32 --set model.layers=2)
"$tpusim" run "$study" "${small[@]}" --set batch=64 --json > "$work/none.json"
"$tpusim" run "$study" "${small[@]}" --set batch=64 --set slices=1 --json > "$work/one.json"
"$tpusim" run "$study" "${small[@]}" --set batch=128 --set slices=2 --out "$work/two" --trace > "$work/two.txt"
"$tpusim" run "$study" "${small[@]}" --set batch=128 --set slices=2 --json \
  --set 'hardware={"base":"tpu-v4","override":{"dcn.reductions_overlap_backward":true}}' > "$work/overlapped.json"
for kind in mesh gpipe; do
  case $kind in
    mesh) sch='{"kind":"mesh","mesh":{"batch":8,"model":2},"layout":{"batch":"batch","d_ff":"model","heads":"model"}}' ;;
    gpipe) sch='{"kind":"gpipe","stages":16,"microbatches":4}' ;;
  esac
  for n in 1 2; do
    "$tpusim" run "$study" "${small[@]}" --set model.layers=16 --set "schedule=$sch" --set slices=$n \
      --set batch=$((64 * n)) --json > "$work/$kind$n.json"
  done
done
python3 - "$work" "$root" <<'PY'
import json, sys
w = sys.argv[1]
none, one = (json.load(open(f"{w}/{x}.json")) for x in ("none", "one"))
none.pop("study"); one.pop("study")
assert none == one, "slices 1 is the study without the key"
two = json.load(open(f"{w}/two/result.json"))
s = two["slices"]
assert s["count"] == 2 and s["batch_per_slice"] == 64 and two["batch"] == 128, s
# Memory per core: the same state, but a gradient waiting for its slower reduction across the
# slices is held longer, so the peak may only grow, and only by gradients.
p1, p2 = (d["cores"][d["peak_hbm_core"]]["hbm_at_peak"] for d in (one, two))
assert two["peak_hbm_bytes"] >= one["peak_hbm_bytes"], (two["peak_hbm_bytes"], one["peak_hbm_bytes"])
assert {k: v for k, v in p1.items() if k != "gradients"} == {k: v for k, v in p2.items() if k != "gradients"}, (p1, p2)
assert two["breakdown"]["compute_s"] == one["breakdown"]["compute_s"]
# v4's stack continues the reductions across slices after the backward (dcn.reductions_overlap_backward
# false): each layer's reduce-scatter inside the slice, then its pieces across the slices alone,
# one all-reduce at a time; the updates are all that can hide them. Overlapped, each layer's
# reduce-scatter continues across the slices behind the backward.
overlapped = json.load(open(f"{w}/overlapped.json"))
assert two["engine"]["collective_algorithms"].get("dcn_rings", 0) > 0, two["engine"]
assert "parallel_rings+dcn_rings" not in two["engine"]["collective_algorithms"], two["engine"]
assert overlapped["engine"]["collective_algorithms"].get("parallel_rings+dcn_rings", 0) > 0, overlapped["engine"]
update = two["breakdown"]["compute_s"]["update"]
assert s["exposed_dcn_s"] >= s["dcn_s"] - update - 1e-12, (s, update)
assert overlapped["slices"]["exposed_dcn_s"] < s["exposed_dcn_s"], (overlapped["slices"], s)
assert overlapped["step_time_s"] < two["step_time_s"], (overlapped["step_time_s"], two["step_time_s"])
assert abs(overlapped["slices"]["dcn_s"] / s["dcn_s"] - 1) < 0.05, (overlapped["slices"], s)
assert s["dcn_s"] > 0 and 0 <= s["exposed_dcn_s"] <= s["dcn_s"] + 1e-12, s
assert abs(two["step_time_s"] - one["step_time_s"] - s["exposed_dcn_s"]) <= 0.05 * two["step_time_s"], (two["step_time_s"], one["step_time_s"], s)
assert abs(two["model_flops_per_step"] - 2 * one["model_flops_per_step"]) <= 1e-9 * two["model_flops_per_step"]
assert abs(two["examples_per_s"] / one["examples_per_s"] - 2 * one["step_time_s"] / two["step_time_s"]) < 1e-9
assert abs(two["mxu_utilization"] - one["mxu_utilization"] * one["step_time_s"] / two["step_time_s"]) < 1e-9
assert two["breakdown"]["communication_by_phase_s"]["across_slices_dcn"] == s["dcn_s"]
# The oracle: each layer's reduce-scatter continues as a ring over the 2 slices, 2 (S - 1) steps
# of its piece / S, the 4 chips of a host sharing its card: alpha-beta within 5 %.
hw = json.load(open(f"{sys.argv[2]}/configs/hardware/tpu-v4.json"))["dcn"]
B, a = hw["nic_bandwidth_bytes_per_s_per_host_per_direction"]["value"], hw["latency_s"]["value"]
S, cores, k = 2, two["slice"]["cores"], 4
oracle = sum(2 * (S - 1) * (a + k * (b["gradient_bytes_on_wire"] / cores) / (S * B))
             for b in two["schedule"]["details"]["gradient_buckets"])
assert abs(s["dcn_s"] / oracle - 1) < 0.05, (s["dcn_s"], oracle)
trace = json.load(open(f"{w}/two/trace.json"))["traceEvents"]
assert any(e.get("cat") == "dcn_flow" for e in trace), "the trace has DCN tracks"
assert any(e.get("args", {}).get("name") == "data-center network" for e in trace)
for kind in ("mesh", "gpipe"):
    a, b = (json.load(open(f"{w}/{kind}{n}.json")) for n in (1, 2))
    assert "slices" not in a and b["slices"]["dcn_s"] > 0, (kind, b.get("slices"))
    assert b["step_time_s"] > a["step_time_s"] and b["peak_hbm_bytes"] == a["peak_hbm_bytes"], kind
    assert any("dcn_rings" in k for k in b["engine"]["collective_algorithms"]), b["engine"]
PY
grep -q "slices            2 over the data-center network, 64 examples each; .* of reductions on it" "$work/two.txt"
grep -q "slices (data parallelism over the data-center network)" "$work/two/report.md"
# A sweep over the slice count, the batch growing with it.
"$tpusim" sweep "$study" "${small[@]}" --zip slices=1,2,4 --zip batch=64,128,256 -j 2 --out "$work/sweep" 2> /dev/null
python3 - "$work/sweep/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3 and all(r.get("error") is None for r in rows), [r.get("error") for r in rows]
steps = [r["result"]["step_time_s"] for r in rows]
rates = [r["result"]["examples_per_s"] for r in rows]
assert steps[0] < steps[1] < steps[2] and rates[0] < rates[1] < rates[2], (steps, rates)
PY
expect_bad() {  # what-to-find set...
  local want="$1"; shift
  set +e; "$tpusim" run "$study" "${small[@]}" --set "$@" > /dev/null 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: exit $rc for $*"; cat "$work/err"; exit 1; }
  grep -qF -- "$want" "$work/err" || { echo "FAIL: '$want' not in the message"; cat "$work/err"; exit 1; }
}
expect_bad "slices: found 0" slices=0
expect_bad "slices: found -2" slices=-2
expect_bad "slices: found 1.5" slices=1.5
expect_bad 'slices: found "two"' slices=two
expect_bad "batch: found 64, expected a multiple of the 3 slices" slices=3 --set batch=64
expect_bad "describes no data-center network" slices=2 --set batch=128 --set hardware=tpu-v3 --set slice=v3-32 --set megacore=false
expect_bad "dcn.latency_s.value: found 0" slices=2 --set batch=128 --set 'hardware={"base": "tpu-v4", "override": {"dcn.latency_s": 0}}'
expect_bad "dcn.nic_bandwidth_bytes_per_s_per_host_per_direction.value: found -1" slices=2 --set batch=128 \
  --set 'hardware={"base": "tpu-v4", "override": {"dcn.nic_bandwidth_bytes_per_s_per_host_per_direction": -1}}'
# One data-parallel replica per slice, or a mesh that splits no batch inside the slice: every
# weight's gradient reduced across slices alone.
"$tpusim" run "$study" "${small[@]}" --set slices=2 --set batch=128 \
  --set 'schedule={"kind":"data_parallel","replicas":1}' --json |
  python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["engine"]["collective_algorithms"].get("dcn_rings", 0) > 0, j["engine"]'
"$tpusim" run "$study" "${small[@]}" --set slices=2 --set batch=128 \
  --set 'schedule={"kind":"mesh","mesh":{"model":16},"layout":{"d_ff":"model","vocab":"model"}}' --json |
  python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["engine"]["collective_algorithms"].get("dcn_rings", 0) > 0, j["engine"]'
# A mesh may name the data-center network's dimension: the same step, its size the slice count.
mesh='{"kind":"mesh","mesh":[["batch",8],["model",2]],"layout":{"batch":"batch","d_ff":"model","heads":"model"}}'
named='{"kind":"mesh","mesh":[["dcn",2],["batch",8],["model",2]],"layout":{"batch":"batch","d_ff":"model","heads":"model"}}'
"$tpusim" run "$study" "${small[@]}" --set slices=2 --set batch=128 --set "schedule=$mesh" --json > "$work/m.json"
"$tpusim" run "$study" "${small[@]}" --set slices=2 --set batch=128 --set "schedule=$named" --json > "$work/n.json"
python3 - "$work" <<'PY'
import json, sys
m, n = (json.load(open(f"{sys.argv[1]}/{x}.json")) for x in ("m", "n"))
assert n["study"]["schedule"]["mesh"][0] == ["dcn", 2], n["study"]["schedule"]
m.pop("study"); n.pop("study")
assert m == n, "naming the dcn dimension changes nothing but the echo"
PY
expect_bad "schedule.mesh.dcn: found 2, expected the study's slices (4)" slices=4 --set batch=256 --set "schedule=$named"
expect_bad 'schedule.layout.batch: found "dcn"' slices=2 --set batch=128 \
  --set 'schedule={"kind":"mesh","mesh":[["dcn",2],["batch",8],["model",2]],"layout":{"batch":"dcn"}}'
# Experts split over the batch's mesh dimension: no reduction over the replicas covers their
# gradients, so each core's are all-reduced across the slices alone (one per expert layer).
moe=(--set 'model.moe={"experts":16,"every":2}' --set model.layers=4
     --set 'schedule={"kind":"mesh","mesh":{"batch":16},"layout":{"batch":"batch","experts":"batch"}}')
"$tpusim" run "$study" "${small[@]}" "${moe[@]}" --set batch=64 --json > "$work/e1.json"
"$tpusim" run "$study" "${small[@]}" "${moe[@]}" --set slices=2 --set batch=128 --json > "$work/e2.json"
python3 - "$work" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/{x}.json")) for x in ("e1", "e2"))
assert b["engine"]["collective_algorithms"].get("dcn_rings") == 2, b["engine"]["collective_algorithms"]
assert "dcn_rings" not in json.dumps(a["engine"]), a["engine"]
assert b["peak_hbm_bytes"] == a["peak_hbm_bytes"] and b["step_time_s"] > a["step_time_s"]
PY
expect_bad "1 in functional mode" slices=2 --set batch=128 --functional
echo "slices: ok"
