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
# On a terminal (script gives the run one) the line refreshes in place and is erased when the run
# ends: the last thing on the terminal before the summary is the erase, not a stale percentage.
script -qec "\"$tpusim\" run \"$study\" --set model.layers=12000 > /dev/null" "$work/tty.log" > /dev/null
python3 - "$work/tty.log" <<'PY'
import sys
text = open(sys.argv[1], "rb").read()
assert b"\rtpusim: simulating: " in text, text[:200]
last = text.rfind(b"\rtpusim: simulating: ")
assert text.find(b"\r\x1b[K", last) > last, text[last:last + 200]  # erased after the last refresh
assert b"\n" not in text[last:text.find(b"\r\x1b[K", last)], "no newline left after the progress line"
PY
echo "progress: ok ($(wc -l < "$work/long.err") lines)"
