#!/usr/bin/env bash
# A study overrides hardware figures in place ({"base": ..., "override": {...}}): the figure
# changes what is simulated (half the ICI bandwidth: about twice the communication time), a
# larger pod admits a larger slice, the result names the overrides, and an unknown figure or an
# implausible value is exit 2 with its path.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
"$tpusim" run "$study" --json > "$work/base.json"
"$tpusim" run "$study" --json \
  --set 'hardware={"base": "tpu-v3", "override": {"chip.ici_bandwidth_bytes_per_s_per_link_per_direction": 3.5e10}}' \
  > "$work/half.json"
python3 - "$work/base.json" "$work/half.json" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
ratio = b["breakdown"]["communication_s"] / a["breakdown"]["communication_s"]
assert 1.6 < ratio < 2.1, ratio
assert "overridden: chip.ici_bandwidth_bytes_per_s_per_link_per_direction" in b["hardware"], b["hardware"]
assert b["study"]["hardware"]["override"], b["study"]["hardware"]
PY
cat > "$work/pod.json" <<'EOF2'
{"schema": "tpusim.study/1", "hardware": {"base": "tpu-v3", "override": {"pod.chips": [64, 64]}},
 "slice": {"chips": [64, 64], "wraparound": [true, true]},
 "model": {"kind": "mlp", "layers": 2, "width": 64, "input": 32, "classes": 8},
 "batch": 8192, "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}}
EOF2
"$tpusim" check "$work/pod.json" | grep -q "8192 devices"
expect_bad() {  # what-to-find set...
  local want="$1"; shift
  set +e; "$tpusim" check "$work/pod.json" --set "$@" > /dev/null 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: exit $rc for $*"; cat "$work/err"; exit 1; }
  grep -qF -- "$want" "$work/err" || { echo "FAIL: '$want' not in the message"; cat "$work/err"; exit 1; }
}
expect_bad "slice" 'hardware="tpu-v3"'  # the 64x64 slice without the larger pod
expect_bad "hardware.override.chip.ici_bandwith" 'hardware.override={"chip.ici_bandwith": 1e11}'
expect_bad "chip.tdp_w.value: found -5" 'hardware.override={"chip.tdp_w": -5}'
expect_bad "hardware.base" 'hardware={"override": {}}'
expect_bad "hardware.overide" 'hardware={"base": "tpu-v3", "overide": {}}'
echo "hardware override: ok"
