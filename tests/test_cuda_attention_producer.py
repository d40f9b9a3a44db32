"""The ws producer's index schedule under DSV4_ATTENTION_PRODUCER (sparse_attention.cu, WS_PRODUCER_AHEAD) without a
GPU: numpy / plain models of when each pair's indices are loaded against when its copies read them, and of the
persistent kernel's L2 prefetch of an item's index list (docs/attn-s12b.md)."""

import importlib

import pytest

from tests.rebuilds import decode_positions, rebuilt_runs, skip_unless_ws, synced_call

A = importlib.import_module("kernels_cuda.sparse_attention")
FILL_ORDER = ("K0L", "K1R", "K0R", "K1L")  # a pair's four half-buffer fills, each after its free wait


def split_producer(pairs, ahead, advance_after=3):
    """The one-item (split) producer's events in program order, as the kernel issues them: ("load", pair, slot)
    puts pair's indices into register set `slot` (ids / ids_next), ("q",) the Q copies, ("fill", half, pair,
    slot) reads set `slot` for the pair's copies. ahead (WS_PRODUCER_AHEAD): pairs 0 and 1 loaded before Q, and
    after fill number `advance_after` of pair j (the kernel: the last, K1L) ids_next moves to ids and pair j + 2
    is loaded into ids_next; else pair j + 1 is loaded into ids after pair j's fills."""
    events, regs = [], {}
    if ahead:
        events += [("load", 0, "ids"), ("load", 1, "ids_next")]
        regs = {"ids": 0, "ids_next": 1}
    events.append(("q",))
    if not ahead:
        events.append(("load", 0, "ids"))
        regs["ids"] = 0
    for j in range(pairs):
        for f, half in enumerate(FILL_ORDER):
            events.append(("fill", half, j, regs["ids"]))
            if ahead and f == advance_after:
                regs["ids"] = regs["ids_next"]
                events.append(("load", j + 2, "ids_next"))
                regs["ids_next"] = j + 2
        if not ahead:
            events.append(("load", j + 1, "ids"))
            regs["ids"] = j + 1
    return events


def persistent_producer(items, pairs, ahead):
    """The persistent producer's events for `items` items of `pairs` pairs: per item the q_free wait (after the
    first), the Q copies and the fills; ahead: the item's pair 0 loaded before the q_free wait and pair j + 1 after
    pair j's fills while j + 1 < pairs; else pair 0 after Q and pair j + 1 after every pair."""
    events = []
    for it in range(items):
        if ahead:
            events.append(("load", (it, 0), "ids"))
        if it:
            events.append(("q_free",))
        events.append(("q", it))
        if not ahead:
            events.append(("load", (it, 0), "ids"))
        cur = (it, 0)
        for j in range(pairs):
            for half in FILL_ORDER:
                events.append(("fill", half, (it, j), cur))
            if not ahead or j + 1 < pairs:
                events.append(("load", (it, j + 1), "ids"))
                cur = (it, j + 1)
    return events


def lead_in_fills(events):
    """For every pair filled: how many fills of other pairs lie between its indices' load and its first fill."""
    loaded, fills_seen, lead = {}, 0, {}
    for e in events:
        if e[0] == "load":
            loaded[e[1]] = fills_seen
        elif e[0] == "fill":
            if e[2] not in lead:
                lead[e[2]] = fills_seen - loaded[e[2]]
            fills_seen += 1
    return lead


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("pairs", [0, 1, 2, 3, 9])
def test_split_producer_copies_each_pair_from_its_own_indices(pairs, ahead):
    events = split_producer(pairs, ahead)
    fills = [e for e in events if e[0] == "fill"]
    assert [(e[1], e[2]) for e in fills] == [(h, j) for j in range(pairs) for h in FILL_ORDER]
    # every fill reads the register set that holds its own pair (the slot's pair at that point)
    assert all(e[2] == e[3] for e in fills), fills
    # no pair past the list is read (loads of pairs >= pairs are the kernel's predicated-off -1 rows)
    assert all(e[2] < pairs for e in fills)


@pytest.mark.parametrize("pairs", [1, 2, 3, 9])
def test_ahead_loads_each_pair_a_whole_pair_before_its_copies_and_the_first_two_before_q(pairs):
    lead = lead_in_fills(split_producer(pairs, ahead=True))
    # pairs 0 and 1 at the start; every later pair after pair j - 2's last fill: pair j - 1's 4 fills between
    assert all(lead[j] >= (4 if j >= 1 else 0) for j in range(pairs)), lead
    events = split_producer(pairs, ahead=True)
    q_at = events.index(("q",))
    assert [e for e in events[:q_at] if e[0] == "load"] == [("load", 0, "ids"), ("load", 1, "ids_next")]
    # today's producer: the load right before the pair's first fill (no fill between), pair 0's after Q
    base = lead_in_fills(split_producer(pairs, ahead=False))
    assert all(base[j] == 0 for j in range(pairs))


