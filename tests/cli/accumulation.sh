#!/usr/bin/env bash
# Gradient accumulation in data parallelism (issue 40): schedule.accumulation_steps A runs each
# replica's batch as A micro-batches one after another, their gradients summed before the one
# reduction: activations of one micro-batch at the peak, the same gradients as one core in
# functional mode; A = 1 is exactly today's step; a bad A is exit 2 naming the key.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
args=(--set slice=v3-8 --set batch=128 --set model.layers=4)
"$tpusim" run "$study" "${args[@]}" --json > "$work/a1.json"
"$tpusim" run "$study" "${args[@]}" --set schedule.accumulation_steps=1 --json > "$work/one.json"
"$tpusim" run "$study" "${args[@]}" --set schedule.accumulation_steps=4 --json > "$work/a4.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
a1, one, a4 = (json.load(open(f"{w}/{x}.json")) for x in ("a1", "one", "a4"))
one.pop("study"); a1.pop("study")
assert one == a1, "accumulation_steps 1 is the step without it"
acts = lambda r: r["cores"][0]["hbm_at_peak"]["activations"]
assert acts(a4) < 0.3 * acts(a1), (acts(a4), acts(a1))  # one micro-batch's activations (a quarter, and less)
assert a4["cores"][0]["hbm_at_peak"]["weights"] == a1["cores"][0]["hbm_at_peak"]["weights"]
# The same work in four passes: as many model FLOPs, the gradients reduced once.
assert abs(a4["model_flops_per_step"] - a1["model_flops_per_step"]) <= 1e-9 * a1["model_flops_per_step"]
assert a4["breakdown"]["communication_by_phase_s"] == a1["breakdown"]["communication_by_phase_s"]
assert a4["step_time_s"] > a1["step_time_s"] * 0.99
PY
"$tpusim" run "$study" --set slice=v3-8 --set batch=32 --set schedule.accumulation_steps=2 \
  --set 'model={"kind":"transformer","activation":"relu","layers":2,"d_model":32,"d_ff":64,"heads":2,"vocab":16,"seq_len":8}' --functional --json |
  python3 -c 'import json,sys; f=json.load(sys.stdin)["functional"]; assert f["gradient_max_rel_diff"] <= 1e-5 and f["max_rel_diff"] <= 1e-3 and f["replicas_identical"], f'
for bad in 3 0; do
  status=0
  "$tpusim" run "$study" "${args[@]}" --set schedule.accumulation_steps=$bad > /dev/null 2> "$work/err" || status=$?
  test "$status" -eq 2 && grep -q "schedule.accumulation_steps: found $bad" "$work/err"
done
# plan searches it: where one micro-batch per replica is over HBM (2048 examples on v3-8, the
# compiler's own re-materialization off) and data parallelism may not re-materialize, the best
# plan accumulates, fits, and its label reads back into that schedule.
cat > "$work/space.json" <<'EOF2'
{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "remat": [false], "weight_update": ["replicated"],
 "gradient_dtype": ["fp32"], "attention": ["standard"]}
EOF2
"$tpusim" plan "$study" --set slice=v3-8 --set batch=2048 --set model.layers=4 --set compiler_remat=false \
  --space "$work/space.json" -j 2 --json --out "$work/plan" > "$work/plan.json" 2> /dev/null
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
plan = json.load(open(f"{w}/plan.json"))
best = plan["best"]
assert best["result"]["fits"] and best["schedule"].get("accumulation_steps", 1) > 1, best["plan"]
assert f" accum {best['schedule']['accumulation_steps']}" in best["plan"], best["plan"]
assert json.load(open(f"{w}/plan/best.json"))["schedule"]["accumulation_steps"] == best["schedule"]["accumulation_steps"]
PY
"$tpusim" run "$study" --set slice=v3-8 --set batch=2048 --set model.layers=4 --set compiler_remat=false \
  --plan-label "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["best"]["plan"])' "$work/plan.json")" \
  --require-fit > /dev/null
echo "gradient accumulation: passed"
