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
# The peak is the mixed program's (the naive peak less the share of what every layer saves: the
# usable HBM here), the every-layer run's under its own name, whose breakdown the result keeps.
assert close(c["peak_hbm_bytes"], r["peak_hbm_bytes"]) and close(r["every_layer"]["peak_hbm_bytes"], d["peak_hbm_bytes"])
assert close(c["peak_hbm_bytes"], n["peak_hbm_bytes"] - r["share_of_layers_needed"] * saved)
assert c["peak_hbm_bytes"] > d["peak_hbm_bytes"] and c["breakdown"] == d["breakdown"]
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
# plan agrees with run: a replicated step over HBM at its floor without re-materialization, that
# the compiler fits with save_dots on part of its layers, is simulated as run has it (its mixed
# program's time and peak), not pruned; with compiler_remat false it is pruned.
cat > "$work/t24.json" <<'EOF'
{"schema": "tpusim.study/1", "hardware": "tpu-v3", "slice": "v3-8", "batch": 64,
 "model": {"kind": "transformer", "activation": "relu", "layers": 24, "d_model": 1024, "d_ff": 4096,
           "heads": 16, "vocab": 32000, "seq_len": 1024},
 "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel", "remat": false}}
EOF
echo '{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "weight_update": ["replicated"], "gradient_dtype": ["bf16"], "accumulation_steps": [1], "remat": [false, "save_dots"], "attention": ["standard"]}' > "$work/space.json"
"$tpusim" plan "$work/t24.json" --space "$work/space.json" -j 2 --json 2> /dev/null > "$work/plan.json"
"$tpusim" plan "$work/t24.json" --space "$work/space.json" -j 2 2> /dev/null |
  grep -qF '#1 fits as the compiler re-materializes 8 % of its layers ("save_dots")'
"$tpusim" plan "$work/t24.json" --space "$work/space.json" -j 2 --json --set compiler_remat=false 2> /dev/null > "$work/plan_naive.json"
python3 - "$work" "$tpusim" <<'PY'
import json, subprocess, sys
w, tpusim = sys.argv[1], sys.argv[2]
plan, naive = (json.load(open(f"{w}/{x}.json")) for x in ("plan", "plan_naive"))
best = plan["top"][0]
assert best["plan"] == plan["best"]["plan"] and plan["best"]["result"]["compiler_remat"]["fits"]
assert "remat" not in best["schedule"] and best["compiler_remat"]["policy"] == "save_dots", best
assert 0 < best["compiler_remat"]["share_of_layers_needed"] < 1, best
run = json.loads(subprocess.run([tpusim, "run", f"{w}/t24.json", "--json", "--plan-label", best["plan"]],
                                capture_output=True, text=True, check=True).stdout)
assert run["fits"] and run["step_time_s"] == best["step_time_s"], (run["step_time_s"], best["step_time_s"])
assert best["peak_hbm_bytes"] == run["compiler_remat"]["peak_hbm_bytes"] <= run["hbm_capacity_bytes"]
dots = [p for p in plan["top"] + plan["others"] if p["schedule"].get("remat") == "save_dots"]
assert dots and all(p["step_time_s"] > best["step_time_s"] for p in dots if "step_time_s" in p)
# Without the compiler's re-materialization the same candidates are over HBM at their floor.
assert naive["best"]["schedule"].get("remat") == "save_dots", naive["best"]
none = [p for p in naive["others"] if "remat" not in p["schedule"]]
assert none and all(p["why"].startswith("does not fit: at least") for p in none), none
PY
echo "compiler re-materialization: passed"
