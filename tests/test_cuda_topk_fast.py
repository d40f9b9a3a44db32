"""Session 13c's opt-in cuts of the fast kernel's chain (docs/topk-s13c.md), on the CPU: numpy models, line for line,
of DSV4_TOPK_FAST_CUTS bit 64 (the row's page-table entries in shared memory: which entries are read, and the mapping
from them) and bit 128 (fast_mask_walk: the inside mask from an at-or-above mask, the above keys placed by one loop
over the thread's whole mask) against the default's; the switched kernels' registers and shared memory under NVRTC;
and on the GPU, the switched build's output bit for bit against the default's. Session 14a's (docs/topk-s14a.md):
FAST_CUTS bit 256 (fast<1> without bit 64) and HALF_CUTS bit 1 (the half kernel's table in shared memory), their
resources on the CPU and their bits against the default's on the GPU; session 22's HALF_CUTS bit 2 (the half
kernel's keys counted as each vector lands) the same way."""

import importlib

import numpy as np
import pytest

from tests.rebuilds import rebuilt_runs
from tests.test_cuda_topk_s11b import bit_walk, walked_rows

T = importlib.import_module("kernels_cuda.topk_indices")
THREADS = 1024
TABLE_SHARED, MASK_WALK = 64, 128


def mask_walk(key, lo, hi):
    """fast_mask_walk, line for line: above bits (e > hi) and at-or-above bits (e >= lo1, lo1 = max(lo, 1)), bit
    4 i + j; inside = at-or-above & ~above; the packed popcounts scanned in thread order; the above keys by one
    loop over the whole mask (lowest bit first), the inside keys vector by vector (place_bits)."""
    lo1 = max(lo, 1)
    vecs = key.shape[1]
    above_bits = np.zeros(THREADS, np.int64)
    from_bits = np.zeros(THREADS, np.int64)
    for i in range(vecs):
        for j in range(4):
            e = key[:, i, j].astype(np.int64)
            above_bits |= (e > hi).astype(np.int64) << (4 * i + j)
            from_bits |= (e >= lo1).astype(np.int64) << (4 * i + j)
    inside_bits = from_bits & ~above_bits
    counts = np.array([bin(int(a)).count("1") | bin(int(b)).count("1") << 16
                       for a, b in zip(above_bits, inside_bits)], np.int64)
    before = np.concatenate([[0], np.cumsum(counts)[:-1]])
    above, inside = {}, {}
    for t in range(THREADS):
        slot_above, slot_inside = int(before[t] & 0xFFFF), int(before[t] >> 16)
        m = int(above_bits[t])
        while m:
            bit = (m & -m).bit_length() - 1
            above[slot_above] = 4 * (t + THREADS * (bit >> 2)) + (bit & 3)
            slot_above += 1
            m &= m - 1
        for i in range(vecs):
            m = (int(inside_bits[t]) >> 4 * i) & 15
            while m:
                j = (m & -m).bit_length() - 1
                inside[slot_inside] = (int(key[t, i, j]), 4 * (i * THREADS + t) + j)
                slot_inside += 1
                m &= m - 1
    assert sorted(above) == list(range(len(above))) and sorted(inside) == list(range(len(inside)))
    return [above[s] for s in range(len(above))], [inside[s] for s in range(len(inside))]


