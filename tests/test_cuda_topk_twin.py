"""The plan's routing of long batches (DSV4_TOPK_LONG_PLAN: twin by default; DSV4_TOPK_TWIN=4: twin<4>, wide<8>'s
chunks two a CTA on 4-CTA clusters; DSV4_TOPK_TWIN=2: twin<2>, four a CTA on 2-CTA clusters), docs/topk-s11a.md and
docs/topk-s12a.md: which batches the plan routes and which it leaves, that a planned call swaps only the
launch the plan was made for, twin's cluster size from the device's max active clusters, that twin compiles
to what the host counts on, the numpy model of twin's slots against wide<8>'s, and on the GPU the routed
kernel's bits against the unplanned call's."""

import importlib

import numpy as np
import pytest

from test_cuda_topk import (BINS, H200, MIXED, THREADS, cluster_bucket, coarse_bin, model_row, rank_candidates,
                            sortable_key, wide_model)

T = importlib.import_module("kernels_cuda.topk_indices")  # the package's name is the op

LONG = [262144] * 64  # the bench's b64-262144
WIDE16_ROWS = (T.WIDE16_CHUNK, T.WIDE16_MIN_ROW_CTAS)  # wide16's bound and least CTAs a row (wide8_row_ctas)


@pytest.mark.parametrize("choice", ["wide16", "twin"])
def test_the_plan_routes_a_batch_of_long_rows_and_leaves_the_mixed_batch_on_wide8(choice):
    assert T.long_plan(LONG, 512, *H200, choice=choice) == (choice, (-1, T.MAX_CHUNK, T.WIDE_FOLD | T.WIDE_GROUPS))
    assert T.long_plan(LONG + [7, 0, 512], 512, *H200, choice=choice)[0] == choice  # copies take no CTA
    # the mixed bench batch: its long rows' CTAs (6 x 8 + 12 x 4 = 96) are one wave at one CTA an SM
    assert sum(c for c in (T.wide8_row_ctas(n, 512, T.MAX_CHUNK) for n in MIXED) if c > 1) == 96 <= H200[0]
    for k in (512, 1024, 2048):
        assert T.long_plan(MIXED, k, *H200, choice=choice) is None
    # not long: 16 rows of 262144 are one wave of wide<8> (the lean kernel's, no wide<8> launch), 17 are 136
    # CTAs: long; 64 rows of 40960 are solo rows
    assert T.long_plan([262144] * 16, 512, *H200, choice=choice) is None
    assert T.long_plan([262144] * 17, 512, *H200, choice=choice)[0] == choice
    assert T.long_plan([40960] * 64, 512, *H200, choice=choice) is None
    # off, or a launch the plan does not replace (split, the direct sum, groups off or bound, another kernel)
    assert T.long_plan(LONG, 512, *H200, choice="") is None
    for env in [{"DSV4_TOPK_KERNEL": "split"}, {"DSV4_TOPK_SUM": "direct"}, {"DSV4_TOPK_GROUPS": "0"},
                {"DSV4_TOPK_GROUPS_BOUND": "20480"}, {"DSV4_TOPK_KERNEL": "cluster"}, {"DSV4_TOPK_LONG": "wide16"}]:
        assert T.long_plan(LONG, 512, *H200, choice=choice, env=env) is None, env
    with pytest.raises(ValueError, match="DSV4_TOPK_LONG_PLAN"):
        T.long_plan(LONG, 512, *H200, choice="wide32")


