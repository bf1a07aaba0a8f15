#!/usr/bin/env bash
# `tpusim sweep` end to end: a failing point does not stop the others; killing a sweep with
# SIGKILL and resuming it gives the same rows as an uninterrupted run (none lost, none
# duplicated); three shards merged equal the unsharded sweep; outputs are deterministic.
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
study="$root/configs/studies/gpipe-throughput-transformer48.json"
grid=(--grid schedule.stages=1,2,4,8 --grid schedule.microbatches=1,2,3,4,8,16 --grid batch=32,64)  # M=3 is invalid
passed=0

# 1. Uninterrupted, 2 workers: 48 points, 8 fail (M=3), exit code 1, the failures recorded.
set +e
"$tpusim" sweep "$study" "${grid[@]}" -j 2 --out "$work/full" 2> /dev/null
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: exit code $rc with failed points, expected 1"; exit 1; }
[ "$(tail -n +2 "$work/full/results.csv" | wc -l)" -eq 48 ] || { echo "FAIL: expected 48 rows"; exit 1; }
[ "$(grep -c 'multiple of replicas x microbatches' "$work/full/results.csv")" -eq 8 ] || { echo "FAIL: expected 8 recorded failures"; exit 1; }
for f in report.html report.md sweep.json results.jsonl; do [ -s "$work/full/$f" ] || { echo "FAIL: no $f"; exit 1; }; done
# The reports name the study relative to themselves (the folder moves with its study).
rel=$(realpath --relative-to="$work/full" "$study")
grep -qF "Study \`$rel\`" "$work/full/report.md" || { echo "FAIL: report.md does not name the study as $rel"; exit 1; }
! grep -qF -e "\`$root" -e "<code>$root" "$work/full/report.md" "$work/full/report.html" || { echo "FAIL: a report embeds the absolute path $root"; exit 1; }
passed=$((passed + 1))

# 2. Same sweep with -j 1: byte-identical outputs whatever the completion order.
"$tpusim" sweep "$study" "${grid[@]}" -j 1 --out "$work/serial" 2> /dev/null || true
cmp "$work/full/results.csv" "$work/serial/results.csv"
cmp "$work/full/results.jsonl" "$work/serial/results.jsonl"
cmp "$work/full/report.html" "$work/serial/report.html"
passed=$((passed + 1))

