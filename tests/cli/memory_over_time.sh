#!/usr/bin/env bash
# HBM over time: the trace carries one counter track per core (the memory categories as its
# series) whose highest sample is the core's peak in result.json, reached at cores[].peak_at_s
# in cores[].peak_task; the summary and report.md name the peak's time and task, cores that peak
# alike in one row.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for study in default.json gpipe-transformer-v3-k8.json; do
  "$tpusim" run "$root/configs/studies/$study" --out "$work/$study" --trace > "$work/$study.txt"
  grep -q "^  peak at  .* on core [0-9]*, in " "$work/$study.txt" || { echo "FAIL: no peak line"; exit 1; }
  grep -q "Each core's peak and the task running it" "$work/$study/report.md" || { echo "FAIL: report.md"; exit 1; }
  # Cores that peak alike share a row: data parallelism's 32 replicas are one row; the
  # pipeline's stages peak at different times, one row each.
  rows=$(sed -n '/Each core.s peak/,$p' "$work/$study/report.md" | grep -c '^| [0-9]' || true)
  case "$study" in
    default.json) grep -q '^| 0-31 | .* | backward output |$' "$work/$study/report.md" && [ "$rows" = 1 ] ||
      { echo "FAIL: the replicas' peaks are not one row ($rows)"; exit 1; } ;;
    *) [ "$rows" = 8 ] || { echo "FAIL: $rows rows for 8 stages"; exit 1; } ;;
  esac
  python3 - "$work/$study" "$study" <<'PY'
import json, sys
d, name = sys.argv[1], sys.argv[2]
r = json.load(open(f"{d}/result.json"))
events = json.load(open(f"{d}/trace.json"))["traceEvents"]
series = {}
for e in events:
    if e["ph"] == "C":
        assert set(e["args"]) == {"weights", "optimizer", "gradients", "activations", "workspace"}, e
        core = int(e["name"].split()[2])
        series.setdefault(core, []).append((e["ts"], sum(e["args"].values())))
assert series, "no counter tracks"
for core, samples in series.items():
    c = r["cores"][core]
    assert [t for t, _ in samples] == sorted(t for t, _ in samples), core
    top = max(v for _, v in samples)
    assert abs(top - c["peak_hbm_bytes"]) <= 1e-9 * c["peak_hbm_bytes"], (core, top, c["peak_hbm_bytes"])
    first = min(t for t, v in samples if abs(v - top) <= 1e-9 * top)
    assert abs(first - c["peak_at_s"] * 1e6) <= 1e-3, (core, first, c["peak_at_s"])
    assert c["peak_task"], core
print(f"{name}: {len(series)} counter tracks match the peaks")
PY
done
