#!/usr/bin/env bash
# `tpusim plan` end to end: on small studies (an mlp, a 12-layer Transformer on v3-8 and v3-32)
# its answer is the optimum of simulating every valid candidate (--exhaustive); the JSON has the
# documented schema and is byte-identical whatever -j is; best.json runs to the same step time;
# plan.html renders its Pareto chart in headless Chromium; nothing fitting is exit 1 naming the
# closest plan; bad input is exit 2.
set -euo pipefail
tpusim=$(realpath "$1"); root="$2"; here=$(dirname "$0")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

study() {  # name slice batch model-json
  cat > "$work/$1.json" <<EOF
{"schema": "tpusim.study/1", "hardware": "tpu-v3", "slice": "$2", "batch": $3,
 "model": $4, "optimizer": {"kind": "adam"}, "schedule": {"kind": "data_parallel"}}
EOF
}
study mlp v3-8 256 '{"kind": "mlp", "layers": 6, "width": 1024, "input": 512, "classes": 64}'
study t12_v3_8 v3-8 64 '{"kind": "transformer", "activation": "relu", "layers": 12, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 8000, "seq_len": 256}'
study t12_v3_32 v3-32 128 '{"kind": "transformer", "activation": "relu", "layers": 12, "d_model": 512, "d_ff": 2048, "heads": 8, "vocab": 8000, "seq_len": 256}'

# On v3-32 the exhaustive run simulates a narrower space (both runs search the same one): stages
# of one or two cores, at most 8 micro-batches. The transformers' exhaustive runs keep their
# standard attention (flash twins double every simulation; they are checked below).
echo '{"schema": "tpusim.plan_space/1", "tensor_parallel": [1, 2], "max_microbatches": 8, "attention": ["standard"]}' > "$work/narrow.json"
echo '{"schema": "tpusim.plan_space/1", "attention": ["standard"]}' > "$work/standard.json"
for s in mlp t12_v3_8 t12_v3_32; do
  space=(); [ "$s" = t12_v3_32 ] && space=(--space "$work/narrow.json")
  [ "$s" = t12_v3_8 ] && space=(--space "$work/standard.json")
  "$tpusim" plan "$work/$s.json" -j 2 --json "${space[@]}" > "$work/$s.plan.json" 2> /dev/null
  "$tpusim" plan "$work/$s.json" -j 2 --json --exhaustive "${space[@]}" > "$work/$s.all.json" 2> /dev/null
  python3 - "$work/$s.plan.json" "$work/$s.all.json" "$s" <<'PY'
import json, sys
plan, every, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert plan["schema"] == "tpusim.plan/1"
for k in ("best", "top", "evaluated", "simulated", "pruned"): assert k in plan, k
assert set(plan["pruned"]) == {"memory", "invalid", "interleaved_by_twin"}
assert plan["evaluated"] == every["evaluated"] == len(plan["top"]) + len(plan["others"])
valid = plan["evaluated"] - plan["pruned"]["memory"] - plan["pruned"]["invalid"]
assert every["simulated"] == valid, (every["simulated"], valid)
assert plan["simulated"] <= valid
# The same answer as simulating everything: best and the top list, in order.
assert plan["best"]["plan"] == every["best"]["plan"], (name, plan["best"]["plan"], every["best"]["plan"])
assert [t["plan"] for t in plan["top"]] == [t["plan"] for t in every["top"]], name
assert plan["best"]["result"]["fits"]
steps = [t["step_time_s"] for t in plan["top"]]
assert steps == sorted(steps)
# Every plan that fits and was left out is no faster than the last of the top.
for o in every["others"]:
    if o.get("fits"): assert o["step_time_s"] >= steps[-1], o
# No simulated peak is below its candidate's floor (unless the compiler's re-materialization,
# another program, fitted it).
for o in every["top"] + every["others"]:
    if o.get("peak_hbm_bytes") is not None and "compiler_remat" not in o:
        assert o["peak_hbm_bytes"] >= o["floor_hbm_bytes"] * (1 - 1e-9), o
# No simulated step is faster than its candidate's time bound.
for o in every["top"] + every["others"]:
    if o.get("step_time_s") is not None and "bound_s" in o:
        assert o["step_time_s"] >= o["bound_s"] * (1 - 1e-9), o
for o in plan["others"]: assert o["why"], o
print(f"{name}: best {plan['best']['plan']}, {plan['simulated']} of {valid} simulated")
PY
done

