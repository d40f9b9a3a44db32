"""DSV4_TOPK_WIDE_STAGES (read at import; docs/topk-s16a.md): wide_select's chunk (wide<2/4/8>, lean<8/16>) copied in
2 .. 8 commit groups, each converted and counted as it lands. Here: 2 by default (the two halves: the build as it
was); under 4 and 8 the wide kernels compile within one CTA an SM without a spill; on the GPU, the mixed batches of
test_cuda_topk_s14b, planned and not, under 4 and 8 bitwise the default build's."""

import importlib

import pytest
from tests.rebuilds import rebuilt_runs

from test_cuda_topk_s14b import BATCHES, assert_the_reference_set, variant_batch

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op


def test_two_stages_by_default():
    assert T.DEFINES["WIDE_STAGES"] == T.WIDE_STAGES
    if "DSV4_TOPK_WIDE_STAGES" not in __import__("os").environ:
        assert T.WIDE_STAGES == 2


@pytest.mark.parametrize("stages", [4, 8])
def test_the_staged_wide_kernels_fit_one_cta_an_sm(monkeypatch, stages):
    # one CTA an SM: up to 64 registers, no spill, the same static shared memory (the stages are commit groups, not
    # buffers)
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    kernels = ["dsv4_topk_indices_wide<2>", "dsv4_topk_indices_wide<8>"]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", kernels)
    monkeypatch.setitem(T.DEFINES, "WIDE_STAGES", stages)
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    found = build.resources(log, lowered)
    for kernel, cluster in zip(kernels, (2, 8)):
        res = found[kernel]
        assert res["registers"] <= 64, res
        assert res["spill_stores"] == 0 and res["stack"] == 0, res
        assert res["smem"] == T.wide_static_shared(cluster), res


def test_the_loader_refuses_other_stage_counts(monkeypatch):
    pytest.importorskip("cupy")
    from kernels_cuda import _loader
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", ["dsv4_topk_indices_wide<2>"])
    monkeypatch.setitem(T.DEFINES, "WIDE_STAGES", 9)
    with pytest.raises(Exception, match="WIDE_STAGES"):
        _loader.compile_cubin("topk_indices.cu", "sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 1024, 2048])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("variant", ["normal", "ties", "heavy", "inf", "page16"])
def test_the_staged_loads_write_the_default_builds_bits(monkeypatch, batch, k, variant):
    import torch

    x, page_size, both = variant_batch(batch, k, variant)
    default, *staged = rebuilt_runs(monkeypatch, T.DEFINES, [{"WIDE_STAGES": s} for s in (2, 4, 8)], both)
    for stages, got in zip((4, 8), staged):
        for a, b in zip(got, default):
            assert torch.equal(a, b), stages
    assert_the_reference_set(x, default, k, page_size)
