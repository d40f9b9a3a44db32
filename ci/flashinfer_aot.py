"""Put a prebuilt FlashInfer JIT module into the slimmed flashinfer-python wheel, so a GPU machine
loads it instead of building it: FlashInfer 0.7.4's `topk` module (four sources, CUB's batched top-k
among them) took over 9 minutes to JIT-build on the 16-core H200 machine, past one device call.

FlashInfer loads `flashinfer/data/aot/<name>/<name>.so` when present (jit/env.py `get_aot_artifacts`)
and skips its JIT build. Build the module where nvcc is (no GPU needed; the machine's CUDA must
have curand.h, e.g. from the nvidia-curand wheel on CPATH), for the GPU's arch, with the same
apache-tvm-ffi the GPU machine installs, e.g. for the H200:

    python3.12 ci/flashinfer_aot.py build .whl-new/flashinfer_python-0.7.4+slim-*.whl 9.0a /tmp/fiws
    python3.12 ci/flashinfer_aot.py add .whl-new/flashinfer_python-0.7.4+slim-*.whl \
        /tmp/fiws/.cache/flashinfer/0.7.4/90a/cached_ops/topk/topk.so .whl-new

`build` runs FlashInfer's own JIT build of the module (its ninja file, its flags) against the wheel's
sources, with the package imported under a stand-in (the slim wheel's __init__ cannot run), as the
adapter does. On a machine with no driver the final link fails (`cannot find -lcuda`, and -lcudart
where only the runtime's .so.13 is installed); the objects are built by then, so link them by hand in
the module's build folder, against the CUDA toolkit's libcudart and an empty stand-in libcuda (nothing
of the driver's is used, so the .so does not even record it):

    gcc -shared -o /tmp/stub/libcuda.so -Wl,-soname,libcuda.so.1 -x c /dev/null
    c++ *.cuda.o -shared -L/usr/local/cuda-13.0/lib -L/tmp/stub -lcudart -lcuda -o topk.so

(2026-12-01: 0.7.4's four objects took about 70 minutes on 2 cores, cub_topk.cu most of it; the module
then loaded and ran on the H200: results/h200/2026-12-01-session6/bench-topk-93e251d.json.)

`add` writes a copy of the wheel with the .so under data/aot/topk and the version
label "+slim.aot<arch>" (the replaced wheel is removed from DEST_DIR), RECORD rewritten.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from slim_wheel import rewrite  # noqa: E402


def build(wheel, arch, workspace):
    """FlashInfer's JIT build of `topk` for `arch` (e.g. 9.0a) from `wheel`'s sources."""
    site = Path(tempfile.mkdtemp(prefix="fi-aot-"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
                   check=True)
    os.environ.update(FLASHINFER_CUDA_ARCH_LIST=arch, FLASHINFER_WORKSPACE_BASE=str(workspace))
    package = types.ModuleType("flashinfer")
    package.__path__ = [str(site / "flashinfer")]
    sys.modules["flashinfer"] = package
    sys.path.insert(0, str(site))
    from flashinfer.jit.topk import gen_topk_module
    spec = gen_topk_module()
    spec.build(verbose=True)
    print(spec.jit_library_path)


def add(wheel, so_path, dest_dir, module="topk"):
    wheel, so_path = Path(wheel), Path(so_path)
    arch = so_path.parts[-4]  # .../<version>/<arch>/cached_ops/<module>/<module>.so
    version = re.fullmatch(r"([^-]+)-([^-]+)-(.+)\.whl", wheel.name).group(2)
    new_version = f"{version}.aot{arch}" if "+" in version else f"{version}+aot{arch}"
    out = rewrite(wheel, dest_dir, new_version,
                  extra=[(f"flashinfer/data/aot/{module}/{module}.so", so_path.read_bytes())])
    if wheel.resolve().parent == out.resolve().parent and wheel.resolve() != out.resolve():
        wheel.unlink()
    print(f"{out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return out


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "build":
        build(*sys.argv[2:])
    elif len(sys.argv) == 5 and sys.argv[1] == "add":
        add(*sys.argv[2:])
    else:
        sys.exit(__doc__)
