#!/usr/bin/env bash
# Time to train and cost (issue 65, study keys target and price_per_chip_hour): steps to a
# target of steps, examples (the global batch's per step) or tokens (a sequence's positions per
# example), rounded up; days = steps x the simulated step / 86400, and their interval from the
# step's with --intervals; cost = chips (every slice's) x days x 24 x the price. Oracles on the
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
python3 - "$work" <<'PY'
import json, math, sys
w = sys.argv[1]
r = {n: json.load(open(f"{w}/{n}.json")) for n in ("steps", "examples", "tokens", "slices")}
def close(a, b):
    assert abs(a - b) <= 1e-12 * abs(b), (a, b)
step = r["steps"]["step_time_s"]
t = r["steps"]["time_to_train"]
assert t["steps"] == 1000 and t["goodput"] == 1.0
close(t["days"], 1000 * step / 86400)
c = r["steps"]["cost"]
assert c["chips"] == 16
close(c["usd"], 16 * t["days"] * 24 * 1.5)
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
