#!/usr/bin/env bash
# Faults and stragglers as what-ifs (issue 44, first step): study key "perturbations" with slow
# chips and slow links. A synchronous data-parallel step waits for its slowest chip: one chip at
# half speed adds exactly its own compute once more (the oracle below); a slow link stretches the
# all-reduce whose rings cross it; the reductions (symmetry proof, one cluster) are refused, so
# the step is simulated chip by chip; bad perturbations are exit 2 naming the path.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/tests/cli/bad/good.json"
"$tpusim" run "$study" --json > "$work/uniform.json"
"$tpusim" run "$study" --set 'perturbations={}' --json > "$work/empty.json"
"$tpusim" run "$study" --set 'perturbations={"chips": [{"chip": [1, 2], "compute_scale": 0.5}]}' --json > "$work/slow_chip.json"
"$tpusim" run "$study" --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0.1}]}' --json > "$work/slow_link.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
u, e, c, l = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "empty", "slow_chip", "slow_link"))
for r in (u, e): r.pop("study")
assert u == e, "no perturbation is the uniform step"
# The busiest core's compute (forward, backward, update), run at half speed on the slow chip.
split = u["breakdown"]["step_split_s"]
compute = split["forward"] + split["backward"] + split["update"]
grown = c["step_time_s"] - u["step_time_s"]
assert abs(grown - compute) <= 1e-6 * u["step_time_s"], (grown, compute)
assert c["breakdown"]["step_split_s"]["idle"] > 0  # the others wait for it
assert l["step_time_s"] > u["step_time_s"] * 1.5, (l["step_time_s"], u["step_time_s"])
PY
bad() {
  local expect="$1"; shift
  if "$tpusim" run "$study" "$@" > "$work/out" 2> "$work/err"; then echo "FAIL: accepted $*"; exit 1; fi
  grep -qF -- "$expect" "$work/err" || { echo "FAIL: $* said:"; cat "$work/err"; exit 1; }
}
bad 'perturbations.chips[0].chip: found [9,0]' --set 'perturbations={"chips": [{"chip": [9, 0], "compute_scale": 0.5}]}'
bad 'perturbations.chips[0].compute_scale: found 0' --set 'perturbations={"chips": [{"chip": [0, 0], "compute_scale": 0}]}'
bad 'perturbations.chips[0].hbm_bandwidth_scale' --set 'perturbations={"chips": [{"chip": [0, 0], "compute_scale": 1, "hbm_bandwidth_scale": 0.5}]}'
bad 'perturbations.links[0].bandwidth_scale: found 0' --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0}]}'
bad 'perturbations.links[0].dimension: found "w"' --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "w", "direction": "+", "bandwidth_scale": 0.5}]}'
bad 'perturbations.chaos' --set 'perturbations={"chaos": 1}'
echo "perturbations: ok"
