#!/usr/bin/env bash
# The engine's reductions are exact: the same study simulated in full (--no-symmetry: every
# core, every ring) gives the same step time, memory and per-core figures (1e-9 relative), for
# every kind of family they reduce: data-parallel replicas (representative rings, one core per
# cluster), pipeline replicas (their stage transfers; their stages' gradient all-reduces share
# links and overlap in time: congruent ring clusters), 1F1B replicas with tensor-parallel stages,
# the spatial groups of a mesh (halo exchanges), on tori and on lines; and result.json says how
# the step was simulated.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0
same() {  # label, expected text in engine.simulation, run arguments...
  local label="$1" how="$2"; shift 2
  "$tpusim" run "$@" --json > "$work/a.json"
  "$tpusim" run "$@" --json --no-symmetry > "$work/b.json"
  python3 - "$work/a.json" "$work/b.json" "$how" "$label" <<'PY'
import json, sys
a, b, how, label = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
assert how in a["engine"]["simulation"], (label, a["engine"])
assert b["engine"]["simulation"].startswith("every core"), (label, b["engine"])
assert a["engine"]["flows_simulated"] < b["engine"]["flows_simulated"], (label, a["engine"], b["engine"])
close = lambda x, y: abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-30)
for key in ("step_time_s", "peak_hbm_bytes"):
    assert close(a[key], b[key]), (label, key, a[key], b[key])
for key in ("communication_s", "exposed_communication_s"):
    assert close(a["breakdown"][key], b["breakdown"][key]), (label, key)
for ca, cb in zip(a["cores"], b["cores"]):
    for key in ("busy_s", "peak_hbm_bytes", "peak_at_s"):
        assert close(ca[key], cb[key]), (label, ca["core"], key, ca[key], cb[key])
    assert ca["peak_task"] == cb["peak_task"], (label, ca["core"], ca["peak_task"], cb["peak_task"])
PY
  passed=$((passed + 1))
}
study="$root/configs/studies/default.json"
for slice in v3-32 v3-128 v3-64; do
  batch=$(( $(echo "$slice" | cut -d- -f2) * 2 ))
  same "data parallel $slice" "congruent clusters of 1 cores; collectives: representative rings" \
    "$study" --set slice=$slice --set batch=$batch --set model.layers=4
done
same "GPipe replicas, torus" "one of 16 congruent clusters of 2 cores" "$study" --set slice=v3-32 --set batch=128 \
  --set model.layers=4 --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"replicas":16}'
same "GPipe replicas, lines" "one of 32 congruent clusters of 2 cores" "$study" --set slice=v3-64 \
  --set batch=128 --set model.layers=4 \
  --set 'schedule={"kind":"gpipe","stages":2,"microbatches":2,"replicas":32}'
same "GPipe replicas sharding their weight update" "one of 16 congruent clusters of 2 cores" "$study" \
  --set slice=v3-32 --set batch=128 --set model.layers=4 \
  --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"replicas":16,"weight_update":"sharded"}'
same "1F1B replicas with tensor-parallel stages (their partial sums)" "one of 16 congruent clusters of 2 cores" \
  "$study" --set slice=v3-32 --set batch=64 --set model.layers=4 \
  --set 'schedule={"kind":"one_f_one_b","stages":1,"microbatches":4,"replicas":16,"tensor_parallel":2}'
# A ring step whose flows have their links to themselves plays one flow per route shape (the
# 2.7B Transformer's line rings on v3-512: 4,148 flows instead of 32,776).
same "lone flows of line rings" "congruent clusters of 1 cores; collectives: representative rings" \
  "$root/configs/studies/transformer-2.7b-v3-512.json" --set model.layers=4
# A ring whose links no other ring of its phase crosses, or whose phase's rings are one ring moved
# along the torus with the flows carried onto themselves (the model pairs of a model x batch mesh
# on v4-128, sharing their links), plays one step and waits out the rest (2.7B: 340 flows).
mesh_study='{"schema":"tpusim.study/1","hardware":"tpu-v4","slice":"v4-128","batch":256,"optimizer":{"kind":"adam"},"model":{"kind":"transformer","layers":2,"d_model":1024,"d_ff":4096,"heads":16,"vocab":1000,"seq_len":256,"activation":"gelu"},"schedule":{"kind":"mesh","layout":{"batch":"batch","d_ff":"model","heads":"model","vocab":"model"}}}'
echo "$mesh_study" > "$work/mesh.json"
for mesh in '[["model",2],["batch",32]]' '[["batch",16],["model",4]]'; do
  same "translated rings in lockstep, mesh $mesh" "collectives: representative rings" "$work/mesh.json" \
    --set "schedule.mesh=$mesh"
done
same "spatial groups (halo exchanges)" "one of 32 congruent clusters of 4 cores" "$root/configs/studies/resnet50-spatial-v3-32.json" \
  --set slice=v3-128 --set batch=64 --set 'schedule.mesh=[["batch",32],["spatial",4]]'
# Where a proof fails the step is simulated in full, and the result says why: K = 4 stages over
# two chips, whose stage-to-stage transfers cross links a stage's gradient all-reduce uses and may
# run beside it.
"$tpusim" run "$study" --set slice=v3-64 --set batch=128 --set model.layers=4 \
  --set 'schedule={"kind":"gpipe","stages":4,"microbatches":2,"replicas":8}' --json |
  python3 -c 'import json,sys; e=json.load(sys.stdin)["engine"]; assert e["simulation"].startswith("every core (clusters: none: a collective"), e; assert "transfers it may run beside" in e["simulation"], e'
passed=$((passed + 1))
echo "$passed passed, 0 failed"
