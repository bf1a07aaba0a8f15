#!/usr/bin/env bash
# Opens a sweep's report.html in headless Chromium and takes a screenshot: the report must
# render from disk with no network. Skipped (exit 77) where Chromium is not installed.
set -euo pipefail
tpusim="$1"; root="$2"
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then echo "chromium not installed: skipped"; exit 77; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$tpusim" sweep "$root/configs/studies/gpipe-throughput-transformer48.json" --grid schedule.stages=2,4,8 \
  --grid schedule.microbatches=1,4,32 --out "$work/sweep" 2> /dev/null
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$work/profile" --window-size=1200,1600 \
  --screenshot="$work/report.png" "file://$work/sweep/report.html" > /dev/null 2>&1
size=$(stat -c %s "$work/report.png")
[ "$size" -gt 20000 ] || { echo "FAIL: screenshot of $size bytes"; exit 1; }
echo "1 passed, 0 failed"
