#!/usr/bin/env bash
# `run --out` writes report.html: report.md as one self-contained page, its charts inline. Opened
# in headless Chromium (from disk, no network): the DOM holds both charts as SVG elements, every
# table of report.md with its rows, its headings, and what the markdown marks bold and as code.
set -euo pipefail
tpusim="$1"; root="$2"; here=$(dirname "$0")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$tpusim" run "$root/configs/studies/gpipe-transformer-v3-k8.json" --out "$work/run" > /dev/null
bash "$here/chromium_dom.sh" "$work/run/report.html" > "$work/dom.html"
count() { grep -o "$1" "$2" | wc -l; }
[ "$(count '<svg' "$work/dom.html")" -ge 2 ] || { echo "FAIL: the charts are not inline"; exit 1; }
[ "$(count '<rect' "$work/dom.html")" -ge 20 ] || { echo "FAIL: the timeline's bars did not render"; exit 1; }
tables_md=$(grep -c '^| --- \|^| ---:' "$work/run/report.md")
[ "$(count '<table' "$work/dom.html")" = "$tables_md" ] || { echo "FAIL: tables differ from report.md"; exit 1; }
rows_md=$(grep '^|' "$work/run/report.md" | grep -vc '^| ---\|^| ---:')
[ "$(count '<tr' "$work/dom.html")" = "$rows_md" ] || { echo "FAIL: table rows differ from report.md"; exit 1; }
[ "$(count '<h2' "$work/dom.html")" = "$(grep -c '^## ' "$work/run/report.md")" ] || { echo "FAIL: headings"; exit 1; }
grep -q '<strong>[0-9]' "$work/dom.html" || { echo "FAIL: bold"; exit 1; }
grep -q '<code>backward ' "$work/dom.html" || { echo "FAIL: code"; exit 1; }
grep -q 'src="' "$work/dom.html" && { echo "FAIL: an image refers to a file instead of being inline"; exit 1; }
echo "1 passed, 0 failed"
