"""Rebuild a peer wheel with only the files kernels_peers/ imports and JIT-compiles, so the newest set
fits one carried folder on a GPU machine without a registry (ci/peer_wheels.sh calls this).

The result is a valid wheel: the kept files byte for byte (none is edited), the dist-info with its
RECORD rewritten for them, and the version given the local label "+slim" (in the file name, the
dist-info folder and METADATA), so every result document that records package versions says the
run used a slimmed wheel. Usage: python3 ci/slim_wheel.py PROFILE SRC.whl DEST_DIR
(PROFILE: one of PROFILES below).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import re
import sys
import zipfile
from pathlib import Path

LABEL = "slim"

# Per package: glob patterns (fnmatch on the path inside the wheel, `*` crosses folders) of what
# to keep; the dist-info is always kept. Why each part stays is said beside it; everything else
# (the serving stack, other models' kernels, prebuilt cubins) is dropped.
PROFILES = {
    # sglang >= 0.5.2x: the DeepSeek-V4 launchers (compress, topk) moved to
    # sglang/kernels/ops/attention/dsv4 and the JIT machinery to sglang/kernels/jit.
    "sglang": [
        "sglang/__init__.py", "sglang/version.py", "sglang/_version.py",  # the package marker, its version
        "sglang/kernels/__init__.py", "sglang/kernels/ops/__init__.py",
        "sglang/kernels/ops/attention/__init__.py",
        # the launchers the adapter loads and the modules they import
        "sglang/kernels/ops/attention/dsv4/__init__.py", "sglang/kernels/ops/attention/dsv4/compress.py",
        "sglang/kernels/ops/attention/dsv4/topk.py", "sglang/kernels/ops/attention/dsv4/kv_layout.py",
        "sglang/kernels/ops/attention/dsv4/utils.py", "sglang/kernels/ops/attention/dsv4/candidate_table.py",
        "sglang/kernels/ops/attention/dsv4/triton_sparse_decode/*.py",  # the Triton FP8 sparse decode
        # the JIT loader (tvm-ffi + ninja), its headers and the sources it compiles: DeepSeek-V4's
        # compress/top-k kernels and the cluster-occupancy probe topk_v2 runs at build time
        "sglang/kernels/jit/__init__.py", "sglang/kernels/jit/utils/*", "sglang/kernels/jit/include/*",
        "sglang/kernels/jit/csrc/deepseek_v4/*", "sglang/kernels/jit/csrc/occupancy/*",
        # environment switches the loader reads (standard library only)
        "sglang/srt/__init__.py", "sglang/srt/environ.py",
    ],
    # flashinfer-python 0.7: top_k_page_table_transform and the JIT build of its "topk" module.
    "flashinfer": [
        "flashinfer/__init__.py",  # kept unchanged; the adapter does not run it (it imports every kernel)
        # flashinfer.topk and the modules it imports (traced with tvm_ffi stubbed out)
        "flashinfer/topk.py", "flashinfer/utils.py", "flashinfer/api_logging.py", "flashinfer/artifacts.py",
        "flashinfer/compilation_context.py", "flashinfer/fi_trace.py", "flashinfer/version.py",
        "flashinfer/_build_meta.py", "flashinfer/jit/*.py", "flashinfer/trace/*.py",
        # what gen_topk_module compiles: its four sources and the csrc headers they include, the
        # FlashInfer headers, the vendored CCCL (put before the toolkit's: CUB's batched top-k) and spdlog
        "flashinfer/data/csrc/topk.cu", "flashinfer/data/csrc/cub_topk.cu",
        "flashinfer/data/csrc/flashinfer_topk_binding.cu",
        "flashinfer/data/csrc/flashinfer_fast_topk_clusters_binding.cu",
        "flashinfer/data/csrc/topk_transform_checks.h", "flashinfer/data/csrc/tvm_ffi_utils.h",
        "flashinfer/data/include/*", "flashinfer/data/cccl/*", "flashinfer/data/spdlog/*",
    ],
}


def _kept(name, patterns):
    return ".dist-info/" in name or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def rewrite(src, dest_dir, new_version, keep=lambda name: True, extra=()):
    """Write a copy of wheel `src` into `dest_dir` under `new_version`: the files `keep` accepts, byte
    for byte, plus `extra` ((path, bytes) pairs), the dist-info renamed and its RECORD rewritten;
    returns its path."""
    src = Path(src)
    dist, version, tags = re.fullmatch(r"([^-]+)-([^-]+)-(.+)\.whl", src.name).groups()
    old_info, new_info = f"{dist}-{version}.dist-info", f"{dist}-{new_version}.dist-info"
    out = Path(dest_dir) / f"{dist}-{new_version}-{tags}.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        def write(entry, data):
            zout.writestr(entry, data, zipfile.ZIP_DEFLATED)
            records.append(_record_line(entry.filename, data))

        for info in zin.infolist():
            name = info.filename
            if name.endswith("/") or name == f"{old_info}/RECORD" or not (".dist-info/" in name or keep(name)):
                continue
            data = zin.read(name)
            if name.startswith(old_info + "/"):
                name = new_info + name[len(old_info):]
                if name == f"{new_info}/METADATA":
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
            entry = zipfile.ZipInfo(name, info.date_time)
            entry.external_attr = info.external_attr  # mode bits: an executable stays executable
            write(entry, data)
        for name, data in extra:
            entry = zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0))
            entry.external_attr = 0o755 << 16
            write(entry, data)
        records.append(f"{new_info}/RECORD,,")
        zout.writestr(f"{new_info}/RECORD", "\n".join(records) + "\n")
    return out


def slim(src, dest_dir, patterns, label=LABEL):
    """Write the slimmed copy of wheel `src` into `dest_dir`; returns its path."""
    version = re.fullmatch(r"([^-]+)-([^-]+)-(.+)\.whl", Path(src).name).group(2)
    return rewrite(src, dest_dir, f"{version}+{label}", lambda name: _kept(name, patterns))


def main(argv):
    if len(argv) != 3 or argv[0] not in PROFILES:
        sys.exit(f"usage: slim_wheel.py {{{','.join(PROFILES)}}} SRC.whl DEST_DIR")
    out = slim(argv[1], argv[2], PROFILES[argv[0]])
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB, from {Path(argv[1]).stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
