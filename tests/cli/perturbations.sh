#!/usr/bin/env bash
# Faults and stragglers as what-ifs (issue 44, first step): study key "perturbations" with slow
# chips and slow links. A synchronous data-parallel step waits for its slowest chip: one chip at
# half speed adds exactly its own compute once more (the oracle below); a slow link stretches the
# all-reduce whose rings cross it, and the reductions are refused (every link and chip simulated);
# a slow chip keeps them: one replica of each kind of chip speeds is simulated, with the same
# result as the full simulation (--no-symmetry); bad perturbations are exit 2 naming the path.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/tests/cli/bad/good.json"
"$tpusim" run "$study" --json > "$work/uniform.json"
"$tpusim" run "$study" --set 'perturbations={}' --json > "$work/empty.json"
"$tpusim" run "$study" --set 'perturbations={"chips": [{"chip": [1, 2], "compute_scale": 0.5}]}' --json > "$work/slow_chip.json"
"$tpusim" run "$study" --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0.1}]}' --json > "$work/slow_link.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
u, e, c, l = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "empty", "slow_chip", "slow_link"))
for r in (u, e): r.pop("study")
assert u == e, "no perturbation is the uniform step"
# The busiest core's compute (forward, backward, update), run at half speed on the slow chip.
split = u["breakdown"]["step_split_s"]
compute = split["forward"] + split["backward"] + split["update"]
grown = c["step_time_s"] - u["step_time_s"]
assert abs(grown - compute) <= 1e-6 * u["step_time_s"], (grown, compute)
assert c["breakdown"]["step_split_s"]["idle"] > 0  # the others wait for it
assert c["breakdown"]["critical_chip"] == [1, 2], c["breakdown"]  # the slow chip gated the step
assert "critical_chip" not in u["breakdown"]
assert l["step_time_s"] > u["step_time_s"] * 1.5, (l["step_time_s"], u["step_time_s"])
PY
# The report of a perturbed run maps its chips: the slow one outlined, the failed link marked.
"$tpusim" run "$study" --set 'perturbations={"chips": [{"chip": [1, 2], "compute_scale": 0.5}], "links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0}]}' \
  --out "$work/map" > "$work/map.txt"
grep -q "chips.svg" "$work/map.txt" && grep -q "^## Chips" "$work/map/report.md" && grep -q "<svg" "$work/map/chips.svg"
grep -q 'stroke="#e15759" stroke-width="2.5"><title>chip \[1,2\]: busy [0-9.]* %, speed 0.50' "$work/map/chips.svg"
grep -q 'stroke="#000000" stroke-width="3"><title>link \[0,0\] x+ at 0.00' "$work/map/chips.svg"
[ "$(grep -c "<svg" "$work/map/report.html")" -ge 3 ]  # timeline, memory and the chips, inline
"$tpusim" run "$study" --out "$work/plain" > /dev/null
[ ! -e "$work/plain/chips.svg" ] && ! grep -q "## Chips" "$work/plain/report.md"
# A slow chip: the reduced simulation (a normal replica and the slow chip's) is the full one.
"$tpusim" run "$study" --set 'perturbations={"chips": [{"chip": [1, 2], "compute_scale": 0.5}]}' --json \
  --no-symmetry > "$work/slow_chip_full.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
reduced, full = (json.load(open(f"{w}/{x}.json")) for x in ("slow_chip", "slow_chip_full"))
assert reduced["engine"]["simulation"].startswith("one of each of 2 kinds (by chip speed)"), reduced["engine"]
assert full["engine"]["simulation"].startswith("every core"), full["engine"]
def same(a, b, path=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            if k not in ("engine", "perturbations") or path:
                same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)
same(reduced, full)
PY
# plan ranks plans under the study's perturbations: every simulated plan runs with the slow chip
# (its result says so, and the slow chip gates it).
cat > "$work/space.json" <<'EOF2'
{"schema": "tpusim.plan_space/1", "kinds": ["data_parallel"], "remat": [false], "accumulation_steps": [1]}
EOF2
"$tpusim" plan "$study" --set 'perturbations={"chips": [{"chip": [1, 2], "compute_scale": 0.5}]}' \
  --space "$work/space.json" -j 2 --json > "$work/plan.json" 2> /dev/null
