#!/usr/bin/env bash
# Host offload (issue 62, schedule key offload): oracles on a dense MLP trained on one v5e chip,
# every layer re-materialized. Each of its 8 layers keeps its input, 8192 x 1024 bf16 values
# (16 MiB), and the peak is theirs at the forward's end. Offloading them moves each to the host
# after its forward and back before its recompute, one DMA after another each way over the
# chip's host link: 2 x 8 x 16 MiB of DMA, exactly. Kept, the peak holds the eight inputs and
# the last layer's recompute (9 x 16 MiB of activations). Over a host link 100 x v5e's (a
# what-if where each DMA is far shorter than a layer's forward) it holds at most four: the layer
# being recomputed (its input and what it rebuilds), the input fetched ahead, and one more in
# flight; the peak falls. Over v5e's own 15 GB/s a DMA takes seven times a layer's
# forward: the inputs wait in HBM for the link, the peak is higher than over the fast link and
# the step waits for the fetches. A chip without a host-memory figure, an offload without
# re-materialization and a host without room are refused (tests/cli/bad/cases.tsv and below).
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mlp='{"kind":"mlp","layers":7,"width":1024,"input":1024,"classes":1024}'
fast='{"base":"tpu-v5e","override":{"chip.host_link_bandwidth_bytes_per_s_per_chip":1.5e12}}'
run() {  # name schedule [hardware]
  "$tpusim" run "$root/configs/studies/default.json" --set "hardware=${3:-tpu-v5e}" --set slice=v5e-1 \
    --set batch=8192 --set "model=$mlp" --set 'optimizer={"kind":"sgd"}' --set "schedule=$2" --json > "$work/$1.json"
}
run kept '{"kind":"data_parallel","remat":true}'
run host '{"kind":"data_parallel","remat":true,"offload":["layer_input"]}'
run fast '{"kind":"data_parallel","remat":true,"offload":["layer_input"]}' "$fast"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
kept, host, fast = (json.load(open(f"{w}/{n}.json")) for n in ("kept", "host", "fast"))
layer_input = 8192 * 1024 * 2
for r, bandwidth in ((host, 15e9), (fast, 1.5e12)):
    dma = r["breakdown"]["communication_by_phase_s"]["host_offload"]
    expected = 2 * 8 * layer_input / bandwidth
    assert abs(dma - expected) <= 1e-9 * expected, (dma, expected)
    assert r["study"]["schedule"]["offload"] == ["layer_input"]
assert "host_offload" not in kept["breakdown"]["communication_by_phase_s"]
def activations(r):
    return r["cores"][r["peak_hbm_core"]]["hbm_at_peak"]["activations"]
assert activations(kept) == 9 * layer_input, activations(kept) / layer_input
assert activations(fast) <= 4 * layer_input, activations(fast) / layer_input
drop = kept["peak_hbm_bytes"] - fast["peak_hbm_bytes"]
assert kept["step_time_s"] <= fast["step_time_s"] < host["step_time_s"]
assert fast["peak_hbm_bytes"] < host["peak_hbm_bytes"] < kept["peak_hbm_bytes"]
assert host["breakdown"]["exposed_communication_by_phase_s"]["host_offload"] > 0.5 * host["step_time_s"]
print(f"offload: peak {drop / layer_input:.2f} layer inputs lower over a fast link; "
      f"{host['step_time_s'] * 1e3:.2f} ms against {kept['step_time_s'] * 1e3:.2f} over v5e's")
PY
# A host too small for what is offloaded: exit 2 naming the key.
small='{"base":"tpu-v5e","override":{"chip.host_memory_bytes_per_host":2000000}}'
set +e
"$tpusim" run "$root/configs/studies/default.json" --set "hardware=$small" --set slice=v5e-1 --set batch=8192 \
  --set "model=$mlp" --set 'schedule={"kind":"data_parallel","remat":true,"offload":["layer_input"]}' \
  > /dev/null 2> "$work/err"
rc=$?
set -e
[ "$rc" = 2 ] || { echo "expected exit 2, got $rc"; cat "$work/err"; exit 1; }
grep -q "schedule.offload" "$work/err" && grep -q "host_memory_bytes_per_host" "$work/err" || { cat "$work/err"; exit 1; }
echo "offload: a host too small is refused"