def test_the_plan_routes_only_where_every_row_takes_wide8s_ctas():
    # wide16: its bound (36864) and its least CTAs a row (2; wide<8>'s 4) give a row other CTAs than wide<8>'s
    # (40960) in (36864, 73728] and (147456, 163840]; one such row keeps the batch on wide<8>
    for n in (36865, 40960, 40961, 73728, 147457, 163840):
        assert T.wide8_row_ctas(n, 512, T.MAX_CHUNK) != T.wide8_row_ctas(n, 512, *WIDE16_ROWS), n
        assert T.long_plan(LONG[:-1] + [n], 512, *H200, choice="wide16") is None, n
        assert T.long_plan(LONG[:-1] + [n], 512, *H200, choice="twin") is None, n
    for n in (36864, 73729, 81920, 81921, 147456, 163841, 200001):
        assert T.wide8_row_ctas(n, 512, T.MAX_CHUNK) == T.wide8_row_ctas(n, 512, *WIDE16_ROWS), n
        assert T.long_plan(LONG[:-1] + [n], 512, *H200, choice="wide16")[0] == "wide16", n
    # twin: every row a copy or on all 8 of wide<8>'s CTAs (past 163840); a solo row or one of 2 or 4 CTAs
    # keeps the batch on wide<8>
    for n, routed in [(163840, False), (163841, True), (262143, True), (100000, False), (5000, False), (512, True)]:
        assert (T.long_plan(LONG[:-1] + [n], 512, *H200, choice="twin") is not None) == routed, n


def parameters(kernel):
    """How many parameters topk_indices.cu's `kernel` takes."""
    import re
    from pathlib import Path
    source = (Path(T.__file__).parent / "topk_indices.cu").read_text()
    match = re.search(rf"\b{kernel}\(([^)]*)\)\s*{{", source)
    assert match, kernel
    return len(match.group(1).split(","))


class _Plan:  # what _long_planned reads of a plan
    def __init__(self, long):
        self.data = {"long": long}


def test_a_planned_call_swaps_only_the_launch_its_plan_was_made_for():
    runs = T.launches(64, 262144, True, *H200)
    assert [r[0] for r in runs] == ["dsv4_topk_indices_wide<8>"]
    for choice in ("wide16", "twin"):
        plan = _Plan(T.long_plan(LONG, 512, *H200, choice=choice))
        (kernel, grid, shared, pdl, extra), = T._long_planned(runs, plan, 64, 262144, True, H200[0], "plan",
                                                              env={"DSV4_TOPK_TWIN": "4"})
        if choice == "wide16":  # the width's wide16 launch (DSV4_TOPK_LONG=wide16): the same kernel and bounds
            assert [(kernel, grid, shared, pdl, extra)] == T.launches(64, 262144, True, *H200, long="wide16")
        else:
            assert (kernel, grid, extra) == (T.TWIN_KERNEL, (4, 64), (T.WIDE_FOLD,))
            assert parameters("dsv4_topk_indices_twin") == 8 + len(extra)  # the common 8, then options
            assert shared == T.chunk_columns(262144, 8) == 32768  # 2 bytes a group of 4, two chunks
            assert pdl  # 256 CTAs: one round at two CTAs an SM
        # the device routing's A/B, no plan, a plan of no long batch: the call as it was
        assert T._long_planned(runs, plan, 64, 262144, True, H200[0], "device") == runs
        assert T._long_planned(runs, None, 64, 262144, True, H200[0], "plan") == runs
        assert T._long_planned(runs, _Plan(None), 64, 262144, True, H200[0], "plan") == runs
        # a call whose launch is not the planned one (other options or bound, or another kernel) keeps it
        for other in [T.launches(64, 262144, True, *H200, fold=False), T.launches(64, 65536, True, *H200),
                      T.launches(64, 262144, True, *H200, groups_bound=20480)]:
            assert T._long_planned(other, plan, 64, 262144, True, H200[0], "plan") == other
        # the kernel's own launch declines unaligned rows
        unaligned = T.launches(64, 262144, False, *H200)
        assert T._long_planned(unaligned, plan, 64, 262144, False, H200[0], "plan") == unaligned


TWIN_ROW = {4: 48, 2: 64}  # sizeof(TwinRow<8 / cluster>) as ptxas counts it after WideShared (rounded to 16)


