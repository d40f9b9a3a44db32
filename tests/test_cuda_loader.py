"""The CUDA loader's declarations, without a GPU: each source's compile-time constants come only from
its wrapper's DEFINES (passed as -D options: dropping any one fails the compile, a changed one is a
new cubin cache entry), and each kernel's declared signature matches its parameter list in the .cu
and is what launch() checks before launching."""

import importlib
import os
import re

import numpy as np
import pytest
import torch

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

from kernels_cuda import _loader  # noqa: E402

DECLARED = sorted(_loader.DECLARED_IN)
C_KIND = {"int": "i32", "long long": "i64", "float": "f32", "WsQTensorMap": "tmap"}


def declared_defines():
    return [(source, name) for source in DECLARED for name in _loader.defines(source)]


def source_parameters(source, kernel):
    """[((kind, name), ...)] of the kernel's parameter lists in the .cu text: one a header (a kernel may have one
    a preprocessor branch, as the ws kernel's with and without WS_Q_TMA's tensor map)."""
    text = (_loader.SOURCE_DIR / source).read_text()
    found = re.findall(rf"__global__[^;{{]*?\b{kernel}\(([^)]*)\)", text)
    assert found, (source, kernel)
    headers = []
    for header in found:
        params = []
        for param in header.split(","):
            words = re.findall(r"\w+", param.replace("__restrict__", "").replace("__grid_constant__", "").replace(
                "const", ""))
            params.append(("ptr" if "*" in param else C_KIND[" ".join(words[:-1])], words[-1]))
        headers.append(tuple(params))
    return headers


def test_each_source_gets_its_wrappers_constants_as_options():
    for source in DECLARED:
        defines = _loader.defines(source)
        assert defines, source
        options = _loader.compile_options(source, "sm_90a")
        assert [o for o in options if o.startswith("-D")] == [f"-D{k}={v}" for k, v in sorted(defines.items())]
    assert _loader.compile_options("not_declared.cu", "sm_90a") == [*_loader.OPTIONS, "--gpu-architecture=sm_90a"]


@pytest.mark.parametrize("source, missing", declared_defines(), ids=lambda x: x)
def test_a_missing_define_fails_the_compile(monkeypatch, source, missing):
    # the source keeps no default: without the option NVRTC stops (in the front end, a fraction of a second)
    defines = _loader.defines
    monkeypatch.setattr(_loader, "defines", lambda name: {k: v for k, v in defines(name).items() if k != missing})
    with pytest.raises(RuntimeError, match=rf"{source} for sm_90a failed to compile:[\s\S]*\b{missing}\b"):
        _loader.compile_cubin(source, "sm_90a")


@pytest.mark.parametrize("value", [True, 8.0, "8"])
def test_a_define_is_an_int(monkeypatch, value):
    module = importlib.import_module(_loader.DECLARED_IN["indexer_logits.cu"])
    monkeypatch.setitem(module.DEFINES, "BLOCKS_PER_CTA", value)
    with pytest.raises(TypeError, match="BLOCKS_PER_CTA"):
        _loader.compile_options("indexer_logits.cu", "sm_90a")


def test_a_changed_define_is_a_new_cache_entry(monkeypatch, tmp_path):
    monkeypatch.setenv("DSV4_KERNEL_CACHE", str(tmp_path))
    built = []
    monkeypatch.setattr(_loader, "compile_cubin",
                        lambda name, arch: built.append(_loader.compile_options(name, arch)) or (b"cubin", {}, ""))
    _loader.cached_cubin("indexer_logits.cu", "sm_90a")
    _loader.cached_cubin("indexer_logits.cu", "sm_90a")
    assert len(built) == 1  # read back
    module = importlib.import_module(_loader.DECLARED_IN["indexer_logits.cu"])
    monkeypatch.setitem(module.DEFINES, "BLOCKS_PER_CTA", module.DEFINES["BLOCKS_PER_CTA"] * 2)
    _loader.cached_cubin("indexer_logits.cu", "sm_90a")
    assert len(built) == 2 and built[0] != built[1] and len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("source", DECLARED)
def test_every_kernel_declares_the_parameters_of_its_source(source):
    for expr in _loader.KERNELS[source]:
        kernel = expr.split("<")[0]
        assert _loader.signature(source, expr) in source_parameters(source, kernel), expr


def test_undeclared_sources_launch_unchecked():
    assert _loader.signature("not_declared.cu", "dsv4_anything<1>") is None


PARAMS = (("ptr", "q"), ("i32", "n"), ("i64", "stride"), ("f32", "scale"))


