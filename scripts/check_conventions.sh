#!/usr/bin/env bash
# Conventions that hold by rule, not luck (run by ctest, so by `make test` and .ci/run):
# - every C++ file is clang-formatted (.clang-format);
# - includes follow the layering of shared/DESIGN.md: dependencies point down
#   cli -> workflows -> reports -> schedules -> sim -> models -> hardware only (reports may use
#   sim and hardware; models only hardware; hardware nothing; cli parses and prints over
#   workflows, the library entry points; python/, the Python module, sits beside cli), and only
#   sim/'s .cpp files include SimGrid.
# Prints every violation, exits 1 if there is any.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
status=0

mapfile -t files < <(find bench cli hardware models python reports schedules sim tests workflows -name '*.cpp' -o -name '*.hpp' | sort)
if ! clang-format --dry-run --Werror "${files[@]}" 2> /tmp/tpusim-format.$$; then
  echo "not clang-formatted (run: clang-format -i FILE):"
  sed -n 's/^\([^: ]*\.[ch]pp\):[0-9]*:[0-9]*: .*/  \1/p' /tmp/tpusim-format.$$ | sort -u
  status=1
fi
rm -f /tmp/tpusim-format.$$

declare -A allowed=(
  [hardware]="hardware"
  [models]="models hardware"
  [sim]="sim hardware"
  [schedules]="schedules sim models hardware"
  [reports]="reports sim hardware"
  [workflows]="workflows reports schedules sim models hardware"
  [cli]="cli workflows reports schedules sim models hardware"
  [python]="workflows reports schedules sim models hardware"
)
for layer in "${!allowed[@]}"; do
  while IFS= read -r line; do
    file="${line%%:*}"
    target=$(sed -n 's/.*#include "\([a-z_]*\)\/.*/\1/p' <<< "$line")
    [ -n "$target" ] || continue
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "layering: $file includes $target/ (${layer}/ may include: ${allowed[$layer]})"
      status=1
    fi
  done < <(grep -Hn '#include "[a-z_]*/' $(find "$layer" -name '*.cpp' -o -name '*.hpp') || true)
done
while IFS= read -r line; do
  file="${line%%:*}"
  if [[ "$file" != sim/*.cpp ]]; then
    echo "layering: $file includes SimGrid (only sim/'s .cpp files may)"
    status=1
  fi
done < <(grep -Hn '#include <simgrid' $(find bench cli hardware models python reports schedules sim workflows -name '*.cpp' -o -name '*.hpp') || true)

# Within a folder, a file (its .hpp and .cpp together) never reaches itself through includes.
loops=$(python3 - <<'PY'
import os, re
out = []
for folder in ("cli", "hardware", "models", "python", "reports", "schedules", "sim", "workflows"):
    graph = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            if not name.endswith((".cpp", ".hpp")): continue
            here = os.path.join(dirpath, name).rsplit(".", 1)[0]
            for target in re.findall(r'#include "([a-z_/]+)\.hpp"', open(os.path.join(dirpath, name)).read()):
                if target.startswith(folder + "/") and target != here: graph.setdefault(here, set()).add(target)
    state = {}
    def visit(n, path):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1: out.append(" -> ".join(path[path.index(m):] + [m]) if m in path else m)
            elif m not in state: visit(m, path + [m])
        state[n] = 2
    for n in sorted(graph):
        if n not in state: visit(n, [n])
print("\n".join(out))
PY
)
if [ -n "$loops" ]; then
  echo "include loop (a file reaches itself): $loops"
  status=1
fi

# catch_discover_tests cuts a test's name at a semicolon: ctest would run a filter matching nothing.
if cut=$(grep -Hn 'TEST_CASE("[^"]*;' tests/*.cpp); then
  echo "test names with a semicolon (ctest never runs them): $cut"
  status=1
fi

[ "$status" -eq 0 ] && echo "conventions: clang-format and include layering hold, no include loop (${#files[@]} files)"
exit "$status"