python3 - "$work" <<'PY'
import json, sys
plan = json.load(open(f"{sys.argv[1]}/plan.json"))
for p in [plan["best"]] + [t for t in plan["top"] if "result" in t]:
    r = p["result"]
    assert r["perturbations"]["slow_chips"] == [{"chip": [1, 2], "compute_scale": 0.5}], p["plan"]
    assert r["breakdown"]["critical_chip"] == [1, 2] and r["perturbations"]["slowdown"] > 1, p["plan"]
PY
# HBM apart from compute: each scale stretches its own part of the slow chip's compute, so the two
# slowdowns add up to the chip throttled as a whole (every task's time is its HBM-bound part
# plus the rest); the result lists the HBM scale where it is not the compute's.
chip() { echo "perturbations={\"chips\": [{\"chip\": [1, 2], \"compute_scale\": $1, \"hbm_bandwidth_scale\": $2}]}"; }
"$tpusim" run "$study" --set "$(chip 0.5 1)" --json > "$work/compute_only.json"
"$tpusim" run "$study" --set "$(chip 1 0.5)" --json > "$work/hbm_only.json"
"$tpusim" run "$study" --set "$(chip 0.5 0.5)" --json > "$work/both.json"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
u, c, h, b, whole = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "compute_only", "hbm_only", "both", "slow_chip"))
assert b["step_time_s"] == whole["step_time_s"], "both scales at 0.5 is the chip at half speed"
grown = lambda r: r["step_time_s"] - u["step_time_s"]
assert grown(c) > 0 and grown(h) > 0, (grown(c), grown(h))
assert abs(grown(c) + grown(h) - grown(b)) <= 1e-6 * u["step_time_s"], (grown(c), grown(h), grown(b))
assert h["perturbations"]["slow_chips"] == [{"chip": [1, 2], "compute_scale": 1.0, "hbm_bandwidth_scale": 0.5}], h["perturbations"]
assert "hbm_bandwidth_scale" not in b["perturbations"]["slow_chips"][0]
PY
bad() {
  local expect="$1"; shift
  if "$tpusim" run "$study" "$@" > "$work/out" 2> "$work/err"; then echo "FAIL: accepted $*"; exit 1; fi
  grep -qF -- "$expect" "$work/err" || { echo "FAIL: $* said:"; cat "$work/err"; exit 1; }
}
bad 'perturbations.chips[0].chip: found [9,0]' --set 'perturbations={"chips": [{"chip": [9, 0], "compute_scale": 0.5}]}'
bad 'perturbations.chips[0].compute_scale: found 0' --set 'perturbations={"chips": [{"chip": [0, 0], "compute_scale": 0}]}'
bad 'perturbations.chips[0].hbm_bandwidth_scale: found -0.5' --set 'perturbations={"chips": [{"chip": [0, 0], "compute_scale": 1, "hbm_bandwidth_scale": -0.5}]}'
bad 'perturbations.links[0].bandwidth_scale: found -1' --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": -1}]}'
bad '"cut_off_chips":[[0,0]]' --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0}, {"chip": [0, 0], "dimension": "y", "direction": "+", "bandwidth_scale": 0}]}'
bad 'perturbations.links[0].dimension: found "w"' --set 'perturbations={"links": [{"chip": [0, 0], "dimension": "w", "direction": "+", "bandwidth_scale": 0.5}]}'
bad 'perturbations.chaos' --set 'perturbations={"chaos": 1}'
bad 'perturbations.random.seed' --set 'perturbations={"random": {"slow_chip_fraction": 0.1, "compute_scale": 0.5}}'
bad 'perturbations.random.slow_chip_fraction: found 2' --set 'perturbations={"random": {"seed": 1, "slow_chip_fraction": 2, "compute_scale": 0.5}}'
bad 'perturbations.random.compute_scale' --set 'perturbations={"random": {"seed": 1, "slow_chip_fraction": 0.1}}'

