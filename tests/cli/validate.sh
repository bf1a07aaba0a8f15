#!/usr/bin/env bash
# `tpusim validate` end to end: every shipped case runs, the JSON has the documented schema,
# the exit code says whether every case is within its tolerance, a case's predicted value is
# exactly what its own command prints, the HTML renders its parity plots in headless
# Chromium, and bad input is exit 2.
set -euo pipefail
tpusim="$1"; root="$2"; here=$(dirname "$0")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
set +e
"$tpusim" validate -j 2 --json --out "$work/v" > "$work/validation.json" 2> "$work/stderr"
rc=$?
set -e
[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || { echo "FAIL: exit code $rc"; cat "$work/stderr"; exit 1; }
cases=$(ls "$root/configs/validation"/*.json | wc -l)
python3 - "$work/validation.json" "$rc" "$cases" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); rc = int(sys.argv[2]); n = int(sys.argv[3])
assert j["schema"] == "tpusim.validation/1"
assert len(j["cases"]) == n, (len(j["cases"]), n)
for c in j["cases"]:
    for k in ("id", "quantity", "measured", "predicted", "error", "tolerance", "within", "source"):
        assert k in c, (c["id"], k)
    assert "failure" not in c, c
    assert abs(c["error"] - (c["predicted"] / c["measured"] - 1)) < 1e-12
    # the tolerance shown is the larger of the relative one and an absolute one (a statement's
    # precision, or fit.step grid steps) over the measured value: within is decided exactly
    assert c["within"] == (abs(c["error"]) <= c["tolerance"] * (1 + 1e-12)), c["id"]
assert rc == (0 if all(c["within"] for c in j["cases"]) else 1), rc
assert j["assumption_knobs"] == len(j["assumptions"]) > 0
assert set(j["summary"]["per_quantity"]) == {c["quantity"] for c in j["cases"]}
# In-sample cases (a study value inferred from them) are marked and left out of "predicted".
ins = [c for c in j["cases"] if c["in_sample"]]
assert {c["id"] for c in ins} >= {"mlperf06-ssd-v3-32", "gpipe-t1-transformer-p1-activations"}, ins
assert all(c["inferred_from_it"] for c in ins)
p = j["summary"]["predicted"]
assert p["cases"] == len(j["cases"]) - len(ins), p
# A verdict ("fits") is counted, right or wrong, and left out of the mean error.
out = [abs(c["error"]) for c in j["cases"] if not c["in_sample"] and c["quantity"] != "fits"]
assert abs(p["mean_abs_error"] - sum(out) / len(out)) < 1e-12, p
verdicts = [c for c in j["cases"] if c["quantity"] == "fits"]
assert verdicts and all(c["measured"] == 1 and c["predicted"] in (0, 1) for c in verdicts), verdicts
assert j["summary"]["per_quantity"]["fits"]["mean_abs_error"] is None
PY
grep -q "^- predicted (the [0-9]* in-sample cases" "$work/v/validation.md" || { echo "FAIL: no predicted line"; exit 1; }
# The predicted value is exactly what the case's own command reports.
python3 - "$work/validation.json" "$tpusim" <<'PY'
import json, shlex, subprocess, sys
j = json.load(open(sys.argv[1]))
checked = set()
for c in j["cases"]:
    if c["quantity"] in checked: continue
    checked.add(c["quantity"])
    args = shlex.split(c["command"])[1:]
    out = json.loads(subprocess.run([sys.argv[2]] + args, capture_output=True, text=True, check=True).stdout)
    if c["quantity"] == "max_fitting": value = out["max_fitting"]
    elif c["quantity"] == "activation_bytes_total": value = sum(k["hbm_at_peak"]["activations"] + k["hbm_at_peak"].get("workspace", 0) for k in out["cores"])
    else: value = out[c["quantity"]]
    assert value == c["predicted"], (c["id"], value, c["predicted"])
assert len(checked) == 5, checked
PY
# Sensitivity: every assumed figure of the case's hardware (a flag turned over) has a relative change, and
# the core's vector rate (an assumption ResNet-50's element-wise work leans on) moves it.
"$tpusim" validate --sensitivity mlperf06-resnet-v3-32 --json > "$work/sens.json" 2> /dev/null || true
python3 - "$work/sens.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["cases"][0]["sensitivity"]
figures = {a["figure"] for a in j["assumptions"]}
assert set(s) == figures, (set(s), figures)
assert all(isinstance(v, float) for v in s.values()), s
assert s["core.vpu_ops_per_alu_per_cycle"] < 0, s  # a faster VPU, a shorter step
assert s["core.fuse_elementwise"] > 0, s  # a flag turned over: unfused element-wise passes
PY
# --hardware-override: every case runs on its own hardware with the figure changed (what
# `--set hardware={"base": ..., "override": ...}` runs), which is then no longer an assumption;
# the sensitivity runs keep the override.
"$tpusim" validate mlperf06-resnet-v3-32 --json --sensitivity \
  --hardware-override core.hbm_sustained_bandwidth_fraction=1.0 > "$work/over.json" 2> /dev/null || true
python3 - "$work/over.json" "$work/sens.json" "$tpusim" "$root" <<'PY'
import json, subprocess, sys
over, plain = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
hw = '{"base": "tpu-v3", "override": {"core.hbm_sustained_bandwidth_fraction": 1.0}}'
run = subprocess.run([sys.argv[3], "run", sys.argv[4] + "/configs/studies/resnet50-lars-v3-32.json", "--json",
                      "--set", "hardware=" + hw], capture_output=True, text=True, check=True)
case, before = over["cases"][0], plain["cases"][0]
assert case["predicted"] == json.loads(run.stdout)["step_time_s"], case
assert case["predicted"] < before["predicted"], (case, before)  # HBM at its pin rate: faster
assert over["assumption_knobs"] == plain["assumption_knobs"] - 1
assert over["hardware_overrides"] == {"core.hbm_sustained_bandwidth_fraction": 1.0}
assert "core.hbm_sustained_bandwidth_fraction" not in case["sensitivity"], case["sensitivity"]
moves = case["sensitivity"]
assert all(isinstance(v, float) for v in moves.values()) and moves["core.fuse_elementwise"] > 0, moves
PY
# The report renders: one parity plot per quantity with a point per case.
bash "$here/chromium_dom.sh" "$work/v/validation.html" > "$work/dom.html"
plots=$(grep -o 'class="parity"' "$work/dom.html" | wc -l)
points=$(grep -o 'class="case"' "$work/dom.html" | wc -l)
quantities=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['summary']['per_quantity']))" "$work/validation.json")
[ "$plots" -eq "$quantities" ] || { echo "FAIL: $plots parity plots in the rendered DOM, $quantities quantities"; exit 1; }
[ "$points" -eq "$cases" ] || { echo "FAIL: $points points for $cases cases"; exit 1; }
grep -q "mlperf06-resnet-v3-32" "$work/v/validation.md"
# --intervals on two cases (a step time whose hardware figures have ranges, a memory case whose
# study assumes its micro-batch count): each interval contains its prediction, the coverage is
# what the records say, the JSON, md and HTML (error bars) carry them.
"$tpusim" validate mlperf05-resnet-v3-8 gpipe-t1-transformer-p8-activations --intervals -j 2 --json \
  --out "$work/iv" > "$work/iv.json" 2> /dev/null || true
python3 - "$work/iv.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
inside = 0
for c in j["cases"]:
    lo, hi = c["interval"]
    assert lo <= c["predicted"] <= hi, c
    assert lo < hi, c  # both lean on something with a range
    assert c["inside"] == (lo <= c["measured"] <= hi)
    assert abs(c["relative_width"] - (hi - lo) / c["predicted"]) < 1e-12
    inside += c["inside"]
iv = j["intervals"]
assert iv["cases"] == 2 and iv["inside"] == inside and abs(iv["coverage"] - inside / 2) < 1e-12, iv
memory = [c for c in j["cases"] if c["quantity"] == "activation_bytes_total"][0]
moved = {a["name"] for a in memory["interval_assumptions"] if a["at_low"] is not None or a["at_high"] is not None}
assert "schedule.microbatches" in moved, moved  # the study's own assumption moves it
assert any(a.get("study") == "gpipe-transformer-v3-k8.json" for a in j["assumptions"]), j["assumptions"]
PY
grep -q "## Prediction intervals" "$work/iv/validation.md"
bash "$here/chromium_dom.sh" "$work/iv/validation.html" > "$work/iv_dom.html"
bars=$(grep -o 'class="interval"' "$work/iv_dom.html" | wc -l)
[ "$bars" -eq 2 ] || { echo "FAIL: $bars error bars for 2 intervals"; exit 1; }
# Bad input: an unknown case, a broken case folder.
set +e
"$tpusim" validate no-such-case > /dev/null 2> "$work/err1"; rc1=$?
mkdir "$work/bad"; echo '{"schema": "tpusim.validation_case/1", "id": "broken"}' > "$work/bad/broken.json"
"$tpusim" validate --cases-dir "$work/bad" > /dev/null 2> "$work/err2"; rc2=$?
mkdir "$work/badfit"  # 8 stages cannot hold a 1-layer model: `tpusim fit` would refuse fit.min
sed -e 's/"id": "[^"]*"/"id": "early"/' -e 's/"min": [0-9]*/"min": 1/' -e "s|\.\./studies/|$root/configs/studies/|" \
  "$root/configs/validation/gpipe-t1-transformer-p8.json" > "$work/badfit/early.json"
"$tpusim" validate --cases-dir "$work/badfit" > /dev/null 2> "$work/err3"; rc3=$?
"$tpusim" validate mlperf06-resnet-v3-32 --hardware-override core.no_such_figure=1 > /dev/null 2> "$work/err4"; rc4=$?
"$tpusim" validate mlperf06-resnet-v3-32 --hardware-override core.op_overhead_s=fast > /dev/null 2> "$work/err5"; rc5=$?
set -e
[ "$rc4" -eq 2 ] && grep -q "core.no_such_figure" "$work/err4" || { echo "FAIL: unknown figure gave $rc4"; cat "$work/err4"; exit 1; }
[ "$rc5" -eq 2 ] && grep -q -- "--hardware-override: core.op_overhead_s" "$work/err5" || { echo "FAIL: bad value gave $rc5"; cat "$work/err5"; exit 1; }
[ "$rc3" -eq 2 ] && grep -q "early.json: fit.min" "$work/err3" || { echo "FAIL: fit.min too small gave $rc3"; cat "$work/err3"; exit 1; }
[ "$rc1" -eq 2 ] && grep -q "no-such-case" "$work/err1" || { echo "FAIL: unknown case gave $rc1"; cat "$work/err1"; exit 1; }
[ "$rc2" -eq 2 ] && grep -q "quantity" "$work/err2" || { echo "FAIL: broken case gave $rc2"; cat "$work/err2"; exit 1; }
# A ratio to a baseline (a pipeline's throughput normalized to K = 2, M = 1, as GPipe's Table 2
# gives it) and parameter memory: the predictions are what the commands print.
mkdir "$work/more"
cat > "$work/more/ratio.json" <<CASE
{"schema": "tpusim.validation_case/1", "id": "ratio", "description": "K=4, M=8 over K=2, M=1",
 "study": "$root/configs/studies/gpipe-throughput-amoebanet.json",
 "set": ["model.filters=64", "schedule.stages=4", "schedule.microbatches=8"],
 "relative_to": {"set": ["schedule.stages=2", "schedule.microbatches=1"]}, "quantity": "examples_per_s",
 "measured": {"value": 2, "unit": "ratio", "source": "test"}, "tolerance": {"relative": 0.1, "source": "test"}}
CASE
sed -e 's/"id": "ratio"/"id": "memory"/' -e 's/"relative_to": {[^}]*}, //' -e 's/"examples_per_s"/"parameter_bytes_total"/' \
  -e 's/"value": 2, "unit": "ratio"/"value": 1e8, "unit": "bytes"/' "$work/more/ratio.json" > "$work/more/memory.json"
"$tpusim" validate --cases-dir "$work/more" --json --out "$work/more_out" > "$work/more.json" 2> /dev/null || true
grep -q "divided by the baseline's .tpusim run .*schedule.microbatches=1" "$work/more_out/validation.md"
python3 - "$work/more.json" "$tpusim" <<'PY'
import json, shlex, subprocess, sys
j = json.load(open(sys.argv[1]))
def run(command):
    args = shlex.split(command)[1:]
    return json.loads(subprocess.run([sys.argv[2]] + args, capture_output=True, text=True, check=True).stdout)
memory, ratio = j["cases"]
kinds = ("weights", "gradients", "optimizer")
held = sum(sum(k["hbm_at_peak"].get(f, 0) for f in kinds) for k in run(memory["command"])["cores"])
assert memory["predicted"] == held, (memory, held)
assert ratio["quantity"] == "examples_per_s/baseline", ratio
speedup = run(ratio["command"])["examples_per_s"] / run(ratio["baseline_command"])["examples_per_s"]
assert ratio["predicted"] == speedup, (ratio, speedup)
assert 1 < speedup < 4, speedup  # 4 stages pipelined beat 2 run one after the other, never 4x
assert set(j["summary"]["per_quantity"]) == {"examples_per_s/baseline", "parameter_bytes_total"}
PY
# --check, the regression check: the shipped cases pass (each as recorded, within 1e-9
# relative); a case whose prediction moved from its recorded value fails it, named, even one
# still within its tolerance; --record writes them.
"$tpusim" validate --check > "$work/check.txt" 2> /dev/null || { echo "FAIL: --check on the shipped cases"; cat "$work/check.txt"; exit 1; }
grep -q "^check: .*; passed" "$work/check.txt"
"$tpusim" validate --cases-dir "$work/more" --record > /dev/null 2>&1 || true
"$tpusim" validate --cases-dir "$work/more" --check > /dev/null 2>&1 || { echo "FAIL: --check after --record"; exit 1; }
python3 - "$work/more/recorded/predictions.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["predictions"]["ratio"] *= 1 + 1e-6  # a move far inside any tolerance
json.dump(j, open(sys.argv[1], "w"))
PY
set +e; "$tpusim" validate --cases-dir "$work/more" --check > "$work/moved.txt" 2> /dev/null; rc=$?; set -e
[ "$rc" -eq 1 ] && grep -q "FAILED, moved: ratio" "$work/moved.txt" || { echo "FAIL: a moved case gave exit $rc"; cat "$work/moved.txt"; exit 1; }
set +e; "$tpusim" validate --check --hardware-override core.op_overhead_s=2e-6 > /dev/null 2>&1; rc=$?; set -e
[ "$rc" -eq 2 ] || { echo "FAIL: --check with --hardware-override gave exit $rc"; exit 1; }
echo "8 passed, 0 failed"
