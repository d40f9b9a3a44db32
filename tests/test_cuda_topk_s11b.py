"""Session 11b's opt-in cuts of the two top-k latency chains (docs/topk-s11b.md), on the CPU: numpy models,
line for line, of the kept-bits walk (DSV4_TOPK_FAST_CUTS bit 8, DSV4_TOPK_LEAN_CUTS bit 8: classify_bits
and place_bits) against the default's place4 order, and of the lean_regs kernel's pushed histogram sum and
candidates (DSV4_TOPK_LEAN_CUTS bits 1 and 2): which CTA adds and stores what where, and what each
mbarrier is armed for against what lands on it; and the switched kernels' registers under NVRTC."""

import importlib

import numpy as np
import pytest
from tests.rebuilds import rebuilt_runs

from tests.test_cuda_topk import coarse_bin, coarse_bin_keys, sortable_key, threshold

T = importlib.import_module("kernels_cuda.topk_indices")
THREADS, BINS, CANDIDATES = 1024, 4096, 128


def thread_keys(row, n, vecs):
    """The fast kernel's registers: key[t, i, j] of column 4 (1024 i + t) + j, key 0 at or past n."""
    keys = np.zeros(4 * THREADS * vecs, np.uint32)
    keys[:n] = sortable_key(row[:n])
    return keys.reshape(vecs, THREADS, 4).transpose(1, 0, 2)


def place4_walk(key, lo, hi):
    """The default counting and placing walks (classify4, block_scan_packed, place4): threads in turn,
    each its vectors and their elements in order; above the bucket (key > hi) and inside it
    (key != 0, lo <= key <= hi) each in its own run of slots. Columns of each kind in slot order."""
    above, inside = [], []
    for t in range(THREADS):
        for i in range(key.shape[1]):
            for j in range(4):
                e, column = int(key[t, i, j]), 4 * (i * THREADS + t) + j
                if e > hi:
                    above.append(column)
                elif e != 0 and lo <= e <= hi:
                    inside.append((e, column))
    return above, inside


def bit_walk(key, lo, hi):
    """fast_bit_walk (classify_bits, one block scan, place_bits; lean_regs' the same at its chunk's
    first column), line for line: bit 4 i + j of each mask, lo1 = max(lo, 1) and one unsigned
    compare for inside, the popcounts scanned in thread order, each vector's set bits in turn."""
    lo1 = max(lo, 1)
    width1 = (hi - lo1) & 0xFFFFFFFF
    vecs = key.shape[1]
    above_bits = np.zeros(THREADS, np.int64)
    inside_bits = np.zeros(THREADS, np.int64)
    for i in range(vecs):
        for j in range(4):
            e = key[:, i, j].astype(np.int64)
            above_bits |= (e > hi).astype(np.int64) << (4 * i + j)
            inside_bits |= (((e - lo1) & 0xFFFFFFFF) <= width1).astype(np.int64) << (4 * i + j)
    counts = np.array([bin(int(a)).count("1") | bin(int(b)).count("1") << 16
                       for a, b in zip(above_bits, inside_bits)], np.int64)
    before = np.concatenate([[0], np.cumsum(counts)[:-1]])  # block_scan_packed: exclusive, thread order
    assert (np.cumsum(counts) >> 16).max() < 1 << 16 and (np.cumsum(counts) & 0xFFFF).max() < 1 << 16  # no carry
    above, inside = {}, {}
    for t in range(THREADS):
        slot_above, slot_inside = int(before[t] & 0xFFFF), int(before[t] >> 16)
        for i in range(vecs):
            column = 4 * (i * THREADS + t)
            m = (int(above_bits[t]) >> 4 * i) & 15
            while m:
                above[slot_above] = column + (m & -m).bit_length() - 1
                slot_above += 1
                m &= m - 1
            m = (int(inside_bits[t]) >> 4 * i) & 15
            while m:
                j = (m & -m).bit_length() - 1
                inside[slot_inside] = (int(key[t, i, j]), column + j)
                slot_inside += 1
                m &= m - 1
    assert sorted(above) == list(range(len(above))) and sorted(inside) == list(range(len(inside)))
    return [above[s] for s in range(len(above))], [inside[s] for s in range(len(inside))]


