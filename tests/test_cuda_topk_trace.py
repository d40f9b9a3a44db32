"""kernels_cuda/topk_trace.py and the trace build (DEFINES' WIDE_TRACE): off by default; on, the wide kernels compile
with the stamp array and without a spill; the tool's classes and table from a work list and stamps (CPU); on a GPU,
every CTA's stamps in phase order and the trace build's indices bitwise the default build's."""

import importlib
import os

import numpy as np
import pytest

from kernels_cuda import topk_trace

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op


def test_the_trace_is_off_by_default():
    assert T.DEFINES["WIDE_TRACE"] == T.TRACE
    if "DSV4_TOPK_TRACE" not in os.environ:
        assert T.TRACE == 0


def test_the_trace_build_compiles_the_wide_kernels_without_a_spill(monkeypatch):
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    kernels = ["dsv4_topk_indices_wide<2>", "dsv4_topk_indices_wide<8>"]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", kernels)
    monkeypatch.setitem(T.DEFINES, "WIDE_TRACE", 1)
    cubin, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    assert b"wide_trace" in cubin  # the array the tool reads (module.get_global)
    found = build.resources(log, lowered)
    for kernel in kernels:
        assert found[kernel]["registers"] <= 64 and found[kernel]["spill_stores"] == 0, found[kernel]


def test_classes_name_each_cta_by_its_rows_ctas_and_columns():
    # two places of 4: a 131072 row on 4 CTAs; two solo rows and an empty slot and a copy
    work = np.array([[3, 131072]] * 4 + [[0, 5000], [1, 700], [-1, 0], [2, 300]]).reshape(-1)
    named = topk_trace.classes(work, 4)
    assert [named[i] for i in range(4)] == [("4 CTAs x 32K", 3)] * 4
    assert named[4] == ("1 CTA x 4K", 0) and named[5] == ("1 CTA x 700", 1) and named[7] == ("1 CTA x 300", 2)
    assert 6 not in named


def test_the_table_gives_each_classs_median_and_slowest_phase_ends():
    work = np.array([[3, 131072]] * 4 + [[0, 5000], [1, 700], [-1, 0], [2, 300]]).reshape(-1)
    named = topk_trace.classes(work, 4)
    stamps = np.zeros((T.TRACE_CTAS, T.TRACE_PHASES, 2), dtype=np.uint64)
    for i, ends in {0: [100, 900, 4000, 5000, 6000, 6500, 7000, 7500, 8000],
                    1: [100, 950, 4100, 5000, 6000, 6500, 7100, 7600, 8200],
                    2: [120, 900, 4200, 5000, 6000, 6500, 7000, 7500, 8100],
                    3: [110, 900, 4900, 5000, 6000, 6500, 7000, 7500, 8000],
                    4: [1000, 1800, 2500, 2600, 2700, 2750, 2800, 2900, 3300],
                    5: [1000, 1800, 2000, 2100, 2200, 2250, 2300, 2400, 2600]}.items():
        stamps[i, :9, 0] = ends
    stamps[7, :2, 0] = [1000, 1900]  # the copy: entry and row only
    table = {name: (count, cells) for name, count, cells in topk_trace.summarise(stamps, named)}
    count, cells = table["4 CTAs x 32K"]
    assert count == 4 and cells[2] == (4050.0, 4800) and cells[8] == (7950.0, 8100)  # after the earliest entry, 100
    assert table["1 CTA x 300"][1][1] == (1800, 1800) and table["1 CTA x 300"][1][2] is None
    assert [name for name in table][0] == "4 CTAs x 32K"  # the slowest class first


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["b64-mixed-to-262144", "b64-mixed-to-262144-k1024"])
def test_the_trace_build_stamps_every_cta_in_order_and_writes_the_default_bits(monkeypatch, case):
    import torch

    import kernels_cuda
    from harness import cases, check
    from tests.rebuilds import rebuilt_runs
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the wide kernels' clusters are Hopper's")
    c = cases.find("topk_indices", case)
    x = cases.build(c, "cuda")
    calls = check.op_calls(c, x)
    plans = check.make_plans(kernels_cuda, c, calls)
    named = topk_trace.classes(plans[0]["work"].cpu().numpy(), plans[0]["launch"][0])

    def run():
        if T.DEFINES["WIDE_TRACE"]:
            topk_trace.read_trace(torch.cuda.current_device()).fill(0)
        out = check.run_calls(kernels_cuda, c, x.clone(), calls, plans, validate=False)
        torch.cuda.synchronize()
        stamps = topk_trace.read_trace(torch.cuda.current_device()).get() if T.DEFINES["WIDE_TRACE"] else None
        return out, stamps

    (default, _), (traced, stamps) = rebuilt_runs(monkeypatch, T.DEFINES, [{"WIDE_TRACE": 0}, {"WIDE_TRACE": 1}], run)
    assert all(torch.equal(default[key], traced[key]) for key in default)
    ns = stamps[:, :, 0].astype(np.int64)
    for i in named:
        assert ns[i, 0] > 0 and ns[i, 1] >= ns[i, 0], i  # every CTA with a row stamps its entry and its row
        set_ = [p for p in range(9) if ns[i, p] > 0]
        assert set_ == list(range(len(set_))), (i, set_)  # the phases it reached, none skipped
        assert all(np.diff(ns[i, set_]) >= 0), (i, ns[i, set_])
    empty = [i for i in range(len(plans[0]["work"]) // 2) if i not in named]
    assert all(ns[i, 0] > 0 and ns[i, 1:9].max() == 0 for i in empty)  # an empty slot: its entry, then it exits
    assert ns[len(plans[0]["work"]) // 2:].max() == 0  # nothing past the grid
