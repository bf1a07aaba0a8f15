#!/usr/bin/env bash
# `tpusim fit` end to end: the answer fits, the next value does not, and the result is the
# answer's own result.json.
set -euo pipefail
tpusim="$1"; root="$2"
work_err=$(mktemp); trap 'rm -f "$work_err"' EXIT
out=$("$tpusim" fit "$root/configs/studies/default.json" --maximize model.layers --min 8 --max 2048 --json \
  --set slice=v3-8 --set batch=32 --set 'schedule={"kind":"gpipe","stages":8,"microbatches":8}')
python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
best = j["max_fitting"]
assert j["field"] == "model.layers" and j["monotonic"], j
probes = {p["value"]: p for p in j["probes"]}
assert probes[best]["fits"], probes[best]
assert not probes[best + 1]["fits"], "the next value should not fit"
assert j["result"]["fits"] and j["result"]["model"]["layers"] == best + 2, j["result"]["model"]
assert j["result"]["peak_hbm_bytes"] <= j["result"]["hbm_capacity_bytes"]
PY
# A probe that runs past --probe-timeout fails the search (exit 3), never lowering the answer.
set +e
"$tpusim" fit "$root/configs/studies/resnet50-lars-v3-2048.json" --maximize batch --min 2048 --max 65536 --step 2048 \
  --probe-timeout 0.001 > /dev/null 2> "$work_err"
rc=$?
set -e
[ "$rc" -eq 3 ] && grep -q "timed out" "$work_err" || { echo "FAIL: a timed-out probe gave exit $rc"; cat "$work_err"; exit 1; }
# The study is validated with the searched field at --min: 32 stages need at least 32 layers,
# more than the study's own 24, and the search from 32 is valid.
"$tpusim" fit "$root/configs/studies/default.json" --maximize model.layers --min 32 --max 40 --set slice=v3-32 --set batch=32 \
  --set 'schedule={"kind":"gpipe","stages":32,"microbatches":8}' > /dev/null 2> "$work_err" || { echo "FAIL: --min not applied before validating"; cat "$work_err"; exit 1; }
# Each probe is reported on stderr as it finishes, a line each on a pipe.
"$tpusim" fit "$root/configs/studies/gpipe-transformer-v3-k8.json" --maximize model.layers --min 8 --max 64 \
  > /dev/null 2> "$work_err"
probes=$(grep -c "^tpusim fit: probe [0-9]*: model.layers = [0-9]*: \(fits\|does not fit\)" "$work_err")
[ "$probes" -ge 4 ] || { echo "FAIL: $probes probe lines"; cat "$work_err"; exit 1; }
echo "4 passed, 0 failed"
