#!/usr/bin/env bash
# Runs the benchmarks: every engine benchmark in its own process (SimGrid allows one
# simulation per process), the others together. Usage: scripts/bench.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
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
start=$(date +%s%N)
"$build/cli/tpusim" validate -j 2 --sensitivity > /dev/null 2>&1 || true
echo "validate --sensitivity (-j 2): $(( ($(date +%s%N) - start) / 1000000 )) ms"
