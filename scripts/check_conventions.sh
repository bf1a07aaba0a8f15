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

[ "$status" -eq 0 ] && echo "conventions: clang-format and include layering hold (${#files[@]} files)"
exit "$status"
