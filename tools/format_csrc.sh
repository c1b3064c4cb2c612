#!/usr/bin/env bash
# Formats the C++ and CUDA sources of csrc/ with clang-format (.clang-format; the
# clang-format package is in the [dev] extra).
#   tools/format_csrc.sh           # rewrite the files in place
#   tools/format_csrc.sh --check   # fail, showing where, when a file is not formatted
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v clang-format >/dev/null; then
  echo "tools/format_csrc.sh needs clang-format: pip install clang-format (in the [dev] extra)" >&2
  exit 2
fi
mapfile -t files < <(cd "$root" && find csrc -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
cd "$root"
if [ "${1:-}" = "--check" ]; then
  if ! clang-format --dry-run --Werror "${files[@]}"; then
    echo "csrc/ is not formatted as .clang-format says; fix it with: tools/format_csrc.sh" >&2
    exit 1
  fi
  echo "csrc/ is formatted ($(clang-format --version))"
else
  clang-format -i "${files[@]}"
fi
