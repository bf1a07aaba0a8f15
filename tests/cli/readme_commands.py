#!/usr/bin/env python3
"""Every command the README and its guide (docs/guide.md, docs/reference.md) show still runs: each `$tpusim ...` line of its ```sh blocks (with
its continuation lines) runs from a scratch folder that sees the repository's configs/ and
bench/, two at a time, and must exit 0 or 1 (1 is an answer: a study that does not fit with
--require-fit, cases outside their tolerance), never 2 (bad input), a signal or a timeout, unless
its comment shows another exit code on purpose ("# exit 2: ..."). Lines with a placeholder
(`...`, `shards/*`) are shown, not run.

Usage: readme_commands.py TPUSIM ROOT"""
import concurrent.futures, os, re, shlex, subprocess, sys, tempfile

tpusim, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
# The README and the pages it sends a reader to (docs/guide.md, docs/reference.md).
text = "\n".join(open(os.path.join(root, page)).read()
                 for page in ("README.md", os.path.join("docs", "guide.md"), os.path.join("docs", "reference.md")))
commands = []
for block in re.findall(r"```sh\n(.*?)```", text, re.S):
    current = ""
    for line in block.split("\n"):
        if current:
            current += " " + line.strip()
        elif line.startswith("$tpusim "):
            current = line.strip()
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1]
            continue
        commands.append(current)
        current = ""
# A line's comment may say the exit code it shows ("# exit 2: ..."); otherwise 0 or 1.
runnable = []
for c in commands:
    command, _, comment = c.partition(" #")
    if "..." in command or "shards/*" in command:
        continue
    expected = re.search(r"exit (\d)", comment)
    runnable.append((command.strip(), (int(expected.group(1)),) if expected else (0, 1)))
assert len(runnable) >= 25, f"only {len(runnable)} README commands found"

with tempfile.TemporaryDirectory() as work:
    for d in ("configs", "bench"):
        os.symlink(os.path.join(root, d), os.path.join(work, d))

    def run(entry):
        command, expected = entry
        args = [tpusim] + shlex.split(command)[1:]
        try:
            p = subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return command, expected, "timed out", ""
        return command, expected, p.returncode, p.stderr[-500:]

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for command, expected, rc, err in pool.map(run, runnable):
            if rc not in expected:
                failed += 1
                print(f"FAIL ({rc}): {command}\n{err}")
print(f"{len(runnable) - failed} of {len(runnable)} README commands ran ({len(commands) - len(runnable)} placeholders)")
sys.exit(1 if failed else 0)