@pytest.mark.parametrize("cluster", [4, 2])
def test_twin_fits_its_ctas_an_sm_at_the_widest_rows(cluster):
    for columns in (262144, 8 * T.MAX_CHUNK):
        (kernel, grid, shared, pdl, _) = T.twin_launch(64, columns, True, H200[0], T.WIDE_FOLD, cluster)
        assert kernel == T.TWIN_KERNELS[cluster] and grid == (cluster, 64)
        assert shared == 2 * (8 // cluster) * T.chunk_columns(columns, 8) // 4  # 2 bytes a group of 4 columns
        static = T.wide_static_shared(cluster) + TWIN_ROW[cluster]
        per_sm = T.TWIN_CTAS_PER_SM_OF[cluster]
        assert per_sm * (shared + static + 1024) <= 228 * 1024  # (1 KB an SM's CTA reserves)
        # 64 rows: 256 CTAs of the 264 two an SM hold, or 128 of 132 at one an SM: one round, PDL
        assert grid[0] * grid[1] <= per_sm * H200[0] and pdl
    assert T.twin_launch(64, 262144, True, H200[0], T.WIDE_FOLD, 2)[2] == 65536  # four chunks of 32768 columns
    # more CTAs than the SMs hold: no PDL (it would hold SMs waiting for the kernel before)
    assert not T.twin_launch(67, 262144, True, H200[0], T.WIDE_FOLD, 2)[3]
    assert T.twin_launch(66, 262144, True, H200[0], T.WIDE_FOLD, 4)[3]
    for cluster in (4, 2):
        assert T.twin_launch(64, 262144, False, H200[0], T.WIDE_FOLD, cluster) is None
        assert T.twin_launch(64, 8 * T.MAX_CHUNK + 4, True, H200[0], T.WIDE_FOLD, cluster) is None


def test_twins_cluster_size_takes_the_fewest_rounds_of_the_devices_active_clusters():
    h200 = {4: 62, 2: 66}  # the lead's ncu: 62 active 4-CTA clusters; 2-CTA clusters one a TPC
    for batch, want in [(17, 4), (62, 4), (63, 2), (64, 2), (66, 2), (67, 4), (124, 4), (125, 2), (132, 2),
                        (133, 4), (186, 4), (256, 2)]:
        assert T.twin_cluster(batch, h200, "auto") == want, batch
    assert T.twin_cluster(64, {4: 64, 2: 66}, "auto") == 4  # all rows in one round of 4-CTA clusters
    assert T.twin_cluster(64, {4: 0, 2: 66}, "auto") == 2  # the driver did not answer for twin<4>
    assert T.twin_cluster(64, {4: 62, 2: 0}, "auto") == 4
    assert T.twin_cluster(64, {4: None, 2: None}, "auto") == 4
    for choice in ("4", "2"):
        assert T.twin_cluster(64, {}, choice) == int(choice)  # fixed: no counts needed
    with pytest.raises(ValueError, match="DSV4_TOPK_TWIN"):
        T.twin_cluster(64, h200, "8")


def test_a_planned_call_takes_the_twin_of_dsv4_topk_twin():
    runs = T.launches(64, 262144, True, *H200)
    plan = _Plan(T.long_plan(LONG, 512, *H200, choice="twin"))
    asked = []

    def h200(kernel, shared):
        asked.append((kernel, shared))
        return {T.TWIN_KERNELS[4]: 62, T.TWIN_KERNELS[2]: 66}[kernel]

    def never(kernel, shared):
        raise AssertionError("asked the device's active clusters for a fixed cluster size")

    for env, active, kernel in [({}, h200, T.TWIN_KERNELS[2]), ({"DSV4_TOPK_TWIN": "4"}, never, T.TWIN_KERNELS[4]),
                                ({"DSV4_TOPK_TWIN": "2"}, never, T.TWIN_KERNELS[2]),
                                ({"DSV4_TOPK_TWIN": "auto"}, h200, T.TWIN_KERNELS[2])]:
        (run,) = T._long_planned(runs, plan, 64, 262144, True, H200[0], "plan", active, env)
        cluster = 2 if kernel == T.TWIN_KERNELS[2] else 4
        assert run == T.twin_launch(64, 262144, True, H200[0], T.WIDE_FOLD, cluster), env
    # auto (the default, then named) asked each kernel at the shared memory its launch takes
    assert sorted(asked) == sorted(2 * [(T.TWIN_KERNELS[c], T.twin_launch(64, 262144, True, H200[0], 0, c)[2])
                                        for c in (4, 2)])
    # 62 rows fit one round of twin<4>
    (run,) = T._long_planned(T.launches(62, 262144, True, *H200), _Plan(T.long_plan([262144] * 62, 512, *H200,
                             choice="twin")), 62, 262144, True, H200[0], "plan", h200, {"DSV4_TOPK_TWIN": "auto"})
    assert run[0] == T.TWIN_KERNELS[4]


def test_the_active_cluster_query_gives_the_driver_one_cluster_of_the_kernel(monkeypatch):
    """_max_active_clusters (DSV4_TOPK_TWIN=auto) through the loader's cuOccupancyMaxActiveClusters, on a fake
    driver: the kernel's function, a grid of one cluster, its block and dynamic shared memory; 0 on an error."""
    import contextlib
    import ctypes
    import types

    import cupy
    from kernels_cuda import _loader
    seen = []

    class FakeCuda:
        def __init__(self, err):
            self.err = err

        def cuOccupancyMaxActiveClusters(self, count, function, config):
            c = ctypes.cast(config, ctypes.POINTER(_loader._LaunchConfig)).contents
            seen.append((function.value, tuple(c.grid), tuple(c.block), c.shared_mem, c.num_attrs))
            ctypes.cast(count, ctypes.POINTER(ctypes.c_int)).contents.value = 66
            return self.err

    prepared = []
    monkeypatch.setattr(T, "_opt_in", lambda kernel, shared, device: prepared.append(("opt_in", kernel, shared)))
    monkeypatch.setattr(T, "_two_per_sm", lambda kernel, device: prepared.append(("two_per_sm", kernel)))
    monkeypatch.setattr(_loader, "kernel", lambda name, expr, device: types.SimpleNamespace(ptr=1234))
    monkeypatch.setattr(cupy.cuda, "Device", lambda index: contextlib.nullcontext())
    for err, want in ((0, 66), (1, 0)):
        monkeypatch.setattr(_loader, "_libcuda", lambda err=err: FakeCuda(err))
        T._max_active_clusters.cache_clear()
        assert T._max_active_clusters(T.TWIN_KERNELS[2], 65536, 0) == want
        assert seen[-1] == (1234, (2, 1, 1), (T.THREADS, 1, 1), 65536, 0)
    assert prepared[-2:] == [("opt_in", T.TWIN_KERNELS[2], 65536), ("two_per_sm", T.TWIN_KERNELS[2])]
    T._max_active_clusters.cache_clear()

def test_the_default_compiles_and_routes_as_before():
    from kernels_cuda import _loader
    assert all(kernel in _loader.KERNELS["topk_indices.cu"] for kernel in T.TWIN_KERNELS.values())
    assert T.LONG_PLAN in T.LONG_PLAN_CHOICES


def test_twin_compiles_to_its_ctas_an_sm(monkeypatch):
    # twin<4>: 32 registers (2 x 1024 x 32 = the register file); twin<2>: at most 64 (one CTA an SM); no spill;
    # the static shared memory the host counts
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    monkeypatch.setitem(_loader.KERNELS, "topk_indices.cu", list(T.TWIN_KERNELS.values()))
    _, lowered, log = _loader.compile_cubin("topk_indices.cu", "sm_90a")
    found = build.resources(log, lowered)
    for cluster, kernel in T.TWIN_KERNELS.items():
        res = found[kernel]
        assert res["registers"] <= 65536 // (1024 * T.TWIN_CTAS_PER_SM_OF[cluster]), res
        assert res["spill_stores"] == 0 and res["stack"] == 0, res
        assert res["smem"] == T.wide_static_shared(cluster) + TWIN_ROW[cluster]


def test_twins_histogram_address_is_the_coarse_bins():
    # twin_count4: bin_2048 + 4 (c ^ negative) mod 2^32, c the clamped code and negative all ones for a key
    # with its top bit clear, is the shared-memory address of coarse_bin's bin, for all 2^15 values of key >> 17
    # (the bin reads nothing else), low bits clear and set, wherever the histogram lies
    for low in (0, 0x1FFFF):
        key = (np.arange(1 << 15, dtype=np.uint64) << np.uint64(17)) | np.uint64(low)
        negative = np.where(key >> np.uint64(31), 0, 0xFFFFFFFF).astype(np.uint64)
        top = ((key ^ negative) & np.uint64(0xFFFFFFFF)) >> np.uint64(17)
        c = np.clip(top.astype(np.int64) - (0x4000 + (111 << 6)), 0, (31 << 6) | 63).astype(np.uint64)
        for base in (0, 0x95C0, 0xFFFF0):
            address = (base + 4 * 2048 + 4 * (c ^ negative)) & np.uint64(0xFFFFFFFF)
            assert np.array_equal(address, base + 4 * coarse_bin(key.astype(np.uint32)).astype(np.uint64))


def twin_ctas(row, n, cluster):
    """wide<8>'s chunk of a row of seq_len n, and what each CTA p of a `cluster`-CTA twin loads: (begin, groups,
    words, hist), its chunks c p .. c p + c - 1 (c = 8 / cluster) back to back as sortable keys in whole groups of
    four (key 0 past n) and the coarse histogram of its keys."""
    keys = sortable_key(row[:n])
    chunk = (-(-n // 8) + 3) & ~3  # wide<8>'s
    chunks = 8 // cluster
    ctas = []
    for p in range(cluster):
        begin = min(n, chunks * p * chunk)
        m = min(n, begin + chunks * chunk) - begin
        groups = (m + 3) >> 2
        words = np.zeros(4 * groups, np.uint32)
        words[:m] = keys[begin:begin + m]
        ctas.append((begin, groups, words, np.bincount(coarse_bin(keys[begin:begin + m]), minlength=BINS)))
    return chunk, ctas


def twin_model(row, n, k, cluster=4):
    """twin_select<cluster>'s ranked path for one aligned row (seq_len n > k), line for line: CTA p on wide<8>'s
    chunks c p .. c p + c - 1 back to back (c = 8 / cluster), its keys counted, one max16 word a group (key 0
    past n); the bucket from the summed histograms; each chunk's counting walk over the thread's groups
    t + 1024 i of that chunk (the groups whose max16 passes, classified on full keys), one packed scan a chunk;
    the placing walks from the peers' histograms' runs (the fold), a chunk's slots after the CTA's chunks
    before it. The raw columns by slot, or None where the threshold bin holds more than FAST_CANDIDATES keys
    (the radix path, not modelled)."""
    chunk, loaded = twin_ctas(row, n, cluster)
    chunks, split = 8 // cluster, chunk >> 2
    ctas = []
    for begin, groups, words, hist in loaded:
        max16 = words.reshape(groups, 4).max(axis=1) >> 16
        # the kernel's chunk_from / chunk_to: chunk c's groups, the last to the end
        ranges = [(0 if c == 0 else min(groups, c * split), groups if c == chunks - 1 else min(groups, (c + 1) * split))
                  for c in range(chunks)]
        ctas.append((begin, words, max16, hist, ranges))
    bucket = cluster_bucket([c[3] for c in ctas], k)
    if bucket is None:
        return None
    b, remaining, inside, lo, hi = bucket
    out = np.full(k, -1, np.int64)
    candidates = {}
    for p, (begin, words, max16, hist, ranges) in enumerate(ctas):
        first_above = sum(int(c[3][b + 1:].sum()) for c in ctas[:p])
        first_inside = sum(int(c[3][b]) for c in ctas[:p])
        q = words.reshape(-1, 4).astype(np.int64)
        passes = max16 >= lo >> 16
        assert not (q[~passes] >= lo).any()  # the filter drops no group holding a key at or above lo
        above = (q > hi) & passes[:, None]
        within = (q != 0) & (q >= lo) & (q <= hi) & passes[:, None]
        slot_above, slot_inside = 0, first_inside
        for from_group, to_group in ranges:
            # thread t's groups from_group + t + 1024 i, in thread order (the block scan's), then group, column
            for t in range(THREADS):
                for g in range(from_group + t, to_group, THREADS):
                    for j in range(4):
                        if above[g, j]:
                            assert out[first_above + slot_above] == -1
                            out[first_above + slot_above] = begin + 4 * g + j
                            slot_above += 1
                        elif within[g, j]:
                            candidates[slot_inside] = (int(q[g, j]), begin + 4 * g + j)
                            slot_inside += 1
    return rank_candidates(out, candidates, k, remaining, inside)


@pytest.mark.parametrize("data", ["normal", "ties", "inf"])
def test_twins_slots_are_wide8s_in_order(data):
    # the rows of a twin batch: past 163840 (all 8 of wide<8>'s CTAs), and short ones (empty or partial
    # CTAs and chunks: the model, as the kernel, takes any n > k); n not a multiple of 4 ends in a partial group
    rng = np.random.default_rng(len(data))
    ran = 0
    for n, k in [(163841, 512), (200003, 1024), (262144, 512), (9001, 2048), (600, 512)]:
        row = model_row(rng, n, data)
        want = wide_model(row, n, k, 8, 0)
        for cluster in (4, 2):
            got = twin_model(row, n, k, cluster)
            assert (got is None) == (want is None), (n, cluster)
            if got is not None:
                ran += 1
                assert np.array_equal(got, want), (n, k, cluster)
    assert ran >= 6


TWIN_GROUPS_A_THREAD = -(-(T.MAX_CHUNK // 4) // THREADS)  # the kernel's: groups of a wide<8> chunk a thread at most
U64 = (1 << 64) - 1


def classify4(q, lo, hi):
    """classify4: above | inside << 16 of four keys (key 0 neither)."""
    return sum(1 if e > hi else 0x10000 if e != 0 and lo <= e <= hi else 0 for e in q)


def onewalk_model(row, n, k, reverse=False):
    """twin_select<2>'s ranked path at TWIN_ONE_WALK (DSV4_TOPK_TWIN_FORM=onewalk) for one aligned row (n > k),
    line for line: each thread's passing groups as a 64-bit mask (chunk c's group i at bit 16 c + i), visited
    lowest bit first (reverse: highest first, a mutation that must change the slots); a thread's counts in a
    64-bit word, 16 bits a chunk (above | inside << 8); the four chunks' packed words scanned over the threads;
    the placing pass from each chunk's first slots (above | inside << 16) plus the thread's earlier keys of that
    chunk. The raw columns by slot, or None where the threshold bin holds more than FAST_CANDIDATES keys."""
    chunk, ctas = twin_ctas(row, n, 2)
    chunks, split = 4, chunk >> 2
    bucket = cluster_bucket([c[3] for c in ctas], k)
    if bucket is None:
        return None
    b, remaining, inside, lo, hi = bucket
    out = np.full(k, -1, np.int64)
    candidates = {}
    t = np.arange(THREADS)
    for p, (begin, groups, words, hist) in enumerate(ctas):
        first_above = sum(int(c[3][b + 1:].sum()) for c in ctas[:p])
        first_inside = sum(int(c[3][b]) for c in ctas[:p])
        q = words.reshape(-1, 4).astype(np.int64)
        max16 = q.max(axis=1) >> 16
        first_group = [min(groups, c * split) for c in range(chunks)]  # chunk_from (and group_of)
        last_group = [groups if c == chunks - 1 else min(groups, (c + 1) * split) for c in range(chunks)]
        mask = np.zeros(THREADS, object)
        for c in range(chunks):
            for i in range(TWIN_GROUPS_A_THREAD):
                g = first_group[c] + t + THREADS * i
                inside_chunk = g < last_group[c]
                passing = np.zeros(THREADS, bool)
                passing[inside_chunk] = max16[g[inside_chunk]] >= lo >> 16
                mask += np.where(passing, 1 << (16 * c + i), 0).astype(object)
        assert not (q[max16 < lo >> 16] >= lo).any()  # the filter drops no group holding a key at or above lo

        def visits(bits):
            order = [j for j in range(64) if bits >> j & 1]
            for j in (order[::-1] if reverse else order):
                c, i = j >> 4, j & 15
                yield c, first_group[c] + int(t_) + THREADS * i

        def unpack(word, c):
            f = word >> (16 * c) & 0xFFFF
            return (f & 0xFF) | (f >> 8) << 16

        busy = [int(t_) for t_ in t if mask[t_]]  # the threads with a passing group (the others count 0, place none)
        mine = np.zeros((chunks, THREADS), np.int64)
        for t_ in busy:
            counted = 0
            for c, g in visits(int(mask[t_])):
                packed = classify4(q[g], lo, hi)
                counted = (counted + (((packed & 0xFF) | (packed >> 8)) << (16 * c))) & U64
            mine[:, t_] = [unpack(counted, c) for c in range(chunks)]
        before = (np.cumsum(mine, axis=1) - mine) & 0xFFFFFFFF  # the scan, a chunk a word
        total = mine.sum(axis=1)
        for t_ in busy:
            first = [(sum(int(total[d]) & 0xFFFF for d in range(c)) + (int(before[c, t_]) & 0xFFFF) | (
                      first_inside + sum(int(total[d]) >> 16 for d in range(c)) + (int(before[c, t_]) >> 16)) << 16)
                     for c in range(chunks)]
            placed = 0
            for c, g in visits(int(mask[t_])):
                start = (first[c] + unpack(placed, c)) & 0xFFFFFFFF
                slot_above, slot_inside = start & 0xFFFF, start >> 16
                for j in range(4):
                    if q[g, j] > hi:
                        assert out[first_above + slot_above] == -1
                        out[first_above + slot_above] = begin + 4 * g + j
                        slot_above += 1
                    elif q[g, j] != 0 and lo <= q[g, j] <= hi:
                        assert slot_inside not in candidates
                        candidates[slot_inside] = (int(q[g, j]), begin + 4 * g + j)
                        slot_inside += 1
                placed = (placed + (((slot_above - (start & 0xFFFF)) | (slot_inside - (start >> 16)) << 8)
                                    << (16 * c))) & U64
    return rank_candidates(out, candidates, k, remaining, inside)


@pytest.mark.parametrize("data", ["normal", "ties", "inf"])
def test_the_one_walk_forms_slots_are_wide8s(data):
    # twin<2> at DSV4_TOPK_TWIN_FORM=onewalk: the rows of a twin batch as above, and the widest (8 chunks of
    # MAX_CHUNK: 10 groups a thread a chunk, the mask's and the counts' widest fields); visiting a thread's
    # groups highest bit first (the order a chunk's keys take their slots) must change them
    rng = np.random.default_rng(10 + len(data))
    ran = 0
    for n, k in [(262144, 512), (8 * T.MAX_CHUNK, 512), (200003, 1024), (9001, 2048), (600, 512)]:
        row = model_row(rng, n, data)
        want = wide_model(row, n, k, 8, 0)
        got = onewalk_model(row, n, k)
        assert (got is None) == (want is None), n
        if got is not None:
            ran += 1
            assert np.array_equal(got, want), (n, k)
            if n == 262144:
                assert not np.array_equal(onewalk_model(row, n, k, reverse=True), want)
    assert ran >= 3


@pytest.mark.gpu
@pytest.mark.skipif(T.LONG_PLAN == "", reason="DSV4_TOPK_LONG_PLAN=off (read at import): nothing routed")
@pytest.mark.parametrize("twin", ["4", "2"])
@pytest.mark.parametrize("variant", ["normal", "ties", "equal", "neg_inf", "k2048"])
def test_the_plans_long_kernel_writes_wide8s_bits(monkeypatch, variant, twin):
    # A long batch (24 rows past 163840 and copies: 8 x 24 = 192 CTAs of wide<8>), planned: the plan's kernel
    # (DSV4_TOPK_LONG_PLAN) against the unplanned call's wide<8>, bitwise: the ranked path, the heavy ties'
    # radix and column-order walk (few distinct values, all equal), -inf inside rows, garbage past seq_len;
    # reruns; and the k largest (the harness's tie rule)
    import torch

    from harness import comparators, inputs
    from kernels_torch.topk_indices import topk_indices as torch_topk
    monkeypatch.setenv("DSV4_TOPK_TWIN", twin)  # (read at each call; wide16 ignores it)
    k = 2048 if variant == "k2048" else 512
    lens = [262144, 262143, 262141, 262140, 250001, 200001, 200000, 163841] * 3 + [k, 7, 0]
    options = {"ties": dict(distinct=3), "equal": dict(distinct=1), "neg_inf": dict(neg_inf_inside=100000)}
    x = inputs.topk_inputs(seq_lens=lens, columns=262144, k=k, page_size=64, seed=11, device="cuda", tail="garbage",
                           **options.get(variant, {}))
    logits, seq_lens, page_table = x.args
    plan = T.topk_indices_plan(seq_lens, page_table, k=k, page_size=64)
    assert plan.data["long"][0] == T.LONG_PLAN
    sms, _ = T._device(torch.cuda.current_device())
    runs = T._long_planned(T.launches(len(lens), 262144, True, *T._device(torch.cuda.current_device())), plan,
                           len(lens), 262144, True, sms, "plan")
    assert runs[0][0] == (T.TWIN_KERNELS[int(twin)] if T.LONG_PLAN == "twin" else "dsv4_topk_indices_wide16<8>")
    got = x.call(T.topk_indices, k=k, plan=plan)
    assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)  # reruns
    assert torch.equal(x.call(T.topk_indices, k=k), got)  # wide<8>'s bits (no plan)
    monkeypatch.setenv("DSV4_TOPK_ROUTE", "device")
    assert torch.equal(x.call(T.topk_indices, k=k, plan=plan), got)
    report = comparators.topk_indices({"indices": got}, {"indices": x.call(torch_topk, k=k)}, logits=logits,
                                      seq_lens=seq_lens, page_table=page_table, k=k, page_size=64)
    assert report.ok, report


@pytest.mark.gpu
def test_the_devices_active_twin_clusters_pick_the_fewest_rounds():
    # the driver's max active clusters of each twin kernel at 262144 columns: at most what the SMs hold (two CTAs
    # an SM at 4, one at 2), at least one cluster; 2-CTA clusters one a TPC on every TPC (a GPC holds whole TPCs:
    # docs/topk-s12a.md's premise); 64 rows take twin<2> exactly where twin<4> needs two rounds
    import torch
    device = torch.cuda.current_device()
    sms, _ = T._device(device)
    active = {}
    for cluster, kernel in T.TWIN_KERNELS.items():
        shared = T.twin_launch(64, 262144, True, sms, T.WIDE_FOLD, cluster)[2]
        active[cluster] = T._max_active_clusters(kernel, shared, device)
        assert 1 <= active[cluster] <= T.TWIN_CTAS_PER_SM_OF[cluster] * sms // cluster, active
    assert active[2] == sms // 2, active
    if sms >= 128:  # all 64 rows in one round of twin<2>
        assert (T.twin_cluster(64, active, "auto") == 2) == (active[4] < 64), active
