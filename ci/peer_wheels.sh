#!/usr/bin/env bash
# Fetch the wheels of the peer packages that kernels_peers/ adapts (and nvtx), for a GPU machine
# without a package registry: run this where pip reaches PyPI, carry the folder to the GPU machine,
# and there `python3 -m pip install --no-deps --target /tmp/site DIR/*.whl` (then PYTHONPATH=/tmp/site).
# These versions were seen to load and run on an H200 with Python 3.12, torch 2.11 and CUDA 13
# (newer sgl-deep-gemm fails to load on torch 2.11). Usage: ci/peer_wheels.sh [DIR] (default .whl)
set -euo pipefail
dest=${1:-.whl}
mkdir -p "$dest"
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 any; do
    platforms+=(--platform "$p")
done
for pkg in sglang==0.5.15 apache-tvm-ffi==0.1.11 sgl-deep-gemm==0.1.5.post1 sgl-flash-mla==1.0.0 \
           flashinfer-python==0.6.4 nvtx; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" --index-url "${PEER_INDEX_URL:-https://pypi.org/simple}" -d "$dest" "$pkg"
done
ls -l "$dest"
