#!/usr/bin/env bash
# Gated feed-forwards (issue 42, first part): model.activation "swiglu" and "geglu" add the gate's
# projection (a third d_model x d_ff matrix), cost more per step, run under data parallelism,
# pipelines with save_dots and mesh layouts, and prove one core's gradients in functional mode;
# a mesh's functional mode says it has no shard math for them yet (exit 2).
set -euo pipefail
tpusim="$1"; root="$2"
study="$root/configs/studies/default.json"
tiny='{"kind":"transformer","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8,"activation":"ACT"}'
params() { "$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set "model=${tiny/ACT/$1}" --json | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["params"], r["model_flops_per_step"])'; }
read -r relu relu_flops <<< "$(params relu)"
read -r swiglu swiglu_flops <<< "$(params swiglu)"
read -r geglu geglu_flops <<< "$(params geglu)"
python3 -c "import sys; r,s,g,rf,sf=map(float,sys.argv[1:]); assert s == g == r + 2 * (32 * 64 + 64), (r, s, g); assert sf > rf" \
  "$relu" "$swiglu" "$geglu" "$relu_flops" "$swiglu_flops"
for schedule in '{"kind":"data_parallel"}' '{"kind":"one_f_one_b","stages":2,"microbatches":4,"replicas":4,"remat":"save_dots"}'; do
  for act in swiglu geglu; do
    "$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set "model=${tiny/ACT/$act}" --set "schedule=$schedule" --functional --json |
      python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["gradient_max_rel_diff"] <= 1e-5, f'
  done
done
mesh='{"kind":"mesh","mesh":[["batch",4],["model",2]],"layout":{"batch":"batch","d_ff":"model","heads":"model"}}'
"$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set "model=${tiny/ACT/swiglu}" --set "schedule=$mesh" --json |
  python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["fits"] and r["step_time_s"] > 0'
status=0
"$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set "model=${tiny/ACT/swiglu}" --set "schedule=$mesh" --functional > /dev/null 2> /tmp/gated_err.$$ || status=$?
test "$status" -eq 2 && grep -q "a gated activation (SwiGLU, GEGLU): no host math on a mesh's shards yet" /tmp/gated_err.$$
rm -f /tmp/gated_err.$$
echo "gated feed-forwards: passed"
