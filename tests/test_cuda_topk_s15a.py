"""DSV4_TOPK_MIXED (docs/topk-s15a.md): a planned batch of mixed lengths on dsv4_topk_indices_wide16<16>, 16-CTA
clusters at two CTAs an SM, every long chain about half the columns of the default's wide<8> chains. Another chunking
than wide<8>'s, so another slot order: the GPU tests compare the SET of indices with the reference (and the default),
and reruns bitwise. CPU tests: the planning (CTAs a row, places, shared memory a CTA, two CTAs an SM) and the build."""

import importlib

import numpy as np
import pytest

from test_cuda_topk import H200, MIXED

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

SM_SHARED = 228 * 1024  # the H200's shared memory an SM
CTA_RESERVED = 1024  # the driver's reserve a CTA
DEFAULT_LAUNCH = (-1, T.MAX_CHUNK, T.WIDE_FOLD | T.WIDE_GROUPS)


def ctas_of_rows(rows):
    """{row: CTAs} of a work list (places of (row or -1) a CTA)."""
    ctas = {}
    for place in rows:
        for b in place:
            if b >= 0:
                ctas[b] = ctas.get(b, 0) + 1
    return ctas


def test_the_switch_is_off_by_default():
    if T.MIXED:
        pytest.skip("DSV4_TOPK_MIXED is set in this process")
    assert T.mixed_plan(MIXED, 512, *H200) is None
    assert T.mixed_plan(MIXED, 512, *H200, choice="") is None
    with pytest.raises(ValueError):
        T.mixed_plan(MIXED, 512, *H200, choice="quarter")


@pytest.mark.parametrize("k", [512, 1024])
def test_the_mixed_bench_batch_halves_every_long_chain(k):
    choice, launch, places, rows = T.mixed_plan(MIXED, k, *H200, choice="half")
    assert (choice, launch) == ("half", DEFAULT_LAUNCH)  # replaces the default's planned wide<8>
    ctas = ctas_of_rows(rows)
    assert sorted(ctas) == list(range(len(MIXED)))  # every row once, copies included
    for b, n in enumerate(MIXED):
        want = (16 if n == 262144 else 8 if n > 131072 else 4 if n > 65536 else 2 if n > 32768 else 1)
        assert ctas[b] == want, (b, n)
        if want > 1:  # a long chain: 16.4-17.4K columns a CTA, against wide<8>'s 32.8-34.8K
            c8 = T.wide_row_ctas(n, k, T.MAX_CHUNK)  # the default's (1: alone)
            half, default = T.chunk_columns(n, want), n if c8 == 1 else T.chunk_columns(n, c8)
            assert 16384 <= half <= 17420 and 32768 <= default <= 34840 and 1.88 < default / half <= 2.0, n
        else:
            assert n <= T.MIXED_CHUNK
    # 6 places of one 262144 row, 3 of two 131K rows, 2 of 66K rows (4 a place), 1 of six 2-CTA rows, 2 of solo
    # rows and copies, the last 8 of these in the spares of the 2-CTA and 66K places (fill_spares): 224 CTAs, one
    # round at two CTAs an SM (the H200's 264 slots) and within the 14 16-CTA clusters the H200 holds at once
    assert places == len(rows) == 14 and places * T.MIXED_CLUSTER <= T.MIXED_CTAS_PER_SM * H200[0]
    # the device's routing of each CTA (topk_row_wide16<16>: row_ctas<16>, base = cluster rank & ~(c - 1)) finds
    # its row's c entries consecutive and aligned in its place, in row order
    for place in rows:
        assert len(place) == T.MIXED_CLUSTER
        for rank, b in enumerate(place):
            if b < 0:
                continue
            c = max(1, T.wide_row_ctas(MIXED[b], k, T.MIXED_CHUNK, T.MIXED_CLUSTER))
            base = rank & ~(c - 1)
            assert place[base:base + c] == [b] * c, (place, rank)


def test_fill_spares_moves_the_shortest_lone_rows_into_spare_ctas():
    k = 512
    rows = T.work_list(MIXED, T.MIXED_CLUSTER, T.MIXED_CHUNK, k, True)
    filled = T.fill_spares(rows, MIXED, k)
    assert len(rows) == 15 and len(filled) == 14
    assert ctas_of_rows(filled) == ctas_of_rows(rows)  # every row, its CTAs unchanged
    alone = [b for b, c in ctas_of_rows(rows).items() if c == 1]
    moved = [b for place in filled for b in place if b in alone and any(ctas_of_rows([place])[o] > 1 for o in place
                                                                        if o >= 0)]
    # the 8 shortest rows alone (512-1992 columns) sit after the aligned 2-CTA and 4-CTA rows
    assert sorted(MIXED[b] for b in moved) == sorted(MIXED[b] for b in alone)[:8]
    assert max(MIXED[b] for b in moved) < 2000
    for place in filled:  # multi-CTA rows keep their consecutive aligned slots
        ctas = ctas_of_rows([place])
        for rank, b in enumerate(place):
            if b >= 0 and ctas[b] > 1:
                assert place[rank & ~(ctas[b] - 1):(rank & ~(ctas[b] - 1)) + ctas[b]] == [b] * ctas[b]
    # nothing to move into: as it was; too few spares: as it was
    full = [[0] * 16, [1] * 16]
    assert T.fill_spares(full, [262144, 262144], k) == full
    few = [[0] * 8 + [1] * 8, [2, 3, 4] + [-1] * 13]
    assert T.fill_spares(few, [131072, 131072, 600, 700, 800], k) == few
    assert T.fill_spares([[0, 1] + [-1] * 14, [2] + [-1] * 15], [900, 800, 700], k) == [[0, 1, 2] + [-1] * 13]


