#!/usr/bin/env bash
# 8-bit matmuls (issue 62, study key precision.matmul): the layers' products with a weight run
# at the chip's int8 peak (v5e's file: 2 x bf16), each operand quantized first by a vector pass
# that reads it as stored and writes it at one byte. Oracles on a dense MLP (every product has a
# weight) trained data-parallel on a v5e-8: the MXU part of the compute split halves exactly;
# the hardware FLOPs are the same; at 8192 examples a chip the step is faster, the quantize
# passes showing in the rest of the compute; at 8 examples a chip the matmuls are HBM-bound on
# their weights and quantizing them (read 2 bytes, write 1, read 1 again) makes the step slower;
# the quantized copies are transient, so the HBM peak is unchanged; the run says it is in int8;
# chips without the mode refuse it (tests/cli/bad/cases.tsv).
set -euo pipefail
tpusim="$1"; root="$2"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mlp='{"kind":"mlp","layers":4,"width":8192,"input":8192,"classes":8192}'
for batch in 64 65536; do
  for p in bf16 int8; do
    "$tpusim" run "$root/configs/studies/default.json" --set hardware=tpu-v5e --set slice=v5e-8 \
      --set batch=$batch --set "model=$mlp" --set 'schedule={"kind":"data_parallel"}' \
      --set "precision={\"matmul\":\"$p\"}" --json > "$work/$p-$batch.json"
  done
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
for batch in (64, 65536):
    b, q = (json.load(open(f"{w}/{p}-{batch}.json")) for p in ("bf16", "int8"))
    cb, cq = b["breakdown"]["compute_split_s"], q["breakdown"]["compute_split_s"]
    assert abs(cq["mxu"] - cb["mxu"] / 2) <= 1e-6 * cb["mxu"], (batch, cb, cq)
    assert q["hardware_flops_per_step"] == b["hardware_flops_per_step"], batch
    assert q["peak_hbm_bytes"] == b["peak_hbm_bytes"], batch
    assert cq["other"] > cb["other"], (batch, cb, cq)
    assert any("int8" in n and "precision.matmul" in n for n in q["notes"]), q.get("notes")
    assert not any("precision.matmul" in n for n in b.get("notes", [])), b.get("notes")
    if batch == 65536:
        assert q["step_time_s"] < 0.9 * b["step_time_s"], (b["step_time_s"], q["step_time_s"])
    else:
        assert q["step_time_s"] > b["step_time_s"], (b["step_time_s"], q["step_time_s"])
print("precision: 2 batches x bf16/int8 ok")
PY
