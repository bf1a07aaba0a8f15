#!/usr/bin/env bash
# `describe model --ops LAYER`: a layer's hardware ops add up to the layer's row of the model
# table (forward and backward seconds), every op says what bounds it, its named ops' kept bytes
# add up to the layer's stash, and an unknown layer is bad input naming the option and the
# layers there are.
set -euo pipefail
tpusim="$1"; root="$2"
study="$root/configs/studies/bert-large-lamb-v3-32.json"
python3 - "$("$tpusim" describe model "$study" --json)" "$("$tpusim" describe model "$study" --ops block3 --json)" <<'PY'
import json, sys
table, ops = json.loads(sys.argv[1]), json.loads(sys.argv[2])
row = next(l for l in table["layers"] if l["name"] == "block3")
fwd = sum(o["seconds"] for o in ops["ops"] if o["pass"] == "forward")
bwd = sum(o["seconds"] for o in ops["ops"] if o["pass"] == "backward")
assert abs(fwd - row["forward_s"]) <= 1e-9 * row["forward_s"], (fwd, row["forward_s"])
assert abs(bwd - row["backward_s"]) <= 1e-9 * row["backward_s"], (bwd, row["backward_s"])
assert all(o["bound"] in ("mxu", "vpu", "hbm", "overhead", "fused") for o in ops["ops"]), ops
flops = sum(o["model_flops"] for o in ops["ops"] if o["pass"] == "forward")
assert abs(flops - row["forward_flops"]) <= 1e-9 * flops, (flops, row["forward_flops"])
# The named ops' memory: what they keep adds up to the layer's stash, the largest forward
# transient is its workspace.
mem = ops["named_op_memory"]
kept = sum(m["kept_bytes"] for m in mem)
assert abs(kept - row["stash_bytes"]) <= 1e-9 * kept, (kept, row["stash_bytes"])
transient = max(m["forward_transient_bytes"] for m in mem)
assert abs(transient - row["workspace_bytes"]) <= 1e-9 * transient, (transient, row["workspace_bytes"])
assert any(m["kept_bytes"] > 0 and m["op"].endswith("attention_dropout") for m in mem), mem
PY
"$tpusim" describe model "$study" --ops block3 | grep -q "^total" || { echo "FAIL: no total line"; exit 1; }
set +e
err=$("$tpusim" describe model "$study" --ops block99 2>&1); rc=$?
set -e
[ "$rc" = 2 ] || { echo "FAIL: unknown layer exited $rc"; exit 1; }
echo "$err" | grep -q -- '--ops: found "block99", expected a layer of the model: embedding, block0' ||
  { echo "FAIL: message: $err"; exit 1; }
echo ok
