#!/usr/bin/env python3
"""Sweep fuzzing, kept as a test: a fixed seed draws grids over small studies that mix valid
and invalid points on every kind of axis the sweep reports treat apart (the compared
alternatives: remat, weight update, schedule kind; the bubble charts' stages and micro-batches;
plain numbers such as the batch), runs each sweep, and checks what a user reads:

- the exit code is 1 when a point failed and 0 otherwise, never "internal error", never a signal;
- results.csv has a row per point, an error on exactly the failed ones;
- report.md's headline counts the points and the failures right, "All points" has a row per
  point, a failed point's cells say "failed" (its comparison cells too) and "Failed points"
  lists each failure; report.html is written and names the same counts.

Usage: sweep_fuzz.py TPUSIM ROOT [SWEEPS]"""
import csv, os, random, subprocess, sys, tempfile

tpusim, root = sys.argv[1], sys.argv[2]
count = int(sys.argv[3]) if len(sys.argv) > 3 else 12
rng = random.Random(20261126)

# (study, axes: path -> candidate values, valid and invalid mixed)
STUDIES = [
    ("gpipe-transformer-v3-k8.json", {
        "schedule.microbatches": ["1", "2", "3", "8", "64"],      # 3 and 64 do not divide batch 32
        "schedule.stages": ["1", "2", "4", "8", "9"],             # 9 stages: more than the 8 layers
        "schedule.remat": ["true", "false"],
        "schedule.kind": ["gpipe", "one_f_one_b", "pipeline"],    # "pipeline" is no schedule kind
        "batch": ["32", "48"],
    }),
    ("default.json", {
        "schedule.weight_update": ["replicated", "sharded", "halved"],  # "halved" is invalid
        "batch": ["256", "255", "512"],                                   # 255 is no multiple of 32 cores
        "model.layers": ["2", "0", "4"],                                  # 0 layers is invalid
    }),
]


def run_sweep(study, axes, out):
    cmd = [tpusim, "sweep", os.path.join(root, "configs/studies", study), "-j", "2", "--out", out]
    for path, values in axes:
        cmd += ["--grid", f"{path}={','.join(values)}"]
    if study == "default.json":  # keep the data-parallel points small
        cmd += ["--set", "model.d_model=256", "--set", "model.d_ff=1024", "--set", "model.heads=4",
                "--set", "model.seq_len=128"]
    return cmd, subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def check(cmd, proc, out, points):
    where = " ".join(cmd)
    assert proc.returncode in (0, 1), f"{where}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "internal error" not in proc.stderr, f"{where}: {proc.stderr[-2000:]}"
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == points, f"{where}: {len(rows)} CSV rows for {points} points"
    failed = sum(1 for r in rows if r["error"])
    assert (proc.returncode == 1) == (failed > 0), f"{where}: exit {proc.returncode} with {failed} failed"
    for r in rows:
        assert bool(r["error"]) != bool(r["step_time_s"]), f"{where}: a row with both or neither: {r}"
    md = open(os.path.join(out, "report.md")).read()
    headline = f"{points} of {points} points recorded, {failed} failed."
    assert headline in md, f"{where}: report.md lacks '{headline}'"
    html = open(os.path.join(out, "report.html")).read()
    assert f"{points} of {points} points recorded, {failed} failed" in html, f"{where}: report.html counts"
    section = md.split("## All points", 1)[1].split("## Failed points", 1)[0]
    table = [l for l in section.splitlines() if l.startswith("|")][2:]
    assert len(table) == points, f"{where}: {len(table)} rows in All points for {points} points"
    assert sum(1 for l in table if "| failed |" in l) == failed, f"{where}: failed rows in All points"
    if failed:
        listed = md.split("## Failed points", 1)[1]
        assert sum(1 for l in listed.splitlines() if l.startswith("| ") and "=" in l) == failed
    if "## Comparison by" in md:
        comparison = md.split("## Comparison by", 1)[1].split("## Best", 1)[0]
        assert ("failed" in comparison) == (failed > 0), f"{where}: comparison table's failed cells"
    return failed


total_points = total_failed = 0
with tempfile.TemporaryDirectory() as work:
    for i in range(count):
        study, space = STUDIES[i % len(STUDIES)]
        paths = rng.sample(sorted(space), rng.randint(2, min(3, len(space))))
        axes = []
        for p in paths:
            values = rng.sample(space[p], rng.randint(2, min(3, len(space[p]))))
            axes.append((p, values))
        points = 1
        for _, v in axes:
            points *= len(v)
        out = os.path.join(work, f"sweep{i}")
        cmd, proc = run_sweep(study, axes, out)
        total_failed += check(cmd, proc, out, points)
        total_points += points
assert 0 < total_failed < total_points, f"the grids must mix valid and invalid points ({total_failed} of {total_points})"
print(f"{count} sweeps, {total_points} points, {total_failed} failed: reports and exit codes right")
