#!/usr/bin/env bash
# Mesh layouts end to end: a batch-only layout gives the data-parallel step time (within 2%)
# and memory (and a data dimension of one core changes nothing); whenever the engine simulates sub-group collectives on representative clusters
# the result equals the full simulation (and it does so for at least one of these layouts).
set -euo pipefail
tpusim="$1"; root="$2"
study="$root/configs/studies/mesh-lm-s0-v2-32.json"
field() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(j[sys.argv[1]])' "$1"; }
dp=$("$tpusim" run "$study" --set 'schedule={"kind":"data_parallel"}' --json)
mesh=$("$tpusim" run "$study" --set 'schedule={"kind":"mesh","mesh":{"batch":32},"layout":{"batch":"batch"}}' --json)
python3 - "$dp" "$mesh" <<'PY'
import json, sys
dp, mesh = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert abs(mesh["step_time_s"] - dp["step_time_s"]) <= 0.02 * dp["step_time_s"], (mesh["step_time_s"], dp["step_time_s"])
assert abs(mesh["peak_hbm_bytes"] - dp["peak_hbm_bytes"]) <= 0.02 * dp["peak_hbm_bytes"], (mesh["peak_hbm_bytes"], dp["peak_hbm_bytes"])
PY
# A data x fsdp mesh whose data dimension has one core is the fsdp mesh alone, to the byte.
one=$("$tpusim" run "$study" --set 'schedule={"kind":"mesh","mesh":[["data",1],["batch",32]],"layout":{"batch":"batch"},"data_parallel_dim":"data","weight_update":"fully_sharded"}' --json)
none=$("$tpusim" run "$study" --set 'schedule={"kind":"mesh","mesh":[["batch",32]],"layout":{"batch":"batch"},"weight_update":"fully_sharded"}' --json)
python3 - "$one" "$none" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ("step_time_s", "peak_hbm_bytes", "breakdown", "cores", "timing"):
    assert a[k] == b[k], (k, a[k], b[k])
PY
n=1
claimed=0
for sched in '{"kind":"mesh","mesh":[["batch",8],["model",4]],"layout":{"batch":"batch","d_ff":"model","heads":"model","vocab":"model"}}' \
             '{"kind":"mesh","mesh":[["model",4],["batch",8]],"layout":{"batch":"batch","d_ff":"model","heads":"model"}}' \
             '{"kind":"mesh","mesh":[["batch",4],["model",8]],"layout":{"batch":"batch","d_ff":"model","heads":"model","vocab":"model"}}' \
             '{"kind":"mesh","mesh":[["batch",8],["model",4]],"layout":{"batch":"batch","d_ff":"model","heads":"model"},"weight_update":"sharded"}' \
             '{"kind":"mesh","mesh":[["batch",16],["model",2]],"layout":{"batch":"batch","seq":"model"},"weight_update":"sharded"}' \
             '{"kind":"mesh","mesh":[["data",2],["batch",16]],"layout":{"batch":"batch"},"data_parallel_dim":"data","weight_update":"fully_sharded"}' \
             '{"kind":"mesh","mesh":[["data",4],["batch",4],["model",2]],"layout":{"batch":"batch","d_ff":"model","heads":"model"},"data_parallel_dim":"data","weight_update":"sharded"}'; do
  a=$("$tpusim" run "$study" --set "schedule=$sched" --json)
  b=$("$tpusim" run "$study" --set "schedule=$sched" --json --no-symmetry)
  c=$(python3 - "$a" "$b" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert not b["engine"]["symmetric_collectives"]
assert abs(a["step_time_s"] - b["step_time_s"]) <= 1e-9 * b["step_time_s"], (a["step_time_s"], b["step_time_s"])
assert a["peak_hbm_bytes"] == b["peak_hbm_bytes"]
print(1 if a["engine"]["symmetric_collectives"] else 0)
PY
)
  claimed=$((claimed + c))
  n=$((n + 1))
