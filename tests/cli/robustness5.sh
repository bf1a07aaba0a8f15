#!/usr/bin/env bash
# Robustness round 5 (issue 66), each case from a tester's reproducer (tests/cli/round5/; the
# signals are tests/cli/signals.py, Python's tests/python/test_round5.py): scales that are not a
# machine, a chip listed twice, a perturbed step's phases as simulated, what gated it, plan labels
# read strictly and named by their attention, the closest plan when all are pruned, a margin of
# "%", a sweep whose first seeds are invalid, an expert capacity split unevenly, Adam's slots under
# expert parallelism, a sharded update with one replica, a range alternative naming no algorithm,
# and the host-memory budget as a bound. Each asserts behaviour (an exit code, a path named, a
# field's value), never how long something took.
set -euo pipefail
tpusim="$1"; root="$2"
here="$root/tests/cli/round5"; tiny="$root/tests/cli/round4/tiny_v3_8.json"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bad() {  # name, expected text, command...: exit 2 and the text on stderr
  local name="$1" text="$2"; shift 2
  set +e; timeout 300 "$tpusim" "$@" > "$work/out" 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { head -5 "$work/err"; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$text" "$work/err" || { head -5 "$work/err"; fail "$name: no '$text'"; }
}
py() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); $1" "$work/r.json" || fail "$2"; }

# L1: scales below 0.001 are not a machine; a chip listed twice is refused naming both places.
bad "compute_scale 1e-300" "perturbations.chips[0].compute_scale: found 1e-300, expected a scale in [0.001, 1000]" \
  check "$here/perturbation_scale_without_floor.json"
bad "chip listed twice" "perturbations.chips[2]" check "$here/perturbation_scale_without_floor.json" \
  --set 'perturbations.chips[0].compute_scale=0.5'
grep -qF "listed at perturbations.chips[1]" "$work/err" || fail "the first listing not named"
bad "bandwidth_scale 1e-300" "bandwidth_scale: found 1e-300" check "$tiny" \
  --set 'perturbations={"links":[{"chip":[0,0],"dimension":"x","direction":"+","bandwidth_scale":1e-300}]}'

# H4: a slow chip's phases at its simulated speed: the critical core's compute is its busy time,
# and the split sums to the step.
"$tpusim" run "$here/slow_chip_breakdown_unscaled.json" --json > "$work/r.json"
py "b=r['breakdown']; c=b['critical_core']; busy=r['cores'][c]['busy_s']; s=sum(b['compute_s'].values());
assert abs(s-busy) <= 1e-9*busy, (s, busy)
t=sum(b['step_split_s'].values()); assert abs(t-r['step_time_s']) <= 1e-6*r['step_time_s'], (t, r['step_time_s'])
assert r['perturbations']['gated_by']['chip'] == [1, 2], r['perturbations']['gated_by']" \
  "slow chip: phases unscaled or split not the step"

# M5: a link at 1 % gates the step: gated_by names it, not the first of equal chips.
"$tpusim" run "$here/critical_chip_ignores_slow_link.json" --json > "$work/r.json"
py "g=r['perturbations']['gated_by']; assert 'link' in g and g['link']['chip'] == [2, 3] and g['link']['dimension'] == 'y', g" \
  "slow link: gated_by does not name the link"

