#!/usr/bin/env bash
# check-format.sh -- every C file of the tree is laid out as .clang-format says.
# Run by ctest as the `format` test (so by make test and CI). To fix a
# failure: clang-format -i FILE (or the whole tree:
#   git ls-files '*.c' '*.h' | xargs clang-format -i).
# Generated code (the build trees) is not checked. Exit 1 names the files.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
# Tracked files where this is a checkout (the new ones too once added),
# else every C file under the source folders.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -co --exclude-standard -- 'src/*.[ch]' 'cmd/*.[ch]' \
                         'test/*.[ch]' 'bench/*.[ch]')
else
  mapfile -t files < <(find src cmd test bench -name '*.[ch]')
fi
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'check-format: not formatted (clang-format -i to fix): %s\n' "${bad[@]}"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
