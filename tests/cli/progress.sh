#!/usr/bin/env bash
# Long runs talk: a run past a couple of seconds reports its progress on stderr (a line every
# few seconds when stderr is not a terminal) while stdout keeps only the result; a short run
# prints nothing on stderr.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/default.json"
"$tpusim" run "$study" --json > "$work/short.json" 2> "$work/short.raw"
# Under AddressSanitizer (make sanitize) its runtime warns once about SimGrid's stack switching
# (google/sanitizers#189); that notice is the sanitizer's, not tpusim's output.
grep -v -e 'ASan is ignoring requested __asan_handle_no_return' -e '^False positive error reports may follow' \
  -e '^For details see https://github.com/google/sanitizers/issues/189' -e '^$' "$work/short.raw" > "$work/short.err" || true
[ ! -s "$work/short.err" ] || { echo "FAIL: a short run wrote to stderr"; cat "$work/short.err"; exit 1; }
"$tpusim" run "$study" --set model.layers=12000 --json > "$work/long.json" 2> "$work/long.err"
python3 -c "import json; json.load(open('$work/long.json'))"  # stdout is the result alone
grep -Eq "^tpusim: simulating: [0-9]+ of [0-9]+ tasks \([0-9.]+ %\), simulated .* s, [0-9]+ s elapsed$" "$work/long.err" ||
  { echo "FAIL: no progress line"; cat "$work/long.err"; exit 1; }
echo "progress: ok ($(wc -l < "$work/long.err") lines)"
