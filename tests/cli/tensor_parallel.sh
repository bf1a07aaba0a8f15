#!/usr/bin/env bash
# Pipelines whose stages are split over several cores (`tensor_parallel`): one stage on 8 cores
# with one micro-batch plays exactly the mesh schedule of the same layout (the oracle: the same
# pieces of compute and the same blocking partial-sum all-reduces, one after another); a
# 2-stage x 2-core pipeline runs, reports its groups and halves each core's weights; functional
# mode refuses split stages with the JSON path.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
small=(--set 'slice="v3-8"' --set batch=16 --set model.layers=4 --set model.seq_len=256)
"$tpusim" run "$study" "${small[@]}" --json \
  --set 'schedule={"kind":"gpipe","stages":1,"microbatches":1,"remat":false,"tensor_parallel":8}' > "$work/pipe.json"
"$tpusim" run "$study" "${small[@]}" --json \
  --set 'schedule={"kind":"mesh","mesh":{"model":8},"layout":{"d_ff":"model","heads":"model","vocab":"model"}}' \
  > "$work/mesh.json"
"$tpusim" run "$study" --json --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"replicas":8}' > "$work/k2.json"
"$tpusim" run "$study" --out "$work/k2t2" \
  --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"replicas":8,"tensor_parallel":2}' > /dev/null
python3 - "$work/pipe.json" "$work/mesh.json" "$work/k2.json" "$work/k2t2/result.json" <<'PY'
import json, sys
pipe, mesh, k2, k2t2 = (json.load(open(f)) for f in sys.argv[1:5])
assert abs(pipe["step_time_s"] / mesh["step_time_s"] - 1) < 1e-9, (pipe["step_time_s"], mesh["step_time_s"])
assert abs(pipe["breakdown"]["communication_s"] / mesh["breakdown"]["communication_s"] - 1) < 1e-9
at = lambda r: r["cores"][0]["hbm_at_peak"]
for k in ("activations", "weights", "optimizer"):
    assert abs(at(pipe)[k] / at(mesh)[k] - 1) < 1e-9, (k, at(pipe), at(mesh))
# A pipeline holds its stage's whole gradient accumulator from its first backward on (fp32, like
# the weights); the mesh's backward allocates each layer's as it reaches it.
assert abs(at(pipe)["gradients"] / at(pipe)["weights"] - 1) < 1e-9
assert pipe["bubble_fraction"] < 1e-6, pipe["bubble_fraction"]  # waiting for partial sums is no bubble
d = k2t2["schedule"]["details"]
assert len(d["placement"]) == 8 and all(len(g) == 2 for r in d["placement"] for g in r), d["placement"]
assert all(g[0] // 2 == g[1] // 2 for r in d["placement"] for g in r)  # a group on one chip
assert k2t2["study"]["schedule"]["tensor_parallel"] == 2, k2t2["study"]["schedule"]
w = lambda r: r["cores"][0]["hbm_at_peak"]["weights"]
assert 0.5 < w(k2t2) / w(k2) < 0.51, (w(k2t2), w(k2))  # split weights halved, norms whole
assert k2t2["breakdown"]["communication_by_phase_s"]["tensor_parallel"] > 0
PY
set +e
"$tpusim" run "$study" "${small[@]}" --set model.d_model=128 --set model.d_ff=256 --set model.vocab=512 --functional \
  --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4,"replicas":2,"tensor_parallel":2}' > /dev/null 2> "$work/err"
code=$?
set -e
[ "$code" -eq 2 ] || { cat "$work/err"; exit 1; }
grep -q "schedule.tensor_parallel" "$work/err" || { cat "$work/err"; exit 1; }
echo "tensor-parallel pipelines: ok"
