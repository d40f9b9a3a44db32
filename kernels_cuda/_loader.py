"""Builds the .cu sources with NVRTC through CuPy and launches them on torch tensors.

One place for the compile options and one compile path: `compile_cubin` (NVRTC, no GPU needed) makes
the cubin that CI inspects and that the GPU loads, for the device's own architecture (`sm_90a` on
Hopper, so wgmma and the bulk-copy engine are available), once per (source, architecture), kept on
disk between processes (`cached_cubin`). A source's compile-time constants (-D options) and its
kernels' argument signatures are declared once, by its wrapper (DECLARED_IN).
Kernels get raw device pointers of torch tensors (no copies) and run on torch's current stream.
The sources need no headers: bf16 and e4m3 conversions are written out.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
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
    "compress.cu": [f"dsv4_compress_c{r}<{v}, {m}>" for r in (4, 128) for v in (4, 1)
                    for m in ((0, 1) if r == 4 else (0, 1, 2))]
                   + ["dsv4_compress_online_commit"],
    "indexer_logits.cu": ["dsv4_indexer_logits", "dsv4_indexer_logits_wgmma<4>", "dsv4_indexer_logits_wgmma<5>",
                          "dsv4_indexer_logits_wgmma<6>"],
    "topk_indices.cu": ["dsv4_topk_indices", "dsv4_topk_indices_cluster<2>", "dsv4_topk_indices_cluster<4>",
                        "dsv4_topk_indices_cluster<8>"] + [f"dsv4_topk_indices_regs<{v}>" for v in (1, 2, 4)]
                       + [f"dsv4_topk_indices_fast<{v}>" for v in (1, 2, 4)]
                       + [f"dsv4_topk_indices_half<{v}>" for v in (1, 2, 4)]
                       + ["dsv4_topk_indices_wide1"] + [f"dsv4_topk_indices_wide<{c}>" for c in (2, 4, 8)]
                       + ["dsv4_topk_indices_wide16<8>"] + [f"dsv4_topk_indices_lean<{c}>" for c in (8, 16)]
                       + [f"dsv4_topk_indices_lean_regs<{c}, {v}>" for c, v in ((16, 1), (8, 2), (2, 2))]
                       + [f"dsv4_topk_indices_twin<{c}>" for c in (4, 2)] + ["dsv4_topk_indices_copy"],
    "sparse_attention.cu": ["dsv4_sparse_attention<true>", "dsv4_sparse_attention<false>"]
                           + [f"dsv4_sparse_attention_{k}<{s}, {p}>"
                              for k in ("h64", "wgmma", "wgmma2", "pipe", "pair", "ws")
                              for s in ("true", "false") for p in ("true", "false")]
                           + ["dsv4_sparse_attention_combine<true>", "dsv4_sparse_attention_combine<false>"]
                           + [f"dsv4_sparse_attention_fp8_wgmma<{s}, {p}, {d}>" for s in ("true", "false")
                              for p in ("true", "false") for d in ("true", "false")]
                           + [f"dsv4_sparse_attention_fp8_{k}<{s}, {p}>" for k in ("pipe", "pair")
                              for s in ("true", "false") for p in ("true", "false")]
                           # the pipe body with P V left running into the next tile (LATE_PV)
                           + [f"dsv4_sparse_attention_{k}<{s}, {p}, true>" for k in ("pipe", "pair", "fp8_pipe")
                              for s in ("true", "false") for p in ("true", "false")],
}


COMMON = "common.cuh"  # prepended to every source: shared helpers, no CUDA headers needed

# source file -> the wrapper module that declares, for that source:
#   DEFINES {NAME: int}: compile-time constants, passed to NVRTC as -DNAME=value. The Python constant is
#     their one definition: the source keeps no default (a missing one fails the compile) and
#     static_asserts the values it is written for;
#   SIGNATURES {kernel name: ("kind name", ...)}: each kernel's parameters, kinds ptr / i32 / i64 / f32,
#     which launch() checks and converts (launch_values).
# A source not listed compiles without -D options and launches unchecked (a Python int becomes int32).
DECLARED_IN = {"compress.cu": "kernels_cuda.compress", "indexer_logits.cu": "kernels_cuda.indexer_logits",
               "sparse_attention.cu": "kernels_cuda.sparse_attention",  # both attention ops' kernels
               "topk_indices.cu": "kernels_cuda.topk_indices"}


def source(name):
    common = (SOURCE_DIR / COMMON).read_text()
    return f'{common}\n#line 1 "{name}"\n' + (SOURCE_DIR / name).read_text()


def defines(name):
    """{NAME: value} of the source's compile-time constants ({} where no wrapper declares them)."""
    if name not in DECLARED_IN:
        return {}
    declared = importlib.import_module(DECLARED_IN[name]).DEFINES
    for key, value in declared.items():
        if not (key.isidentifier() and type(value) is int):  # bool too would print as True
            raise TypeError(f"{DECLARED_IN[name]}.DEFINES[{key!r}] = {value!r}: a C identifier and an int")
    return dict(declared)