# A failed link (0): routes go round it (engine.routes_detoured), so the step still runs, slower than
# the uniform pod and faster than with the link at a tenth of its bandwidth (the detour has the
# whole bandwidth of its three links); the trace's flows never cross it.
fail='perturbations={"links": [{"chip": [0, 0], "dimension": "x", "direction": "+", "bandwidth_scale": 0}]}'
"$tpusim" run "$study" --set "$fail" --json > "$work/failed.json"
"$tpusim" run "$study" --set "$fail" --out "$work/failed_out" --trace > /dev/null
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
u, f, slow = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "failed", "slow_link"))
assert f["engine"]["routes_detoured"] >= 1, f["engine"]
assert u["step_time_s"] < f["step_time_s"] < slow["step_time_s"], (u["step_time_s"], f["step_time_s"], slow["step_time_s"])
assert "routes_detoured" not in u["engine"]
PY
"$tpusim" run "$study" --out "$work/uniform_out" --trace > /dev/null
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def on_link(out):  # flows drawn on chip 0's +x link track (tid 100: the first link of the chip)
    t = json.load(open(f"{w}/{out}/trace.json"))
    return sum(1 for e in t["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0 and e["tid"] == 100)
assert on_link("uniform_out") > 0, "the uniform step uses chip 0's +x link"
assert on_link("failed_out") == 0, "a flow crossed the failed link"
# The trace names the failed link's track (and no track of the uniform run says it is perturbed).
names = lambda out: [e["args"]["name"] for e in json.load(open(f"{w}/{out}/trace.json"))["traceEvents"] if e.get("ph") == "M"]
assert "link +x (failed)" in names("failed_out"), [n for n in names("failed_out") if n.startswith("link")][:4]
assert not any("(" in n for n in names("uniform_out"))
PY
# A slow chip's track says its speed.
"$tpusim" run "$study" --set 'perturbations={"chips": [{"chip": [1, 1], "compute_scale": 0.5}]}' --out "$work/slow_out" --trace > /dev/null
grep -q '"chip [0-9]* (compute x0.5)"' "$work/slow_out/trace.json" || { echo "FAIL: the trace does not mark the slow chip"; exit 1; }

# Random stragglers: a seed draws the same chips and links every time (byte-identical results);
# each chip is slow with its probability (1: all of them, 0: none); the result lists what was
# drawn and the slowdown against the uniform pod, whose step is the uniform run's.
rnd() { echo "perturbations={\"random\": {\"seed\": $1, \"slow_chip_fraction\": $2, \"compute_scale\": 0.5, \"slow_link_fraction\": $3, \"link_bandwidth_scale\": 0.25}}"; }
"$tpusim" run "$study" --set "$(rnd 7 0.2 0.05)" --json > "$work/r7a.json"
"$tpusim" run "$study" --set "$(rnd 7 0.2 0.05)" --json > "$work/r7b.json"
"$tpusim" run "$study" --set "$(rnd 8 0.2 0.05)" --json > "$work/r8.json"
"$tpusim" run "$study" --set "$(rnd 7 1 0)" --json > "$work/all.json"
"$tpusim" run "$study" --set "$(rnd 7 0 0)" --json > "$work/none.json"
cmp -s "$work/r7a.json" "$work/r7b.json" || { echo "FAIL: the same seed gave different results"; exit 1; }
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
u, a, b, every, none = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "r7a", "r8", "all", "none"))
assert a["perturbations"]["slow_chips"] != b["perturbations"]["slow_chips"] or \
    a["perturbations"]["slow_links"] != b["perturbations"]["slow_links"], "two seeds drew the same"
assert len(every["perturbations"]["slow_chips"]) == 16, every["perturbations"]  # v3-32: 16 chips
assert "perturbations" not in none and none["step_time_s"] == u["step_time_s"], "probability 0 slows nothing"
for r in (a, b, every):
    p = r["perturbations"]
    assert p["uniform_step_time_s"] == u["step_time_s"], (p, u["step_time_s"])
    assert abs(p["slowdown"] - r["step_time_s"] / u["step_time_s"]) < 1e-12 and p["slowdown"] >= 1, p
