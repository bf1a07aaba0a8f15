#!/usr/bin/env bash
# A kernel the generation never had is a what-if, and the result says so: flash attention on v3
# (core.flash_attention_kernel false, with its source) adds a note to run --json and the
# summary; on v4 (true) and with standard attention on v3 there is none.
set -euo pipefail
tpusim="$1"; root="$2"
study="$root/configs/studies/transformer-2.7b-v3-512.json"
small=(--set model.layers=2 --set 'schedule={"kind":"data_parallel","weight_update":"fully_sharded"}')
note() { "$tpusim" run "$study" "${small[@]}" "$@" --json | python3 -c '
import json, sys
notes = json.load(sys.stdin).get("notes", [])
print(sum(1 for n in notes if n.startswith("flash attention on ") and " is a what-if: " in n))'; }
[ "$(note --set 'model.attention="flash"')" = 1 ] || { echo "FAIL: flash on v3 is not said to be a what-if"; exit 1; }
[ "$(note)" = 0 ] || { echo "FAIL: a what-if note without flash"; exit 1; }
[ "$(note --set 'model.attention="flash"' --set hardware=tpu-v4 --set slice=v4-512)" = 0 ] || { echo "FAIL: flash on v4 called a what-if"; exit 1; }
summary=$("$tpusim" run "$study" "${small[@]}" --set 'model.attention="flash"')
grep -q "note .*flash attention on tpu-v3 is a what-if" <<< "$summary" ||
  { echo "FAIL: the summary does not say it"; exit 1; }
described=$("$tpusim" describe hardware tpu-v3)
grep -q "flash attention kernel .*no (a what-if)" <<< "$described" || { echo "FAIL: describe hardware"; exit 1; }
echo "flash what-if: ok"
