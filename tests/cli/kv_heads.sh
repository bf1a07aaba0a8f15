#!/usr/bin/env bash
# Grouped-query and multi-query attention (issue 42): model.kv_heads K/V heads, each shared by
# heads / kv_heads query heads: smaller K/V projections and tensors, fewer parameters and less HBM;
# the default is exactly today's model; one core's gradients in functional mode (data parallelism,
# pipelines, a mesh splitting the query heads of a group with K/V replicated, and one splitting the
# groups); kv_heads not dividing heads is exit 2 naming it.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
tiny='{"kind":"transformer","activation":"relu","layers":2,"d_model":32,"d_ff":64,"heads":4,"vocab":16,"seq_len":8KV}'
model() { echo "${tiny/KV/$1}"; }
run() { "$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set "model=$1" "${@:2}" --json; }
run "$(model '')" > "$work/mha.json"
run "$(model ',"kv_heads":4')" > "$work/same.json"
run "$(model ',"kv_heads":2')" > "$work/gqa.json"
run "$(model ',"kv_heads":1')" > "$work/mqa.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
mha, same, gqa, mqa = (json.load(open(f"{w}/{x}.json")) for x in ("mha", "same", "gqa", "mqa"))
mha.pop("study"); same.pop("study")
assert mha == same, "kv_heads = heads is today's model"
per_layer = lambda g: 2 * 32 * (g * 8) + 2 * g * 8  # k and v projections and biases, d_kv 8
assert mha["params"] - gqa["params"] == 2 * (per_layer(4) - per_layer(2)), (mha["params"], gqa["params"])
assert mha["params"] - mqa["params"] == 2 * (per_layer(4) - per_layer(1))
assert mqa["peak_hbm_bytes"] < gqa["peak_hbm_bytes"] < mha["peak_hbm_bytes"]
PY
functional() { run "$(model ',"kv_heads":2')" --set "schedule=$1" --functional |
  python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["gradient_max_rel_diff"] <= 1e-5, f'; }
functional '{"kind":"data_parallel"}'
functional '{"kind":"one_f_one_b","stages":2,"microbatches":4,"replicas":4}'
functional '{"kind":"mesh","mesh":[["batch",4],["model",2]],"layout":{"batch":"batch","heads":"model","d_ff":"model"}}'
functional '{"kind":"mesh","mesh":[["batch",4],["model",2]],"layout":{"batch":"batch","kv_heads":"model","d_ff":"model"}}'
status=0
run "$(model ',"kv_heads":3')" > /dev/null 2> "$work/err" || status=$?
test "$status" -eq 2 && grep -q "model.kv_heads: found 3, expected a divisor of heads (4)" "$work/err"
echo "kv_heads: passed"
