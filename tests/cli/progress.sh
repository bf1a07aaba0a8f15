#!/usr/bin/env bash
# Long runs talk: a run past a couple of seconds reports its progress on stderr (a line every
# few seconds when stderr is not a terminal) while stdout keeps only the result; a short run
# prints nothing on stderr.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
"$tpusim" run "$study" --json > "$work/short.json" 2> "$work/short.err"
[ ! -s "$work/short.err" ] || { echo "FAIL: a short run wrote to stderr"; cat "$work/short.err"; exit 1; }
"$tpusim" run "$study" --set model.layers=12000 --json > "$work/long.json" 2> "$work/long.err"
python3 -c "import json; json.load(open('$work/long.json'))"  # stdout is the result alone
grep -Eq "^tpusim: simulating: [0-9]+ of [0-9]+ tasks \([0-9.]+ %\), simulated .* s, [0-9]+ s elapsed$" "$work/long.err" ||
  { echo "FAIL: no progress line"; cat "$work/long.err"; exit 1; }
echo "progress: ok ($(wc -l < "$work/long.err") lines)"
