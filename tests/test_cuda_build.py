"""The CUDA backend on a machine without a GPU: every kernel compiles with NVRTC for the supported
architectures with the loader's options (no spills), a compile error comes with its log, and bad
input is rejected by the contract before any launch."""

import importlib
import os

import pytest

from harness import badinput as B
from harness import contract

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

from kernels_cuda import _loader, build  # noqa: E402


@pytest.mark.parametrize("arch", build.ARCHS)
def test_every_kernel_compiles_without_spills(arch):
    rows = build.build([arch])
    compiled = {(source, expr) for source, _, expr, _ in rows}
    assert compiled == {(s, e) for s, exprs in _loader.KERNELS.items() for e in exprs}
    for source, _, expr, res in rows:
        assert res["registers"] > 0, (source, expr)
        assert res["spill_stores"] == res["spill_loads"] == 0, (source, expr, res)


def test_build_command_prints_the_table(capsys):
    assert build.main(["--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "topk_indices" in out and "compress_c128<4, 2>" in out


def test_a_compile_error_reports_the_log(monkeypatch):
    monkeypatch.setattr(_loader, "source", lambda name: "__global__ void topk_indices() { undefined_thing; }")
    with pytest.raises(RuntimeError, match="undefined_thing"):
        _loader.compile_cubin("topk_indices.cu", "sm_90")
    assert build.main(["--arch", "sm_90"]) == 1


def test_built_cubins_are_kept_on_disk_by_source(monkeypatch, tmp_path):
    monkeypatch.setenv("DSV4_KERNEL_CACHE", str(tmp_path))
    built = []
    real = _loader.compile_cubin
    monkeypatch.setattr(_loader, "compile_cubin", lambda name, arch: built.append(name) or real(name, arch))
    first = _loader.cached_cubin("compress.cu", "sm_90a")
    assert _loader.cached_cubin("compress.cu", "sm_90a") == first and built == ["compress.cu"]  # read back
    source = _loader.source
    monkeypatch.setattr(_loader, "source", lambda name: source(name) + "\n// edited\n")
    assert _loader.cached_cubin("compress.cu", "sm_90a")[1] == first[1] and len(built) == 2  # a new key
    monkeypatch.setenv("DSV4_KERNEL_CACHE", "off")
    _loader.cached_cubin("compress.cu", "sm_90a")
    assert len(built) == 3 and len(list(tmp_path.iterdir())) == 2


def test_the_cubin_is_the_whole_elf_its_header_declares():
    # the SASS tools (cuobjdump, nvdisasm) read a cached cubin only when none of it is cut off
    import struct
    cubin, _, _ = _loader.compile_cubin("compress.cu", "sm_90a")
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    assert len(cubin) == max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    assert _loader.whole_elf(cubin) == cubin and _loader.whole_elf(cubin[:-1]) == cubin
    assert _loader.whole_elf(b"not an ELF") == b"not an ELF"


@pytest.mark.parametrize("bad", B.BAD_INPUTS, ids=lambda b: f"{b.op}-{b.argument}-{b.what}".replace(" ", "_"))
def test_bad_input_never_reaches_a_kernel(bad):
    import kernels_cuda
    args, kwargs, _ = B.build(bad)
    with pytest.raises(contract.InputError) as err:
        getattr(kernels_cuda, bad.op)(*args, **kwargs)
    assert err.value.argument == bad.argument


def test_every_kernel_is_named_for_the_sanitizer_filter():
    # ci/sanitize.sh runs racecheck with --kernel-name kns=dsv4_: a kernel named otherwise goes unchecked
    for source, exprs in _loader.KERNELS.items():
        text = (_loader.SOURCE_DIR / source).read_text()
        for expr in exprs:
            assert expr.startswith("dsv4_") and f" {expr.split('<')[0]}(" in text, (source, expr)


@pytest.mark.parametrize("sms, clusters", [(132, (1, 2, 4, 8)), (108, (1,))], ids=["h200", "a100"])
def test_topk_routes_name_compiled_kernels_that_fit(sms, clusters):
    # the host routing of topk_indices (no GPU): every kernel it launches is compiled, its chunk fits
    # shared memory, clusters only where the GPU has them; split: a wide batch's short rows go first
    # to the fast kernel, which the wide kernel then skips (tests/test_cuda_topk.py: the default)
    T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op
    compiled = set(_loader.KERNELS["topk_indices.cu"])
    for batch, columns, aligned in [(64, 16384, True), (256, 16384, True), (64, 65536, True), (64, 262144, True),
                                    (1, 65536, True), (64, 512, True), (2, 70001, False), (3, 3000, False),
                                    (300, 4096, True), (1, 16385, True), (256, 8192, False)]:
        for choice in ("fast", "split", "wide", "cluster", "v2"):
            if columns > clusters[-1] * T.MAX_CHUNK and not (choice == "v2" and columns <= 65536):
                with pytest.raises(ValueError, match="exceed"):  # before any launch
                    T.launches(batch, columns, aligned, sms, clusters, choice=choice)
                continue
            runs = T.launches(batch, columns, aligned, sms, clusters, choice=choice)
            assert runs, (batch, columns, choice)
            for kernel, grid, shared, _, _ in runs:
                assert kernel in compiled, kernel
                assert shared <= 4 * (T.MAX_CHUNK + 4), (kernel, shared)
                assert len(grid) == 1 or grid[0] in clusters, (kernel, grid)
            wide = [r for r in runs if "wide" in r[0] and r[4][0] == T.FAST_COLUMNS]
            if choice == "split" and aligned and columns > T.FAST_COLUMNS:
                assert runs[0][0] == "dsv4_topk_indices_fast<4>" and len(wide) == 1, runs
            else:
                assert not wide, runs


def test_attention_shared_sizes_match_the_kernels():
    # the launchers' dynamic shared memory (Python) must equal the kernels' layouts (the .cu macros):
    # a smaller launch would let the kernel run past its allocation; all must fit Hopper's 227 KB
    from cupy.cuda import nvrtc
    A = importlib.import_module("kernels_cuda.sparse_attention")
    F = importlib.import_module("kernels_cuda.sparse_attention_fp8")
    sizes = {"WG_SHARED_BYTES": A.WG_SHARED_BYTES, "WG2_SHARED_BYTES": A.WG2_SHARED_BYTES,
             "BF16_PIPE_SHARED_BYTES": A.PIPE_SHARED_BYTES, "FP8_WG_SHARED_BYTES": F.SHARED_BYTES,
             "FP8_PIPE_SHARED_BYTES": F.PIPE_SHARED_BYTES, "BF16_PAIR_SHARED_BYTES": A.PAIR_SHARED_BYTES,
             "FP8_PAIR_SHARED_BYTES": F.PAIR_SHARED_BYTES, "LATE_SHARED_BYTES": A.LATE_SHARED_BYTES,
             "FP8_LATE_SHARED_BYTES": F.LATE_SHARED_BYTES, "WS_SHARED_BYTES": A.WS_SHARED_BYTES,
             "WS_THREADS": A.WS_THREADS}
    checks = "".join(f"static_assert({m} == {v}, \"{m}\");\n" for m, v in sizes.items())
    prog = nvrtc.createProgram(_loader.source("sparse_attention.cu") + "\n" + checks, "sizes.cu", [], [])
    try:
        nvrtc.compileProgram(prog, _loader.compile_options("sparse_attention.cu", "sm_90a"))
    except nvrtc.NVRTCError:
        pytest.fail(nvrtc.getProgramLog(prog))
    finally:
        nvrtc.destroyProgram(prog)
    assert max(sizes.values()) <= 232448, sizes


@pytest.mark.parametrize("capability, sms, shared, decode, prefill",
                         [((9, 0), 132, 232448, "ws", "ws"), ((8, 0), 108, 166912, "h16", "h16"),
                          ((10, 0), 148, 232448, "h64", "h64")], ids=["h200", "a100", "b200"])
def test_attention_routes_name_compiled_kernels_that_fit(capability, sms, shared, decode, prefill):
    # the host routing of sparse_attention (no GPU): every choice launches a compiled kernel whose
    # shared memory fits; the wgmma kernels only on Hopper with whole 64-head blocks and aligned
    # tensors; auto takes ws on Hopper at every batch (wgmma, wgmma2, pipe and pair only when asked for)
    A = importlib.import_module("kernels_cuda.sparse_attention")
    compiled = set(_loader.KERNELS["sparse_attention.cu"])
    for choice in ("auto", "h16", "h64", "wgmma", "wgmma2", "pipe", "pair", "ws"):
        for heads in (16, 64, 80, 128):
            for batch in (1, 64, 256, 4096):
                for aligned in (True, False):
                    kernel = A.choose_kernel(choice, capability, heads, batch, sms, shared, aligned)
                    name = ("dsv4_sparse_attention<true>" if kernel == "h16"
                            else f"dsv4_sparse_attention_{kernel}<true, true>")
                    assert name in compiled, (choice, kernel)
                    assert kernel == "h16" or A.SHARED[kernel] <= shared, (choice, kernel)
                    if kernel in ("wgmma", "wgmma2", "pipe", "pair", "ws"):
                        assert capability == (9, 0) and heads % 64 == 0 and aligned, (choice, heads, aligned)
                    if kernel == "pair":  # a cluster of two 64-head CTAs: the grid's head blocks in pairs
                        assert heads % 128 == 0, (choice, heads)
                    if choice in ("h16", "h64") and kernel != "h16":
                        assert kernel == choice
                    if choice == "ws" and capability == (9, 0) and heads % 64 == 0 and aligned:
                        assert kernel == "ws", (heads, batch)
    assert A.choose_kernel("auto", capability, 64, 64, sms, shared, True) == decode  # decode b64 H64
    assert A.choose_kernel("auto", capability, 64, 4096, sms, shared, True) == prefill  # prefill 4096 tokens
    assert A.choose_kernel("auto", capability, 128, 64, sms, shared, True) == decode  # decode b64 H128
    assert A.choose_kernel("pair", capability, 64, 64, sms, shared, True) in ("pipe", "h16", "h64")  # H 64: no pair
    assert A.choose_kernel("auto", capability, 64, 1, sms, shared, True) == decode  # decode b1: ws too
    assert A.choose_kernel("auto", capability, 80, 64, sms, shared, True) in ("h64", "h16")  # H 80: no 64-head blocks
    assert A.choose_kernel("auto", capability, 64, 64, sms, shared, False) in ("h64", "h16")  # unaligned: no cp.async
    if capability == (9, 0):  # asked for by name, wgmma stays reachable
        assert A.choose_kernel("wgmma", capability, 64, 64, sms, shared, True) == "wgmma"


def test_fp8_attention_routes_name_compiled_kernels():
    # every FP8 choice launches a compiled kernel; pair (a cluster over head blocks 2c, 2c + 1) only
    # for H a multiple of 128; auto takes the wgmma kernel
    F = importlib.import_module("kernels_cuda.sparse_attention_fp8")
    compiled = set(_loader.KERNELS["sparse_attention.cu"])
    for choice in ("auto", "pipe", "pair", "wgmma", "cvt"):
        for heads in (16, 64, 80, 128, 256):
            for topk in (1, 640, 1152, 8320):
                kernel = F.choose_kernel(choice, topk, heads)
                name = {"cvt": "wgmma<true, true, false>", "wgmma": "wgmma<true, true, true>"}.get(kernel,
                                                                                             f"{kernel}<true, true>")
                assert f"dsv4_sparse_attention_fp8_{name}" in compiled, (choice, kernel)
                assert kernel != "pair" or heads % 128 == 0, (choice, heads)
    assert F.choose_kernel("auto", 1152, 128) == "wgmma" and F.choose_kernel("auto", 8320, 64) == "wgmma"
    assert F.choose_kernel("pair", 8320, 128) == "pair" and F.choose_kernel("pipe", 8320, 64) == "pipe"
    assert F.choose_kernel("pair", 640, 64) == "wgmma"  # not a multiple of 128: auto's choice