def test_launch_values_convert_to_the_declared_c_types():
    q = torch.arange(5.0)
    values = _loader.launch_values("dsv4_k", PARAMS, (q, 7, 3 * 2 ** 31, 0.5))
    assert [type(v) for v in values] == [np.uint64, np.int32, np.int64, np.float32]
    assert values == (q.data_ptr(), 7, 3 * 2 ** 31, 0.5)
    # None is a null pointer; NumPy integers and an int for a float are taken, range permitting
    values = _loader.launch_values("dsv4_k", PARAMS, (None, np.int64(-2 ** 31), np.int32(-1), 3))
    assert values == (0, -2 ** 31, -1, 3.0)


@pytest.mark.parametrize("args, error, message", [
    ((torch.ones(1), 7, 1), TypeError, r"dsv4_k: 3 arguments for 4 parameters \(ptr q, i32 n, i64 stride, f32 scale\)"),
    ((torch.ones(1), 7, 1, 0.5, 2), TypeError, r"dsv4_k: 5 arguments for 4 parameters"),
    ((torch.ones(1), 7.0, 1, 0.5), TypeError, r"dsv4_k argument 1 \(i32 n\): got float"),
    ((torch.ones(1), 7, 1.5, 0.5), TypeError, r"dsv4_k argument 2 \(i64 stride\): got float"),
    ((torch.ones(1), 2 ** 31, 1, 0.5), ValueError, r"dsv4_k argument 1 \(i32 n\): 2147483648 does not fit int32"),
    ((torch.ones(1), -2 ** 31 - 1, 1, 0.5), ValueError, r"argument 1 \(i32 n\): -2147483649 does not fit int32"),
    ((torch.ones(1), 7, 2 ** 63, 0.5), ValueError, r"dsv4_k argument 2 \(i64 stride\): 9223372036854775808 does not"),
    ((torch.ones(1), torch.tensor(7), 1, 0.5), TypeError, r"dsv4_k argument 1 \(i32 n\): got Tensor"),
    ((torch.ones(1), 7, 1, torch.tensor(0.5)), TypeError, r"dsv4_k argument 3 \(f32 scale\): got Tensor"),
    ((7, 7, 1, 0.5), TypeError, r"dsv4_k argument 0 \(ptr q\): got int"),
    ((np.uint64(0), 7, 1, 0.5), TypeError, r"dsv4_k argument 0 \(ptr q\): got uint64"),
], ids=["too-few", "too-many", "float-for-i32", "float-for-i64", "i32-over", "i32-under", "i64-over",
        "tensor-for-i32", "tensor-for-f32", "int-for-ptr", "numpy-for-ptr"])
def test_launch_values_reject_what_the_signature_does_not_declare(args, error, message):
    with pytest.raises(error, match=message):
        _loader.launch_values("dsv4_k", PARAMS, args)


def test_launch_checks_before_building_or_launching(monkeypatch):
    # a wrong argument stops launch() before it compiles, loads or touches a device (none here)
    monkeypatch.setattr(_loader, "kernel", lambda *a: pytest.fail("reached the kernel lookup"))
    t = torch.ones(1)
    args = (t, t, t, t, t, 64, t, 4096, 8)
    with pytest.raises(TypeError, match=r"dsv4_indexer_logits argument 8 \(i32 heads\): got float"):
        _loader.launch("indexer_logits.cu", "dsv4_indexer_logits", (1,), (128,), (*args[:8], 8.0), torch.device("cpu"))
    with pytest.raises(TypeError, match=r"dsv4_indexer_logits_wgmma<4>: 9 arguments for 10 parameters"):
        _loader.launch("indexer_logits.cu", "dsv4_indexer_logits_wgmma<4>", (1,), (128,), args, torch.device("cpu"))


def test_indexer_ring_depths_are_built():
    # every ring depth the wrapper may launch (DSV4_INDEXER_STAGES) is a compiled instantiation
    indexer = importlib.import_module("kernels_cuda.indexer_logits")
    built = set(_loader.KERNELS["indexer_logits.cu"])
    assert {f"dsv4_indexer_logits_wgmma<{s}>" for s in indexer.WGMMA_STAGES} <= built
    assert indexer.WGMMA_DEFAULT_STAGES in indexer.WGMMA_STAGES


def recording_launch(launched):
    """A stand-in for the loader's launch() that checks the arguments as launch() does, and records them."""
    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False):
        launched.append((expr, _loader.launch_values(expr, _loader.signature(name, expr), args)))
    return launch


