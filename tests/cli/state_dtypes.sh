#!/usr/bin/env bash
# bf16 weights and optimizer state (issue 62, study keys precision.weights, precision.optimizer):
# oracles on a dense MLP trained data-parallel with Adam on a v5e-8. Against fp32 masters, bf16
# weights halve what each chip holds of the weights and, by default, of the optimizer's slots
# (an fp32 optimizer keeps its slots' bytes); the gradient reductions carry two bytes a
# parameter, as fp32 weights with gradient_dtype bf16 do; the update moves fewer bytes, so its
# time falls; the run notes the dtypes; an fp32 gradient_dtype over bf16 weights is refused
# (tests/cli/bad/cases.tsv).
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mlp='{"kind":"mlp","layers":4,"width":8192,"input":8192,"classes":8192}'
run() {  # name precision schedule
  "$tpusim" run "$root/configs/studies/default.json" --set hardware=tpu-v5e --set slice=v5e-8 \
    --set batch=64 --set "model=$mlp" --set 'optimizer={"kind":"adam"}' --set "schedule=$3" \
    --set "precision=$2" --out "$work/$1" > /dev/null
}
dp='{"kind":"data_parallel"}'
run fp32 '{}' "$dp"
run bf16 '{"weights":"bf16"}' "$dp"
run mixed '{"weights":"bf16","optimizer":"fp32"}' "$dp"
run wire '{}' '{"kind":"data_parallel","gradient_dtype":"bf16"}'
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
r = {n: json.load(open(f"{w}/{n}/result.json")) for n in ("fp32", "bf16", "mixed", "wire")}
def held(n, kind):
    core = r[n]["cores"][0]
    return core["hbm_at_peak"].get(kind, 0.0)
params = r["fp32"]["params"]
assert held("fp32", "weights") == 4 * params, (held("fp32", "weights"), params)
assert held("fp32", "optimizer") == 8 * params
for n in ("bf16", "mixed"):
    assert held(n, "weights") == 2 * params, n
assert held("bf16", "optimizer") == 4 * params
assert held("mixed", "optimizer") == 8 * params
def on_wire(n):
    return sum(b["gradient_bytes_on_wire"] for b in r[n]["schedule"]["details"]["gradient_buckets"])
assert on_wire("fp32") == 4 * params and on_wire("bf16") == 2 * params and on_wire("wire") == 2 * params
assert r["bf16"]["study"]["schedule"]["gradient_dtype"] == "bf16"
update = {n: r[n]["breakdown"]["compute_s"]["update"] for n in r}
assert update["bf16"] < update["mixed"] < update["fp32"], update
assert r["bf16"]["peak_hbm_bytes"] < r["mixed"]["peak_hbm_bytes"] < r["fp32"]["peak_hbm_bytes"]
for n in ("bf16", "mixed"):
    assert any("precision.weights" in x for x in r[n]["notes"]), r[n].get("notes")
for n in ("fp32", "wire"):
    assert not any("precision.weights" in x for x in r[n].get("notes", [])), n
print("state dtypes: fp32 / bf16 / mixed / bf16 wire ok")
PY
