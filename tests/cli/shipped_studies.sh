#!/usr/bin/env bash
# Every shipped study checks and runs; every shipped hardware file and slice describes.
set -euo pipefail
tpusim="$1"; root="$2"
n=0
for study in "$root"/configs/studies/*.json; do
  "$tpusim" check "$study" > /dev/null
  "$tpusim" run "$study" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["schema"]=="tpusim.result/1" and j["step_time_s"]>0, j'
  n=$((n + 1))
done
for hw in "$root"/configs/hardware/*.json; do
  "$tpusim" describe hardware "$(basename "$hw" .json)" > /dev/null
  "$tpusim" describe hardware "$(basename "$hw" .json)" --json | python3 -c 'import json,sys; json.load(sys.stdin)'
  n=$((n + 1))
done
for slice in v2-8 v2-512 v3-32 v3-2048; do
  "$tpusim" describe slice "$slice" > /dev/null
  n=$((n + 1))
done
echo "$n passed, 0 failed"
