#!/usr/bin/env bash
# Outputs that cannot be written are never silent: a file whose write hits a full disk (its
# temporary twin linked to /dev/full, which fails every write with ENOSPC) makes run, sweep and
# validate exit 2 naming the file, and the previous version of the file stays intact.
set -uo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
failed=0
expect_full() {  # name, file that must survive, command...
  local name="$1" keep="$2"; shift 2
  echo "previous" > "$keep"
  ln -sf /dev/full "$keep.tmp"
  "$@" > "$work/out" 2> "$work/err"
  local rc=$?
  if [ "$rc" -ne 2 ]; then echo "FAIL $name: exit $rc, expected 2"; failed=$((failed + 1)); return; fi
  if ! grep -q "$(basename "$keep")" "$work/err"; then echo "FAIL $name: message lacks the file"; cat "$work/err"; failed=$((failed + 1)); return; fi
  if [ "$(cat "$keep")" != "previous" ]; then echo "FAIL $name: the previous file was replaced"; failed=$((failed + 1)); return; fi
  if [ -e "$keep.tmp" ]; then echo "FAIL $name: the temporary file was left behind"; failed=$((failed + 1)); fi
}
study="$root/configs/studies/default.json"
mkdir -p "$work/run"
expect_full run "$work/run/result.json" "$tpusim" run "$study" --set slice=v3-8 --set batch=32 --out "$work/run"
mkdir -p "$work/sweep"
expect_full sweep "$work/sweep/report.html" "$tpusim" sweep "$study" --set slice=v3-8 --grid batch=32,64 --out "$work/sweep"
mkdir -p "$work/validate"
expect_full validate "$work/validate/validation.html" "$tpusim" validate mlperf06-resnet-v3-32 --out "$work/validate"
echo "$((3 - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
