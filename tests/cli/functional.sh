#!/usr/bin/env bash
# Functional mode end to end: sharded and replicated weight updates reach bit-identical weights
# (so max_rel_diff between them is 0 <= 1e-6) with every optimizer; a functional run is
# deterministic. The comparison with one core is bounded for momentum and SGD only here:
# attention's key bias has an exactly-zero gradient whose fp32 rounding noise Adam and RMSProp
# normalize into full-size steps of random sign (tests/test_functional.cpp covers Adam on the
# mlp, which has no such parameter).
set -euo pipefail
tpusim="$1"; root="$2"
mlp='{"kind":"mlp","layers":3,"width":40,"input":20,"classes":5}'
tf='{"kind":"transformer","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8}'
n=0
fingerprint() {  # bound on max_rel_diff vs one core, then study settings
  local bound="$1"; shift
  "$tpusim" run "$root/configs/studies/default.json" --set slice=v3-8 --set batch=32 --functional --json "$@" |
    python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["max_rel_diff"] <= float(sys.argv[1]), f; print(f["weights_fingerprint"])' "$bound"
}
for model in "$mlp" "$tf"; do
  for opt in adam momentum rmsprop sgd; do
    bound=1e-5
    case "$opt" in adam | rmsprop) bound=inf ;; esac
    a=$(fingerprint $bound --set "model=$model" --set optimizer.kind=$opt --set schedule.weight_update=replicated)
    b=$(fingerprint $bound --set "model=$model" --set optimizer.kind=$opt --set schedule.weight_update=sharded)
    [ "$a" = "$b" ] || { echo "FAIL: $opt sharded $b != replicated $a"; exit 1; }
    n=$((n + 1))
  done
done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for i in 1 2; do
  "$tpusim" run "$root/configs/studies/default.json" --set "model=$tf" --set slice=v3-8 --set batch=32 \
    --set 'schedule={"kind":"gpipe","stages":2,"microbatches":4}' --functional --steps 5 --out "$work/$i" > /dev/null
done
cmp "$work/1/result.json" "$work/2/result.json"
echo "$((n + 1)) passed, 0 failed"