done
[ "$claimed" -ge 1 ] || { echo "FAIL: no layout used the representative-group simulation"; exit 1; }
# The sequence on the model axis: the weight-gradient reductions (over every core) share the
# chips' on-chip links with the sequence's all-gathers, but wait for the whole backward, so the
# representative simulation still holds (the last layout above: checked equal); when they
# overlap the backward it does not, and the engine simulates every ring.
seq='{"kind":"mesh","mesh":[["batch",16],["model",2]],"layout":{"batch":"batch","seq":"model"},"weight_update":"sharded"}'
overlap='hardware={"base":"tpu-v2","override":{"core.gradient_collectives_overlap_backward":true}}'
python3 - "$c" "$("$tpusim" run "$study" --set "schedule=$seq" --set "$overlap" --json)" <<'PY'
import json, sys
assert sys.argv[1] == "1", "the sequence layout was not simulated on representative rings"
assert not json.loads(sys.argv[2])["engine"]["symmetric_collectives"]
PY
# Explicit placement: model groups on chips two apart along x (batch takes the fast half of x)
# pay in hops and contention against model groups on neighbouring chips.
placed() {
  "$tpusim" run "$study" --json --set "schedule={\"kind\":\"mesh\",\"mesh\":$1,\"layout\":{\"batch\":\"batch\",\"d_ff\":\"model\",\"heads\":\"model\"},\"placement\":{\"batch\":[[\"x\",2],\"y\"],\"model\":[\"core\",[\"x\",2]]}}" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["breakdown"]["communication_by_phase_s"]["activation_allreduce"])'
}
near=$(placed '[["model",4],["batch",8]]')
far=$(placed '[["batch",8],["model",4]]')
python3 -c 'import sys; near, far = map(float, sys.argv[1:]); assert far > 1.05 * near, (near, far)' "$near" "$far"
n=$((n + 1))
# Weight-update sharding under a mesh: optimizer slots per core shrink by the batch group (8).
slots() {
  "$tpusim" run "$study" --set optimizer.kind=adam --json \
    --set "schedule={\"kind\":\"mesh\",\"mesh\":[[\"batch\",8],[\"model\",4]],\"layout\":{\"batch\":\"batch\",\"d_ff\":\"model\",\"heads\":\"model\"},\"weight_update\":\"$1\"}" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["cores"][0]["hbm_at_peak"]["optimizer"])'
}
python3 -c 'import sys; r, s = map(float, sys.argv[1:]); assert abs(s - r / 8) <= 0.01 * r / 8, (r, s)' "$(slots replicated)" "$(slots sharded)"
n=$((n + 1))
# Functional mode through the command line: a 2 x 2 layout of an mlp on four cores trains like
# one core (with either weight update), and the run is deterministic.
mlp='{"kind":"mlp","layers":2,"width":32,"input":16,"classes":8}'
functional() {
  "$tpusim" run "$root/configs/studies/default.json" --set 'slice={"chips":[2,1],"wraparound":[false,false]}' --set batch=16 \
    --set "model=$mlp" --set 'schedule={"kind":"mesh","mesh":{"rows":2,"cols":2},"layout":{"batch":"rows","d_ff":"cols","vocab":"cols"},"weight_update":"sharded"}' \
    --functional --json | python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["max_rel_diff"] <= 1e-5, f; print(f["weights_fingerprint"])'
}
first=$(functional)
second=$(functional)
[ "$first" = "$second" ] || { echo "FAIL: functional mesh run not deterministic"; exit 1; }
n=$((n + 1))
# A model whose re-materialized inputs alone overflow a Megatron mesh (a 48-layer, 8192-wide
# parallel block on v4-128): plan says no plan fits and that split inputs were not searched; a
# space asking for them finds one, keeping each layer's input split over the model axis.
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cat > "$work/wide.json" <<'EOF2'
{"schema": "tpusim.study/1", "hardware": "tpu-v4", "slice": "v4-128",
 "model": {"kind": "transformer", "layers": 48, "d_model": 8192, "d_ff": 32768, "heads": 64, "vocab": 32768,
           "seq_len": 2048, "activation": "swiglu", "block": "parallel", "biases": false, "kv_heads": 1},
 "batch": 256, "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}}
EOF2
space='"schema": "tpusim.plan_space/1", "kinds": ["mesh"], "model_axis": [8], "remat": [true], "weight_update": ["fully_sharded"], "meshes_3d": false, "model_axis_dims": [["d_ff", "heads", "vocab"]], "attention": ["standard"]'
echo "{$space}" > "$work/whole.json"
echo "{$space, \"layer_input_split\": [false, true]}" > "$work/split.json"
set +e; "$tpusim" plan "$work/wide.json" --space "$work/whole.json" -j 2 > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q 'not searched: meshes keeping each layer.s input split' "$work/err" ||
  { echo "FAIL: plan without split inputs gave exit $rc"; cat "$work/err"; exit 1; }
"$tpusim" plan "$work/wide.json" --space "$work/split.json" -j 2 --json 2> /dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
assert p["best"] and p["best"]["plan"].endswith("remat split-inputs"), p["best"]
r = p["best"]["result"]
assert r["fits"] and r["breakdown"]["communication_by_phase_s"]["layer_input_allgather"] > 0, r["fits"]'
n=$((n + 1))
echo "$n passed, 0 failed"
