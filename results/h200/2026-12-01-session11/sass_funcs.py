"""Per-function SASS of one kernel source as built now, for telling on the CPU whether a change moved any kernel's
machine code (compare two dumps per function after collapsing whitespace; cuobjdump pads its columns).
usage (from a tree's root, NVRTC 13.0 preloaded as the GPU image has it):
  PYTHONPATH=. LD_PRELOAD=.../libnvrtc.so.13 LD_LIBRARY_PATH=... [DSV4_...=...] python3 sass_funcs.py OUT.json FILE.cu
CUOBJDUMP: the cuobjdump to run (default: the one on PATH; pip install nvidia-cuda-cuobjdump)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from kernels_cuda import _loader

cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
cubin = _loader.compile_cubin(sys.argv[2], "sm_90a")[0]
with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
    f.write(cubin)
sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
functions, current = {}, None
for line in sass.splitlines():
    named = re.search(r"Function : (\S+)", line)
    if named:
        current = named.group(1)
        functions[current] = []
    elif current and line.strip():
        functions[current].append(re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip())  # addresses out, encodings kept
json.dump(functions, open(sys.argv[1], "w"))
print(len(functions), "functions")