def test_the_schedule_model_catches_an_advance_before_the_last_fill():
    # moving ids_next into ids after K0R (fill 2) would copy K1L of pair j from pair j + 1's indices
    events = split_producer(3, ahead=True, advance_after=2)
    assert any(e[0] == "fill" and e[2] != e[3] for e in events)


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("items, pairs", [(1, 9), (3, 5), (2, 1), (4, 0)])
def test_persistent_producer_reads_each_items_pairs_and_loads_pair_0_before_q_free(items, pairs, ahead):
    events = persistent_producer(items, pairs, ahead)
    fills = [e for e in events if e[0] == "fill"]
    assert [e[2] for e in fills] == [(it, j) for it in range(items) for j in range(pairs) for _ in FILL_ORDER]
    assert all(e[2] == e[3] for e in fills)
    for it in range(1, items):
        load0, qfree = events.index(("load", (it, 0), "ids")), [i for i, e in enumerate(events) if e == ("q_free",)]
        q = events.index(("q", it))
        # ahead: the item's first indices are in flight while the producer waits for Q to be free; today after Q
        assert (load0 < qfree[it - 1]) if ahead else (load0 > q)


def prefetched_lines(start_int, n, threads=128, line=32):
    """ws_prefetch_ids_l2's prefetch addresses (int offsets into the list: thread lt the int 32 lt, or the last for
    the thread just past the list), as the lines they touch for a list starting `start_int` ints past a line."""
    at = [min(lt * 32, n - 1) for lt in range(threads) if lt * 32 < n + 31 and n > 0]
    return {(start_int + a) // line for a in at}, at


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 640, 1152, 4000])
@pytest.mark.parametrize("start", [0, 1, 17, 31])
def test_prefetch_touches_every_line_of_the_list_and_reads_only_inside_it(n, start):
    lines, at = prefetched_lines(start, n)
    want = set(range(start // 32, (start + n - 1) // 32 + 1)) if n > 0 else set()
    assert lines == want
    assert all(0 <= a < n for a in at)


def test_prefetch_of_a_long_list_covers_its_first_4096_ints_only():
    lines, at = prefetched_lines(0, 8320)
    assert lines == set(range(128)) and max(at) == 127 * 32


def test_producer_switch_defaults_to_the_measured_producer():
    assert A.PRODUCER == "lean" and A.DEFINES["WS_PRODUCER_AHEAD"] == A.DEFINES["WS_PRODUCER_PREFETCH"] == 0
    assert A.PRODUCERS[:3] == ("loads", "ahead", "prefetch")  # (lean: tests/test_cuda_attention_s14d.py)


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [0, 1])
def test_the_ahead_producer_fits_the_ws_budget_without_spills(monkeypatch, prefetch):
    # NVRTC (no GPU) of the four ws instantiations under WS_PRODUCER_AHEAD (and WS_PRODUCER_PREFETCH): the launch's
    # 168 registers (384 x 168 = the setmaxnreg split 2 x 128 x 216 + 128 x 72), no spill, no stack (the persistent
    # one spilled `items` with a second index pair in flight, so it keeps one)
    pytest.importorskip("cupy")
    from kernels_cuda import _loader, build
    monkeypatch.setitem(A.DEFINES, "WS_PRODUCER_AHEAD", 1)
    monkeypatch.setitem(A.DEFINES, "WS_PRODUCER_LEAN", 0)  # ahead is a form of the loads producer
    monkeypatch.setitem(A.DEFINES, "WS_PRODUCER_PREFETCH", prefetch)
    if prefetch:  # the order prefetch takes by default (under ORDER=rows its persistent kernels spill 16 B)
        monkeypatch.setitem(A.DEFINES, "WS_ORDER_ROWS", 0)
    exprs = [e for e in _loader.KERNELS["sparse_attention.cu"] if e.startswith("dsv4_sparse_attention_ws<")]
    assert len(exprs) == 4
    monkeypatch.setitem(_loader.KERNELS, "sparse_attention.cu", exprs)
    _, lowered, log = _loader.compile_cubin("sparse_attention.cu", "sm_90a")
    res = build.resources(log, lowered)
    for expr in exprs:
        r = res[expr]
        assert r["registers"] <= 168 and r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (expr, r)


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("shape", ["split", "persistent", "h128"])
def test_the_ahead_producer_writes_the_defaults_bits_on_the_gpu(monkeypatch, shape, prefetch):
    # the same call with the ws kernels built under WS_PRODUCER_AHEAD (and WS_PRODUCER_PREFETCH; the loader's module
    # cache cleared, so the switched defines compile) and with the process's own build: out and lse bit for bit.
    # split: 64 rows of 64 heads, 2 splits in clusters (decode b64 H64); persistent: 300 rows (3 items on some CTAs,
    # the next item's list prefetched); h128: 64 rows of 128 heads, K 1152 (decode b64 H128). Short rows (-1 padded
    # lists, a split or pair past the list) and a sink in each
    import torch
    from harness import inputs
    skip_unless_ws(A)
    batch, heads, topk = {"split": (64, 64, 512), "persistent": (300, 64, 512), "h128": (64, 128, 1024)}[shape]
    x = inputs.attention_inputs(positions=decode_positions(batch), heads=heads, topk=topk, seed=batch + heads,
                                device="cuda")
    # ahead is a form of the loads producer (lean off)
    ahead_defines = {"WS_PRODUCER_AHEAD": 1, "WS_PRODUCER_LEAN": 0, "WS_PRODUCER_PREFETCH": prefetch}
    default, ahead = rebuilt_runs(monkeypatch, A.DEFINES, [{}, ahead_defines], synced_call(A.sparse_attention, x))
    assert torch.equal(ahead[0], default[0]) and torch.equal(ahead[1], default[1])
    assert torch.isfinite(default[0].float()).all() and torch.isfinite(default[1]).all()
