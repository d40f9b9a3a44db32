#!/usr/bin/env bash
# Installs what the harness and its tests need into the active Python, keeping a torch that is
# already there (the GPU image's CUDA build); without one it takes the CPU build (torch 2.13.0,
# which CPU machines here serve from local disk; an unpinned torch would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -e ".[test,triton,cuda,bench]"