def rows(rng, columns):
    normal = rng.standard_normal(columns).astype(np.float32)
    ties = np.round(rng.standard_normal(columns) * 4).astype(np.float32) / 4  # many equal keys a bin
    # the threshold in bin 0 (lo = 0: the bin of -inf) with key-0 padding after seq_len: 450 finite
    # scores above it, 100 -inf in it (k 512 takes 62 of them)
    low = np.full(columns, -np.inf, np.float32)
    low[rng.choice(550, 450, replace=False)] = rng.standard_normal(450).astype(np.float32)
    return [("normal", normal, columns, (512, 1024, 2048)), ("ties", ties, columns, (512,)),
            ("normal-short", normal, columns - 5, (512,)), ("normal-half", normal, columns // 2 + 3, (512, 1024)),
            ("bin0", low, 550, (512,))]


def walked_rows(rng, vecs):
    """(name, k, key, lo, hi, above_total, inside) for each row of rows() and each k where the fast kernel walks its
    keys (more keys than k, the threshold bin's keys within CANDIDATES: not the radix path, which no walk changes):
    the thread-major keys and the threshold bin's key range, with the counts the walks must place."""
    for name, row, n, ks in rows(rng, 4 * THREADS * vecs):
        keys = sortable_key(row[:n])
        for k in ks:
            if n <= k:
                continue
            b, above_total, inside = threshold(np.bincount(coarse_bin(keys), minlength=BINS), k)
            if inside <= CANDIDATES:
                yield (name, k, thread_keys(row, n, vecs), *coarse_bin_keys(b), above_total, inside)


@pytest.mark.parametrize("vecs", [1, 2, 4])
def test_the_kept_bits_walk_places_every_key_where_the_place4_walk_does(vecs):
    # FAST_CUTS bit 8 changes the instructions, not the slots: the same above run and the same
    # candidates in the same order, so the kernel's output is the default's bit for bit
    ran = 0
    for name, k, key, lo, hi, above_total, inside in walked_rows(np.random.default_rng(vecs), vecs):
        expected = place4_walk(key, lo, hi)
        assert bit_walk(key, lo, hi) == expected, (name, k)
        assert len(expected[0]) == above_total and len(expected[1]) == inside, (name, k)
        if name == "bin0":
            assert lo == 0 and (key == 0).sum() > 0  # padding keys present, never inside
        ran += 1
    assert ran >= 5


def push_sum_model(hists, cluster):
    """lean_push_setup and lean_push_sum, index for index, over the cluster's histograms hists[r]
    (4096 bins each): row_sum of every CTA after the pushes, and per CTA the bytes armed on and
    landed on bars[0] and bars[1]."""
    own = THREADS // cluster
    assert own * cluster == THREADS
    row_sum = np.full((cluster, BINS), -1, np.int64)  # garbage where nothing is written
    armed = [16 * own * (cluster - 1)] * 2
    landed = np.zeros((cluster, 2), np.int64)
    for rank in range(cluster):  # lean_push_setup: the slice zeroed
        for t in range(own):
            row_sum[rank, 4 * (rank * own + t):4 * (rank * own + t) + 4] = 0
    for rank in range(cluster):  # four red.async a thread to the owner of its group, never itself
        for t in range(THREADS):
            owner = t // own
            if owner != rank:
                row_sum[owner, 4 * t:4 * t + 4] += hists[rank][4 * t:4 * t + 4]
                landed[owner, 0] += 4 * 4
    assert (landed[:, 0] == armed[0]).all()  # every owner's bars[0] completes, and only then
    for rank in range(cluster):  # the owner's threads t < own: one group each, read then overwritten
        for t in range(own):
            g = rank * own + t
            total = row_sum[rank, 4 * g:4 * g + 4] + hists[rank][4 * g:4 * g + 4]
            peers = [(rank + p) % cluster for p in range(1, cluster)]
            assert rank not in peers and len(set(peers)) == cluster - 1
            for peer in peers:
                row_sum[peer, 4 * g:4 * g + 4] = total
                landed[peer, 1] += 16
            row_sum[rank, 4 * g:4 * g + 4] = total
    assert (landed[:, 1] == armed[1]).all()
    return row_sum


@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_the_pushed_sum_gives_every_cta_every_bin_and_each_mbarrier_the_bytes_it_is_armed_for(cluster):
    rng = np.random.default_rng(cluster)
    hists = [rng.integers(0, 40, BINS) for _ in range(cluster)]
    row_sum = push_sum_model(hists, cluster)
    assert (row_sum == sum(hists)).all()


@pytest.mark.parametrize("cluster, vecs", [(2, 2), (8, 2), (16, 1)])
def test_the_pushed_candidates_fill_rank_0s_buffer_once_with_the_bytes_it_is_armed_for(cluster, vecs):
    # LEAN_PUSH_CANDIDATES on rows split as lean_regs splits them: rank 0 arms bars[2] with 8 bytes for
    # each threshold-bin key it does not hold, `inside` (the summed histogram's count of the bin) less
    # its own classified count; the peers' st.async (8 bytes a key they classify inside, at slot
    # first_inside + their index, first_inside from the fold) must land exactly that many bytes, each
    # slot once. The histogram and the classification are separate computations in the kernel.
    rng = np.random.default_rng(cluster)
    columns = cluster * 4 * THREADS * vecs
    ran = 0
    for n in (columns, columns - 5, columns // 3 + 7, 9000):
        row = rng.standard_normal(columns).astype(np.float32)
        keys = sortable_key(row[:n])
        chunk = (-(-n // cluster) + 3) & ~3
        bounds = [(min(n, r * chunk), min(n, min(n, r * chunk) + chunk)) for r in range(cluster)]
        hists = [np.bincount(coarse_bin(keys[a:b]), minlength=BINS) for a, b in bounds]
        for k in (512, 1024):
            b, _, inside = threshold(sum(hists), k)
            if inside > CANDIDATES:
                continue
            lo, hi = coarse_bin_keys(b)
            per_cta = []
            for a, e in bounds:
                chunk_keys = np.zeros(4 * THREADS * vecs, np.uint32)  # key 0 past the chunk
                chunk_keys[:e - a] = keys[a:e]
                _, inside_keys = bit_walk(chunk_keys.reshape(vecs, THREADS, 4).transpose(1, 0, 2), lo, hi)
                per_cta.append(len(inside_keys))
            first = [int(h[b]) for h in np.cumsum(hists, axis=0)[:-1, None, :].reshape(cluster - 1, BINS)]
            first = [0] + first  # the fold: the peers before this one, from their histograms
            slots = [first[r] + i for r in range(cluster) for i in range(per_cta[r])]
            assert sorted(slots) == list(range(inside)), (n, k)
            armed = 8 * (inside - per_cta[0])
            landed = 8 * sum(per_cta[1:])
            assert armed == landed, (n, k)
            ran += 1
    assert ran >= 4


def test_the_switched_kernels_fit_their_ctas_an_sm_without_spills(monkeypatch):
    # FAST_CUTS 63 (every fast cut) and LEAN_CUTS 15 (every lean_regs cut) at the default kernels' register
    # budgets: fast<1> two CTAs an SM (32), the others one (64); no spill, no stack
    pytest.importorskip("cupy")  # NVRTC through CuPy, as tests/test_cuda_build.py
    from kernels_cuda import _loader, build
    monkeypatch.setitem(T.DEFINES, "FAST_CUTS", 63)
    monkeypatch.setitem(T.DEFINES, "LEAN_CUTS", 15)
    monkeypatch.setitem(T.DEFINES, "LEAN_WINDOW", 0)  # (the pushed sums replace what the window form replaces)
    exprs = [f"dsv4_topk_indices_fast<{v}>" for v in T.FAST_VECS] + T.LEAN_REGS_KERNELS
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", exprs)
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)
    for expr in exprs:
        r = res[expr]
        budget = 32 if expr == "dsv4_topk_indices_fast<1>" else 64
        assert r["registers"] <= budget and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (expr, r)
    for c, v in [(16, 1), (8, 2), (2, 2)]:  # WideShared<c> and the three mbarriers
        assert res[f"dsv4_topk_indices_lean_regs<{c}, {v}>"]["smem"] == T.wide_static_shared(c) + 32


def test_the_cut_switches_defaults_are_declared_as_defines():
    # the fast kernel's cuts on by default since session 11's call 3 (64 x 16384 8.0 -> 6.7 us), with session 13's
    # bits since its call 3 (6.7 -> 5.9); the lean ones' pushed sums off (1 x 65536 8.7 -> 10.6), 4 + 8 on since
    # session 13's call 4 (with the window form: 1 x 65536 k1024 7.1 -> 6.7); fast<1> without 64 (bit 256) since
    # session 14's call 3
    assert T.DEFINES["LEAN_CUTS"] == T.LEAN_CUTS and T.DEFINES["FAST_CUTS"] == T.FAST_CUTS
    import os
    if "DSV4_TOPK_LEAN_CUTS" not in os.environ:
        assert T.LEAN_CUTS == 12
    if "DSV4_TOPK_FAST_CUTS" not in os.environ:
        assert T.FAST_CUTS == 511


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["fast", "lean8r", "lean16r", "pairs"])
@pytest.mark.parametrize("k", [512, 1024])
def test_the_cuts_write_the_defaults_bits_on_the_gpu(monkeypatch, shape, k):
    # the same call with the kernels built under FAST_CUTS 63 / LEAN_CUTS 15 (the loader's module cache
    # cleared, so the switched defines compile) and with the process's own build: bit for bit, reruns
    # included. Rows: normal, heavy ties (the radix path, which the cuts leave as it was), ending
    # mid-group and mid-row, a copy (seq_len <= k), the threshold in the bin of -inf (lo = 0, key-0
    # padding after seq_len); the page table a permutation, so a wrong column cannot map right by chance
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    columns, batch, kernel = {"fast": (16384, 64, "dsv4_topk_indices_fast<4>"),
                              "lean8r": (65536, 6, "dsv4_topk_indices_lean_regs<8, 2>"),
                              "lean16r": (65536, 4, "dsv4_topk_indices_lean_regs<16, 1>"),
                              "pairs": (16384, 64, "dsv4_topk_indices_lean_regs<2, 2>")}[shape]
    monkeypatch.setattr(T, "LEAN", "16r" if shape == "lean16r" else "8r")
    monkeypatch.setattr(T, "PAIRS", shape == "pairs")
    generator = torch.Generator(device="cuda").manual_seed(columns + k)
    logits = torch.randn(batch, columns, generator=generator, device="cuda")
    logits[1] = torch.round(logits[1] * 40) / 40
    logits[3] = -float("inf")
    logits[3, :450] = torch.randn(450, generator=generator, device="cuda")
    lens = ([columns, columns - 5, columns // 2 + 3, 550 if k == 512 else 1100, k, 9000] + [columns] * batch)[:batch]
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    pages = -(-columns // 64)
    page_table = torch.stack([torch.randperm(pages, generator=generator, device="cuda") for _ in range(batch)]).int()
    (launched, *_), = T._launches_from_env(batch, columns, True, sms, clusters, {})
    assert launched == kernel

    def run():
        out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64)
        assert torch.equal(T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64), out)
        return out

    # (LEAN_WINDOW 0: the pushed sums replace what the window form replaces)
    default, cut = rebuilt_runs(monkeypatch, T.DEFINES, [{}, {"FAST_CUTS": 63, "LEAN_CUTS": 15, "LEAN_WINDOW": 0}], run)
    assert torch.equal(cut, default)
    expected = torch.topk(torch.where(torch.arange(columns, device="cuda") < seq_lens[:, None], logits, -float("inf")),
                          k, dim=1).values
    taken = torch.gather(logits, 1, torch.where(default >= 0, default, 0).long() % 64
                         + 64 * torch.argsort(page_table.long(), dim=1).gather(1, (default.clamp(min=0) // 64).long()))
    valid = torch.arange(k, device="cuda") < seq_lens[:, None]
    assert torch.equal(torch.where(valid, taken, 0).sort(1).values, torch.where(valid, expected, 0).sort(1).values)


def test_a_kernel_loaded_again_at_a_freed_pointer_is_set_up_again():
    # the GPU test above rebuilds the module under other defines; the reloaded kernel may get a freed pointer back,
    # and its launch attributes (the 16-CTA cluster's non-portable size) must be set on it again
    class Kernel:
        def __init__(self, ptr):
            self.ptr = ptr

    first, reloaded = Kernel(0x7F00), Kernel(0x7F00)
    registry = {first.ptr: (first, 40960)}
    assert T._done(registry, first) and T._done(registry, first, 40960)
    assert not T._done(registry, first, 40964)  # more shared memory than it was opted in for
    assert not T._done(registry, reloaded) and not T._done(registry, Kernel(0x7F10))
