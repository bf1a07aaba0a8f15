#!/usr/bin/env bash
# Time to train and cost (issue 65, study keys target and price_per_chip_hour): steps to a
# target of steps, examples (the global batch's per step) or tokens (a sequence's positions per
# example), rounded up; days = steps x the simulated step / 86400, and their interval from the
# step's with --intervals; cost = chips (every slice's) x days x 24 x the price. Goodput is
# Young's first order, checked against its formula from the reported checkpoint and MTBF, its
# default interval against Young's optimum (a longer or shorter one loses more), an evaluation
# by its forward passes' share. Oracles on the
# default study (a Transformer, 512 positions a sequence, 256 sequences, v3-32) and on two
# v5e-256 slices; bad targets and prices are exit 2 (tests/cli/bad/cases.tsv).
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
"$tpusim" run "$study" --set 'target={"steps":1000}' --set price_per_chip_hour=1.5 --json > "$work/steps.json"
"$tpusim" run "$study" --set 'target={"examples":1000}' --json > "$work/examples.json"
"$tpusim" run "$study" --set 'target={"tokens":1e9}' --json --intervals > "$work/tokens.json"
"$tpusim" run "$root/configs/studies/llama3-8b-v5e-256x2.json" --set 'target={"tokens":1e12}' \
  --set price_per_chip_hour=1.2 --json > "$work/slices.json"
"$tpusim" run "$study" > "$work/plain.txt"
run='"failures_per_chip_hour":0.001,"checkpoint_write_bytes_per_s_per_host":1e8,"checkpoint_read_bytes_per_s_per_host":2e8,"restart_s":300'
"$tpusim" run "$study" --set 'target={"steps":100000}' --set "training_run={$run}" --json > "$work/young.json"
k=$(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["time_to_train"]["checkpoint"]["young_optimal_every_steps"]))' "$work/young.json")
for m in half double; do
  every=$(python3 -c "import sys; k=int(sys.argv[1]); print(max(1, k // 2) if sys.argv[2] == 'half' else 2 * k)" "$k" "$m")
  "$tpusim" run "$study" --set 'target={"steps":100000}' --set "training_run={$run,\"checkpoint_every_steps\":$every}" --json > "$work/$m.json"
done
"$tpusim" run "$study" --set 'target={"steps":100000}' \
  --set "training_run={$run,\"evaluation_every_steps\":1000,\"evaluation_steps\":50}" --json > "$work/eval.json"
python3 - "$work" <<'PY'
import json, math, sys
w = sys.argv[1]
r = {n: json.load(open(f"{w}/{n}.json")) for n in ("steps", "examples", "tokens", "slices", "young", "half", "double", "eval")}
def close(a, b):
    assert abs(a - b) <= 1e-12 * abs(b), (a, b)
step = r["steps"]["step_time_s"]
t = r["steps"]["time_to_train"]
assert t["steps"] == 1000 and 0 < t["goodput"] < 1
close(t["days"], 1000 * step / 86400)
close(t["days_with_goodput"], t["days"] / t["goodput"])
lo, hi = t["goodput_interval"]
assert lo < t["goodput"] < hi, t
# Young's first order from what the result reports: 16 chips at 0.001 failures an hour.
y = r["young"]["time_to_train"]
ck, step_s = y["checkpoint"], r["young"]["step_time_s"]
delta, mtbf = ck["seconds"], y["interruptions"]["mtbf_hours"] * 3600
close(delta, ck["bytes_per_host"] / 1e8)
close(mtbf, 3600 / (16 * 0.001))
assert ck["young_optimal_every_steps"] == max(1, round(math.sqrt(2 * delta * mtbf) / step_s))
assert ck["every_steps"] == ck["young_optimal_every_steps"]
tau = ck["every_steps"] * step_s
recover = ck["bytes_per_host"] / 2e8 + 300
close(y["goodput"], 1 / (1 + delta / tau + (tau / 2 + recover) / mtbf))
for other in ("half", "double"):  # the optimum loses least
    assert r[other]["time_to_train"]["goodput"] < y["goodput"], (other, r[other]["time_to_train"]["goodput"], y["goodput"])
