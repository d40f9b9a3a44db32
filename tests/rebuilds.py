"""Helpers for tests that build a kernel source under other compile-time DEFINES than the process's: a GPU run of
each build (bitwise comparisons of two forms, with the ws attention kernel's skip, decode rows and synchronised call),
and the ws attention kernels' register budget under NVRTC (no GPU)."""

from kernels_cuda._loader import forget_builds as clear_loader_caches  # (the tests' name for it)


def skip_unless_ws(attn):
    """Skip the test unless this GPU runs the sparse_attention module `attn` on its ws kernel (Hopper)."""
    import pytest
    import torch
    if attn.choose_kernel(attn.KERNEL, torch.cuda.get_device_capability(), 64, 64, attn._sm_count(0),
                          attn._shared_optin(0), True) != "ws":
        pytest.skip("the ws kernel runs on Hopper only")


def decode_positions(batch):
    """Decode rows at positions 20000 + 37 i, rows 1, 2 and 5 (where the batch has them) at 3, 700 and 2500: their
    lists shorter than K (-1 padded; pairs and splits past the list)."""
    positions = [20000 + 37 * i for i in range(batch)]
    for row, position in ((1, 3), (2, 700), (5, 2500)):
        if row < batch:
            positions[row] = position
    return positions


def synced_call(op, x):
    """A run() for rebuilt_runs: x's call of `op` (out, lse), the device synchronised."""
    import torch

    def run():
        out, lse = x.call(op)
        torch.cuda.synchronize()
        return out, lse
    return run


def rebuilt_runs(monkeypatch, defines, settings, run):
    """run() under each {key: value} of `settings` set in `defines` (a kernel module's DEFINES), the loader's caches
    cleared around each; every monkeypatch of the test is undone after each run. The outputs, in order."""
    outs = []
    for setting in settings:
        for key, value in setting.items():
            monkeypatch.setitem(defines, key, value)
        clear_loader_caches()
        try:
            outs.append(run())
        finally:
            monkeypatch.undo()
            clear_loader_caches()
    return outs


def tail_split(monkeypatch, attn):
    """The persistent ws grid's tail split (DSV4_ATTENTION_TAIL=split, where the grid is persistent) for this test:
    the wrapper's flags and the DEFINES, with the items head-block-major (ORDER=blocks: the split's pieces take no
    other order, the kernel's static_assert), and the loader's caches cleared."""
    on = bool(attn.WS_PERSISTENT)
    monkeypatch.setattr(attn, "WS_TAIL", "split" if on else "none")
    monkeypatch.setattr(attn, "WS_TAIL_SPLIT", on)
    monkeypatch.setitem(attn.DEFINES, "WS_TAIL_SPLIT", int(on))
    if on:
        monkeypatch.setattr(attn, "WS_ORDER_ROWS", False)
        monkeypatch.setitem(attn.DEFINES, "WS_ORDER_ROWS", 0)
    clear_loader_caches()


def ws_budget(monkeypatch, settings):
    """NVRTC (no GPU) of sparse_attention.cu's four ws instantiations with `settings` set in its DEFINES: asserts no
    wgmma serialised (C7510-C7516, C7518), at most 168 registers and, under NVRTC 13.0 (the GPU image's compiler;
    13.5 spills 4 bytes in the persistent kernels), no spill or stack. Returns (cubin, lowered names, log, resources)
    for further checks; the test's monkeypatches are undone."""
    import importlib

    import pytest
    pytest.importorskip("cupy")
    from cupy.cuda import nvrtc

    from kernels_cuda import _loader, build
    attn = importlib.import_module("kernels_cuda.sparse_attention")
    if settings.get("WS_TAIL_SPLIT"):
        settings = {"WS_ORDER_ROWS": 0, **settings}  # the tail split's pieces are head-block-major (tail_split)
    for key, value in settings.items():
        monkeypatch.setitem(attn.DEFINES, key, value)
    exprs = [e for e in _loader.KERNELS["sparse_attention.cu"] if e.startswith("dsv4_sparse_attention_ws<")]
    assert len(exprs) == 4
    monkeypatch.setitem(_loader.KERNELS, "sparse_attention.cu", exprs)
    clear_loader_caches()
    try:
        cubin, lowered, log = _loader.compile_cubin("sparse_attention.cu", "sm_90a")
    finally:
        monkeypatch.undo()
        clear_loader_caches()
    assert "serialized" not in log, [line for line in log.splitlines() if "serialized" in line]
    res = build.resources(log, lowered)
    for expr in exprs:
        r = res[expr]
        assert r["registers"] <= 168, (expr, r)
        if nvrtc.getVersion() == (13, 0):
            assert r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (expr, r)
    return cubin, lowered, log, res
