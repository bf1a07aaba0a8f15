#!/usr/bin/env bash
# `"partition": "memory_aware"`: where the cost-balanced cut overflows a stage (AmoebaNet-D with
# 640 filters on two TPU-v2 cores: the late cells hold most parameters), the memory-aware cut
# fits, and result.json and report.md say that memory, not cost, set it; where the cost cut
# fits, memory_aware keeps it.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/gpipe-amoebanet-v2-k2.json"
common=(--set model.filters=640 --set schedule.microbatches=4)
"$tpusim" run "$study" "${common[@]}" --json > "$work/cost.json"
"$tpusim" run "$study" "${common[@]}" --set 'schedule.partition="memory_aware"' --out "$work/mem" > /dev/null
"$tpusim" run "$study" --set schedule.microbatches=4 --set 'schedule.partition="memory_aware"' --json > "$work/small.json"
python3 - "$work/cost.json" "$work/mem/result.json" "$work/small.json" <<'PY'
import json, sys
cost, mem, small = (json.load(open(f)) for f in sys.argv[1:4])
assert not cost["fits"] and cost["schedule"]["details"]["partition_set_by"] == "cost"
assert mem["fits"] and mem["schedule"]["details"]["partition_set_by"] == "memory"
cut = lambda r: [s["layers"] for s in r["schedule"]["details"]["stages"]]
assert cut(cost) != cut(mem), cut(mem)
assert small["schedule"]["details"]["partition_set_by"] == "cost"
PY
grep -q "Memory, not cost, set the cut" "$work/mem/report.md"
echo "memory-aware partition: ok"