e = r["eval"]
forward = e["breakdown"]["compute_s"]["forward"]
close(1 / e["time_to_train"]["goodput"], 1 / y["goodput"] + 50 * forward / (1000 * e["step_time_s"]))
c = r["steps"]["cost"]
assert c["chips"] == 16
close(c["usd"], 16 * t["days"] * 24 * 1.5)
close(c["usd_with_goodput"], c["usd"] / t["goodput"])
batch = r["steps"]["batch"]
assert r["examples"]["time_to_train"]["steps"] == math.ceil(1000 / batch)
assert "cost" not in r["examples"]
seq = r["steps"]["study"]["model"]["seq_len"]
tok = r["tokens"]["time_to_train"]
assert tok["steps"] == math.ceil(1e9 / (batch * seq)), (tok["steps"], batch, seq)
close(tok["tokens_per_s"], batch * seq / r["tokens"]["step_time_s"])
lo, hi = r["tokens"]["intervals"]["step_time_s"]
close(tok["days_interval"][0], tok["steps"] * lo / 86400)
close(tok["days_interval"][1], tok["steps"] * hi / 86400)
s = r["slices"]
assert s["cost"]["chips"] == 512  # two slices of 256 chips
assert s["time_to_train"]["steps"] == math.ceil(1e12 / (1024 * 8192))
close(s["cost"]["usd"], 512 * s["time_to_train"]["days"] * 24 * 1.2)
print(f"time to train: 1 T tokens on 2 x v5e-256 in {s['time_to_train']['days']:.2f} days, ${s['cost']['usd']:.0f}")
PY
grep -q "time to train" "$work/plain.txt" && { echo "a study without a target printed a time to train"; exit 1; }
"$tpusim" run "$study" --set 'target={"steps":1000}' | grep -q "time to train     1000 steps: 1000 steps"
echo "time to train: summary lines ok"
# A sweep whose points have a target has their days and cost as columns; one without has none.
"$tpusim" sweep "$study" --set 'target={"tokens":1e9}' --set price_per_chip_hour=2 --grid 'batch=128,256' \
  --out "$work/sweep" -j 2 > /dev/null 2>&1
head -1 "$work/sweep/results.csv" | grep -q ",fits,time_to_train.days,time_to_train.days_with_goodput,time_to_train.goodput,cost.usd,cost.usd_with_goodput,error$" ||
  { echo "FAIL: no days and cost columns"; head -1 "$work/sweep/results.csv"; exit 1; }
python3 - "$work/sweep/results.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2 and all(float(r["time_to_train.days"]) > 0 and float(r["cost.usd"]) > 0 for r in rows), rows
PY
"$tpusim" sweep "$study" --grid 'batch=128,256' --out "$work/plain" -j 2 > /dev/null 2>&1
head -1 "$work/plain/results.csv" | grep -q "time_to_train" && { echo "FAIL: days columns without a target"; exit 1; }
echo "time to train: sweep columns ok"
# plan --objective time_to_train: every plan's days and cost, the best's printed; without a
# target it is refused.
echo '{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "weight_update": ["replicated", "sharded"], "remat": [false], "accumulation_steps": [1], "gradient_dtype": ["bf16"]}' > "$work/space.json"
"$tpusim" plan "$study" --set 'target={"tokens":1e9}' --set price_per_chip_hour=2 --objective time_to_train \
  --space "$work/space.json" -j 2 --json > "$work/plan.json" 2> /dev/null
python3 - "$work/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["objective"] == "time_to_train"
assert all(t["time_to_train"]["days"] > 0 and t["cost"]["usd"] > 0 for t in p["top"]), p["top"]
assert p["top"][0]["time_to_train"]["days"] <= p["top"][-1]["time_to_train"]["days"]
PY
"$tpusim" plan "$study" --set 'target={"tokens":1e9}' --objective time_to_train --space "$work/space.json" -j 2 2> /dev/null |
  grep -q "^best: .* days to the target" || { echo "FAIL: plan's best without its days"; exit 1; }
set +e; "$tpusim" plan "$study" --objective time_to_train --space "$work/space.json" > /dev/null 2>&1; rc=$?; set -e
[ "$rc" = 2 ] || { echo "FAIL: --objective time_to_train without a target gave exit $rc"; exit 1; }
echo "time to train: plan ok"