@pytest.mark.parametrize("vecs", [1, 2, 4])
def test_the_mask_walk_places_every_key_where_the_bit_walk_does(vecs):
    # FAST_CUTS bit 128 changes the instructions, not the slots: the same above run and the same candidates in
    # the same order as fast_bit_walk (itself checked against the default's place4 walk in test_cuda_topk_s11b)
    ran = 0
    for name, k, key, lo, hi, above_total, inside in walked_rows(np.random.default_rng(13 + vecs), vecs):
        got = mask_walk(key, lo, hi)
        assert got == bit_walk(key, lo, hi), (name, k)
        assert len(got[0]) == above_total and len(got[1]) == inside, (name, k)
        # several above keys in one thread's vectors: the whole-mask loop crosses vectors
        per_thread = np.bincount([c % (4 * THREADS) // 4 for c in got[0]], minlength=THREADS)
        ran += int(per_thread.max() >= 2)
    assert ran >= 3


def table_reads(n, page_size, table_row):
    """The fast kernel's page-table reads under FAST_CUTS bit 64, line for line: last_page = page_of(n - 1); the row
    is cached when last_page < 1024 (uniform in the CTA): thread t <= last_page reads entry t (table_row must hold
    exactly the pages of seq_len: an index past it raises), the write-out maps raw through the copy; else None (the
    L2 prefetch and the global mapping, as the default)."""
    last_page = (n - 1) // page_size
    if last_page >= THREADS:
        return None
    cache = np.array([table_row[t] for t in range(THREADS) if t <= last_page], np.int64)
    return lambda raw: cache[raw // page_size] * page_size + (raw - raw // page_size * page_size)


@pytest.mark.parametrize("page_size", [1, 3, 8, 16, 48, 64, 128])
def test_the_shared_table_maps_every_column_as_the_global_table_does(page_size):
    # every column before seq_len maps through the shared copy to what mapped_paged gives from the table, the
    # copy reads only the pages of seq_len (the contract sizes the table by it), and V4's page sizes (>= 16) at
    # up to 16384 columns always take it; smaller pages fall back once a row has more than 1024 pages
    rng = np.random.default_rng(page_size)
    for n in [513, 1000, 4096, 4097, 8191, 12345, 16383, 16384]:
        pages = -(-n // page_size)
        table_row = rng.permutation(10 * pages)[:pages]  # exactly seq_len's pages
        mapped = table_reads(n, page_size, table_row)
        assert (mapped is None) == (pages > THREADS), (n, page_size)
        if page_size >= 16:
            assert mapped is not None
        if mapped is None:
            continue
        raw = np.arange(n)
        assert np.array_equal(mapped(raw), table_row[raw // page_size] * page_size + raw % page_size), (n, page_size)


def test_the_switched_fast_kernels_fit_their_ctas_an_sm_without_spills(monkeypatch):
    # FAST_CUTS 255 (63 and both of this session's bits): fast<1> two CTAs an SM (32 registers), fast<2> / fast<4>
    # one (64); no spill, no stack; the shared copy of the table adds 4 KB, which fits two fast<1> CTAs an SM
    pytest.importorskip("cupy")  # NVRTC through CuPy, as tests/test_cuda_build.py
    from kernels_cuda import _loader, build
    exprs = [f"dsv4_topk_indices_fast<{v}>" for v in T.FAST_VECS]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", exprs)
    smem = {}
    for cuts in (63, 255):
        monkeypatch.setitem(T.DEFINES, "FAST_CUTS", cuts)
        _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
        res = build.resources(log, lowered)
        for expr in exprs:
            r = res[expr]
            budget = 32 if expr == "dsv4_topk_indices_fast<1>" else 64
            assert r["registers"] <= budget, (cuts, expr, r)
            assert r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (cuts, expr, r)
            smem[cuts, expr] = r["smem"]
    for expr in exprs:
        assert smem[255, expr] == smem[63, expr] + 4 * THREADS, expr
    assert 2 * smem[255, "dsv4_topk_indices_fast<1>"] <= 227 * 1024


@pytest.mark.gpu
@pytest.mark.parametrize("columns", [16384, 8192, 4096])
@pytest.mark.parametrize("page_size", [64, 48, 8])
@pytest.mark.parametrize("k", [512, 1024])
def test_the_table_and_mask_walk_cuts_write_the_defaults_bits_on_the_gpu(monkeypatch, columns, page_size, k):
    # the same call with the kernels built under FAST_CUTS 255 and 127, 191 (each bit alone) and under 63 (session
    # 11's cuts): bit for bit, reruns included. fast<4> / fast<2> / fast<1> by width; page size 64 (V4's), 48 (not a
    # power of two: the division), 8 (16384 columns: 2048 pages, the global fallback). Rows: normal, heavy ties
    # (the radix path and its write-out), ending mid-vector and mid-row, a copy (seq_len <= k), the threshold in the
    # bin of -inf; the page table a permutation, so a wrong column cannot map right by chance
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    batch = 64
    lens = ([columns, columns - 5, columns // 2 + 3, 550 if k == 512 else 1100, k, columns - 1000]
            + [columns] * batch)[:batch]
    logits, seq_lens, page_table = _random_rows(batch, columns, page_size, columns + k + page_size, lens)
    (launched, *_), = T._launches_from_env(batch, columns, True, sms, clusters, {})
    assert launched.startswith("dsv4_topk_indices_fast<"), launched
    run = _checked_rerun(logits, seq_lens, page_table, k, page_size)
    # session 11's cuts (63), the reference here, against 255, 127 and 191
    default, *cut = rebuilt_runs(monkeypatch, T.DEFINES, [{"FAST_CUTS": c} for c in (63, 255, 127, 191)], run)
    for cuts, out in zip((255, 127, 191), cut):
        assert torch.equal(out, default), cuts
    expected = torch.topk(torch.where(torch.arange(columns, device="cuda") < seq_lens[:, None], logits, -float("inf")),
                          k, dim=1).values
    page = torch.argsort(page_table.long(), dim=1).gather(1, (default.clamp(min=0) // page_size).long())
    taken = torch.gather(logits, 1, torch.where(default >= 0, default, 0).long() % page_size + page_size * page)
    valid = torch.arange(k, device="cuda") < seq_lens[:, None]
    assert torch.equal(torch.where(valid, taken, 0).sort(1).values, torch.where(valid, expected, 0).sort(1).values)


# ---- session 14a (docs/topk-s14a.md): FAST_CUTS bit 256 (fast<1> without bit 64) and HALF_CUTS bit 1 (the half
# kernel's page table in shared memory)
TABLE_SHARED_NOT_1, HALF_TABLE_SHARED = 256, 1
HALF_KEYS_BY_VECTOR = 2  # session 22: the half kernel's keys counted as each vector lands


def test_the_half_cuts_switch_is_declared_as_a_define_and_on_by_default():
    # both on since session 14's call 3 (256 x 16384 k1024 12.01 -> 11.75 us, the short batch 0.97 -> 0.90); the
    # half kernel's keys by vector since session 22's call 4 (256 x 16384 12.18 -> 11.39 us on the H100)
    import os
    assert T.DEFINES["HALF_CUTS"] == T.HALF_CUTS
    if "DSV4_TOPK_HALF_CUTS" not in os.environ:
        assert T.HALF_CUTS == HALF_TABLE_SHARED | HALF_KEYS_BY_VECTOR
    if "DSV4_TOPK_FAST_CUTS" not in os.environ:
        assert T.FAST_CUTS == 255 | TABLE_SHARED_NOT_1


def test_the_half_and_fast1_switches_fit_without_spills(monkeypatch):
    # HALF_CUTS 1: every half<VECS> within its two CTAs an SM (32 registers), no spill or stack, 4 KB more shared
    # memory (two CTAs still fit); FAST_CUTS 511: fast<1>'s shared memory back to 63's (no table copy), fast<2> /
    # fast<4> keep 255's; HALF_CUTS 3 (bit 2 on 1, session 22): the same, and half's shared memory 1's (its SASS,
    # NVRTC 13.0: the zeroing barrier before ACQBULK, each vector's ATOMS after its F2FP)
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    half = [f"dsv4_topk_indices_half<{v}>" for v in T.FAST_VECS]
    fast = [f"dsv4_topk_indices_fast<{v}>" for v in T.FAST_VECS]
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", half + fast)
    res = {}
    both = 255 | TABLE_SHARED_NOT_1
    for fast_cuts, half_cuts in ((63, 0), (255, 0), (both, HALF_TABLE_SHARED),
                                 (both, HALF_TABLE_SHARED | HALF_KEYS_BY_VECTOR)):
        monkeypatch.setitem(T.DEFINES, "FAST_CUTS", fast_cuts)
        monkeypatch.setitem(T.DEFINES, "HALF_CUTS", half_cuts)
        _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
        r = build.resources(log, lowered)
        for expr in half + fast:
            assert r[expr]["spill_stores"] == r[expr]["spill_loads"] == r[expr]["stack"] == 0, (fast_cuts, expr, r)
        for expr in half + fast[:1]:
            assert r[expr]["registers"] <= 32, (half_cuts, expr, r[expr])
        res[fast_cuts, half_cuts] = r
    switched = res[both, HALF_TABLE_SHARED]
    for expr in half:
        assert switched[expr]["smem"] == res[255, 0][expr]["smem"] + 4 * THREADS, expr
        assert 2 * switched[expr]["smem"] <= 227 * 1024, expr
        assert res[both, HALF_TABLE_SHARED | HALF_KEYS_BY_VECTOR][expr]["smem"] == switched[expr]["smem"], expr
    assert switched[fast[0]]["smem"] == res[63, 0][fast[0]]["smem"]
    for expr in fast[1:]:
        assert switched[expr]["smem"] == res[255, 0][expr]["smem"], expr


def _random_rows(batch, columns, page_size, seed, lens):
    """Random logits (rows: heavy ties, the threshold in the bin of -inf, the rest normal), seq_lens `lens`, a
    page table of random permutations (a wrong column cannot map right by chance)."""
    import torch
    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(batch, columns, generator=generator, device="cuda")
    logits[1] = torch.round(logits[1] * 40) / 40
    logits[3] = -float("inf")
    logits[3, :450] = torch.randn(450, generator=generator, device="cuda")
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    pages = -(-columns // page_size)
    page_table = torch.stack([torch.randperm(pages, generator=generator, device="cuda") for _ in range(batch)]).int()
    return logits, seq_lens, page_table


def _checked_rerun(logits, seq_lens, page_table, k, page_size):
    """A run() for rebuilt_runs: the call's out, its rerun asserted bitwise equal."""
    import torch

    def run():
        out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size)
        assert torch.equal(T.topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size), out)
        return out
    return run


@pytest.mark.gpu
@pytest.mark.parametrize("batch,columns", [(256, 16384), (256, 8192), (300, 4096)])
@pytest.mark.parametrize("page_size", [64, 16, 8])
@pytest.mark.parametrize("k", [512, 1024])
def test_the_half_table_cut_writes_the_defaults_bits_on_the_gpu(monkeypatch, batch, columns, page_size, k):
    # the half kernel (more rows than one wave of the fast kernel: 256 x 16384 -> half<4>, 256 x 8192 -> half<2>,
    # 300 x 4096 -> half<1>) built under HALF_CUTS 1 against HALF_CUTS 0, bit for bit, reruns included. Page size 64
    # (V4's), 16 (16384 columns: 1024 pages, every thread loads an entry), 8 (at 16384 columns 2048 pages: the
    # global fallback). Rows: heavy ties (the radix path's write-out), the threshold in the bin of -inf, seq_len
    # at k and below (the copy), mid-vector and mid-row ends, the rest full
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    lens = ([columns, columns - 5, columns // 2 + 3, columns, k, columns - 1000, k + 1, 37, k // 2 + 1]
            + [columns] * batch)[:batch]
    logits, seq_lens, page_table = _random_rows(batch, columns, page_size, columns + k + page_size, lens)
    (launched, *_), = T._launches_from_env(batch, columns, True, sms, clusters, {})
    assert launched.startswith("dsv4_topk_indices_half<"), launched
    run = _checked_rerun(logits, seq_lens, page_table, k, page_size)
    settings = [{"HALF_CUTS": c} for c in (0, HALF_TABLE_SHARED, HALF_TABLE_SHARED | HALF_KEYS_BY_VECTOR)]
    default, cut, by_vector = rebuilt_runs(monkeypatch, T.DEFINES, settings, run)
    assert torch.equal(cut, default)
    assert torch.equal(by_vector, default)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["b64-short", "b64-short-k1024", "64x4096", "64x16384"])
def test_fast1_without_the_table_cut_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape):
    # FAST_CUTS 511 (fast<1> without bit 64) against 255, bit for bit: the short batches (the copy path, the bench's
    # b64-short lengths), fast<1> selecting (64 x 4096, page sizes 64 and 8 in turn) and fast<4> (which keeps bit
    # 64 under 511)
    import torch
    batch = 64
    columns, k, lens = {"b64-short": (512, 512, [7 * i + 1 for i in range(batch)]),
                        "b64-short-k1024": (1024, 1024, [15 * i + 1 for i in range(batch)]),
                        "64x4096": (4096, 512, [4096, 4091, 2051, 257, 512, 3096, 513, 37] + [4096] * 56),
                        "64x16384": (16384, 512, [16384, 16379, 8195, 257, 512, 15384, 513, 37] + [16384] * 56)}[shape]
    for page_size in (64, 8):
        logits, seq_lens, page_table = _random_rows(batch, columns, page_size, columns + page_size, lens)
        run = _checked_rerun(logits, seq_lens, page_table, k, page_size)
        settings = [{"FAST_CUTS": 255}, {"FAST_CUTS": 255 | TABLE_SHARED_NOT_1}]
        default, cut = rebuilt_runs(monkeypatch, T.DEFINES, settings, run)
        assert torch.equal(cut, default), page_size
