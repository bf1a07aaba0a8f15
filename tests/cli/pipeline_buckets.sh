#!/usr/bin/env bash
# A pipeline's reductions across its replicas are combined as XLA's all-reduce combiner does
# (core.allreduce_combine_threshold_bytes), in backward order (schedules/gradient_buckets). Its
# unit is still a whole layer where data parallelism (a mesh) combines per weight tensor, as XLA
# does: with one combined reduction (a threshold above the model's gradients) a one-stage,
# one-micro-batch pipeline over R replicas is data parallelism's step, the same collectives and,
# replicated or sharded, the same step time (to 2e-5: the pipeline's update also pays an op's
# overhead, 1 us, for a layer without weights, and pads each bucket to R pieces where data
# parallelism pads each weight); with the hardware's threshold they differ by the unit alone
# (within 3 % here). In functional mode a pipeline whose stages reduce in several
# buckets computes one core's gradients.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/transformer-big-adam-v3-512.json"
one='{"base": "tpu-v3", "override": {"core.allreduce_combine_threshold_bytes": 1e12}}'
one_stage='{"kind":"gpipe","stages":1,"microbatches":1,"replicas":32,"remat":false'
for hw in one default; do
  base=(--set slice=v3-32 --set batch=256)
  [ "$hw" = one ] && base+=(--set "hardware=$one")
  for update in replicated sharded; do
    "$tpusim" run "$study" "${base[@]}" --set "schedule={\"kind\":\"data_parallel\",\"weight_update\":\"$update\"}" \
      --json > "$work/dp-$update-$hw.json"
    "$tpusim" run "$study" "${base[@]}" --set "schedule=$one_stage,\"weight_update\":\"$update\"}" \
      --json > "$work/pipe-$update-$hw.json"
  done
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
for update in ("replicated", "sharded"):
    dp, pipe = (json.load(open(f"{w}/{k}-{update}-one.json")) for k in ("dp", "pipe"))
    assert len(dp["schedule"]["details"]["gradient_buckets"]) == 1, dp["schedule"]["details"]["gradient_buckets"]
    assert pipe["engine"]["collective_algorithms"] == dp["engine"]["collective_algorithms"], (
        update, pipe["engine"]["collective_algorithms"], dp["engine"]["collective_algorithms"])
    a, b = dp["step_time_s"], pipe["step_time_s"]
    assert abs(a - b) <= 2e-5 * a, (update, a, b)
    pa, pb = (r["breakdown"]["exposed_communication_by_phase_s"] for r in (dp, pipe))
    assert pa.keys() == pb.keys() and all(abs(pa[k] - pb[k]) <= 2e-5 * a for k in pa), (pa, pb)
    dp, pipe = (json.load(open(f"{w}/{k}-{update}-default.json")) for k in ("dp", "pipe"))
    buckets = len(dp["schedule"]["details"]["gradient_buckets"])
    assert buckets > 3, buckets  # the 211M-parameter model's gradients span several 32 MiB buckets
    a, b = dp["step_time_s"], pipe["step_time_s"]
    assert abs(a - b) <= 0.03 * a, (update, a, b)
PY
# Functional mode: two stages of two layers over two replicas; with a 1 KiB threshold each
# layer's gradients are reduced on their own (twice the collectives of one bucket per stage).
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
    assert count(split) == 2 * count(one), (update, one["engine"], split["engine"])
    for r in (one, split):
        f = r["functional"]
        assert f["gradient_max_rel_diff"] <= 1e-5 and f["max_rel_diff"] <= 1e-3 and f["replicas_identical"], (update, f)
PY
echo "pipeline gradient buckets: passed"
