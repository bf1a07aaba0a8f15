#!/usr/bin/env bash
# --require-fit: a study whose resident state alone (weights, optimizer slots, gradient
# accumulators) overflows a core is answered without simulating the step (exit 1, says by how
# much; --json gives fits false, simulated false and the overflow); one that fits runs as usual;
# fit's probes use it and show such values as "resident state alone".
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
set +e
"$tpusim" run "$study" --set model.layers=5000 --require-fit --json > "$work/out.json" 2> "$work/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc"; cat "$work/err"; exit 1; }
grep -q "resident state .* over by .*the step was not simulated" "$work/err" || { echo "FAIL: message"; cat "$work/err"; exit 1; }
python3 - "$work/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["fits"] is False and j["simulated"] is False, j
assert j["overflow"]["bytes_over"] == j["peak_hbm_bytes"] - j["hbm_capacity_bytes"] > 0, j
PY
# Without --require-fit the same study is simulated (and does not fit either).
"$tpusim" run "$study" --set model.layers=200 --json > "$work/sim.json"
python3 -c "import json,sys; j=json.load(open('$work/sim.json')); assert j['fits'] is False and 'simulated' not in j"
# A study that fits is simulated and exits 0.
"$tpusim" run "$study" --require-fit > /dev/null
# fit: the probes above the boundary whose resident state overflows are not simulated.
"$tpusim" fit "$study" --maximize model.layers --min 8 --max 4096 > "$work/fit.txt"
grep -q "resident state alone" "$work/fit.txt" || { echo "FAIL: fit did not bound a probe"; cat "$work/fit.txt"; exit 1; }
grep -q "largest value that fits" "$work/fit.txt"
echo "require-fit: ok"