# 3. SIGKILL part-way, then --resume.
"$tpusim" sweep "$study" "${grid[@]}" -j 1 --out "$work/killed" 2> /dev/null &
pid=$!
for _ in $(seq 1 500); do
  n=$( (cat "$work/killed/results.jsonl" 2>/dev/null || true) | wc -l)
  [ "$n" -ge 10 ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
before=$(wc -l < "$work/killed/results.jsonl")
[ "$before" -lt 48 ] || { echo "FAIL: the sweep finished before it could be killed"; exit 1; }
"$tpusim" sweep "$study" "${grid[@]}" -j 2 --out "$work/killed" --resume 2> /dev/null || true
cmp "$work/full/results.csv" "$work/killed/results.csv"
# The full records (per-core figures too) survive the resume byte for byte: the sweep keeps only
# their summaries in memory and copies each full line from where it was written.
cmp "$work/full/results.jsonl" "$work/killed/results.jsonl"
python3 - "$work/killed/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["index"] for r in rows] == sorted(r["index"] for r in rows)
ran = [r for r in rows if r["result"]]
assert ran and all(isinstance(r["result"]["cores"], list) and r["result"]["cores"] for r in ran)
PY
[ "$(tail -n +2 "$work/killed/results.csv" | sort | uniq -d | wc -l)" -eq 0 ]
passed=$((passed + 1))

# 4. Without --resume an existing sweep is not overwritten (bad input).
set +e
"$tpusim" sweep "$study" "${grid[@]}" --out "$work/full" 2> /dev/null
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: overwriting without --resume gave $rc, expected 2"; exit 1; }
passed=$((passed + 1))

# 5. Three shards (one through SLURM's variables) merged equal the unsharded sweep.
"$tpusim" sweep "$study" "${grid[@]}" --shard 0/3 --out "$work/s0" 2> /dev/null || true
"$tpusim" sweep "$study" "${grid[@]}" --shard 1/3 --out "$work/s1" 2> /dev/null || true
SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=3 "$tpusim" sweep "$study" "${grid[@]}" --out "$work/s2" 2> /dev/null || true
[ "$(tail -n +2 "$work/s2/results.csv" | wc -l)" -eq 16 ] || { echo "FAIL: SLURM shard size"; exit 1; }
"$tpusim" merge "$work/s0" "$work/s1" "$work/s2" --out "$work/merged" > /dev/null || true
cmp "$work/full/results.csv" "$work/merged/results.csv"
cmp "$work/full/results.jsonl" "$work/merged/results.jsonl"
passed=$((passed + 1))

# Resuming refuses what would mix or lose results: another shard, a missing sweep.json, a
# results.jsonl corrupt before its last line (each exit 2, naming what is wrong).
refuse() {  # name, expected text, command...
  local name="$1" text="$2"; shift 2
  set +e; "$@" > /dev/null 2> "$work/refuse_err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] && grep -q -- "$text" "$work/refuse_err" || { echo "FAIL $name: exit $rc"; cat "$work/refuse_err"; exit 1; }
}
refuse "other shard" "--shard" "$tpusim" sweep "$study" "${grid[@]}" --shard 1/3 --out "$work/s0" --resume
cp -r "$work/s1" "$work/nometa"; rm "$work/nometa/sweep.json"
refuse "no sweep.json" "sweep.json" "$tpusim" sweep "$study" "${grid[@]}" --shard 1/3 --out "$work/nometa" --resume
cp -r "$work/s1" "$work/corrupt"; sed -i '2s/.*/not a record/' "$work/corrupt/results.jsonl"
refuse "corrupt middle" "line 2" "$tpusim" sweep "$study" "${grid[@]}" --shard 1/3 --out "$work/corrupt" --resume
passed=$((passed + 1))

# A sweep into a directory another sweep holds (its lock, taken here by this shell) is refused.
mkdir -p "$work/locked"
exec 9> "$work/locked/.lock"
flock -n 9
refuse "locked directory" "another sweep is writing into it" "$tpusim" sweep "$study" "${grid[@]}" --out "$work/locked"
exec 9>&-
"$tpusim" sweep "$study" --grid batch=32 --out "$work/locked" > /dev/null 2>&1 || { echo "FAIL: the released directory stayed locked"; exit 1; }
passed=$((passed + 1))

# A point that runs past --point-timeout is killed and recorded as failed, the sweep goes on
# and exits 1 (a 2048-core step takes far longer than 1 ms); a generous limit changes nothing.
set +e
"$tpusim" sweep "$root/configs/studies/resnet50-lars-v3-2048.json" --grid batch=32768,65536 --point-timeout 0.001 \
  --out "$work/timeout" -j 2 > /dev/null 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: timed-out points gave exit $rc"; exit 1; }
[ "$(grep -c 'timed out after 0.001 s' "$work/timeout/results.csv")" -eq 2 ] || { echo "FAIL: timeouts not recorded"; exit 1; }
"$tpusim" sweep "$root/configs/studies/resnet50-lars-v3-2048.json" --grid batch=32768 --point-timeout 600 \
  --out "$work/no_timeout" > /dev/null 2>&1
grep -q "^32768,0\." "$work/no_timeout/results.csv" || { echo "FAIL: a point within its time limit failed"; exit 1; }
passed=$((passed + 1))

# On a terminal (script gives the sweep a pty) a failed point is listed on its own line above
# the progress bar, which keeps updating.
script -qec "$tpusim sweep $root/configs/studies/default.json --grid model.layers=2,-1 --out $work/tty -j 1" \
  /dev/null > "$work/tty.raw" || true  # the sweep's own exit code says a point failed
tr '\r' '\n' < "$work/tty.raw" > "$work/tty.txt"
grep -aq "FAILED model.layers=-1: .*model.layers: found -1" "$work/tty.txt" || { echo "FAIL: no failure line on a TTY"; cat -v "$work/tty.txt"; exit 1; }
grep -aq "2/2  failed 1" "$work/tty.txt" || { echo "FAIL: no final progress line"; cat -v "$work/tty.txt"; exit 1; }
passed=$((passed + 1))

# Issue 30: a compared alternative (remat) with failed points ends like any sweep with failed
# points (exit 1), the comparison showing the failed cells and the headline counting them.
set +e
"$tpusim" sweep "$root/configs/studies/gpipe-transformer-v3-k8.json" --grid schedule.microbatches=16,64 \
  --grid schedule.remat=true,false --out "$work/remat" > /dev/null 2> "$work/remat.err"
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc for a remat comparison with failed points"; cat "$work/remat.err"; exit 1; }
grep -q "4 of 4 points recorded, 2 failed." "$work/remat/report.md" || { echo "FAIL: headline"; exit 1; }
grep -q "^| 64 | failed | failed |" "$work/remat/report.md" || { echo "FAIL: no failed comparison row"; exit 1; }
passed=$((passed + 1))

# A sweep over slices whose --set moves the study to another generation: the study's own slice
# (v3-32) is not a v4 slice, every point's is, so the sweep runs (each point checked on its own);
# a --set that no point mends is still the sweep's error, the study's own message (exit 2).
"$tpusim" sweep "$root/configs/studies/default.json" --set 'hardware="tpu-v4"' --set megacore=true \
  --set model.layers=2 --set batch=64 --grid slice=v4-16,v4-32 --out "$work/generations" > /dev/null 2>&1
[ "$(tail -n +2 "$work/generations/results.csv" | grep -c ',true,')" -eq 2 ] || { echo "FAIL: v4 slice sweep"; exit 1; }
set +e
"$tpusim" sweep "$root/configs/studies/default.json" --set 'hardware="tpu-v4"' --grid batch=64,128 \
  --out "$work/wrong" > /dev/null 2> "$work/wrong.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q 'slice: found "v3-32", expected a slice of tpu-v4' "$work/wrong.err" \
  || { echo "FAIL: exit $rc for a study no point mends"; cat "$work/wrong.err"; exit 1; }
passed=$((passed + 1))

echo "$passed passed, 0 failed"
