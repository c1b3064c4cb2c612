#!/usr/bin/env bash
# Developer build: compiles vlmrm_fast._core into the source tree, so tests can
# run from a checkout (or a git worktree) with PYTHONPATH=. and no pip install.
#   tools/build_inplace.sh            # CUDA when nvcc is found
#   VLMRM_WITH_CUDA=OFF tools/build_inplace.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
build="$root/build/inplace"
for tool in "import pybind11" "import cmake" "import ninja"; do
  if ! "$python" -c "$tool" 2>/dev/null && ! command -v "${tool#import }" >/dev/null; then
    echo "tools/build_inplace.sh needs pybind11, cmake and ninja: pip install pybind11 cmake ninja (all in the [dev] extra)" >&2
    exit 2
  fi
done
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$("$python" -c 'import sys; print(sys.executable)')" \
  -Dpybind11_DIR="$("$python" -m pybind11 --cmakedir)" \
  -DVLMRM_WITH_CUDA="${VLMRM_WITH_CUDA:-ON}" >/dev/null
cmake --build "$build" -j "${JOBS:-2}"
cp "$build"/_core*.so "$build"/_cuda_emulation*.so "$root/vlmrm_fast/"
echo "built $(ls "$root"/vlmrm_fast/_core*.so "$root"/vlmrm_fast/_cuda_emulation*.so)"
