"""`python -m harness.triton_build [--arch 90] [--ops OP ...] [--tier quick|full]`: compile, for a GPU
architecture and with no GPU, every Triton kernel launch that the check's cases make, and print each
one's shared memory and compile time; exit non-zero with the compiler's error on any failure.

Triton's interpreter (how the CPU tier runs these kernels) does not compile them, so a kernel that
the interpreter runs can still fail to compile for a GPU (a loop-carried value that changes shape, a
layout the backend cannot lower): 24 of 43 top-k cases did so on the H200 once (4f7cc4b). Two child
processes: one runs the cases' Triton calls in the interpreter on the CPU and records every launch (the
kernel, its argument types and constexpr values, num_warps / num_stages), with the wrappers' interpreter
flags off so that the launches are the GPU's (their results are wrong and unused); the other, with the
interpreter off, compiles each distinct launch with `triton.compile` for `cuda:<arch>` (ptxas ships with
Triton; no driver is needed). A launch that needs more shared memory than a CTA of that architecture
can have fails here too, as it would when it runs."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import subprocess
import sys
import time

OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # launch options that change the compiled kernel
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448}  # bytes a CTA may opt in to
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8e4nv", "float64": "fp64",
           "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


def _is_constexpr(parameter):
    annotation = parameter.annotation
    return getattr(annotation, "__name__", None) == "constexpr" or str(annotation).endswith("constexpr")


def _kind(value):
    """Triton's signature type of a runtime argument."""
    import torch
    if isinstance(value, torch.Tensor):
        return "*" + _DTYPES[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton signature type for {type(value).__name__}")


def launch_record(fn, args, kwargs):
    """One launch as data: the kernel's module and name, {parameter: type or 'constexpr'}, the constexpr
    values, and the launch options."""
    fn_signature = inspect.signature(fn)
    parameters = fn_signature.parameters
    bound = fn_signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in parameters})
    bound.apply_defaults()
    signature, constexprs = {}, {}
    for name, value in bound.arguments.items():
        if _is_constexpr(parameters[name]) or value is None:
            signature[name], constexprs[name] = "constexpr", value
        else:
            signature[name] = _kind(value)
    options = {k: kwargs[k] for k in OPTIONS if k in kwargs}
    return {"module": fn.__module__, "kernel": fn.__name__, "signature": signature, "constexprs": constexprs,
            "options": options}


def record(ops, tier):
    """Every distinct Triton launch of the check's cases of `ops`, run in the interpreter on the CPU."""
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime.interpreter import InterpretedFunction

    from harness import backends, cases, check

    triton_backend = backends.load("triton").module
    package = backends.module_path("triton")
    for name, module in list(sys.modules.items()):  # the flags a GPU launch sets (F32_DOT, INTERPRETING off):
        if name.partition(".")[0] == package and hasattr(module, "INTERPRET"):  # results are not used
            module.INTERPRET = False
    launches = {}
    run = InterpretedFunction.run

    def recording_run(self, *args, grid, warmup, **kwargs):
        entry = launch_record(self.fn, args, kwargs)
        launches.setdefault(json.dumps(entry, sort_keys=True), entry)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording_run
    try:
        for case in cases.select(ops, tier):
            if case.family != "bad-input":
                check.run_op(triton_backend, case, cases.build(case, "cpu"))
    finally:
        InterpretedFunction.run = run
    return list(launches.values())


def compile_launch(entry, arch):
    """(shared memory bytes, seconds) of one recorded launch compiled for cuda:<arch>."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    kernel = getattr(importlib.import_module(entry["module"]), entry["kernel"])
    kernel = getattr(kernel, "fn", kernel) if not hasattr(kernel, "arg_names") else kernel  # an autotuner's kernel
    began = time.perf_counter()
    compiled = triton.compile(ASTSource(kernel, entry["signature"], entry["constexprs"]),
                              target=GPUTarget("cuda", arch, 32), options=entry["options"])
    shared = compiled.metadata.shared
    if shared > SHARED_LIMIT.get(arch, shared):
        raise RuntimeError(f"needs {shared} bytes of shared memory; a CTA of cuda:{arch} can have {SHARED_LIMIT[arch]}")
    return shared, time.perf_counter() - began


def _child(mode, payload, env):
    result = subprocess.run([sys.executable, "-m", "harness.triton_build", f"--{mode}", json.dumps(payload)],
                            capture_output=True, text=True, env={**os.environ, **env})
    if result.returncode:
        raise RuntimeError(result.stderr.strip() or result.stdout.strip())
    return json.loads(result.stdout.strip().splitlines()[-1])


def build(ops=None, tier="quick", arch=90):
    """[(launch, shared bytes, compile seconds)] for every distinct launch; RuntimeError on a failure."""
    launches = _child("record", {"ops": ops, "tier": tier}, {"TRITON_INTERPRET": "1"})
    compiled = _child("compile", {"launches": launches, "arch": arch}, {"TRITON_INTERPRET": "0"})
    return [(entry, shared, seconds) for entry, (shared, seconds) in zip(launches, compiled)]


def _describe(entry):
    values = ", ".join(f"{k}={v}" for k, v in {**entry["constexprs"], **entry["options"]}.items())
    return f"{entry['kernel']}[{values}]"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m harness.triton_build", description=__doc__)
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (default: 90, Hopper)")
    parser.add_argument("--ops", nargs="+", default=None, help="ops whose cases to compile (default: all)")
    parser.add_argument("--tier", choices=("quick", "full"), default="quick", help="the check's case tier")
    parser.add_argument("--record", help=argparse.SUPPRESS)
    parser.add_argument("--compile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record:  # child: the launches, as JSON on the last line
        request = json.loads(args.record)
        print(json.dumps(record(request["ops"], request["tier"])))
        return 0
    if args.compile:
        request = json.loads(args.compile)
        results = []
        for entry in request["launches"]:
            try:
                results.append(compile_launch(entry, request["arch"]))
            except Exception as err:  # name the launch, then Triton's message
                print(f"{_describe(entry)} failed to compile for cuda:{request['arch']}:\n{err}", file=sys.stderr)
                return 1
        print(json.dumps(results))
        return 0
    from tabulate import tabulate
    try:
        rows = build(args.ops, args.tier, args.arch)
    except RuntimeError as err:
        print(err, file=sys.stderr)
        return 1
    print(tabulate([[e["module"].rpartition(".")[2], _describe(e), shared, f"{seconds:.1f}"]
                    for e, shared, seconds in rows],
                   headers=["op", "launch", "shared bytes", "compile s"], tablefmt="github"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
