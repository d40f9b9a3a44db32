"""The lean top-k kernels (dsv4_topk_indices_lean<8 | 16>, opt-in DSV4_TOPK_LEAN) and the registers'
form (lean_regs<16, 1> / <8, 2>, DSV4_TOPK_LEAN=16r / 8r; lean_regs<2, 2>, DSV4_TOPK_PAIRS=1),
docs/topk-s10a.md: where the host routes them, that they compile to what it counts on, the 16-CTA
split in the numpy model of the wide kernel's write-out, and on the GPU their slots against that
model and the kernels they stand in for. The window form of lean_regs (DSV4_TOPK_LEAN_FORM=window,
docs/topk-s13b.md): its threshold search, index for index, against the summed histograms' and the fold's."""

import importlib

import numpy as np
import pytest

from test_cuda_topk import (BINS, H200, THREADS, coarse_bin, model_row, sortable_key, threshold, wide_model,
                            wide_model_writes_the_k_largest)

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op


def test_the_lean_kernels_take_one_wave_of_few_long_rows_only_where_asked():
    for lean in (8, 16):
        for early in (False, True):
            (kernel, grid, shared, pdl, extra), = T.launches(1, 65536, True, *H200, lean=str(lean), early=early)
            assert kernel == f"dsv4_topk_indices_lean<{lean}>" and grid == (lean, 1) and pdl
            assert shared == 4 * (65536 // lean + 4) and extra == (T.WIDE_EARLY * early,)
        # unaligned rows too (the chunk's shift is the selection's own)
        (kernel, grid, shared, _, _), = T.launches(2, 70001, False, *H200, lean=str(lean))
        assert kernel == f"dsv4_topk_indices_lean<{lean}>" and shared == 4 * (T.chunk_columns(70001, lean) + 4)
    # 16r / 8r: the registers' form where each CTA's chunk is 1 / 2 groups a thread of an aligned row,
    # else lean<16> / lean<8>
    for lean, cluster, vecs in [("16r", 16, 1), ("8r", 8, 2)]:
        for early in (False, True):
            (kernel, grid, shared, pdl, extra), = T.launches(1, 65536, True, *H200, lean=lean, early=early)
            assert (kernel, grid, shared, pdl, extra) == (f"dsv4_topk_indices_lean_regs<{cluster}, {vecs}>",
                                                          (cluster, 1), 0, True, (T.WIDE_EARLY * early,))
        assert T.launches(1, 65536, False, *H200, lean=lean) == T.launches(1, 65536, False, *H200, lean=lean[:-1])
        assert T.launches(1, 65540, True, *H200, lean=lean) == T.launches(1, 65540, True, *H200, lean=lean[:-1])
        assert T.chunk_columns(65536, cluster) == 4 * 1024 * vecs < T.chunk_columns(65540, cluster)
    # 16 CTAs a row for up to LEAN16_ROWS rows, 8 while the grid is one wave; wide<8> past that
    assert T.launches(4, 65536, True, *H200, lean="16")[0][0] == "dsv4_topk_indices_lean<16>"
    assert T.launches(4, 65536, True, *H200, lean="16r")[0][0] == "dsv4_topk_indices_lean_regs<16, 1>"
    assert T.launches(5, 65536, True, *H200, lean="16")[0][0] == "dsv4_topk_indices_wide<8>"
    assert T.launches(5, 65536, True, *H200, lean="16r")[0][0] == "dsv4_topk_indices_wide<8>"
    assert T.launches(16, 65536, True, *H200, lean="8")[0][0] == "dsv4_topk_indices_lean<8>"
    assert T.launches(17, 65536, True, *H200, lean="8") == T.launches(17, 65536, True, *H200)  # wide<4>
    # every other shape and switch keeps its launch: not wide<8>, more than a wave, the A/B switches
    for batch, columns, kw in [(64, 262144, {}), (64, 65536, {}), (64, 16384, {}), (1, 16384, {}),
                               (1, 65536, {"choice": "split"}), (1, 65536, {"choice": "wide"}),
                               (1, 65536, {"solo": 0}), (1, 65536, {"groups": False}), (1, 20000, {})]:
        for lean in ("8", "16", "16r", "8r", "12"):  # (12: not a lean kernel)
            assert T.launches(batch, columns, True, *H200, lean=lean, **kw) == T.launches(batch, columns, True, *H200,
                                                                                          **kw), (batch, columns, kw)
    assert T.launches(1, 65536, True, *H200, lean="12") == T.launches(1, 65536, True, *H200)
    # no clusters (A100): never
    assert T.launches(1, 40000, True, 108, (1,), lean="16r") == T.launches(1, 40000, True, 108, (1,))


def test_pairs_take_one_wave_of_narrow_rows_of_8193_to_16384_columns_only_where_asked():
    for batch, columns in [(64, 16384), (66, 8196), (1, 12000)]:
        assert T.launches(batch, columns, True, *H200, pairs=True) == [
            ("dsv4_topk_indices_lean_regs<2, 2>", (2, batch), 0, True, (0,))]
    # not past one wave of pairs, not 8192 columns or fewer (fast<2>, fast<1>), not unaligned or wider
    # tensors, not other choices, not without clusters
    for batch, columns, aligned, kw in [(67, 16384, True, {}), (256, 16384, True, {}), (64, 8192, True, {}),
                                        (64, 16384, False, {}), (64, 16388, True, {}), (1, 65536, True, {}),
                                        (64, 16384, True, {"choice": "wide"}), (64, 16384, True, {"choice": "split"})]:
        assert T.launches(batch, columns, aligned, *H200, pairs=True, **kw) == T.launches(batch, columns, aligned,
                                                                                          *H200, **kw)
    assert T.launches(64, 16384, True, 108, (1,), pairs=True) == T.launches(64, 16384, True, 108, (1,))
    # the plan never packs them (no cluster launch of the wide kernel)
    assert T.plan_route([16384] * 64, 512, *H200) is None


def test_the_lean_kernels_are_compiled_and_take_the_arguments_they_are_given():
    import re
    from pathlib import Path

    from kernels_cuda import _loader
    exprs = {f"dsv4_topk_indices_lean<{c}>" for c in T.LEAN_CLUSTERS} | set(T.LEAN_REGS_KERNELS)
    assert {"dsv4_topk_indices_lean_regs<16, 1>", "dsv4_topk_indices_lean_regs<8, 2>",
            "dsv4_topk_indices_lean_regs<2, 2>"} == set(T.LEAN_REGS_KERNELS)
    assert exprs <= set(_loader.KERNELS["topk_indices.cu"])
    source = (Path(T.__file__).parent / "topk_indices.cu").read_text()
    for name in ("dsv4_topk_indices_lean", "dsv4_topk_indices_lean_regs"):
        match = re.search(rf"\b{name}\(([^)]*)\)\s*{{", source)
        parameters = len(match.group(1).split(","))
        assert parameters == len(T.SIGNATURES[name]) == 8 + 1  # the common 8, options


def test_the_lean_kernels_fit_one_cta_an_sm_with_their_chunk(monkeypatch):
    pytest.importorskip("cupy")  # NVRTC through CuPy, as tests/test_cuda_build.py
    from kernels_cuda import _loader, build
    exprs = [f"dsv4_topk_indices_lean<{c}>" for c in T.LEAN_CLUSTERS] + T.LEAN_REGS_KERNELS
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", exprs)
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    res = build.resources(log, lowered)
    max_shared = 227 * 1024  # the opt-in limit of a CTA on sm_90
    for c in T.LEAN_CLUSTERS:
        r = res[f"dsv4_topk_indices_lean<{c}>"]
        assert r["registers"] <= 64 and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (c, r)
        assert r["smem"] == T.wide_static_shared(c)  # WideShared<c>
        (_, _, shared, _, _), = T.launches(min(T.LEAN16_ROWS, 132 // c), 8 * T.MAX_CHUNK, True, *H200, lean=str(c))
        assert shared + r["smem"] <= max_shared
    for c, v in [(16, 1), (8, 2), (2, 2)]:  # no dynamic shared memory: the chunk is in registers
        r = res[f"dsv4_topk_indices_lean_regs<{c}, {v}>"]
        assert r["registers"] <= 64 and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (c, v, r)
        assert r["smem"] == T.wide_static_shared(c)


@pytest.mark.parametrize("data", ["normal", "ties", "inf"])
def test_a_row_split_over_16_ctas_is_written_as_the_k_largest_lowest_column_first(data):
    # wide_model (the write-out from the peers' histograms, the kept bits of 8 groups as lean<16>
    # compiles them) on 16 chunks, some of them empty or a few columns long
    rng = np.random.default_rng(16 + len(data))
    rows = [(65536, 512, 0), (65531, 1024, 3), (20011, 512, 1), (600, 512, 2), (70001, 2048, 1)]
    assert wide_model_writes_the_k_largest(rng, rows, data, 16, 8) >= 3


@pytest.mark.parametrize("cluster", [2, 8, 16])
def test_the_registers_forms_fold_reads_every_peer_group_past_the_threshold_once(cluster):
    # lean_regs' fold, index for index: warps p * 32 / cluster .. of peer p < rank, a lane's groups
    # g0, g0 + STRIDE, .. (4 a round) from the threshold bin's group up; together every (peer, group)
    # pair of the sums wide_select's fold makes, each once
    warps_a_peer = 32 // cluster
    stride, groups = 32 * warps_a_peer, BINS // 4
    for rank in range(cluster):
        for b in (0, 5, 2047, 3150, 4092, 4095):
            read = []
            for warp in range(32):
                peer = warp // warps_a_peer
                if peer >= rank:
                    continue
                for lane in range(32):
                    for g0 in range(b // 4 + 32 * (warp % warps_a_peer) + lane, groups, 4 * stride):
                        read += [(peer, g0 + j * stride) for j in range(4) if g0 + j * stride < groups]
            assert sorted(read) == [(p, g) for p in range(rank) for g in range(b // 4, groups)], (rank, b)


def test_the_16_cta_histogram_sum_gives_every_cta_every_bin():
    # wide_sum<16>: 64 groups a slice, a group's 16 parts in adjacent lanes of one warp
    cluster = 16
    rng = np.random.default_rng(cluster)
    hists = rng.integers(0, 1000, size=(cluster, BINS // 4, 4))
    groups = BINS // 4 // cluster
    assert groups * cluster == THREADS and 32 % cluster == 0
    slices = np.zeros((cluster, groups, 4), np.int64)
    for rank in range(cluster):
        parts = np.array([hists[t % cluster, rank * groups + t // cluster] for t in range(THREADS)])
        for off in [1 << i for i in range(cluster.bit_length() - 1)]:
            parts = parts + parts[np.arange(THREADS) ^ off]
            assert all((t ^ off) // 32 == t // 32 for t in range(THREADS))
        for t in range(0, THREADS, cluster):
            slices[rank, t // cluster] = parts[t]
    gathered = np.array([slices[t // groups, t % groups] for t in range(THREADS)])
    assert (gathered == hists.sum(axis=0)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("lean", ["8", "16", "16r", "8r"])
def test_the_lean_kernels_slots_on_the_gpu_are_the_models_and_the_others(monkeypatch, lean):
    # every slot, order included, as wide_model places it on 8 or 16 chunks (identity page table):
    # rows at every 16-byte phase (8, 16: 65537 columns) or aligned (16r, 8r: 65536), a row ending
    # mid-group, ties, a copy, short rows whose chunks leave CTAs empty; reruns bitwise; 16r / 8r the
    # bits of lean<16> / lean<8>, lean<8> those of wide<8> on the rows wide<8> also splits in 8
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    cluster, k = (8 if lean in ("8", "8r") else 16), 512
    columns = 65536 if lean.endswith("r") else 65537
    lens = [columns, columns - 5, 40000, 9000, 512, 300][:6 if cluster == 8 else T.LEAN16_ROWS]
    lens[-1] = 300 if cluster == 8 else 512  # (16: 4 rows, the last a copy)
    generator = torch.Generator(device="cuda").manual_seed(cluster)
    logits = torch.randn(len(lens), columns, generator=generator, device="cuda")
    logits[1] = torch.round(logits[1] * 40) / 40  # ties
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    page_table = torch.arange(-(-columns // 64), dtype=torch.int32, device="cuda").repeat(len(lens), 1)
    aligned = columns % 4 == 0 and logits.data_ptr() % 16 == 0

    def run(setting):
        monkeypatch.setattr(T, "LEAN", setting)
        (kernel, *_), = T._launches_from_env(len(lens), columns, aligned, sms, clusters, {})
        out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64)
        assert torch.equal(T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64), out), kernel
        return kernel, out.cpu().numpy()

    kernel, out = run(lean)
    assert kernel == {"8": "dsv4_topk_indices_lean<8>", "16": "dsv4_topk_indices_lean<16>",
                      "16r": "dsv4_topk_indices_lean_regs<16, 1>", "8r": "dsv4_topk_indices_lean_regs<8, 2>"}[lean]
    rows = logits.cpu().numpy()
    modelled = 0
    for b, n in enumerate(lens):
        if n <= k:
            assert out[b].tolist() == list(range(n)) + [-1] * (k - n)
            continue
        expected = wide_model(rows[b], n, k, cluster, b * columns % 4, 8)
        if expected is not None:
            modelled += 1
            assert np.array_equal(out[b], expected), (b, n)
    assert modelled >= 2
    if lean.endswith("r"):  # the registers' form writes the bits of lean<cluster>
        assert np.array_equal(run(lean[:-1])[1], out)
    if lean == "8":  # wide<8>'s bound here is 8196 columns: rows past 4 x 8196 take all 8 of its CTAs
        kernel, wide = run("0")
        (_, _, _, _, (_, up_to, _, _)), = T._launches_from_env(len(lens), columns, aligned, sms, clusters, {})
        assert kernel == "dsv4_topk_indices_wide<8>"
        same = [b for b, n in enumerate(lens) if n <= k or (n > up_to and T.row_ctas(n, 8, up_to) == 8)]
        assert len(same) == 5  # 65537, 65532, 40000 and the two copies (9000 takes 2 CTAs there)
        for b in same:
            assert np.array_equal(out[b], wide[b]), (b, lens[b])


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 2048])
def test_pairs_on_the_gpu_write_the_models_slots(monkeypatch, k):
    # lean_regs<2, 2> (DSV4_TOPK_PAIRS) on 64 x 16384: every slot, order included, as wide_model on 2
    # chunks (identity page table), rows ending mid-group and short, ties; reruns bitwise; the same
    # set as fast<4> (its slots' order is its own)
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    columns, batch = 16384, 64
    generator = torch.Generator(device="cuda").manual_seed(k)
    logits = torch.randn(batch, columns, generator=generator, device="cuda")
    logits[3] = torch.round(logits[3] * 40) / 40  # ties
    lens = [columns] * batch
    lens[1], lens[2], lens[4], lens[5] = columns - 5, 9000, k, 700
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    page_table = torch.arange(columns // 64, dtype=torch.int32, device="cuda").repeat(batch, 1)
    monkeypatch.setattr(T, "PAIRS", True)
    (kernel, *_), = T._launches_from_env(batch, columns, True, sms, clusters, {})
    assert kernel == "dsv4_topk_indices_lean_regs<2, 2>"
    out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64)
    assert torch.equal(T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64), out)
    out, rows = out.cpu().numpy(), logits.cpu().numpy()
    modelled = 0
    for b in range(8):
        n = lens[b]
        if n <= k:
            assert out[b].tolist() == list(range(n)) + [-1] * (k - n)
            continue
        expected = wide_model(rows[b], n, k, 2, 0, 2)
        if expected is not None:
            modelled += 1
            assert np.array_equal(out[b], expected), (b, n)
    assert modelled >= 4
    monkeypatch.setattr(T, "PAIRS", False)
    fast = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64).cpu().numpy()
    assert (np.sort(fast, axis=1) == np.sort(out, axis=1)).all()


def window_model(hists, lens, k, cluster):
    """lean_window_bounds and lean_window_threshold (LEAN_WINDOW) for one row on `cluster` CTAs, line for line:
    each CTA's own threshold bin (0 below k keys) and highest non-empty bin (0 if none) by two levels (the warps'
    totals and the keys past each warp; the lane scan in the one warp holding the first, the highest lane holding
    keys in the one holding the second: one writer each, checked against their definitions), the window's groups from
    the largest of the first to the largest of the second, and in each CTA, where the window fits TOPK_THREADS /
    cluster groups, thread t's read (peer t % cluster, group first + t / cluster), the sums over the peers (and the
    peers before this CTA) by shuffles, the suffix over the warp's groups (shuffles down by whole groups) and over
    the later warps' totals, and the search from each group's last bin down. Per CTA the (bin, keys above, keys
    in it, the earlier CTAs' keys above it, in it) that the one thread finding it writes; None where the window
    is too wide (the sums' fallback)."""
    bounds = []
    for hist, m in zip(hists, lens):
        # thread t's four bins 4t.., warp w's 128 bins 128w..: the warp totals, the keys in the warps past each
        mine = hist.reshape(THREADS, 4)
        totals = mine.sum(1).reshape(32, 32).sum(1)
        later = np.concatenate([np.cumsum(totals[::-1])[::-1][1:], [0]])
        own, top = [], []
        for w in range(32):
            if later[w] < k <= later[w] + totals[w]:  # its lanes' suffix (shuffles down), then each lane's four bins
                from_here = np.cumsum(mine[32 * w:32 * w + 32].sum(1)[::-1])[::-1]
                for lane in range(32):
                    above = int(later[w] + from_here[lane])
                    for e in range(4):
                        above -= int(mine[32 * w + lane, e])
                        if above < k <= above + mine[32 * w + lane, e]:
                            own.append(4 * (32 * w + lane) + e)
            if later[w] == 0 and totals[w] != 0:  # the highest lane holding keys, its highest bin holding some
                lane = max(i for i in range(32) if mine[32 * w + i].sum())
                top.append(4 * (32 * w + lane) + max(e for e in range(4) if mine[32 * w + lane, e]))
        assert len(own) == (m >= k) and len(top) == (m > 0)  # one writer, or thread 0's 0
        bounds.append((own[0] if own else 0, top[0] if top else 0))
        # the CTA's own threshold bin and highest bin, as the definitions say
        if m >= k:
            assert bounds[-1][0] == threshold(hist, k)[0]
        if m > 0:
            assert bounds[-1][1] == int(np.nonzero(hist)[0].max())
    first, last = max(c for c, _ in bounds) >> 2, max(t for _, t in bounds) >> 2
    groups, segments = THREADS // cluster, 32 // cluster
    if last - first >= groups:
        return None
    last_warp = (last - first) // segments
    results = []
    for rank in range(cluster):
        part = np.zeros((THREADS, 4), np.int64)
        t = np.arange(THREADS)
        peer, g = t % cluster, first + t // cluster
        for i in np.nonzero((g <= last) & (t // 32 <= last_warp))[0]:
            part[i] = hists[peer[i]][4 * g[i]:4 * g[i] + 4]
        before = np.where((peer < rank)[:, None], part, 0)
        # the xor shuffles: every lane of a group's `cluster` lanes holds the group's sums
        part = part.reshape(-1, cluster, 4).sum(1).repeat(cluster, 0)
        before = before.reshape(-1, cluster, 4).sum(1).repeat(cluster, 0)
        own = part.sum(1) + (before.sum(1) << 32)
        from_here = own.copy()
        lane = t & 31
        off = cluster
        while off < 32:  # shfl_down: lane + off's value where it is in the warp
            shifted = np.where(lane + off < 32, np.roll(from_here, -off), 0)
            from_here = from_here + shifted
            off <<= 1
        warp_before = from_here[::32]  # lane 0's
        found = []
        for i in np.nonzero((peer == 0) & (g <= last) & (t // 32 <= last_warp))[0]:
            w = i // 32
            later = sum(int(warp_before[x]) for x in range(w + 1, last_warp + 1))
            above = (later & 0xFFFFFFFF) + (int(from_here[i]) & 0xFFFFFFFF) - (int(own[i]) & 0xFFFFFFFF)
            above_before = (later >> 32) + (int(from_here[i]) >> 32) - (int(own[i]) >> 32)
            for e in (3, 2, 1, 0):
                if above < k <= above + part[i, e]:
                    found.append((4 * int(g[i]) + e, above, int(part[i, e]), above_before, int(before[i, e])))
                above += int(part[i, e])
                above_before += int(before[i, e])
        assert len(found) == 1, (rank, found)
        results.append(found[0])
    return results


@pytest.mark.parametrize("cluster", [8, 16, 2])
@pytest.mark.parametrize("data", ["normal", "ties", "inf", "equal", "short"])
def test_the_window_form_finds_the_threshold_and_the_counts_before_each_cta_that_the_sums_do(cluster, data):
    # against the summed histograms' threshold (fast_threshold) and the fold's sums over the earlier CTAs; where
    # the window fits at 8 CTAs, a 1 x 65536 row's is a few dozen groups (the ~3 KB the doc counts on)
    # the window form counts the padding (key 0) in the histogram and takes it out of bin 0 once: key 0's bin
    assert coarse_bin(np.zeros(1, np.uint32))[0] == 0 and coarse_bin(sortable_key(np.float32([-np.inf])))[0] == 0
    rng = np.random.default_rng(cluster + len(data))
    windowed = 0
    for n, k in [(65536, 512), (65536, 1024), (65536, 2048), (65531, 512), (40000, 512), (9000, 512), (20011, 2048)]:
        n = 3000 if data == "short" else n  # chunks shorter than k at 8 and 16 CTAs
        row = np.full(n, 0.75, np.float32) if data == "equal" else model_row(rng, n, data)
        keys = sortable_key(row)
        chunk = (-(-n // cluster) + 3) & ~3
        spans = [(min(n, r * chunk), min(n, (r + 1) * chunk)) for r in range(cluster)]
        hists = [np.bincount(coarse_bin(keys[a:b]), minlength=BINS).astype(np.int64) for a, b in spans]
        model = window_model(hists, [b - a for a, b in spans], k, cluster)
        if model is None:
            continue
        windowed += 1
        b, above, inside = threshold(sum(hists), k)
        for rank, found in enumerate(model):
            fold = (sum(int(h[b + 1:].sum()) for h in hists[:rank]), sum(int(h[b]) for h in hists[:rank]))
            assert found == (b, above, inside, *fold), (n, k, rank)
        if data == "normal" and cluster == 8 and n == 65536:
            bounds = [threshold(h, k)[0] for h in hists]
            tops = [int(np.nonzero(h)[0].max()) for h in hists]
            assert 16 <= (max(tops) >> 2) - (max(bounds) >> 2) + 1 <= {512: 40, 1024: 48, 2048: 64}[k]
    # where each case goes: +inf (the top bin) and chunks all shorter than k (the window from bin 0) take the
    # window past what 8 or 16 CTAs read at once (the sums again); at 2 CTAs (512 groups) and otherwise most fit
    fits = cluster == 2 or data not in ("inf", "short")
    assert windowed >= 3 if fits else windowed == 0, windowed


@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_lean_regs_8_2_writes_lean_8s_bits_on_rows_of_every_window_path(monkeypatch, k):
    # DSV4_TOPK_LEAN_FORM (read at import) picks the form under test; either way lean_regs<8, 2> writes the bits of
    # lean<8> (shared memory, the sums) and of wide_model, through a permuted page table: rows whose window fits
    # (normal, a row ending mid-group; heavy ties in one bin, all equal: the radix after the window), rows whose
    # window does not (+inf, chunks shorter than k), a copy; reruns bitwise
    import torch
    sms, clusters = T._device(torch.cuda.current_device())
    columns = 65536
    lens = [columns, columns - 5, columns, columns, columns, 3000, 30000, k - 1]
    generator = torch.Generator(device="cuda").manual_seed(k)
    logits = torch.randn(len(lens), columns, generator=generator, device="cuda")
    logits[2] = torch.round(logits[2] * 40) / 40  # ties
    logits[3, 7:] = 0.75  # one bin, the radix's
    logits[4, [5, 999, 40000]] = float("inf")
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    # a permuted page table a row (the window form's rank 0 maps its candidates through a staged copy of it)
    table = np.stack([np.random.default_rng(k + b).permutation(columns // 64) for b in range(len(lens))])
    page_table = torch.tensor(table, dtype=torch.int32, device="cuda")
    rows = logits.cpu().numpy()
    paths = []
    for n in lens[:-1]:
        keys = sortable_key(rows[len(paths), :n])
        chunk = (-(-n // 8) + 3) & ~3
        spans = [(min(n, r * chunk), min(n, (r + 1) * chunk)) for r in range(8)]
        hists = [np.bincount(coarse_bin(keys[a:b]), minlength=BINS).astype(np.int64) for a, b in spans]
        windowed = window_model(hists, [b - a for a, b in spans], k, 8) is not None
        paths.append((windowed, threshold(sum(hists), k)[2] > 128))
    assert {(True, False), (True, True), (False, False)} <= set(paths), paths

    def run(setting):
        monkeypatch.setattr(T, "LEAN", setting)
        (kernel, *_), = T._launches_from_env(len(lens), columns, True, sms, clusters, {})
        out = T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64)
        assert torch.equal(T.topk_indices(logits, seq_lens, page_table, k=k, page_size=64), out), kernel
        return kernel, out.cpu().numpy()

    kernel, out = run("8r")
    assert kernel == "dsv4_topk_indices_lean_regs<8, 2>"
    assert np.array_equal(run("8")[1], out)
    modelled = 0
    for b, n in enumerate(lens[:-1]):
        expected = wide_model(rows[b], n, k, 8, 0, 8)
        if expected is not None:
            modelled += 1
            assert np.array_equal(out[b], table[b][expected // 64] * 64 + expected % 64), (b, n)
    copy = np.arange(k - 1)
    assert modelled >= 3 and out[-1].tolist() == (table[-1][copy // 64] * 64 + copy % 64).tolist() + [-1]