# Flash attention is searched where the model has it (the transformers, not the mlp): every
# schedule twice, the flash twin labelled and carrying the model's attention, a best.json that
# runs the best, and the fastest flash twin's label that runs it; a space of "standard" alone
# leaves it out.
echo '{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"]}' > "$work/dp.json"
"$tpusim" plan "$work/t12_v3_8.json" -j 2 --json --space "$work/dp.json" --set model.seq_len=1024 \
  --out "$work/flash" > "$work/flash.json" 2> /dev/null
(cd / && "$tpusim" run "$work/flash/best.json" --json) > "$work/flash_run.json"
python3 - "$tpusim" "$work/t12_v3_8.json" "$work/flash.json" "$work/mlp.plan.json" "$work/t12_v3_8.plan.json" "$work/flash_run.json" "$work/flash/best.json" <<'PY'
import json, subprocess, sys
tpusim, study = sys.argv[1], sys.argv[2]
t12, mlp, standard, run, best = (json.load(open(f)) for f in sys.argv[3:8])
every = lambda p: p["top"] + p["others"]
flash = [c for c in every(t12) if c["plan"].endswith(" flash")]
assert flash and all(c["attention"] == "flash" for c in flash), len(flash)
assert len(flash) * 2 == t12["evaluated"], (len(flash), t12["evaluated"])
assert not any("attention" in c for c in every(mlp) + every(standard))
# best.json runs the best with its attention (at 1024 positions of 64-wide heads on v3, flash
# attention's 128-row blocks make it grid-bound: standard attention wins).
is_flash = t12["best"]["plan"].endswith(" flash")
assert best["model"].get("attention", "standard") == ("flash" if is_flash else "standard"), best["model"]
assert run["step_time_s"] == t12["best"]["result"]["step_time_s"]
# The best's twin, read back by its label, runs with the other attention, no faster than the best
# and no faster than the bound that ruled it out.
label = t12["best"]["plan"][: -len(" flash")] if is_flash else t12["best"]["plan"] + " flash"
twin = next(c for c in every(t12) if c["plan"] == label)
again = json.loads(subprocess.run([tpusim, "run", study, "--json", "--set", "model.seq_len=1024", "--plan-label",
                                   label], capture_output=True, text=True, check=True).stdout)
assert again["study"]["model"].get("attention", "standard") == ("standard" if is_flash else "flash"), again["study"]["model"]
assert again["step_time_s"] >= t12["best"]["result"]["step_time_s"], (label, again["step_time_s"])
assert again["step_time_s"] >= twin.get("bound_s", 0) * (1 - 1e-9), (label, again["step_time_s"], twin)
PY

# Deterministic whatever -j is; --out writes the reports and a best.json that runs as is.
"$tpusim" plan "$work/t12_v3_8.json" -j 1 --json --space "$work/standard.json" --out "$work/out" > "$work/j1.json" 2> /dev/null
cmp "$work/j1.json" "$work/t12_v3_8.plan.json" || { echo "FAIL: plan JSON differs between -j 1 and -j 2"; exit 1; }
for f in plan.json plan.md plan.html best.json; do [ -s "$work/out/$f" ] || { echo "FAIL: no $f"; exit 1; }; done
(cd / && "$tpusim" run "$work/out/best.json" --json) > "$work/best_run.json"
python3 - "$work/best_run.json" "$work/j1.json" <<'PY'
import json, sys
run, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert run["step_time_s"] == plan["best"]["result"]["step_time_s"]
PY
# The best plan's label, read back by run --plan-label, is the same step as best.json (and every
# top plan's label runs the step plan simulated for it).
python3 - "$tpusim" "$work/t12_v3_8.json" "$work/j1.json" <<'PY'
import json, subprocess, sys
tpusim, study, plan = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
for top in plan["top"][:3]:
    run = json.loads(subprocess.run([tpusim, "run", study, "--json", "--plan-label", top["plan"]],
                                    capture_output=True, text=True, check=True).stdout)
    assert run["step_time_s"] == top["step_time_s"], (top["plan"], run["step_time_s"])
