#!/usr/bin/env bash
# Same study twice -> byte-identical outputs (result.json, report.md, SVGs, trace.json), for a
# data-parallel and a pipeline study.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
n=0
for study in default.json gpipe-amoebanet-v2-k4.json; do
  for i in 1 2; do
    "$tpusim" run "$root/configs/studies/$study" --out "$work/$study.$i" --trace > /dev/null
  done
  for f in result.json report.md timeline.svg memory.svg trace.json; do
    cmp "$work/$study.1/$f" "$work/$study.2/$f"
    n=$((n + 1))
  done
done
echo "$n passed, 0 failed"
