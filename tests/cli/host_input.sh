#!/usr/bin/env bash
# The hosts' side of a step through the engine: with the shipped figures ResNet-50 is bound by
# its TPUs (the step is the simulated one); with a host link a thousand times slower the step is
# its infeed (the busiest chip's bytes over the link) and the wait shows in the step split; a
# preparation rate bounds it by the busiest host's examples; the host's work between device loops
# adds its share to every step.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/resnet50-momentum-v3-8.json"
"$tpusim" run "$study" --json > "$work/tpus.json"
"$tpusim" run "$study" --json \
  --set 'hardware={"base": "tpu-v3", "override": {"chip.host_link_bandwidth_bytes_per_s_per_chip": 1.6e7}}' \
  > "$work/infeed.json"
"$tpusim" run "$study" --json --set input_pipeline.examples_per_s_per_host=2000 > "$work/prep.json"
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
tpus, infeed, prep = (json.load(open(f"{d}/{n}.json")) for n in ("tpus", "infeed", "prep"))
i = tpus["input"]
# v3-8: one host, 4 chips, 128 images per core; a 224x224x3 bf16 image is 301,056 bytes.
assert i["hosts"] == 1 and i["busiest_host_examples"] == 1024, i
assert abs(i["bytes_per_example"] - 224 * 224 * 3 * 2) < 1e-6, i
assert abs(i["busiest_chip_bytes"] - 256 * 224 * 224 * 3 * 2) < 1e-3, i
assert abs(i["infeed_s"] - i["busiest_chip_bytes"] / 16e9) < 1e-12, i
assert i["bound"] == "tpus" and tpus["step_time_s"] == i["tpu_step_time_s"], i
assert "input_wait" not in tpus["breakdown"]["step_split_s"]
assert abs(i["host_examples_per_s_needed"] - 1024 / tpus["step_time_s"]) < 1e-6, i
# A host link of 16 MB/s: 77 MB per chip take 4.8 s, far beyond the TPUs' step.
f = infeed["input"]
assert f["bound"] == "infeed", f
assert abs(infeed["step_time_s"] - f["busiest_chip_bytes"] / 1.6e7) < 1e-9, (infeed["step_time_s"], f)
assert abs(f["tpu_step_time_s"] - tpus["step_time_s"]) < 1e-12, f
wait = infeed["breakdown"]["step_split_s"]["input_wait"]
assert abs(wait - (infeed["step_time_s"] - f["tpu_step_time_s"])) < 1e-9, wait
assert abs(infeed["examples_per_s"] - 1024 / infeed["step_time_s"]) < 1e-6
# 1024 images at 2000 per second: 512 ms.
p = prep["input"]
assert p["bound"] == "host preparation" and abs(prep["step_time_s"] - 0.512) < 1e-12, p
PY
"$tpusim" run "$study" --json --set 'training_loop={"steps_per_loop": 100, "host_seconds_per_loop": 0.5}' \
  > "$work/loop.json"
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
tpus, loop = (json.load(open(f"{d}/{n}.json")) for n in ("tpus", "loop"))
# 0.5 s between loops of 100 steps: 5 ms more every step, which the TPUs spend waiting.
assert abs(loop["step_time_s"] - (tpus["step_time_s"] + 0.005)) < 1e-12, loop["step_time_s"]
assert abs(loop["breakdown"]["step_split_s"]["host_loop"] - 0.005) < 1e-12, loop["breakdown"]["step_split_s"]
assert loop["input"]["bound"] == "tpus" and loop["input"]["loop_overhead_s"] == 0.005, loop["input"]
PY
"$tpusim" run "$study" --json --set 'input_pipeline={"examples_per_s_per_host": 2000, "seconds_per_step_per_host": 0.1}' \
  > "$work/step.json"
"$tpusim" run "$study" --json --set 'input_pipeline={"seconds_per_step_per_host": 1}' > "$work/slow.json"
python3 - "$work" <<'PY'
import json, sys
d = sys.argv[1]
tpus, step, slow = (json.load(open(f"{d}/{n}.json")) for n in ("tpus", "step", "slow"))
# 100 ms per step and 1024 images at 2000 per second: 612 ms.
s = step["input"]
assert s["bound"] == "host preparation" and abs(step["step_time_s"] - 0.612) < 1e-12, s
assert s["host_seconds_per_step"] == 0.1 and abs(s["preparation_s"] - 0.612) < 1e-12, s
# What the pipeline must sustain in the time its per-step work leaves of the TPUs' step.
assert abs(s["host_examples_per_s_needed"] - 1024 / (s["tpu_step_time_s"] - 0.1)) < 1e-6, s
# A second of per-step work alone outlasts the TPUs' step: no rate keeps pace.
w = slow["input"]
assert abs(slow["step_time_s"] - 1.0) < 1e-12 and w["host_examples_per_s_needed"] is None, w
assert w["host_examples_per_s"] is None and w["bound"] == "host preparation", w
PY
"$tpusim" run "$study" --set 'input_pipeline={"seconds_per_step_per_host": 1}' | grep -q "outlasts the TPUs' step"
"$tpusim" run "$study" --set input_pipeline.examples_per_s_per_host=2000 | grep -q "host preparation-bound"
set +e; "$tpusim" check "$study" --set input_pipeline.examples_per_s_per_host=-1 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -qF "input_pipeline.examples_per_s_per_host" "$work/err" || { cat "$work/err"; exit 1; }
echo "host input: ok"
