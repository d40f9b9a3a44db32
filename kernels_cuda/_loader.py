"""Builds the .cu sources with NVRTC through CuPy and launches them on torch tensors.

One place for the compile options and one compile path: `compile_cubin` (NVRTC, no GPU needed) makes
the cubin that CI inspects and that the GPU loads, for the device's own architecture (`sm_90a` on
Hopper, so wgmma and the bulk-copy engine are available), once per (source, architecture), kept on
disk between processes (`cached_cubin`).
Kernels get raw device pointers of torch tensors (no copies) and run on torch's current stream.
The sources need no headers: bf16 and e4m3 conversions are written out.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
from pathlib import Path

import numpy as np

SOURCE_DIR = Path(__file__).parent
OPTIONS = ("--std=c++17",)
STATIC_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs the kernel's opt-in

# source file -> the template instantiations it exports (NVRTC name expressions); every kernel is
# named dsv4_*, so profilers and compute-sanitizer can filter to them by one substring
KERNELS = {
    "compress.cu": [f"dsv4_compress_c4<{v}, {m}>" for v in (4, 1) for m in (0, 1)]
                   + [f"dsv4_compress_c128<{v}, {m}, {c}>" for v, c in ((4, 6), (4, 4), (1, 4)) for m in (0, 1, 2)]
                   + ["dsv4_compress_online_commit"],
    "indexer_logits.cu": ["dsv4_indexer_logits", "dsv4_indexer_logits_wgmma<4>", "dsv4_indexer_logits_wgmma<5>",
                          "dsv4_indexer_logits_wgmma<6>"],
    "topk_indices.cu": ["dsv4_topk_indices", "dsv4_topk_indices_cluster<2>", "dsv4_topk_indices_cluster<4>",
                        "dsv4_topk_indices_cluster<8>"] + [f"dsv4_topk_indices_regs<{v}>" for v in (1, 2, 4)]
                       + [f"dsv4_topk_indices_fast<{v}>" for v in (1, 2, 4)]
                       + ["dsv4_topk_indices_wide1"] + [f"dsv4_topk_indices_wide<{c}>" for c in (2, 4, 8)],
    "sparse_attention.cu": ["dsv4_sparse_attention<true>", "dsv4_sparse_attention<false>"]
                           + [f"dsv4_sparse_attention_{k}<{s}, {p}>" for k in ("h64", "wgmma", "wgmma2", "pipe")
                              for s in ("true", "false") for p in ("true", "false")]
                           + ["dsv4_sparse_attention_combine<true>", "dsv4_sparse_attention_combine<false>"]
                           + [f"dsv4_sparse_attention_fp8_wgmma<{s}, {p}, {d}>" for s in ("true", "false")
                              for p in ("true", "false") for d in ("true", "false")]
                           + [f"dsv4_sparse_attention_fp8_pipe<{s}, {p}>" for s in ("true", "false")
                              for p in ("true", "false")],
}


COMMON = "common.cuh"  # prepended to every source: shared helpers, no CUDA headers needed


def source(name):
    common = (SOURCE_DIR / COMMON).read_text()
    return f'{common}\n#line 1 "{name}"\n' + (SOURCE_DIR / name).read_text()


def arch_option(arch):
    return f"--gpu-architecture={arch}"


def compile_cubin(name, arch):
    """NVRTC, no GPU or driver needed: (cubin bytes, {expression: lowered name}, compiler log).
    Raises RuntimeError with the log on failure."""
    from cupy.cuda import nvrtc
    prog = nvrtc.createProgram(source(name), name, [], [])
    try:
        for expr in KERNELS[name]:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, [*OPTIONS, arch_option(arch), "-Xptxas=-v"])
        except nvrtc.NVRTCError as err:
            raise RuntimeError(f"{name} for {arch} failed to compile:\n{nvrtc.getProgramLog(prog)}") from err
        lowered = {expr: nvrtc.getLoweredName(prog, expr) for expr in KERNELS[name]}
        return nvrtc.getCUBIN(prog), lowered, nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def device_arch(capability):
    """NVRTC target of a compute capability (major, minor): the arch-specific `a` variant on Hopper
    (wgmma, setmaxnreg), the plain one elsewhere."""
    major, minor = capability
    return f"sm_{major}{minor}{'a' if (major, minor) == (9, 0) else ''}"


def cache_dir():
    """Where built cubins are kept between processes (NVRTC takes 15-80 s a source, and every
    `harness` command is a new process): $DSV4_KERNEL_CACHE, else ~/.cache/dsv4-harness/cubin;
    DSV4_KERNEL_CACHE=off builds every time."""
    path = os.environ.get("DSV4_KERNEL_CACHE", str(Path.home() / ".cache" / "dsv4-harness" / "cubin"))
    return None if path in ("off", "0", "") else Path(path)


def cached_cubin(name, arch):
    """compile_cubin's (cubin, lowered names), from the cache when the source (with common.cuh), the
    options, the exported expressions, the arch and the NVRTC version are the same."""
    import hashlib
    import json
    from cupy.cuda import nvrtc
    folder = cache_dir()
    key = hashlib.sha256(json.dumps([source(name), OPTIONS, KERNELS[name], arch, list(nvrtc.getVersion())])
                         .encode()).hexdigest()[:32]
    path = folder / f"{Path(name).stem}-{arch}-{key}" if folder else None
    if path is not None:
        try:
            return (path / "kernel.cubin").read_bytes(), json.loads((path / "lowered.json").read_text())
        except (OSError, ValueError):
            pass
    cubin, lowered, _ = compile_cubin(name, arch)
    if path is not None:
        try:  # written aside, then renamed: a process reading it sees all or nothing
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "kernel.cubin").write_bytes(cubin)
            (tmp / "lowered.json").write_text(json.dumps(lowered))
            tmp.rename(path)
        except OSError:  # a read-only or raced cache only costs the next process a compile
            shutil.rmtree(tmp, ignore_errors=True)
    return cubin, lowered


@functools.lru_cache(maxsize=None)
def _module(name, device_index):
    import cupy
    import torch
    arch = device_arch(torch.cuda.get_device_capability(device_index))
    cubin, lowered = cached_cubin(name, arch)
    with cupy.cuda.Device(device_index):
        module = cupy.cuda.function.Module()
        module.load(cubin)
    return module, lowered


def _index(device):
    import torch
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.lru_cache(maxsize=None)
def _function(name, expr, device_index):
    module, lowered = _module(name, device_index)
    return module.get_function(lowered[expr])


def kernel(name, expr, device):
    return _function(name, expr, _index(device))


def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False):
    """Launch on torch's current stream; tensors go as raw pointers, ints as int32 unless wrapped.
    pdl: programmatic dependent launch (Hopper and newer): the kernel may be scheduled while the
    previous kernel on the stream finishes; it must call `pdl_wait()` (common.cuh) before reading
    anything an earlier kernel wrote. Hides the launch gap between short kernels."""
    import cupy
    import torch
    fn = kernel(name, expr, device)
    if shared_mem > STATIC_SHARED_LIMIT:
        _opt_in_shared(fn, shared_mem)
    stream = torch.cuda.current_stream(device).cuda_stream
    values = tuple(_arg(a) for a in args)
    with cupy.cuda.Device(_index(device)):
        if pdl and _pdl_supported(_index(device)):
            _launch_pdl(fn.ptr, grid, block, values, shared_mem, stream)
        else:
            fn(tuple(grid), tuple(block), values, shared_mem=shared_mem, stream=cupy.cuda.ExternalStream(stream))


@functools.lru_cache(maxsize=None)
def _pdl_supported(device_index):
    """Hopper or newer, unless DSV4_PDL=0 asks for plain launches."""
    import torch
    return os.environ.get("DSV4_PDL", "1") != "0" and torch.cuda.get_device_capability(device_index)[0] >= 9


_CTYPE = {np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.int64): ctypes.c_int64,
          np.dtype(np.int32): ctypes.c_int32, np.dtype(np.float32): ctypes.c_float}
_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8 bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("value_pad", ctypes.c_char * 60)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_void_p)]
    return lib


def _launch_pdl(function, grid, block, values, shared_mem, stream):
    """cuLaunchKernelEx with programmatic stream serialization (CuPy's launcher sets no attributes)."""
    grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    attr = _LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                           ctypes.c_void_p(stream), ctypes.pointer(attr), 1)
    holders = [_CTYPE[np.asarray(v).dtype](v.item()) for v in values]
    params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
    err = _libcuda().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function), params, None)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {err}")


def _opt_in_shared(fn, nbytes):
    """Dynamic shared memory above 48 KB needs the kernel's opt-in (a driver attribute)."""
    from cupy_backends.cuda.api import driver
    attr = driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if driver.funcGetAttribute(attr, fn.ptr) < nbytes:
        driver.funcSetAttribute(fn.ptr, attr, nbytes)


def _arg(a):
    import torch
    if isinstance(a, torch.Tensor):
        return np.uint64(a.data_ptr())
    if isinstance(a, bool):
        return np.int32(a)
    if isinstance(a, int):
        return np.int32(a)
    if isinstance(a, float):
        return np.float32(a)
    return a  # numpy scalars as given (np.int64 for 64-bit counts)
