#!/usr/bin/env bash
# A pipeline's reductions across its replicas are combined as XLA's all-reduce combiner does
# (core.allreduce_combine_threshold_bytes, per weight tensor in backward order), as data
# parallelism's gradient buckets and a mesh's combined reductions are (schedules/gradient_buckets):
# one rule in one place. A one-stage, one-micro-batch pipeline over R replicas is then data
# parallelism's step: the same collectives and, replicated or sharded, the same step time (to
# 1e-9; a layer's update once its reductions end, overlapping the next ones, in both). In
# functional mode a pipeline whose stages reduce in several combined reductions, a layer's
# weights split between two of them, computes one core's gradients.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/transformer-big-adam-v3-512.json"
base=(--set slice=v3-32 --set batch=256)
one_stage='{"kind":"gpipe","stages":1,"microbatches":1,"replicas":32,"remat":false'
for update in replicated sharded; do
  "$tpusim" run "$study" "${base[@]}" --set "schedule={\"kind\":\"data_parallel\",\"weight_update\":\"$update\"}" \
    --json > "$work/dp-$update.json"
  "$tpusim" run "$study" "${base[@]}" --set "schedule=$one_stage,\"weight_update\":\"$update\"}" \
    --json > "$work/pipe-$update.json"
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
for update in ("replicated", "sharded"):
    dp, pipe = (json.load(open(f"{w}/{k}-{update}.json")) for k in ("dp", "pipe"))
    buckets = len(dp["schedule"]["details"]["gradient_buckets"])
    assert buckets > 3, buckets  # the 211M-parameter model's gradients span several 32 MiB buckets
    assert pipe["engine"]["collective_algorithms"] == dp["engine"]["collective_algorithms"], (
        update, pipe["engine"]["collective_algorithms"], dp["engine"]["collective_algorithms"])
    a, b = dp["step_time_s"], pipe["step_time_s"]
    assert abs(a - b) <= 1e-9 * a, (update, a, b)
    pa, pb = (r["breakdown"]["exposed_communication_by_phase_s"] for r in (dp, pipe))
    assert pa.keys() == pb.keys() and all(abs(pa[k] - pb[k]) <= 1e-9 * a for k in pa), (pa, pb)
PY
# Functional mode: two stages of two layers over two replicas; with a 1 KiB threshold each
# weight's gradients (4 KiB and more, but the norms' scales) are reduced on their own.
small='{"kind":"transformer","activation":"relu","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8}'
for update in replicated sharded; do
  for hw in '"tpu-v3"' '{"base": "tpu-v3", "override": {"core.allreduce_combine_threshold_bytes": 1024}}'; do
    "$tpusim" run "$root/configs/studies/default.json" --set slice=v3-8 --set batch=16 --set "model=$small" \
      --set optimizer.kind=adam --set "hardware=$hw" \
      --set "schedule={\"kind\":\"gpipe\",\"stages\":2,\"microbatches\":2,\"replicas\":2,\"weight_update\":\"$update\"}" \
      --functional --json > "$work/functional-$update-${#hw}.json"
  done
done
python3 - "$work" <<'PY'
import json, glob, sys
for update in ("replicated", "sharded"):
    one, split = (json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/functional-{update}-*.json"), key=len))
    count = lambda r: sum(r["engine"]["collective_algorithms"].values())
    assert count(split) > 4 * count(one), (update, one["engine"], split["engine"])
    for r in (one, split):
        f = r["functional"]
        assert f["gradient_max_rel_diff"] <= 1e-5 and f["max_rel_diff"] <= 1e-3 and f["replicas_identical"], (update, f)
PY
echo "pipeline gradient buckets: passed"
