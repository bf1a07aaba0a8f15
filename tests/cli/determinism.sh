#!/usr/bin/env bash
# Same study twice -> byte-identical result.json and trace.json.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for i in 1 2; do
  "$tpusim" run "$root/configs/studies/default.json" --out "$work/$i" --trace > /dev/null
done
cmp "$work/1/result.json" "$work/2/result.json"
cmp "$work/1/trace.json" "$work/2/trace.json"
echo "1 passed, 0 failed"
