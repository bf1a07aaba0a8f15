#!/usr/bin/env bash
# Robustness round 4 (issue 39), each case from a tester's reproducer (tests/cli/round4/):
# inputs that never end, signals while reading, unusable output paths, time limits out of range,
# a tight plan time limit, an empty plan space, fit's search bounds, CLI conversions, positive
# interval ends and a list of 12,000 assumptions. Each asserts behaviour: an exit code and the
# message naming the option or path, never how long it took (timeouts only keep a regression from
# hanging the suite).
set -euo pipefail
tpusim="$1"; root="$2"
here="$root/tests/cli/round4"; tiny="$here/tiny_v3_8.json"; space="$here/tiny_plan_space.json"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
bad() {  # name, expected text, command...: exit 2 and the text on stderr
  local name="$1" text="$2"; shift 2
  set +e; timeout 300 "$tpusim" "$@" > "$work/out" 2> "$work/err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || { cat "$work/err" | head -5; fail "$name: exit $rc, expected 2"; }
  grep -qF -- "$text" "$work/err" || { head -5 "$work/err"; fail "$name: no '$text'"; }
}

# 2, 3: a plan space that never ends is refused; a read that blocks (a FIFO nobody writes) ends on SIGTERM.
bad "endless space" "found more than 64 MiB" plan "$tiny" --space /dev/zero -j 1
mkfifo "$work/fifo"
"$tpusim" plan "$tiny" --space "$work/fifo" -j 1 > /dev/null 2>&1 & pid=$!
sleep 1; kill -TERM "$pid"; set +e; wait "$pid"; rc=$?; set -e
[ "$rc" -eq 143 ] || fail "plan reading a FIFO: exit $rc after SIGTERM, expected 143"

# 4: an --out that cannot be created is exit 2 naming --out, and plan says so before its search.
long=$(printf 'x%.0s' $(seq 300))
bad "run --out" "--out: (top level): found /dev/null/x, expected a directory that can be created" run "$tiny" --out /dev/null/x
bad "run --out too long" "File name too long" run "$tiny" --out "$work/$long"
bad "sweep --out" "--out" sweep "$tiny" --grid batch=8,16 --out /dev/null/x
bad "plan --out" "--out" plan "$tiny" --space "$space" -j 1 --out /dev/null/x
! grep -q "round 1" "$work/err" || fail "plan searched before refusing --out"

# 7: time limits outside [0, 1e9] s are refused by all three commands alike.
bad "plan --point-timeout -1" "--point-timeout" plan "$tiny" --space "$space" -j 1 --point-timeout -1
bad "plan --point-timeout 1e18" "seconds in [0, 1e9]" plan "$tiny" --space "$space" -j 1 --point-timeout 1e18
bad "sweep --point-timeout 1e18" "seconds in [0, 1e9]" sweep "$tiny" --grid batch=8 --point-timeout 1e18 --out "$work/s"
bad "fit --probe-timeout 1e18" "seconds in [0, 1e9]" fit "$tiny" --maximize model.layers --probe-timeout 1e18

# 9: a tight time limit still answers (with a plan, marked incomplete); a space leaving nothing is exit 2.
"$tpusim" plan "$tiny" --space "$space" -j 1 --time-limit 0.001 --json > "$work/plan.json" 2> /dev/null
python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['best'] is not None and not p['complete'], p['stopped']" \
  "$work/plan.json" || fail "plan --time-limit 0.001 gave no plan"
echo '{"schema": "tpusim.plan_space/1", "kinds": ["gpipe"], "stages": [3]}' > "$work/empty_space.json"
bad "empty space" "a space leaving at least one schedule" plan "$tiny" --space "$work/empty_space.json" -j 1

# 10: fit's --max is lowered to the field's own bound; a fractional step on an integer field is
# refused; CLI conversions say what they expected.
"$tpusim" fit "$tiny" --maximize model.layers --max 1e308 --json > "$work/fit.json" 2> "$work/fit.err"
grep -q -- "--max 1e+308 lowered to 100000\|--max .* lowered to 100000" "$work/fit.err" || { cat "$work/fit.err" | head; fail "fit --max not lowered"; }
python3 -c "import json,sys; f=json.load(open(sys.argv[1])); assert f['max_fitting'] > 1 and len(f['probes']) < 60, len(f['probes'])" \
  "$work/fit.json" || fail "fit --max 1e308 walked too many probes"
bad "fit fractional step" "--step: (top level): found 0.5, expected a whole number: model.layers is an integer field" \
  fit "$tiny" --maximize model.layers --max 20 --step 0.5
bad "--top 1e9" '--top: found "1e9", expected a whole number' plan "$tiny" --top 1e9
bad "--time-limit abc" '--time-limit: found "abc", expected a number' plan "$tiny" --time-limit abc

# 10: 12,000 assumptions of one key are refused at once, the message counting what it leaves out.
python3 - "$tiny" "$work/many.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["assumptions"] = [{"key": "batch", "range": [32, 32], "source": "x"}] * 12000
json.dump(s, open(sys.argv[2], "w"))
PY
bad "12000 assumptions" "and 11949 more problems" check "$work/many.json"

# 1: an assumption that moves the step by more than the step itself leaves every low end above zero.
"$tpusim" run "$here/intervals_negative_step_time.json" --intervals -j 2 --json > "$work/iv.json" 2> /dev/null
python3 - "$work/iv.json" <<'PY'
import json, sys
iv = json.load(open(sys.argv[1]))["intervals"]
for q in ("step_time_s", "examples_per_s", "mxu_utilization", "peak_hbm_bytes"):
    assert 0 < iv[q][0] <= iv[q][1], (q, iv[q])
assert "quadrature" in iv["method"], iv["method"]
PY
echo "robustness: ok"
