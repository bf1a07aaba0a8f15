#!/usr/bin/env bash
# Opens a sweep's report.html in headless Chromium (from disk, no network) and checks what it
# renders: the DOM Chromium builds holds the three charts (throughput, bubble heatmaps, memory)
# as SVG elements with their data points, and the table of every point.
set -euo pipefail
tpusim="$1"; root="$2"; here=$(dirname "$0")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$tpusim" sweep "$root/configs/studies/gpipe-throughput-transformer48.json" --grid schedule.stages=2,4,8 \
  --grid schedule.microbatches=1,4,32 --out "$work/sweep" 2> /dev/null
bash "$here/chromium_dom.sh" "$work/sweep/report.html" > "$work/dom.html"
svgs=$(grep -o '<svg' "$work/dom.html" | wc -l)
circles=$(grep -o '<circle' "$work/dom.html" | wc -l)
rows=$(grep -o '<tr' "$work/dom.html" | wc -l)
[ "$svgs" -ge 3 ] || { echo "FAIL: $svgs SVG charts rendered"; exit 1; }
[ "$circles" -ge 9 ] || { echo "FAIL: $circles data points rendered (9 points swept)"; exit 1; }
[ "$rows" -ge 10 ] || { echo "FAIL: $rows table rows rendered"; exit 1; }
grep -q "examples/s" "$work/dom.html" || { echo "FAIL: the throughput chart's axis label is missing"; exit 1; }
echo "1 passed, 0 failed"
