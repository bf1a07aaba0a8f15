#!/usr/bin/env bash
# A pipeline's reductions across its replicas go through the one step tail (schedules/step_tail,
# schedules/stage_tail): each weight's gradient reduced over the stage's replicas, combined as
# XLA's all-reduce combiner does (core.allreduce_combine_threshold_bytes), in backward order, a
# layer's reductions as one unit ("gradient_combine_unit": "layer", the default) or each weight's
# ("tensor", as data parallelism's, a mesh's). With "tensor" a one-stage, one-micro-batch
# pipeline over R replicas is data parallelism's step: replicated or sharded, with one combined
# reduction or the hardware's threshold, the same collectives, step time and exposed
# communication (to 1e-12); with "layer" the same when everything is one reduction, within 3 %
# otherwise (a layer larger than the threshold one reduction, not several). In functional mode a
# pipeline whose stages reduce in several combined reductions computes one core's gradients, a
# small threshold splitting its reductions as it splits data parallelism's.
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
      --json > "$work/layers-$update-$hw.json"
    "$tpusim" run "$study" "${base[@]}" \
      --set "schedule=$one_stage,\"weight_update\":\"$update\",\"gradient_combine_unit\":\"tensor\"}" \
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
    for hw in ("one", "default"):
        dp, pipe = (json.load(open(f"{w}/{k}-{update}-{hw}.json")) for k in ("dp", "pipe"))
        a, b = dp["step_time_s"], pipe["step_time_s"]
        assert abs(a - b) <= 1e-12 * a, (update, hw, a, b)
        pa, pb = (r["breakdown"]["exposed_communication_by_phase_s"] for r in (dp, pipe))
        assert pa.keys() == pb.keys() and all(abs(pa[k] - pb[k]) <= 1e-12 * a for k in pa), (pa, pb)
        layers = json.load(open(f"{w}/layers-{update}-{hw}.json"))["step_time_s"]
        assert abs(a - layers) <= (1e-12 if hw == "one" else 0.03) * a, (update, hw, a, layers)
    buckets = len(dp["schedule"]["details"]["gradient_buckets"])
    assert buckets > 3, buckets  # the 211M-parameter model's gradients span several 32 MiB buckets
PY
# Functional mode: two stages of two layers over two replicas; with a 1 KiB threshold each
# weight's gradient is reduced on its own, as data parallelism's are.
small='{"kind":"transformer","activation":"relu","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8}'
for update in replicated sharded; do
  for hw in '"tpu-v3"' '{"base": "tpu-v3", "override": {"core.allreduce_combine_threshold_bytes": 1024}}'; do
    "$tpusim" run "$root/configs/studies/default.json" --set slice=v3-8 --set batch=16 --set "model=$small" \
      --set optimizer.kind=adam --set "hardware=$hw" \
      --set "schedule={\"kind\":\"gpipe\",\"stages\":2,\"microbatches\":2,\"replicas\":2,\"weight_update\":\"$update\",\"gradient_combine_unit\":\"tensor\"}" \
      --functional --json > "$work/functional-$update-${#hw}.json"
    "$tpusim" run "$root/configs/studies/default.json" --set slice=v3-8 --set batch=16 --set "model=$small" \
      --set optimizer.kind=adam --set "hardware=$hw" \
      --set "schedule={\"kind\":\"data_parallel\",\"replicas\":2,\"weight_update\":\"$update\"}" \
      --json > "$work/dps-$update-${#hw}.json"
  done
done
python3 - "$work" <<'PY'
import json, glob, sys
for update in ("replicated", "sharded"):
    one, split = (json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/functional-{update}-*.json"), key=len))
    count = lambda r: sum(r["engine"]["collective_algorithms"].values())
    dp_one, dp_split = (json.load(open(f)) for f in sorted(glob.glob(f"{sys.argv[1]}/dps-{update}-*.json"), key=len))
    # The small threshold splits the stages' reductions as it splits data parallelism's.
    assert count(split) - count(one) == count(dp_split) - count(dp_one) > 0, (
        update, one["engine"], split["engine"], dp_one["engine"], dp_split["engine"])
    for r in (one, split):
        f = r["functional"]
        assert f["gradient_max_rel_diff"] <= 1e-5 and f["max_rel_diff"] <= 1e-3 and f["replicas_identical"], (update, f)
PY
echo "pipeline gradient buckets: passed"