@pytest.mark.parametrize("ratio, mode, prefix, extend, d", [
    (4, "ring", [0, 5], [9, 1], 512), (4, "paged", [3, 0], [1, 17], 130), (128, "ring", [0, 100], [300, 1], 512),
    (128, "paged", [0], [1000], 512), (128, "online", [100, 0], [300, 1], 512), (128, "online", [0], [4096], 512),
    (128, "ring", [127, 300], [1, 1], 512), (128, "online", [127, 300], [1, 1], 130)], ids=lambda x: str(x))
def test_compress_launches_what_its_kernels_declare(monkeypatch, ratio, mode, prefix, extend, d):
    # the real wrapper on CPU tensors up to the launch (no GPU): every launch it makes passes the
    # signature check, whichever path (C4, one-run or grouped C128, VEC 4 or 1, scratch and commit)
    from harness import inputs
    compress = importlib.import_module("kernels_cuda.compress")
    launched = []
    monkeypatch.setattr(compress, "launch", recording_launch(launched))
    monkeypatch.setattr(compress, "_sms", lambda device: 132)
    x = inputs.compress_inputs(ratio=ratio, d=d, prefix_lens=prefix, extend_lens=extend, mode=mode, seed=3)
    x.call(compress.compress)
    assert launched and all(e.startswith(f"dsv4_compress_c{ratio}<") for e, _ in launched[:1]), launched
    for expr, values in launched:
        assert len(values) == len(_loader.signature("compress.cu", expr))


@pytest.mark.parametrize("wgmma", [True, False], ids=["wgmma", "mma"])
def test_indexer_launches_what_its_kernels_declare(monkeypatch, wgmma):
    from harness import inputs
    indexer = importlib.import_module("kernels_cuda.indexer_logits")
    launched = []
    monkeypatch.setattr(indexer, "launch", recording_launch(launched))
    monkeypatch.setattr(indexer, "_use_wgmma", lambda *a: wgmma)
    monkeypatch.setattr(indexer, "_wgmma_grid", lambda device_index, stages: 528)
    monkeypatch.setattr(_loader, "_index", lambda device: 0)
    x = inputs.indexer_inputs(context_lens=[100, 700], heads=64, seed=5)
    x.call(indexer.indexer_logits)
    [(expr, values)] = launched
    assert expr.startswith("dsv4_indexer_logits_wgmma<" if wgmma else "dsv4_indexer_logits")
    assert values[5] == x.args[4].stride(0) and isinstance(values[5], np.int64)  # table_stride: long long


@pytest.mark.parametrize("kernel, heads, sms", [
    ("h16", 80, 132), ("h64", 64, 132), ("wgmma", 64, 132), ("wgmma2", 128, 132), ("pipe", 64, 132),
    ("pair", 128, 132), ("h64", 64, 1), ("wgmma", 64, 1), ("ws", 128, 132), ("ws", 64, 1)], ids=lambda x: str(x))