def arch_option(arch):
    return f"--gpu-architecture={arch}"


def compile_options(name, arch):
    """NVRTC options of a source: OPTIONS, the architecture, the source's -D constants."""
    return [*OPTIONS, arch_option(arch), *(f"-D{key}={value}" for key, value in sorted(defines(name).items()))]


def whole_elf(cubin):
    """The cubin at the length its ELF header declares. CuPy's getCUBIN (14.2) returns NVRTC's buffer
    less its last byte, as if it were a C string; the driver loads that, but cuobjdump and nvdisasm
    reject it (the program header table at the end is cut). The lost byte is the top byte of the last
    header's p_align, a zero."""
    import struct
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:  # ELF64 only: what NVRTC writes for every supported arch
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    return cubin + bytes(end - len(cubin)) if 0 < end - len(cubin) <= 8 else cubin


def compile_cubin(name, arch):
    """NVRTC, no GPU or driver needed: (cubin bytes, {expression: lowered name}, compiler log).
    Raises RuntimeError with the log on failure."""
    from cupy.cuda import nvrtc
    prog = nvrtc.createProgram(source(name), name, [], [])
    try:
        for expr in KERNELS[name]:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, [*compile_options(name, arch), "-Xptxas=-v"])
        except nvrtc.NVRTCError as err:
            raise RuntimeError(f"{name} for {arch} failed to compile:\n{nvrtc.getProgramLog(prog)}") from err
        lowered = {expr: nvrtc.getLoweredName(prog, expr) for expr in KERNELS[name]}
        return whole_elf(nvrtc.getCUBIN(prog)), lowered, nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def env_choice(name, choices, default):
    """The environment's setting `name` (`default` when unset), one of `choices`, else a ValueError naming both."""
    value = os.environ.get(name, default)
    if value not in choices:
        raise ValueError(f"{name}={value!r}: one of {', '.join(choices)}")
    return value


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
    options (the -D constants and the arch among them), the exported expressions and the NVRTC version
    are the same."""
    import hashlib
    import json
    from cupy.cuda import nvrtc
    folder = cache_dir()
    key = hashlib.sha256(json.dumps([source(name), compile_options(name, arch), KERNELS[name],
                                     list(nvrtc.getVersion())]).encode()).hexdigest()[:32]
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


def forget_builds():
    """Forget the loaded modules, their functions and the parsed signatures, so the next launch compiles (or loads
    the cubin cache) anew under the DEFINES (and SIGNATURES) set now: a process that changes a build's defines."""
    _module.cache_clear()
    _function.cache_clear()
    signature.cache_clear()


def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False, cluster=None):
    """Launch on torch's current stream, the arguments checked and converted by the kernel's declared
    signature (launch_values); where its source declares none, tensors go as raw pointers and ints as
    int32 unless wrapped.
    pdl: programmatic dependent launch (Hopper and newer): the kernel may be scheduled while the
    previous kernel on the stream finishes; it must call `pdl_wait()` (common.cuh) before reading
    anything an earlier kernel wrote. Hides the launch gap between short kernels.
    cluster: (x, y, z) thread-block cluster dimensions given at launch (sm_90+), for a kernel compiled without
    __cluster_dims__."""
    import cupy
    import torch
    params = signature(name, expr)
    values = tuple(_arg(a) for a in args) if params is None else launch_values(expr, params, args)
    fn = kernel(name, expr, device)
    if shared_mem > STATIC_SHARED_LIMIT:
        _opt_in_shared(fn, shared_mem)
    stream = torch.cuda.current_stream(device).cuda_stream
    with cupy.cuda.Device(_index(device)):
        pdl = pdl and _pdl_supported(_index(device))
        if pdl or cluster is not None or any(isinstance(v, np.void) for v in values):  # (CuPy's takes no tmap)
            _launch_ex(fn.ptr, grid, block, values, shared_mem, stream, pdl, cluster)
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


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (value: x, y, z)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8 bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                 ctypes.POINTER(_LaunchConfig)]
    return lib


def max_active_clusters(name, expr, device, cluster, block, shared_mem):
    """cuOccupancyMaxActiveClusters: how many clusters of `cluster` CTAs (the size compiled into the kernel's
    __cluster_dims__) of `block` threads and `shared_mem` dynamic bytes fit on the device at once, with the
    attributes the kernel has been given so far; 0 where the driver does not answer."""
    import cupy
    fn = kernel(name, expr, device)
    config = _LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(*(tuple(block) + (1, 1))[:3]),
                           shared_mem, None, None, 0)  # a grid of one cluster
    count = ctypes.c_int(0)
    with cupy.cuda.Device(_index(device)):
        err = _libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(fn.ptr),
                                                      ctypes.byref(config))
    return 0 if err else count.value


