"""DSV4_TOPK_WIDE_WINDOW (read at import; docs/topk-s14b.md): the wide kernels' rows on 2 or more CTAs take their
threshold and each CTA's counts before it from the window of the peers' bins (lean_regs' window form, at the row's
base rank) instead of the reduce-scatter, all-gather and fold. DSV4_TOPK_WIDE_TABLE: wide<4> / wide<8>'s rows
selected alone map their write-out through their page-table entries staged in shared memory during the load. Here:
the window is on by default (since session 21) and the table off, and neither moves the routing or the plan; under
them the wide kernels compile within one CTA an SM; on the GPU, the mixed bench batch (b64-mixed-to-262144) and
other mixed-length batches, planned and not, under each switch and both, bitwise the default build's."""

import importlib
import os

import pytest
from tests.rebuilds import clear_loader_caches

from test_cuda_topk import H200

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

MIXED_64 = [min(262144, (512 << (i % 10)) + 37 * i) for i in range(64)]  # harness/cases.py's _TOPK_MIXED_64

# batches of mixed lengths, each more than a wave of wide<8> (a planned launch, rows sized by length): the bench's;
# rows of every CTA count of wide<8> (1 .. 8) with copies and rows not a multiple of 4; long rows only (16 on 4 CTAs,
# two to a place, and 8 on 8)
BATCHES = {
    "mixed": MIXED_64,
    "every-count": [262144, 262141, 163843, 131075, 90001, 81923, 70001, 40961, 40959, 20003, 4097, 513, 512, 7, 0,
                    262143, 100003, 45001],
    "fours": [131073 + 1237 * i for i in range(16)] + [163841, 200003, 262144, 262142, 250001, 180005, 199999, 262141],
}


def test_the_window_is_on_and_the_table_off_by_default_and_neither_moves_a_launch():
    assert T.DEFINES["WIDE_WINDOW"] == T.WIDE_WINDOW and T.DEFINES["WIDE_TABLE"] == T.WIDE_TABLE
    for name, value, default in [("DSV4_TOPK_WIDE_WINDOW", T.WIDE_WINDOW, 1),
                                 ("DSV4_TOPK_WIDE_TABLE", T.WIDE_TABLE, 0)]:
        assert value == int(os.environ.get(name, default)), name  # (read at import)
    # a compile-time form of the same kernels: the launches and the plan's work list are the switch's own business
    # nowhere (wide<8> with rows sized by length, the plan's 18 places for the mixed batch)
    (kernel, grid, _, _, extra), = T.launches(64, 262144, True, *H200)
    assert kernel == "dsv4_topk_indices_wide<8>" and grid == (8, 64) and extra[1] == T.MAX_CHUNK
    (cluster, solo_up_to, groups), rows = T.plan_route(MIXED_64, 512, *H200)
    assert (cluster, solo_up_to, groups) == (8, T.MAX_CHUNK, True) and len(rows) == 18
    assert T.long_plan(MIXED_64, 512, *H200) is None  # the mixed batch stays on wide<8>
    for lens in BATCHES.values():  # the GPU test's batches: each a planned wide<8> launch of fewer places than rows
        (cluster, solo_up_to, groups), rows = T.plan_route(lens, 512, *H200)
        assert (cluster, solo_up_to, groups) == (8, T.MAX_CHUNK, True) and len(rows) < len(lens)
        assert T.long_plan(lens, 512, *H200) is None


