#!/usr/bin/env bash
# Installs what the harness and its tests need into the active Python, keeping a torch that is
# already there (the GPU image's CUDA build); without one it takes the CPU build (torch 2.13.0,
# which CPU machines here serve from local disk; an unpinned torch would pull a multi-GB CUDA build).
# Says what it does and how long each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "install.sh [${SECONDS}s]: $*"; }
say "into $("$PY" -c 'import sys; print(sys.prefix)') ($("$PY" --version 2>&1))"
if torch_version=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null); then
    say "keeping the installed torch $torch_version"
else
    say "no torch: installing the CPU build torch==2.13.0 (a large download where it is not cached)"
    "$PY" -m pip install --quiet --progress-bar off "torch==2.13.0"
fi
say "installing dsv4-sparse-harness (editable) with the extras test, triton, cuda (CuPy, NVRTC) and bench"
"$PY" -m pip install --quiet --progress-bar off -e ".[test,triton,cuda,bench]"
say "done"
