#!/usr/bin/env bash
# The compiler's own re-materialization (workflows/compiler_remat.hpp): a step over HBM by less
# than its recomputable activations fits once re-materialized and is slower by the recompute;
# "compiler_remat": false asks the naive question; a step whose resident state alone is over HBM,
# or that no policy brings under it, says so; --out and a study given as JSON agree with --json.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bert=("$root/configs/studies/bert-large-lamb-v4-512.json" --set 'slice="v4-128"' --set batch=3072)

"$tpusim" run "${bert[@]}" --json > "$work/compiler.json"
"$tpusim" run "${bert[@]}" --json --set compiler_remat=false > "$work/naive.json"
"$tpusim" run "${bert[@]}" --json --set compiler_remat=false --set 'schedule.remat="save_dots"' > "$work/dots.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
c, n, d = (json.load(open(f"{w}/{x}.json")) for x in ("compiler", "naive", "dots"))
close = lambda x, y: abs(x - y) <= 1e-9 * max(abs(x), abs(y))
assert not n["fits"] and "compiler_remat" not in n, n.get("compiler_remat")
assert d["fits"], "save_dots on every layer fits"
r = c["compiler_remat"]
assert c["fits"] and r["fits"] and r["policy"] == "save_dots" and r["naive_policy"] is False, r
# The share of layers: the overflow over what save_dots saves on every layer.
over = n["peak_hbm_bytes"] - n["hbm_capacity_bytes"]
saved = n["peak_hbm_bytes"] - d["peak_hbm_bytes"]
assert close(r["share_of_layers_needed"], over / saved) and 0 < r["share_of_layers_needed"] < 1, r
assert close(r["every_layer"]["bytes_saved"], saved) and close(r["every_layer"]["step_time_s"], d["step_time_s"])
# Slower by that share of the recompute, never more than every layer's.
added = r["share_of_layers_needed"] * (d["step_time_s"] - n["step_time_s"])
assert close(c["step_time_s"], n["step_time_s"] + added) and close(r["seconds_added"], added), (c["step_time_s"], added)
assert n["step_time_s"] < c["step_time_s"] < d["step_time_s"]
assert close(c["examples_per_s"], c["batch"] / c["step_time_s"])
assert close(c["peak_hbm_bytes"], d["peak_hbm_bytes"]) and c["breakdown"] == d["breakdown"]
PY
# The summary says so.
"$tpusim" run "${bert[@]}" | grep -q "compiler remat    fits once re-materialized (remat \"save_dots\" on 52 % of the layers"
# --out: the result as --json gives it, the report with the line, the charts of the run that fits.
"$tpusim" run "${bert[@]}" --out "$work/out" > /dev/null
cmp <(python3 -m json.tool --sort-keys "$work/out/result.json") <(python3 -m json.tool --sort-keys "$work/compiler.json")
grep -q "the compiler's re-materialization | fits once re-materialized" "$work/out/report.md"
grep -q "<svg" "$work/out/timeline.svg"
# Already fully re-materialized and still over: said, with fits false (--require-fit: exit 1).
status=0
"$tpusim" run "${bert[@]}" --set batch=30720 --set 'schedule.remat=true' --json --require-fit > "$work/full.json" 2> /dev/null ||
  status=$?
test "$status" -eq 1
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j["compiler_remat"]; assert not j["fits"] and not r["fits"] and r["tried"] == [], r' "$work/full.json"
# The resident state alone over HBM: no recompute helps, nothing tried.
"$tpusim" run "${bert[@]}" --set 'slice="v4-8"' --set batch=8 --set model.layers=400 --json > "$work/resident.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert not j["fits"] and "compiler_remat" not in j' "$work/resident.json"
# The compiler recomputes no whole layer on v3 (core.compiler_remat_recomputes_layers false): the
# GPipe Transformer-L posed as data parallelism, 32 sequences per core, fits 4 layers with
# save_dots and no more; at 6 it says no, save_dots tried. A stack that recomputes whole layers
# (the figure overridden) fits 6 with remat true on part of them.
gpipe=("$root/configs/studies/gpipe-transformer-v3-k1.json" --set 'schedule={"kind": "data_parallel", "remat": false}'
  --set batch=256 --set model.layers=6)
"$tpusim" run "${gpipe[@]}" --json > "$work/v3.json"
"$tpusim" run "${gpipe[@]}" --json \
  --set 'hardware={"base": "tpu-v3", "override": {"core.compiler_remat_recomputes_layers": true}}' > "$work/layers.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
v3, layers = (json.load(open(f"{w}/{x}.json")) for x in ("v3", "layers"))
r = v3["compiler_remat"]
assert not v3["fits"] and not r["fits"] and r["tried"] == ["save_dots"], r
assert "recomputes_layers false" in r["method"], r["method"]
r = layers["compiler_remat"]
assert layers["fits"] and r["fits"] and r["policy"] is True and 0 < r["share_of_layers_needed"] <= 1, r
PY
"$tpusim" fit "${gpipe[@]}" --maximize model.layers --max 24 | grep -q "largest value that fits: 4"
echo "compiler re-materialization: passed"
