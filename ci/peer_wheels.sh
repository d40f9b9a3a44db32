#!/usr/bin/env bash
# Fetch the wheels of the peer packages that kernels_peers/ adapts (and nvtx), for a GPU machine
# without a package registry: run this where pip reaches PyPI, carry the folder to the GPU machine,
# and there `python3 -m pip install --no-deps --target /tmp/site DIR/*.whl` (then PYTHONPATH=/tmp/site;
# ci/use_wheels.sh does that with WHEELS=DIR). Two sets, each in its own folder, so two runs can put
# two versions of a peer side by side (`harness compare`):
#   new (default, into .whl-new): sglang 0.5.23, flashinfer-python 0.7.4, sgl-deep-gemm 0.1.5.post1
#       (the newest seen to load on torch 2.11; see below), sgl-flash-mla 1.0.0, apache-tvm-ffi
#       0.1.11, nvtx, and msgspec (sglang >= 0.5.2x's JIT loader imports it). sglang and flashinfer
#       are slimmed by ci/slim_wheel.py (version "+slim"), so the set is about 27 MB (35 MB with
#       alt/) and one carried call holds it:
#       - sglang 37 MB -> 0.4 MB: kept are the DeepSeek-V4 launchers (kernels/ops/attention/dsv4:
#         compress, topk, the Triton FP8 sparse decode and what they import), the JIT loader
#         (kernels/jit/utils), its headers, the sources of csrc/deepseek_v4 and csrc/occupancy, and
#         srt/environ.py; dropped are the serving stack (srt/ but environ), every other model's
#         kernels and csrc, multimodal_gen, benchmarks, tests.
#       - flashinfer 97 MB -> 7 MB: kept are flashinfer/topk.py and the modules it imports (utils,
#         api_logging, jit/, trace/...), the four top-k sources of data/csrc with their two headers,
#         data/include, the vendored CCCL and spdlog; dropped are every other kernel family's Python
#         (cake_*, fused_moe, experimental, attention...), the other data/csrc sources, CUTLASS and
#         b12x. Its flashinfer/__init__.py stays but cannot run (it imports what was dropped): the
#         adapter imports flashinfer.topk under a stand-in package, as it does for sglang.
#       apache-tvm-ffi 0.1.11, not the newest (0.1.15.post2): sglang 0.5.23 declares ==0.1.11 (its
#       JIT kernels build against the installed tvm-ffi headers), so does sgl-deep-gemm 0.1.5.post1
#       (its library links tvm-ffi), and flashinfer 0.7.4 takes >=0.1.11,<0.2.
#       DIR/alt/ (not installed by DIR/*.whl) holds apache-tvm-ffi 0.1.15.post2, to try in its place,
#       and sgl-deep-gemm 0.2.5, the newest, which does not load on torch 2.11: sgl-deep-gemm >=
#       0.1.5.post3 is a TORCH_LIBRARY extension linked against a newer torch's C++ ABI (0.2.5's _C.so
#       needs c10::cuda::CUDAErrorLogCapture and c10::cuda::c10_cuda_check_implementation(int, char
#       const*, char const*, unsigned, bool, c10::cuda::CUDAErrorLogCapture*), which torch 2.11 lacks;
#       read with nm); the adapter reports such a load failure as the backend's unavailable reason.
#   old (into .whl): sglang 0.5.15, apache-tvm-ffi 0.1.11, sgl-deep-gemm 0.1.5.post1, sgl-flash-mla
#       1.0.0, flashinfer-python 0.6.4, nvtx: seen to load and run on an H200 with Python 3.12,
#       torch 2.11 and CUDA 13.
# Usage: ci/peer_wheels.sh [new|old] [DIR]; a lone DIR (the form before there were two sets) gets the new set.
set -euo pipefail
if [ $# -eq 1 ] && [ "$1" != new ] && [ "$1" != old ]; then set -- new "$1"; fi
set_name=${1:-new}
case "$set_name" in
    new) dest=${2:-.whl-new}
         pins=(sglang==0.5.23 apache-tvm-ffi==0.1.11 sgl-deep-gemm==0.1.5.post1 sgl-flash-mla==1.0.0
               flashinfer-python==0.7.4 nvtx msgspec) ;;
    old) dest=${2:-.whl}
         pins=(sglang==0.5.15 apache-tvm-ffi==0.1.11 sgl-deep-gemm==0.1.5.post1 sgl-flash-mla==1.0.0
               flashinfer-python==0.6.4 nvtx) ;;
    *) echo "usage: $0 [new|old] [DIR]" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest"
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 any; do
    platforms+=(--platform "$p")
done
download() {  # download DIR PIN
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" --index-url "${PEER_INDEX_URL:-https://pypi.org/simple}" -d "$1" "$2"
}
if [ "$set_name" = old ]; then
    for pin in "${pins[@]}"; do download "$dest" "$pin"; done
else
    full=$(mktemp -d)
    trap 'rm -rf "$full"' EXIT
    for pin in "${pins[@]}"; do
        case "$pin" in
            sglang==*|flashinfer-python==*) download "$full" "$pin" ;;
            *) download "$dest" "$pin" ;;
        esac
    done
    python3 "$here/slim_wheel.py" sglang "$full"/sglang-*.whl "$dest"
    python3 "$here/slim_wheel.py" flashinfer "$full"/flashinfer_python-*.whl "$dest"
    mkdir -p "$dest/alt"
    download "$dest/alt" apache-tvm-ffi==0.1.15.post2
    download "$dest/alt" sgl-deep-gemm==0.2.5
fi
ls -l "$dest"
du -sh "$dest"