def test_attention_launches_what_its_kernels_declare(monkeypatch, kernel, heads, sms):
    # the real wrapper on CPU tensors up to the launch, the kernel forced: the kernel and, where the
    # index list is split (2 rows on 132 SMs; on 1 SM it is not), the combine pass the signature check
    from harness import inputs
    attention = importlib.import_module("kernels_cuda.sparse_attention")
    launched = []
    monkeypatch.setattr(attention, "launch", recording_launch(launched))
    monkeypatch.setattr(attention, "choose_kernel", lambda *a: kernel)
    monkeypatch.setattr(attention, "_sm_count", lambda device: sms)
    monkeypatch.setattr(attention, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(attention.torch.cuda, "get_device_capability", lambda device: (9, 0))
    x = inputs.attention_inputs(positions=[900, 30], heads=heads, seed=7)
    x.call(attention.sparse_attention)
    name = "dsv4_sparse_attention<" if kernel == "h16" else f"dsv4_sparse_attention_{kernel}<"
    assert launched[0][0].startswith(name), launched
    split = launched[0][0].endswith(", true>")
    assert [e.split("<")[0] for e, _ in launched[1:]] == (["dsv4_sparse_attention_combine"] if split else [])
    assert split == (kernel != "h16" and sms > 1), launched
    for expr, values in launched:
        assert len(values) == len(_loader.signature("sparse_attention.cu", expr))


@pytest.mark.parametrize("kernel", ["wgmma", "cvt", "pipe", "pair"])
def test_fp8_attention_launches_what_its_kernels_declare(monkeypatch, kernel):
    from harness import inputs
    attention = importlib.import_module("kernels_cuda.sparse_attention")
    fp8 = importlib.import_module("kernels_cuda.sparse_attention_fp8")
    launched = []
    monkeypatch.setattr(attention, "launch", recording_launch(launched))  # launch_split's
    monkeypatch.setattr(attention, "_sm_count", lambda device: 132)
    monkeypatch.setattr(fp8, "decline_reason", lambda q: None)
    monkeypatch.setattr(fp8, "choose_kernel", lambda *a: kernel)
    x = inputs.attention_fp8_inputs(positions=[900, 30], heads=128, seed=9)
    x.call(fp8.sparse_attention_fp8)
    assert launched[0][0].startswith(f"dsv4_sparse_attention_fp8_{'wgmma' if kernel == 'cvt' else kernel}<")
    assert [e.split("<")[0] for e, _ in launched[1:]] == ["dsv4_sparse_attention_combine"]
    values = launched[0][1]
    assert values[-1] == x.args[1].stride(0) and isinstance(values[-1], np.int64)  # page_stride: long long
    for expr, values in launched:
        assert len(values) == len(_loader.signature("sparse_attention.cu", expr))


@pytest.mark.parametrize("choice, seq_lens, columns, sms, first", [
    ("fast", [300, 5000], 8192, 132, "fast<2>"), ("fast", [300, 5000, 16000], 16384, 2, "half<4>"),
    ("fast", [300, 20000, 30000], 32768, 2, "wide1"),
    ("fast", [70000, 9000], 70000, 132, "lean<8>"), ("fast", [65536, 9000], 65536, 132, "lean_regs<8, 2>"),
    ("fast", [70000] * 20 + [9000], 70000, 132, "wide<"), ("fast", [262144] * 17, 262144, 132, "wide<8>"),
    ("split", [70000, 9000], 70000, 132, "fast<4>"),
    ("cluster", [70000, 300], 70000, 132, "cluster<"),
    ("v2", [5000, 300], 5000, 132, "regs<2>")], ids=lambda x: str(x))
def test_topk_launches_what_its_kernels_declare(monkeypatch, choice, seq_lens, columns, sms, first):
    # the real wrapper on CPU tensors up to the launch: each kernel the routing picks (fast, half past
    # one wave of fast, wide1, one wave of 8-CTA rows on the lean kernels (DSV4_TOPK_LEAN's default 8r),
    # more on wide<8>, split's two launches, cluster, v2) passes the signature check
    import torch

    from harness import inputs
    topk = importlib.import_module("kernels_cuda.topk_indices")
    launched = []
    monkeypatch.setattr(topk, "launch", recording_launch(launched))
    monkeypatch.setattr(topk, "_device", lambda index: (sms, (1, 2, 4, 8)))
    monkeypatch.setattr(topk, "_opt_in", lambda kernel, shared, device: None)
    monkeypatch.setattr(topk, "_two_per_sm", lambda kernel, device: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setenv("DSV4_TOPK_KERNEL", choice)
    x = inputs.topk_inputs(seq_lens=seq_lens, columns=columns, k=512, page_size=64, seed=4)
    x.call(topk.topk_indices, validate=False)
    assert launched[0][0].startswith(f"dsv4_topk_indices_{first}"), launched
    assert len(launched) == (2 if choice == "split" else 1), launched
    for expr, values in launched:
        assert len(values) == len(_loader.signature("topk_indices.cu", expr))
        assert values[1] == columns and isinstance(values[1], np.int64)  # columns: long long
        assert values[4] == x.args[2].stride(0) and isinstance(values[4], np.int64)  # table_stride: long long


@pytest.mark.parametrize("route", ["plan", "device"])
def test_topk_plan_launches_the_mixed_batch_as_packed_places(monkeypatch, route):
    # the real planner and wrapper on CPU tensors up to the launch (Hopper's 132 SMs stubbed):
    # b64-mixed-to-262144 with its plan is one wide<8> launch of 18 places (rows sized by their length,
    # those of the same CTA count packed) reading the plan's work list; DSV4_TOPK_ROUTE=device, or no
    # plan, the device routing's 64 places and no work list
    from harness import contract, inputs
    topk = importlib.import_module("kernels_cuda.topk_indices")
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False):
        launched.append((expr, grid, args[-1], _loader.launch_values(expr, _loader.signature(name, expr), args)))

    monkeypatch.setattr(topk, "launch", launch)
    monkeypatch.setattr(topk, "_device", lambda index: (132, (1, 2, 4, 8)))
    monkeypatch.setattr(topk, "_opt_in", lambda kernel, shared, device: None)
    monkeypatch.setattr(topk, "_two_per_sm", lambda kernel, device: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("DSV4_TOPK_ROUTE", route)
    lens = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)]
    x = inputs.topk_inputs(seq_lens=lens, columns=262144, k=512, page_size=64, seed=5)
    _, seq_lens, page_table = x.args
    # DSV4_TOPK_GROUPS=0 (every long row on the whole cluster): the 34 short rows pack 8 a place, 30 + 5
    monkeypatch.setenv("DSV4_TOPK_GROUPS", "0")
    whole = topk.topk_indices_plan(seq_lens, page_table, k=512, page_size=64)
    assert whole["launch"] == (8, 16384) and not whole["groups"] and whole["places"] == 35
    monkeypatch.delenv("DSV4_TOPK_GROUPS")  # the default: rows sized by their length
    plan = topk.topk_indices_plan(seq_lens, page_table, k=512, page_size=64)
    assert plan["launch"] == (8, 40960) and plan["groups"] and plan["places"] == 18  # (the ~66K rows on 4 CTAs)
    assert plan["work"].shape == (18 * 8 * 2,)
    work = plan["work"].view(18, 8, 2)  # (row, seq_len) a CTA
    rows = work[..., 0].tolist()
    assert sorted(b for place in rows for b in set(place) if b >= 0) == list(range(64))  # each row in one place
    taken = work[..., 0] >= 0
    assert torch.equal(work[..., 1][taken], seq_lens[work[..., 0][taken].long()])  # each row's own seq_len
    x.call(topk.topk_indices, validate=True, plan=plan)
    x.call(topk.topk_indices, validate=False)
    planned, unplanned = launched
    assert planned[0] == unplanned[0] == "dsv4_topk_indices_wide<8>"
    assert planned[1] == ((8, 18) if route == "plan" else (8, 64)) and unplanned[1] == (8, 64)
    assert (planned[2] is plan["work"]) == (route == "plan") and unplanned[2] is None
    for expr, _, _, values in launched:
        assert len(values) == len(_loader.signature("topk_indices.cu", expr))
        assert values[-1] == (plan["work"].data_ptr() if values is planned[3] and route == "plan" else 0)
    # a plan from other lengths is refused under validate, naming plan
    other = topk.topk_indices_plan(seq_lens.flip(0), page_table, k=512, page_size=64, validate=False)
    with pytest.raises(contract.InputError) as err:
        x.call(topk.topk_indices, validate=True, plan=other)
    assert err.value.argument == "plan"


