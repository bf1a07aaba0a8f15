#!/usr/bin/env bash
# A valid study too large for this machine is refused up front with the estimate (exit 2,
# "too large to simulate"), instead of SimGrid aborting (a 128x128 slice ran out of memory
# mappings) or the process growing past the machine's memory (a 1,024x1,024 slice, a million
# micro-batches): the budget is --max-host-memory (default half of the machine's memory).
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
slice_study() {  # chips per side
  cat <<EOF2
{"schema": "tpusim.study/1", "hardware": {"base": "tpu-v3", "override": {"pod.chips": [$1, $1]}},
 "slice": {"chips": [$1, $1], "wraparound": [true, true]},
 "model": {"kind": "mlp", "layers": 2, "width": 64, "input": 32, "classes": 8},
 "batch": $((2 * $1 * $1)), "optimizer": {"kind": "sgd"}, "schedule": {"kind": "data_parallel"}}
EOF2
}
refused() {  # name, expected text, command...
  local name="$1" text="$2"; shift 2
  # A refusal up front is quick, but how quick is for bench/ to measure: the timeout only keeps a
  # regression (the graph built after all) from hanging the suite.
  set +e; timeout 300 "$@" > /dev/null 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { echo "FAIL $name: exit $rc, expected 2"; cat "$work/err"; exit 1; }
  grep -q "too large to simulate" "$work/err" && grep -q -- "$text" "$work/err" ||
    { echo "FAIL $name: message"; cat "$work/err"; exit 1; }
}
slice_study 128 > "$work/s128.json"
slice_study 1024 > "$work/s1024.json"
# 32,768 cores: SimGrid's routing table alone is 8.6 GB (9.3 GB with per-core state), over a 4 GB budget.
refused "128x128 slice" "needs over 9.3 GB" "$tpusim" run "$work/s128.json" --max-host-memory 4e9
# 2,097,152 cores: refused with the default budget, before anything is built.
refused "1024x1024 slice" "more than the budget" "$tpusim" run "$work/s1024.json"
# A million micro-batches: the graph stops growing at the budget and says it was still growing.
refused "a million micro-batches" "still growing" "$tpusim" run "$root/configs/studies/gpipe-throughput-transformer48.json" \
  --set batch=1000000 --set schedule.microbatches=1000000 --max-host-memory 2e8
set +e; "$tpusim" run "$work/s128.json" --max-host-memory 0 > /dev/null 2> "$work/err"; rc=$?; set -e
[ "$rc" -eq 2 ] && grep -q -- "--max-host-memory" "$work/err" || { echo "FAIL: budget 0 gave $rc"; exit 1; }
# Within the budget nothing changes.
"$tpusim" run "$root/configs/studies/default.json" --max-host-memory 1e9 > /dev/null
echo "resources: ok"