PY
"$tpusim" run "$study" --set "$(rnd 7 0.2 0.05)" | grep -q "perturbed .* slow chips, .* slow links; .*x the uniform pod's step" ||
  { echo "FAIL: the summary does not say what was perturbed"; exit 1; }

# Their distribution: a sweep over seeds reports the step time's percentiles (nearest rank) and a
# histogram per setting, with the uniform pod's step.
"$tpusim" sweep "$study" --set "$(rnd 0 0.1 0.02)" --grid perturbations.random.seed=1..10 -j 2 --out "$work/seeds" 2> /dev/null
grep -q '^## Step time across seeds of `perturbations.random.seed`' "$work/seeds/report.md" || { echo "FAIL: no distribution in report.md"; exit 1; }
python3 - "$work/seeds" <<'PY'
import json, math, sys
d = sys.argv[1]
steps = sorted(json.loads(l)["result"]["step_time_s"] for l in open(f"{d}/results.jsonl"))
row = [l for l in open(f"{d}/report.md") if l.startswith("| all | 10 |")]
assert len(row) == 1, row
cells = [c.strip() for c in row[0].split("|")[1:-1]]
def human(s):  # the report's human_seconds
    for unit, f in (("s", 1), ("ms", 1e3), ("us", 1e6)):
        if s * f >= 1 or unit == "us": return f"{s * f:.3f} {unit}"
p90 = steps[math.ceil(0.9 * len(steps)) - 1]
assert cells[2] == human(steps[0]) and cells[6] == human(steps[-1]) and cells[4] == human(p90), (cells, steps)
PY
grep -q 'class="distribution"' "$work/seeds/sweep_distribution.svg" || { echo "FAIL: no histogram"; exit 1; }
# Stragglers from a distribution: each slow chip's speed drawn after it (every chip slow here), inside
# the uniform law's [low, high], all distinct, the same for the same seed; a normal law's around
# its mean; a bad law names its path.
law() { echo "perturbations={\"random\": {\"seed\": 3, \"slow_chip_fraction\": 1, \"compute_scale\": $1}}"; }
"$tpusim" run "$study" --set "$(law '{"distribution": "uniform", "low": 0.6, "high": 0.9}')" --json > "$work/law_a.json"
"$tpusim" run "$study" --set "$(law '{"distribution": "uniform", "low": 0.6, "high": 0.9}')" --json > "$work/law_b.json"
"$tpusim" run "$study" --set "$(law '{"distribution": "normal", "mean": 0.8, "sd": 0.02}')" --json > "$work/law_n.json"
cmp -s "$work/law_a.json" "$work/law_b.json" || { echo "FAIL: the same seed drew different speeds"; exit 1; }
python3 - "$work" <<'PY'
import json, statistics, sys
w = sys.argv[1]
u, a, n = (json.load(open(f"{w}/{x}.json")) for x in ("uniform", "law_a", "law_n"))
speeds = [c["compute_scale"] for c in a["perturbations"]["slow_chips"]]
assert len(speeds) == 16 and len(set(speeds)) == 16, speeds  # v3-32: 16 chips, each its own draw
assert all(0.6 <= x <= 0.9 for x in speeds), speeds
normal = [c["compute_scale"] for c in n["perturbations"]["slow_chips"]]
assert abs(statistics.mean(normal) - 0.8) < 0.03 and max(normal) < 0.9 and min(normal) > 0.7, normal
# The step waits for the slowest chip: slower than the uniform pod, and than with all at the fastest speed.
assert a["step_time_s"] > u["step_time_s"] / 0.9, (a["step_time_s"], u["step_time_s"])
PY
bad 'perturbations.random.compute_scale.distribution: found "pareto"' --set "$(law '{"distribution": "pareto", "low": 0.6, "high": 0.9}')"
bad 'perturbations.random.compute_scale.high: found 0.5, expected a scale at least low' --set "$(law '{"distribution": "uniform", "low": 0.6, "high": 0.5}')"
bad 'perturbations.random.compute_scale.sd' --set "$(law '{"distribution": "normal", "mean": 0.8}')"
echo "perturbations: ok"
