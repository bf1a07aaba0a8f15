#!/usr/bin/env bash
# What weight-update sharding buys, at both ends: plain SGD on 4 replicas saves almost nothing;
# Adam on the Transformer-big at 2048 replicas saves visibly; the saving grows with the
# replicas and with the optimizer's cost.
set -euo pipefail
tpusim="$1"; root="$2"
transformer='{"kind":"transformer","activation":"relu","encoder_layers":6,"layers":6,"d_model":1024,"d_ff":4096,"heads":16,"vocab":33708,"seq_len":256,"shared_embeddings":true}'
step() {  # study-args... -> step time of replicated and sharded
  local a b
  a=$("$tpusim" run "$root/configs/studies/default.json" "$@" --set schedule.weight_update=replicated --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_time_s"])')
  b=$("$tpusim" run "$root/configs/studies/default.json" "$@" --set schedule.weight_update=sharded --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_time_s"])')
  python3 -c "print(($a - $b) / $a)"  # relative saving
}
sgd4=$(step --set 'model={"kind":"resnet50"}' --set 'slice={"chips":[2,1],"wraparound":[false,false]}' --set batch=256 --set optimizer.kind=sgd)
adam32=$(step --set "model=$transformer" --set slice=v3-32 --set batch=256 --set optimizer.kind=adam --set schedule.gradient_dtype=bf16)
adam2048=$(step --set "model=$transformer" --set slice=v3-2048 --set batch=2048 --set optimizer.kind=adam --set schedule.gradient_dtype=bf16)
sgd2048=$(step --set "model=$transformer" --set slice=v3-2048 --set batch=2048 --set optimizer.kind=sgd --set schedule.gradient_dtype=bf16)
echo "relative saving: sgd x4 $sgd4, adam x32 $adam32, adam x2048 $adam2048, sgd x2048 $sgd2048"
python3 - "$sgd4" "$adam32" "$adam2048" "$sgd2048" <<'PY'
import sys
sgd4, adam32, adam2048, sgd2048 = map(float, sys.argv[1:])
assert abs(sgd4) < 0.02, ("SGD on 4 replicas should save almost nothing", sgd4)
assert adam2048 > 0.10, ("Adam on 2048 replicas should save visibly", adam2048)
assert adam2048 > adam32, "the saving grows with the replicas"
assert adam2048 > sgd2048, "the saving grows with the optimizer's cost"
PY
echo "4 passed, 0 failed"
