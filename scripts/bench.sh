#!/usr/bin/env bash
# Runs the benchmarks: every engine benchmark in its own process (SimGrid allows one
# simulation per process), the others together. Usage: scripts/bench.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$build/bench/bench_engine"
for name in $("$bin" --benchmark_list_tests | grep '^BM_Engine_'); do
  "$bin" --benchmark_filter="^${name}\$" --benchmark_format=console 2>&1 | grep -E "^BM_|^-|^Benchmark"
done
"$bin" --benchmark_filter='-^BM_Engine_' 2>/dev/null | grep -E '^BM_'
"$build/bench/bench_models" 2>/dev/null | grep -E '^BM_'
"$build/bench/bench_functional" --benchmark_min_time=3 2>/dev/null | grep -E '^BM_'
# The validation suite end to end (every case of configs/validation, 2 at a time), timed.
start=$(date +%s%N)
"$build/cli/tpusim" validate -j 2 > /dev/null 2>&1 || true
echo "validate (every case, -j 2): $(( ($(date +%s%N) - start) / 1000000 )) ms"
# --sensitivity and --intervals over the cases whose every variant keeps the representative-cluster
# reduction (the spatially split SSD cases' overlap variant simulates every core: minutes each).
quick=$(ls "$root/configs/validation"/*.json | xargs -n 1 basename | sed 's/\.json$//' | grep -v -e ssd-v3-1024 -e ssd-v3-2048)
start=$(date +%s%N)
"$build/cli/tpusim" validate -j 2 --sensitivity $quick > /dev/null 2>&1 || true
echo "validate --sensitivity (-j 2, $(echo $quick | wc -w) cases): $(( ($(date +%s%N) - start) / 1000000 )) ms"
start=$(date +%s%N)
"$build/cli/tpusim" validate -j 2 --intervals $quick > /dev/null 2>&1 || true
echo "validate --intervals (-j 2, $(echo $quick | wc -w) cases): $(( ($(date +%s%N) - start) / 1000000 )) ms"
# A 48-point sweep through a 2-worker Dask LocalCluster against sweep -j 2 (the Python package).
if [ -d "$build/python/tpusim" ] && /usr/bin/python3 -c "import distributed" 2> /dev/null; then
  PYTHONPATH="$build/python" /usr/bin/python3 "$root/bench/dask_sweep.py" "$build/cli/tpusim" 2> /dev/null
fi
# tpusim plan on the issue's two cases (bench/studies), timed, with candidates per second.
for s in plan-transformer48-v3-32 plan-transformer-l-v3-512; do
  start=$(date +%s%N)
  "$build/cli/tpusim" plan "bench/studies/$s.json" -j 2 --point-timeout 20 --json > "/tmp/tpusim-bench-$s.json" 2> /dev/null || true
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  python3 - "/tmp/tpusim-bench-$s.json" "$ms" "$s" <<'PY'
import json, sys
p, ms, name = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
best = p["best"]["plan"] if p["best"] else "none fits"
print(f"plan {name}: {ms} ms, {p['evaluated']} candidates ({p['evaluated'] / (ms / 1000):.0f}/s), "
      f"{p['simulated']} simulated, best: {best}")
PY
done
# One `tpusim run`, timed: its label, then the run's arguments. Prints the wall time, the peak
# resident memory, how the step was simulated (tasks and flows played, flows per second).
timed_run() {
  local label="$1"; shift
  local start ms
  start=$(date +%s%N)
  /usr/bin/time -f "%M" -o /tmp/tpusim-bench-rss "$build/cli/tpusim" run "$@" --json > /tmp/tpusim-bench-run.json 2> /dev/null || true
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  python3 - /tmp/tpusim-bench-run.json "$ms" "$label" "$(tail -n 1 /tmp/tpusim-bench-rss)" <<'PY'
import json, sys
r, ms, label, rss_kb = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
e = r["engine"]
print(f"run {label}: {ms} ms, {rss_kb / 1024:.0f} MB peak, step {r['step_time_s'] * 1e3:.3f} ms; "
      f"{e['tasks_simulated']} tasks and {e['flows_simulated']} flows simulated "
      f"({e['flows_simulated'] / (ms / 1000):.0f} flows/s); {e['simulation']}")
PY
}
# One large mesh run: Transformer-L on v3-512, batch:256 x model:2 with the sequence on the
# model axis and sharded updates (its collectives simulated on representative rings).
timed_run "mesh seq-sharded v3-512" bench/studies/plan-transformer-l-v3-512.json --set \
  'schedule={"kind":"mesh","mesh":[["batch",256],["model",2]],"layout":{"batch":"batch","seq":"model"},"weight_update":"sharded"}'
# A spatially partitioned SSD (MLPerf's larger runs: the image's height over 2 cores, batch-norm
# statistics over 16 replicas) on v3-1024.
timed_run "spatial SSD v3-1024" configs/studies/ssd-resnet34-v3-32.json --set slice=v3-1024 --set batch=2048 --set \
  'schedule={"kind":"mesh","mesh":[["batch",512],["spatial",2]],"layout":{"batch":"batch","height":"spatial"},"batch_norm_group":16}'
# Engine scale (pod-sized slices): the spatially split SSD of MLPerf's v3-2048 run, 4096 GPipe
# replicas on a 64x64 pod, and data-parallel ResNet-50 on a full TPU-v4 pod (4096 chips).
timed_run "spatial SSD batch:512 x spatial:4 v3-2048" bench/studies/ssd-spatial-v3-2048.json
timed_run "GPipe K=2 M=8 x 4096 replicas, 64x64 pod" bench/studies/gpipe-4096-replicas-64x64.json
timed_run "data-parallel ResNet-50 v4-8192" configs/studies/resnet50-lars-v4-8192.json
# The largest mesh: a 175B Transformer as batch:512 x model:8 on v4-8192 (issue 39: 6.7 GB and 48 s
# before the tasks were packed and the collective plans kept only their simulated rings).
timed_run "mesh 175B batch:512 x model:8 v4-8192" bench/studies/transformer-175b-mesh-v4-8192.json
# PaLM 540B on two 3072-chip pods (12-way model x 256-way fully sharded, layers' inputs split).
timed_run "PaLM 540B 2 x 3072 chips" configs/studies/palm-540b-v4-6144.json
