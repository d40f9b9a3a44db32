"""`python -m kernels_cuda.build [--arch sm_90 ...]`: compile every CUDA kernel with NVRTC (no GPU or
driver needed) with the loader's options, print each kernel's registers, shared memory, stack and
spills, and exit non-zero with the compiler log on any failure."""

from __future__ import annotations

import argparse
import re
import sys

from tabulate import tabulate

from kernels_cuda import _loader

# what the loader builds for: sm_90a is Hopper (wgmma); sm_80 and sm_100 keep the other generations compiling
ARCHS = ("sm_80", "sm_90a", "sm_100")


def resources(log, lowered):
    """Per kernel expression: registers, shared memory, stack frame and spill bytes from ptxas -v."""
    names = {v: k for k, v in lowered.items()}
    found, current = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = names.get(m.group(1), m.group(1))
            found[current] = {"registers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            continue
        if current is None:
            continue
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            found[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        if m := re.search(r"Used (\d+) registers", line):
            found[current]["registers"] = int(m.group(1))
        if m := re.search(r"(\d+) bytes smem", line):
            found[current]["smem"] = int(m.group(1))
    return found


def build(archs):
    """[(source, arch, expression, resources)]; raises RuntimeError with the log on a failure."""
    rows = []
    for name in _loader.KERNELS:
        for arch in archs:
            _, lowered, log = _loader.compile_cubin(name, arch)
            for expr, res in resources(log, lowered).items():
                rows.append((name, arch, expr, res))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kernels_cuda.build", description=__doc__)
    parser.add_argument("--arch", nargs="+", default=["sm_90a"], help=f"architectures (supported: {', '.join(ARCHS)})")
    args = parser.parse_args(argv)
    try:
        rows = build(args.arch)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    print(tabulate([[s, a, e, r["registers"], r["smem"], r["stack"], r["spill_stores"] + r["spill_loads"]]
                    for s, a, e, r in rows],
                   headers=["source", "arch", "kernel", "registers", "smem bytes", "stack bytes", "spill bytes"],
                   tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