def test_two_ctas_fit_an_sm():
    dynamic = T._mixed_shared()
    static = T.wide_static_shared(8) + 32  # WideShared<8> + Wide16Row (test_cuda_topk's wide16 check)
    assert dynamic == 2 * T.MIXED_CHUNK == 36864
    assert dynamic + static <= 110 * 1024  # the brief's bound
    assert T.MIXED_CTAS_PER_SM * (dynamic + static + CTA_RESERVED) <= SM_SHARED
    # every planned row's chunk fits the buffer: alone up to the bound, else on row_ctas(n, 16) CTAs within it
    for n in MIXED + [T.MIXED_CHUNK, T.MIXED_CHUNK + 1, 2 * T.MIXED_CHUNK + 8, 262144, 16 * T.MIXED_CHUNK]:
        c = T.wide_row_ctas(n, 512, T.MIXED_CHUNK, T.MIXED_CLUSTER)
        assert (n if c <= 1 else T.chunk_columns(n, c)) <= T.MIXED_CHUNK, n


def test_the_plan_declines_what_it_is_not_for():
    half = dict(choice="half")
    assert T.mixed_plan([262144] * 64, 512, *H200, **half) is None  # long_plan's batch (twin)
    assert T.mixed_plan([65536], 512, *H200, **half) is None  # lean_regs, not wide<8>
    assert T.mixed_plan([16384] * 64, 512, *H200, **half) is None  # the fast kernel
    assert T.mixed_plan(MIXED, 512, 132, (1,), **half) is None  # no clusters
    # a row whose chunk on 16 CTAs is past the buffer (wide<8> takes it at 36868 a CTA)
    assert T.mixed_plan(MIXED[:-1] + [16 * T.MIXED_CHUNK + 1], 512, *H200, **half) is None
    # more places than one round of 16-CTA clusters at two CTAs an SM (544 CTAs), or than the device holds
    many = [262144] + [131072] * 16 + [30000] * 200
    assert T.mixed_plan(many, 512, *H200, **half) is None
    assert T.mixed_plan(MIXED, 512, *H200, active=13, **half) is None
    assert T.mixed_plan(MIXED, 512, *H200, active=14, **half) is not None
    # the default's launch only (another groups' bound, the direct sum, no groups)
    for env in ({"DSV4_TOPK_GROUPS_BOUND": "20480"}, {"DSV4_TOPK_SUM": "direct"}, {"DSV4_TOPK_GROUPS": "0"}):
        assert T.mixed_plan(MIXED, 512, *H200, env=env, **half) is None, env
    assert T.mixed_plan(MIXED, 512, *H200, choice="half-prefetch")[0] == "half-prefetch"


class _Plan:  # what _mixed_planned (and _planned) read of a plan
    def __init__(self, mixed):
        self.data = {"mixed": mixed}

    def __getitem__(self, key):
        return self.data[key]


