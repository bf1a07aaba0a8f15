#!/usr/bin/env bash
# Every broken input of the catalogue (cases.tsv beside the files) must give exit code 2 and
# a message containing the expected text (the JSON path and value); none may crash or hang.
set -u
: "${TPUSIM:?set TPUSIM to the tpusim binary}"
dir="$1"
cd "$dir" || exit 1
failed=0
count=0
while IFS=$'\t' read -r name args expected; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  count=$((count + 1))
  # shellcheck disable=SC2086
  out=$(timeout 20 "$TPUSIM" $args 2>&1)
  rc=$?
  if [[ $rc -ne 2 ]]; then
    echo "FAIL $name: exit code $rc, expected 2"; echo "$out" | head -5; failed=$((failed + 1)); continue
  fi
  if [[ "$out" != *"$expected"* ]]; then
    echo "FAIL $name: message lacks '$expected'"; echo "$out" | head -5; failed=$((failed + 1)); continue
  fi
done < cases.tsv
echo "$((count - failed)) passed, $failed failed"
[[ $failed -eq 0 && $count -ge 30 ]]
