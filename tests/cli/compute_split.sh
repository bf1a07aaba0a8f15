#!/usr/bin/env bash
# Where a step's compute goes (issue 61): breakdown.compute_split_s splits every used device's
# compute into the MXUs at peak on the padded FLOPs, what the matmuls' grid steps add, and the
# rest, averaged as step_split_s is, so the two sum to the same. Oracles on MaxText's 22B step:
# the MXU part is the step's hardware FLOPs over the devices' peak; flash attention's grid at
# 128-row blocks is at least 16 sequences x 24 heads x 136 causal block pairs x 4 grids x 48
# layers steps at the grid-step cycles (its scores op is MXU-bound); a slow chip's split is at
# its own speed and still sums.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/maxtext-22b-v4-128.json"
"$tpusim" run "$study" --json > "$work/22b.json"
"$tpusim" run "$study" --json --set model.layers=2 \
  --set 'perturbations={"chips":[{"chip":[0,0,0],"compute_scale":0.5}]}' > "$work/slow.json"
"$tpusim" run "$study" --set model.layers=2 > "$work/22b.txt"
python3 - "$work" "$root" <<'PY'
import json, sys
w, root = sys.argv[1], sys.argv[2]
compute_phases = lambda split: sum(v for k, v in split.items()
                                   if k not in ("exposed_collective", "exposed_transfer", "idle", "input_wait", "host_loop"))
for name in ("22b", "slow"):
    r = json.load(open(f"{w}/{name}.json"))
    c, s = r["breakdown"]["compute_split_s"], r["breakdown"]["step_split_s"]
    assert set(c) == {"mxu", "matmul_grid_steps", "other"}, c
    assert all(v >= 0 for v in c.values()), c
    assert abs(sum(c.values()) - compute_phases(s)) <= 1e-9 * r["step_time_s"], (name, c, s)
r = json.load(open(f"{w}/22b.json"))
hw = json.load(open(f"{root}/configs/hardware/tpu-v4.json"))["core"]
c = r["breakdown"]["compute_split_s"]
devices = r["slice"]["cores"]
peak = r["hardware_flops_per_step"] / r["hardware_flops_utilization"] / r["step_time_s"] / devices
assert abs(c["mxu"] - r["hardware_flops_per_step"] / devices / peak) <= 1e-9 * c["mxu"], (c, peak)
clock = hw["clock_hz"]["value"]
cycles = hw["matmul_grid_step_overhead_cycles"]["value"]
flash = 16 * 24 * (16 * 17 // 2) * 4 * 48 * cycles / clock / 2  # a megacore chip's two cores split the grid
assert flash <= c["matmul_grid_steps"] <= flash + 0.1 * c["mxu"], (c, flash)
assert "compute" in open(f"{w}/22b.txt").read()
PY