def test_a_planned_call_swaps_only_the_launch_its_plan_was_made_for():
    import torch
    cpu = torch.device("cpu")
    runs = T.launches(64, 262144, True, *H200)
    assert [r[0] for r in runs] == ["dsv4_topk_indices_wide<8>"]
    for choice, prefetch in (("half", 0), ("half-prefetch", T.WIDE16_PREFETCH)):
        _, launch, places, rows = T.mixed_plan(MIXED, 512, *H200, choice=choice)
        work = torch.tensor([[b, MIXED[b] if b >= 0 else 0] for place in rows for b in place],
                            dtype=torch.int32).reshape(-1)
        plan = _Plan((choice, launch, places, work))
        (kernel, grid, shared, pdl, extra), = T._mixed_planned(runs, plan, True, H200[0], cpu, "plan")
        assert (kernel, grid, shared, pdl) == (T.MIXED_KERNEL, (16, 14), 36864, True)
        assert extra[:3] == (-1, T.MIXED_CHUNK, T.WIDE_FOLD | T.WIDE_GROUPS | prefetch) and extra[3] is work
        assert len(T.SIGNATURES["dsv4_topk_indices_wide16"]) == 8 + len(extra)
        # then _planned leaves it (its (cluster, solo bound) is not the wide<8> work list's)
        plan.data.update(launch=(8, T.MAX_CHUNK), groups=True, places=17, work=work)
        swapped = T._mixed_planned(runs, plan, True, H200[0], cpu, "plan")
        assert T._planned(swapped, plan, H200[0], cpu, "plan") == swapped
        # the device routing's A/B, no plan, a plan without it, unaligned rows, another device: as it was
        assert T._mixed_planned(runs, plan, True, H200[0], cpu, "device") == runs
        assert T._mixed_planned(runs, None, True, H200[0], cpu, "plan") == runs
        assert T._mixed_planned(runs, _Plan(None), True, H200[0], cpu, "plan") == runs
        assert T._mixed_planned(runs, plan, False, H200[0], cpu, "plan") == runs
        assert T._mixed_planned(runs, plan, True, H200[0], torch.device("meta"), "plan") == runs
        # a call whose launch is not the planned one keeps it
        for other in [T.launches(64, 262144, True, *H200, fold=False), T.launches(64, 65536, True, *H200),
                      T.launches(64, 262144, True, *H200, groups_bound=20480)]:
            assert T._mixed_planned(other, plan, True, H200[0], cpu, "plan") == other


def test_wide16_16_compiles_to_two_ctas_an_sm(monkeypatch):
    # 32 registers (2 x 1024 x 32 = the register file), the static shared memory the host counts (WideShared<8>:
    # its slice holds a row on 4 of the cluster's CTAs). NVRTC 13.0 sm_90a spills 20 B (stores) / 56 B (loads),
    # one-off words outside the loops (the lane index across the load loop, a CTA's column count); wide16<8> none.
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", [T.MIXED_KERNEL])
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)[T.MIXED_KERNEL]
    assert res["registers"] <= 32 and res["spill_stores"] <= 20 and res["spill_loads"] <= 56, res
    assert res["smem"] == T.wide_static_shared(8) + 32


# ---- GPU: the half form against the reference as sets, reruns bitwise ----

OTHER_MIXED = [262144, 262143, 200001, 147456, 131073, 131072, 70001, 65537, 40000, 36868, 34840, 32769, 18433, 18432,
               16385, 4097, 1025, 513, 512, 7, 0] + MIXED[:11]
RANDOM_MIXED = [int(n) for n in np.random.default_rng(15).integers(0, 262145, 20)] + [1, 511, 512, 2048]
GPU_BATCHES = {"bench": MIXED, "other": OTHER_MIXED, "random": RANDOM_MIXED}


@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_the_gpu_batches_take_the_half_form(k):
    # (on the H200's 132 SMs: the GPU test asserts its plan chose it)
    for name, lens in GPU_BATCHES.items():
        assert T.mixed_plan(lens, k, *H200, choice="half") is not None, name


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["normal", "ties", "equal", "neg_inf"])
@pytest.mark.parametrize("k", [512, 1024, 2048])
@pytest.mark.parametrize("batch", ["bench", "other", "random"])
def test_half_selects_the_reference_set(monkeypatch, batch, k, variant):
    import torch

    from harness import comparators, inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    lens = GPU_BATCHES[batch]
    options = {"ties": dict(distinct=3), "equal": dict(distinct=1), "neg_inf": dict(neg_inf_inside=100000)}
    x = inputs.topk_inputs(seq_lens=lens, columns=262144, k=k, page_size=64, seed=15, device="cuda", tail="garbage",
                           **options.get(variant, {}))
    logits, seq_lens, page_table = x.args
    monkeypatch.setattr(T, "MIXED", "")
    default = x.call(T.topk_indices, k=k, plan=T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64))
    monkeypatch.setattr(T, "MIXED", "half")
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64)
    assert plan["mixed"] is not None and plan["mixed"][0] == "half"  # the batch takes the half form
    got = x.call(T.topk_indices, k=k, plan=plan)
    for _ in range(2):
        assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)  # reruns bitwise
    report = comparators.topk_indices({"indices": got}, {"indices": x.call(torch_topk, k=k)}, logits=logits,
                                      seq_lens=seq_lens, page_table=page_table, k=k, page_size=64)
    assert report.ok, report
    if variant == "normal":  # distinct values at the threshold: the default's very set a row
        assert torch.equal(got.sort(dim=1).values, default.sort(dim=1).values)
    # the same kernel with the chunk prefetched into L2 first: the same bits
    monkeypatch.setattr(T, "MIXED", "half-prefetch")
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64)
    assert plan["mixed"][0] == "half-prefetch"
    assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)
    # without the plan (or DSV4_TOPK_ROUTE=device) the call runs the default's launch: its bits
    assert torch.equal(x.call(T.topk_indices, k=k), default)
    monkeypatch.setenv("DSV4_TOPK_ROUTE", "device")
    assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), default)