PY
bash "$here/chromium_dom.sh" "$work/out/plan.html" > "$work/dom.html"
grep -q 'class="pareto"' "$work/dom.html" || { echo "FAIL: no Pareto chart in plan.html"; exit 1; }
points=$(grep -o '<circle class="plan' "$work/dom.html" | wc -l)
charts=$(grep -oE '<svg [^>]*class="(pareto|cores)"' "$work/dom.html" | wc -l)  # the second: by cores used
expected=$(python3 -c "
import json; p = json.load(open('$work/j1.json'))
print(sum(1 for x in p['top'] + p['others'] if isinstance(x.get('examples_per_s'), (int, float))))")
[ "$points" -eq $((expected * charts)) ] || { echo "FAIL: $points points in $charts charts, expected $expected each"; exit 1; }
# The Pareto chart draws the HBM capacity and names the plans on its front (the best among them).
grep -q 'class="capacity"' "$work/dom.html" || { echo "FAIL: no HBM capacity line in the Pareto chart"; exit 1; }
best=$(python3 -c "import json, html; print(html.escape(json.load(open('$work/j1.json'))['best']['plan'], quote=False))")
grep -qF "class=\"label\"" "$work/dom.html" && grep -qF ": $best</text>" "$work/dom.html" ||
  { echo "FAIL: the Pareto front does not name the best plan ($best)"; exit 1; }

# Nothing fits: exit 1, and the closest plan is named.
set +e
"$tpusim" plan "$work/t12_v3_8.json" --set model.d_model=8192 --set model.d_ff=32768 -j 2 > /dev/null 2> "$work/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: nothing fits gave exit $rc"; cat "$work/err"; exit 1; }
grep -q "no plan fits; the closest: .*over by" "$work/err" || { echo "FAIL: no closest plan named"; cat "$work/err"; exit 1; }

# Bad input: exit 2 with the path.
expect_bad() {  # what-to-find args...
  local want="$1"; shift
  set +e; "$tpusim" plan "$@" > /dev/null 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: exit $rc for $*"; cat "$work/err"; exit 1; }
  grep -q -- "$want" "$work/err" || { echo "FAIL: '$want' not in the message for $*"; cat "$work/err"; exit 1; }
}
echo '{"schema": "tpusim.plan_space/1", "stages": [0]}' > "$work/space.json"
expect_bad "stages\[0\]" "$work/mlp.json" --space "$work/space.json"
expect_bad "--top" "$work/mlp.json" --top 0
expect_bad "--objective" "$work/mlp.json" --objective speed
expect_bad "model.layers" "$work/mlp.json" --set model.layers=-1
# Anytime: --time-limit answers with the best plan found so far, marked incomplete with what it
# did not examine (it lets one simulation finish, so even a tight limit answers); SIGINT does the same and exits 130 after writing its outputs. The 12-layer
# Transformer on v3-32 takes about a second to search, ten times the limit; its exhaustive search
# far longer than the 2 s before the interrupt.
"$tpusim" plan "$work/t12_v3_32.json" -j 2 --json --time-limit 0.1 > "$work/limited.json" 2> "$work/limited.err"
python3 - "$work/limited.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["complete"] is False and p["stopped"]["by"] == "the time limit of 0.1 s", p["stopped"]
assert p["stopped"]["after_s"] < 30, p["stopped"]  # the limit lets one simulation finish first
assert p["best"] is not None and p["simulated"] >= 1, p["simulated"]
left = p["not_examined"]
assert left["unbounded"] + left["unsimulated"] > 0, left
assert any(o["why"].startswith("not ") for o in p["others"]), [o["why"] for o in p["others"]][:5]
PY
grep -q "incomplete, stopped by the time limit of 0.1 s" "$work/limited.err" || { echo "FAIL: no incomplete notice"; cat "$work/limited.err"; exit 1; }
"$tpusim" plan "$work/t12_v3_32.json" -j 2 --exhaustive --out "$work/interrupted" > /dev/null 2> "$work/int.err" &
pid=$!
sleep 3
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" -eq 130 ] || { echo "FAIL: SIGINT gave exit $rc"; cat "$work/int.err"; exit 1; }
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["complete"] is False and p["stopped"]["by"] == "SIGINT", p["stopped"]' \
  "$work/interrupted/plan.json"
grep -q "INCOMPLETE: stopped by SIGINT" "$work/interrupted/plan.md" || { echo "FAIL: plan.md not marked incomplete"; exit 1; }
# A complete search says so.
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["complete"] is True and p["stopped"] is None' "$work/t12_v3_8.plan.json"
# Plans that wait for the same hosts (SSD's inferred input cost binds every data-parallel plan on
# v3-128): they tie on the step, so the shorter TPU step ranks first and the others say so.
echo '{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "remat": [false]}' > "$work/dp_plain.json"
"$tpusim" plan "$root/configs/studies/ssd-resnet34-v3-128.json" -j 2 --json --space "$work/dp_plain.json" \
  > "$work/ssd.plan.json" 2> /dev/null
python3 - "$work/ssd.plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
best = p["best"]["result"]
tpu = lambda r: r["input"]["tpu_step_time_s"]
assert best["input"]["bound"] == "host preparation" and tpu(best) < best["step_time_s"], best["input"]
tied = [o for o in p["others"] if o["step_time_s"] == best["step_time_s"]]
assert tied and all(o["why"].startswith("as fast: both wait for the hosts' input") for o in tied), tied[:2]
PY
echo "plan: ok"