def test_topk_plan_is_not_used_where_the_logits_width_gives_another_launch(monkeypatch):
    # a plan is made for logits as wide as the longest row; wider logits that change the launch (here
    # the solo bound: 8 CTAs of 8752 columns for 70000, of 32768 for 262144) route on the device (the
    # same bits), with no work list
    from harness import inputs
    topk = importlib.import_module("kernels_cuda.topk_indices")
    launched = []
    monkeypatch.setattr(topk, "launch", lambda name, expr, grid, block, args, device, **kw:
                        launched.append((expr, grid, args[-1])))
    monkeypatch.setattr(topk, "_device", lambda index: (132, (1, 2, 4, 8)))
    monkeypatch.setattr(topk, "_opt_in", lambda kernel, shared, device: None)
    monkeypatch.setattr(topk, "_two_per_sm", lambda kernel, device: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    x = inputs.topk_inputs(seq_lens=[70000, 300, 5000, 600], columns=262144, k=512, page_size=64, seed=6)
    # one wave of 8-CTA rows runs the lean kernels by default, which take no plan
    assert topk.topk_indices_plan(*x.args[1:], k=512, page_size=64)["launch"] is None
    monkeypatch.setattr(topk, "LEAN", "0")  # wide<8>, the plan's kernel
    plan = topk.topk_indices_plan(*x.args[1:], k=512, page_size=64)
    assert plan["launch"] == (8, 8752) and plan["places"] == 2  # 70000 alone, the three short rows packed
    x.call(topk.topk_indices, validate=False, plan=plan)
    assert launched == [("dsv4_topk_indices_wide<8>", (8, 4), None)]
    # rows that each fill a place already (64 x 262144): no work list, whose load would only lengthen every CTA
    x = inputs.topk_inputs(seq_lens=[262144] * 64, columns=262144, k=512, page_size=64, seed=7)
    assert topk.topk_indices_plan(*x.args[1:], k=512, page_size=64)["launch"] is None