@pytest.mark.parametrize("window, table, spill", [(1, 0, 16), (0, 1, 0), (1, 1, 32)])
def test_the_switched_wide_kernels_fit_one_cta_an_sm(monkeypatch, window, table, spill):
    # one CTA an SM: up to 64 registers; the same static shared memory. wide<2> without a spill; wide<8> (four
    # copies of the selection: 1, 2, 4 and 8 CTAs a row) spills at most 16 bytes under the window (NVRTC 13.0: the
    # 4-CTA copy's chunk bounds and the window's flag, one word on the 8-CTA copy), none under the staged table, 32
    # under both (the 4-CTA copy's; docs/topk-s14b.md)
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    kernels = ["dsv4_topk_indices_wide<2>", "dsv4_topk_indices_wide<8>"]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", kernels)
    monkeypatch.setitem(T.DEFINES, "WIDE_WINDOW", window)
    monkeypatch.setitem(T.DEFINES, "WIDE_TABLE", table)
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    found = build.resources(log, lowered)
    for kernel, cluster, most in zip(kernels, (2, 8), (0, spill)):
        res = found[kernel]
        assert res["registers"] <= 64, res
        assert res["spill_stores"] <= most and res["stack"] <= most, res
        assert res["smem"] == T.wide_static_shared(cluster), res


def _rebuilt(monkeypatch, window, table, call):
    """call() with the top-k kernels built at WIDE_WINDOW=window, WIDE_TABLE=table (the loader's caches cleared before
    and after)."""
    monkeypatch.setitem(T.DEFINES, "WIDE_WINDOW", window)
    monkeypatch.setitem(T.DEFINES, "WIDE_TABLE", table)
    clear_loader_caches()
    try:
        return call()
    finally:
        monkeypatch.setitem(T.DEFINES, "WIDE_WINDOW", T.WIDE_WINDOW)
        monkeypatch.setitem(T.DEFINES, "WIDE_TABLE", T.WIDE_TABLE)
        clear_loader_caches()


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 1024, 2048])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("variant", ["normal", "ties", "heavy", "inf", "page16"])
def test_the_switched_forms_write_the_default_builds_bits(monkeypatch, batch, k, variant):
    # The window form (WIDE_WINDOW=1), the staged table (WIDE_TABLE=1) and both against the default build, bitwise,
    # planned (the plan's work list: groups of 2 and 4 CTAs sharing a place, solo rows packed) and unplanned (the
    # device routing), on fresh random logits with garbage past seq_len and a random page table: normal scores; ties
    # injected (rounded to 1/40: the ranked path with equal keys); heavy ties (a third of each row in one value: the
    # radix after the window); +inf in a few rows (the top bin: a window too wide for 8 CTAs, the sums again, beside
    # windowed rows in the same launch); page size 16 (solo rows past 1024 pages keep the global table); reruns
    import torch

    from harness import comparators, inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    lens = BATCHES[batch]
    columns = max(262144, max(lens))
    page_size = 16 if variant == "page16" else 64
    x = inputs.topk_inputs(seq_lens=lens, columns=columns, k=k, page_size=page_size, seed=1400 + k, device="cuda",
                           tail="garbage")
    logits, seq_lens, page_table = x.args
    generator = torch.Generator(device="cuda").manual_seed(k)
    if variant == "ties":
        logits.copy_(torch.round(logits * 40) / 40)
    for b, n in enumerate(lens):
        if variant == "heavy" and n > 3:
            where = torch.randperm(n, generator=generator, device="cuda")[: n // 3]
            logits[b, where] = 0.75
        if variant == "inf" and b % 3 == 0 and n > 1000:
            logits[b, torch.randint(0, n, (3,), generator=generator, device="cuda")] = float("inf")
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size)
    assert plan.data["launch"] is not None

    def both():
        planned = x.call(T.topk_indices, k=k, page_size=page_size, plan=plan)
        assert torch.equal(x.call(T.topk_indices, k=k, page_size=page_size, plan=plan), planned)  # reruns
        return planned, x.call(T.topk_indices, k=k, page_size=page_size)

    default = _rebuilt(monkeypatch, 0, 0, both)
    for window, table in [(1, 0), (0, 1), (1, 1)]:
        for got in _rebuilt(monkeypatch, window, table, both):
            assert torch.equal(got, default[0]), (window, table)
    assert torch.equal(default[1], default[0])
    want = x.call(torch_topk, k=k, page_size=page_size)
    report = comparators.topk_indices({"indices": default[0]}, {"indices": want}, logits=logits, seq_lens=seq_lens,
                                      page_table=page_table, k=k, page_size=page_size)
    assert report.ok, report