def _launch_ex(function, grid, block, values, shared_mem, stream, pdl, cluster):
    """cuLaunchKernelEx with programmatic stream serialization (pdl) and / or cluster dimensions (CuPy's
    launcher sets no attributes)."""
    grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    wanted = [(_PROGRAMMATIC_STREAM_SERIALIZATION, (1,))] if pdl else []
    if cluster is not None:
        wanted.append((_CLUSTER_DIMENSION, (tuple(cluster) + (1, 1))[:3]))
    attrs = (_LaunchAttribute * len(wanted))(*[_LaunchAttribute(id=i, value=(ctypes.c_uint * 16)(*v))
                                                for i, v in wanted])
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_mem,
                           ctypes.c_void_p(stream), attrs, len(wanted))
    holders = [(ctypes.c_ubyte * v.dtype.itemsize).from_buffer_copy(v.tobytes()) if isinstance(v, np.void)
               else _CTYPE[np.asarray(v).dtype](v.item()) for v in values]
    params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
    err = _libcuda().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function), params, None)
    if err:
        raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {err}")


TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)


def tensor_map_tiled(address, data_type, dims, strides, box, swizzle, l2_promotion):
    """cuTensorMapEncodeTiled (driver API, host only): the CUtensorMap bytes of a tensor at device `address` with
    global `dims` (innermost first), byte `strides` of the dims past the first, `box` (elements a copy, innermost
    first), element strides 1, no interleave, `swizzle` and `l2_promotion` (CUtensor* enum values), out-of-bounds
    elements zero. A kernel takes it as a `tmap` parameter (const __grid_constant__, 64-byte aligned there)."""
    rank = len(dims)
    raw = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
    out = (ctypes.addressof(raw) + 63) & ~63  # the driver wants the map 64-byte aligned
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    err = _libcuda().cuTensorMapEncodeTiled(
        ctypes.c_void_p(out), ctypes.c_int(data_type), u32(rank), ctypes.c_void_p(address), (u64 * rank)(*dims),
        (u64 * max(rank - 1, 1))(*strides), (u32 * rank)(*box), (u32 * rank)(*[1] * rank),
        ctypes.c_int(0), ctypes.c_int(swizzle), ctypes.c_int(l2_promotion), ctypes.c_int(0))
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {err}")
    return ctypes.string_at(out, TENSOR_MAP_BYTES)


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


KINDS = ("ptr", "i32", "i64", "f32", "tmap")  # a device pointer, int, long long, float, CUtensorMap (128 bytes)
_INT_RANGE = {"i32": (np.int32, -2 ** 31, 2 ** 31 - 1), "i64": (np.int64, -2 ** 63, 2 ** 63 - 1)}


@functools.lru_cache(maxsize=None)
def signature(name, expr):
    """((kind, parameter name), ...) that the wrapper of source `name` declares for the kernel of
    expression `expr` (all instantiations of a template share one), or None for a source without
    declarations (DECLARED_IN)."""
    if name not in DECLARED_IN:
        return None
    module, kernel_name = DECLARED_IN[name], expr.split("<")[0]
    declared = importlib.import_module(module).SIGNATURES
    if kernel_name not in declared:
        raise KeyError(f"{module}.SIGNATURES declares no {kernel_name}")
    params = tuple(tuple(p.split()) for p in declared[kernel_name])
    bad = [p for p in params if len(p) != 2 or p[0] not in KINDS]
    if bad:
        raise ValueError(f"{module}.SIGNATURES[{kernel_name!r}]: {bad} not 'kind name' with a kind of {KINDS}")
    return params


def launch_values(kernel, params, args):
    """The C values of `args` for parameters `params` ((kind, name), ...): ptr takes a torch tensor
    (its device pointer) or None (null); i32 / i64 a Python or NumPy integer in range; f32 a real
    number. A wrong count, kind or range raises TypeError / ValueError naming the kernel and the
    argument's position, before anything is launched (CuPy would turn a Python int into int32)."""
    import torch
    if len(args) != len(params):
        raise TypeError(f"{kernel}: {len(args)} arguments for {len(params)} parameters "
                        f"({', '.join(' '.join(p) for p in params)})")
    values = []
    for position, ((kind, param), a) in enumerate(zip(params, args)):
        if kind == "ptr":
            if isinstance(a, torch.Tensor):
                values.append(np.uint64(a.data_ptr()))
                continue
            if a is None:
                values.append(np.uint64(0))
                continue
        elif kind == "f32":
            if isinstance(a, (float, int, np.floating, np.integer)):
                values.append(np.float32(a))
                continue
        elif kind == "tmap":
            if isinstance(a, bytes) and len(a) == TENSOR_MAP_BYTES:  # tensor_map_tiled's
                values.append(np.frombuffer(a, dtype=np.dtype((np.void, TENSOR_MAP_BYTES)))[0])
                continue
        elif isinstance(a, (int, np.integer)):
            ctype, lo, hi = _INT_RANGE[kind]
            if not lo <= a <= hi:
                raise ValueError(f"{kernel} argument {position} ({kind} {param}): {a} does not fit {ctype.__name__}")
            values.append(ctype(a))
            continue
        raise TypeError(f"{kernel} argument {position} ({kind} {param}): got {type(a).__name__}")
    return tuple(values)