# M1: a flash study's standard candidates are labelled so, and each label reads back into its own row.
"$tpusim" plan "$here/plan_labels_duplicate_when_study_is_flash.json" -j 1 --top 10 --json > "$work/plan.json" 2> /dev/null
python3 - "$work/plan.json" "$tpusim" "$here/plan_labels_duplicate_when_study_is_flash.json" <<'PY' || fail "flash labels"
import json, subprocess, sys
plan = json.load(open(sys.argv[1]))
labels = [t["plan"] for t in plan["top"]]
assert len(labels) == len(set(labels)), labels
std = [l for l in labels if l.endswith(" standard")]
assert std, labels
for label in (labels[0], std[0]):
    row = next(t for t in plan["top"] if t["plan"] == label)
    run = json.loads(subprocess.run([sys.argv[2], "run", sys.argv[3], "--plan-label", label, "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    assert abs(run["step_time_s"] - row["step_time_s"]) <= 1e-12 * row["step_time_s"], (label, run["step_time_s"], row)
PY

# M4: --plan-label takes only what plan prints.
for label in "data_parallel sharded bf16 bucket nan MiB" "data_parallel sharded bf16 bucket -128 MiB" \
  "data_parallel sharded bf16 bucket 0 MiB" "data_parallel sharded bf16 bucket 1e-300 MiB" \
  "data_parallel sharded bf16 bucket 0x10 MiB" "data_parallel sharded bf16 bucket inf MiB"; do
  bad "label '$label'" "--plan-label" run "$here/plan_label_malformed_numbers_accepted.json" --plan-label "$label"
done
for label in "mesh batch:8.9xmodel:4 (d_model) experts sharded" "mesh batch:8junkxmodel:4 (d_model) experts sharded"; do
  bad "label '$label'" "--plan-label" run "$here/moe_mesh_fractional_optimizer_bytes.json" --plan-label "$label"
done
"$tpusim" run "$here/plan_label_malformed_numbers_accepted.json" --plan-label "data_parallel sharded bf16 bucket 16 MiB" \
  --json > "$work/r.json" || fail "a printed label refused"

# L3: every candidate pruned: the closest is named with its overflow; "%" is no margin.
set +e; "$tpusim" plan "$here/plan_all_pruned_closest_not_named.json" -j 1 > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "all pruned: exit $rc"
grep -q "the closest: .*memory floor (not simulated) is over by" "$work/err" || { cat "$work/err"; fail "closest not named"; }
bad "margin %" "hbm_margin: found \"%\"" check "$here/plan_all_pruned_closest_not_named.json" --set 'hbm_margin="%"'
bad "tiny host budget" "more than the budget of 0.001 GB" run "$tiny" --max-host-memory 1e6

# L5: a seed sweep whose base and first seed cut chips off runs; the invalid seeds are failed points.
set +e; "$tpusim" sweep "$here/sweep_refused_when_base_and_first_point_invalid.json" \
  --grid perturbations.random.seed=1..6 -j 2 --out "$work/seeds" > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || { tail -3 "$work/err"; fail "seed sweep: exit $rc, expected 1 (some points failed)"; }
python3 - "$work/seeds/results.jsonl" <<'PY' || fail "seed sweep records"
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
assert len(records) == 6, len(records)
assert any(r["error"] is None for r in records) and any("cut_off_chips" in (r["error"] or "") for r in records)
PY

# M2: 3 experts under data parallelism: each core's own capacity (rounded up), no refusal.
"$tpusim" run "$here/moe_data_parallel_capacity_refused.json" --json > "$work/r.json" || fail "3 experts refused"

# L4: Adam's slots under expert parallelism: whole bytes, twice the weights.
"$tpusim" run "$here/moe_mesh_fractional_optimizer_bytes.json" --json > "$work/r.json"
py "h=r['cores'][0]['hbm_at_peak']; assert h['optimizer'] == 2*h['weights'] and h['optimizer'] == int(h['optimizer']), h" \
  "expert parallelism: optimizer bytes not twice the weights"

# L7: a sharded update in a pipeline of one replica is refused naming it.
bad "sharded, one replica" "schedule.weight_update: found \"sharded\"" check "$here/pipeline_sharded_one_replica_accepted.json"

# L6: a range alternative naming no registered algorithm is refused when the hardware loads.
cp "$here/hw_range_invalid_alternative.json" "$work/hw.json"
bad "range alternative" "chip.collective_algorithms.range[1]" check "$tiny" --set "hardware=\"$work/hw.json\""

# H3: the host-memory budget bounds what the run holds: 50,000 layers under 1e9 are stopped (or
# refused) with exit 2, not admitted.
bad "host budget" "host memory" run "$here/max_host_memory_not_a_bound.json" --max-host-memory 1e9 --json
python3 - "$tpusim" "$here/max_host_memory_not_a_bound.json" <<'PY' || fail "the run passed its host-memory budget"
import resource, subprocess, sys
subprocess.run([sys.argv[1], "run", sys.argv[2], "--max-host-memory", "1e9", "--json"], capture_output=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # bytes (Linux: KiB)
assert peak <= 1.1e9, "peak resident %.2f GB under a 1 GB budget" % (peak / 1e9)
PY
# H3: --require-fit far over HBM answers from the weights and slots alone, before any step is built.
set +e; "$tpusim" run "$here/max_host_memory_not_a_bound.json" --set model.layers=100000 --require-fit --json \
  > "$work/r.json" 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 1 ] || fail "require-fit at 100,000 layers: exit $rc"
grep -q "spread evenly over all 8 devices" "$work/err" || fail "require-fit: no floor named"
py "assert r['simulated'] is False and r['peak_hbm_bytes'] > r['hbm_capacity_bytes'], r" "require-fit floor"
echo "robustness5: ok"
