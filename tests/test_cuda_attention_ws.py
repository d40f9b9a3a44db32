"""The warp-specialised attention kernel (sparse_attention.cu, dsv4_sparse_attention_ws) without a GPU:
a numpy model of its producer's copy mapping into the swizzled half buffers, and its launch (three
warpgroups, the index list split in whole pairs of 64-row blocks)."""

import importlib
import os

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs CuPy and NVRTC (ci/install.sh), so there a missing one fails
    pytest.importorskip("cupy")

from kernels_cuda import _loader  # noqa: E402

A = importlib.import_module("kernels_cuda.sparse_attention")
MAT = A.WG_TILE * A.KV_ROW_BYTES  # a swizzled [64 x 512] bf16 matrix: 64 KB
HALF = MAT // 2  # dims 0..255 (L) or 256..511 (R): 4 chunks of 64 dims


def swizzled_offset(rows, r, piece):
    """sparse_attention.cu's: byte offset of 16-byte piece `piece` of line r in a swizzled [rows x 512] matrix."""
    return (piece >> 3) * rows * 128 + r * 128 + (((piece & 7) ^ (r & 7)) << 4)


def producer_copies(lt, blk, r_half):
    """Thread lt's copies of one half buffer as the kernel's copy_half computes them: (destination
    offset from the buffers' start, row of the block, source byte offset within the 1 KB row)."""
    unit, row0 = lt & 7, lt >> 3
    dst0 = row0 * 128 + ((unit ^ (row0 & 7)) << 4)
    return [(dst0 + blk * MAT + (r_half * 4 + c) * A.WG_TILE * 128 + k * 16 * 128, row0 + 16 * k,
             (r_half * 32 + unit) * 16 + c * 128) for k in range(4) for c in range(4)]


@pytest.mark.parametrize("blk, r_half", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_producer_fills_each_half_buffer_once_in_the_swizzled_layout(blk, r_half):
    copies = [(lt, *c) for lt in range(128) for c in producer_copies(lt, blk, r_half)]
    dst = np.array([c[1] for c in copies])
    row = np.array([c[2] for c in copies])
    piece = np.array([c[3] for c in copies]) // 16
    # every (row, piece) of the half's 256 dims exactly once, each where wgmma's layout expects it
    assert sorted(zip(row.tolist(), piece.tolist())) == [(r, p) for r in range(64)
                                                          for p in range(32 * r_half, 32 * r_half + 32)]
    assert (dst == blk * MAT + np.array([swizzled_offset(64, r, p) for r, p in zip(row, piece)])).all()
    # inside the half its ready / free mbarriers guard (the S and P V descriptors read it as 4 chunks)
    lo = blk * MAT + r_half * HALF
    assert ((dst >= lo) & (dst + 16 <= lo + HALF)).all() and len(set(dst.tolist())) == len(dst)
    # 8 neighbouring threads read one 128-byte line of a row (whole sectors, L2::256B prefetch pairs them)
    for i in range(0, len(copies), 1):
        lt, _, r, src = copies[i]
        if lt % 8 == 0:
            group = sorted(c[3] for c in copies if c[0] // 8 == lt // 8 and c[2] == r and c[3] // 128 == src // 128)
            assert group == list(range(src // 128 * 128, src // 128 * 128 + 128, 16)), (lt, r, src)


def ws_flag_part(ballots, w, lane):
    """sparse_attention.cu's ws_flag_part: the bits (2 nt + e) producer warp w knows for t = 2 (w & 1) + lane."""
    word = 0
    for k in range(4):
        for e in range(2):
            word |= ((ballots[k] >> (8 * (2 * lane + e))) & 1) << (2 * ((w >> 1) + 2 * k) + e)
    return word


def flag_words_from_producer(valid):
    """The u16 flag_s[block][t][part] the producer's publish_flags writes for a pair whose row validity is
    valid[block][row]: warp w's ballot k over its lanes' ids[blk][k] (row lt / 8 + 16 k, lt = 32 w + lane)."""
    words = {}
    for blk in range(2):
        for w in range(4):
            ballots = [sum(int(valid[blk][(32 * w + lane) // 8 + 16 * k]) << lane for lane in range(32))
                       for k in range(4)]
            for lane in range(2):
                key = (blk, 2 * (w & 1) + lane, w >> 1)
                assert key not in words  # each u16 written by one lane
                words[key] = ws_flag_part(ballots, w, lane)
    return words


@pytest.mark.parametrize("seed", range(4))
def test_producer_flags_give_each_math_thread_its_valid_bits(seed):
    rng = np.random.default_rng(seed)
    valid = rng.random((2, 64)) < [0.5, 0.2, 0.9, 1.0][seed]
    words = flag_words_from_producer(valid)
    assert len(words) == 16 and all(0 <= v < 1 << 16 for v in words.values())
    for blk in range(2):
        for t in range(4):
            # ws_flag_word: the u32 at (blk * 4 + t) * 4 holds part 0 (low half) and part 1; OR of the halves
            both = words[(blk, t, 0)] | words[(blk, t, 1)] << 16
            got = (both | both >> 16) & 0xFFFF
            # valid_bits: bit 2 nt + e is column 8 nt + 2 t + e of the block
            want = sum(int(valid[blk][8 * nt + 2 * t + e]) << (2 * nt + e) for nt in range(8) for e in range(2))
            assert got == want, (blk, t, bin(got), bin(want))
    # the two parts of a word never set the same bit (they cover the nt of one parity each)
    assert all(words[(b, t, 0)] & words[(b, t, 1)] == 0 for b in range(2) for t in range(4))


def test_ws_launches_three_warpgroups_over_whole_blocks(monkeypatch):
    from harness import inputs
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False):
        launched.append((expr, grid, block, _loader.launch_values(expr, _loader.signature(name, expr), args),
                         shared_mem))

    monkeypatch.setattr(A, "launch", launch)
    monkeypatch.setattr(A, "choose_kernel", lambda *a: "ws")
    monkeypatch.setattr(A, "_sm_count", lambda device: 132)
    monkeypatch.setattr(A, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(A.torch.cuda, "get_device_capability", lambda device: (9, 0))
    x = inputs.attention_inputs(positions=[900, 30], heads=128, seed=3)
    x.call(A.sparse_attention)
    expr, grid, block, values, shared = launched[0]
    assert expr.startswith("dsv4_sparse_attention_ws<") and block == (A.WS_THREADS,) and shared == A.WS_SHARED_BYTES
    chunk = dict(zip((name for _, name in _loader.signature("sparse_attention.cu", expr)), values))["chunk"]
    assert chunk % A.WS_SPLIT_TILE == 0 and grid[2] == -(-x.args[2].shape[1] // chunk) > 1, (chunk, grid)
    assert launched[1][0].startswith("dsv4_sparse_attention_combine<")


@pytest.mark.parametrize("persistent", [False, True])
def test_unsplit_ws_launches_go_persistent_only_under_the_switch(monkeypatch, persistent):
    from harness import inputs
    launched = []

    def launch(name, expr, grid, block, args, device, shared_mem=0, pdl=False):
        launched.append((expr, grid, _loader.launch_values(expr, _loader.signature(name, expr), args)))

    monkeypatch.setattr(A, "WS_PERSISTENT", persistent)
    monkeypatch.setattr(A, "launch", launch)
    monkeypatch.setattr(A, "choose_kernel", lambda *a: "ws")
    monkeypatch.setattr(A, "_sm_count", lambda device: 132)
    monkeypatch.setattr(A, "_shared_optin", lambda device: 232448)
    monkeypatch.setattr(A.torch.cuda, "get_device_capability", lambda device: (9, 0))
    x = inputs.attention_inputs(positions=[900] * 80, heads=128, seed=3)  # 160 (row, head block) items: no split
    x.call(A.sparse_attention)
    expr, grid, values = launched[0]
    named = dict(zip((name for _, name in _loader.signature("sparse_attention.cu", expr)), values))
    assert "false>" in expr and named["batch"] == 80  # the persistent body's item count
    assert grid == ((132, 1, 1) if persistent else (80, 2, 1))
    launched.clear()
    x = inputs.attention_inputs(positions=[900, 30], heads=128, seed=3)  # split: the one-item grid either way
    x.call(A.sparse_attention)
    assert launched[0][1][:2] == (2, 2) and launched[0][1][2] > 1 and "true>" in launched[0][0]


# ---------------------------------------------------------------------------------------------
# A model of the kernel's handshakes: the three warpgroups as generators of the .cu's steps, each
# warpgroup's 128 threads acting as one (they arrive and wait together), copies and wgmma groups
# finishing at random later times. Checked over random interleavings: no deadlock, every wgmma
# reads the block it expects from a landed half buffer (or P buffer), and no copy or P store
# overwrites a buffer that an unfinished wgmma group still reads.
HALVES = ("K0L", "K0R", "K1L", "K1R")  # mbarrier index h = 2 buffer + (R half), as in the kernel


def producer(pairs, flags=False, flag_arrival=True, items=None):
    """items (WS_PERSISTENT): the pair counts of the CTA's (row, head block) items in order; the producer then
    copies each item's Q once the math warpgroups freed the last one's (q_free), and the global pair count g
    runs on across items (the mbarrier parities continue)."""
    g = 0
    for i, item_pairs in enumerate([pairs] if items is None else items):
        if items is not None:
            if i:
                yield ("mwait", "q_free", (i - 1) & 1)
            yield ("copy", "Q", i, "q")
        for j in range(item_pairs):
            # K0L, K1R, K0R, K1L; an item's first pair fills buffer 0 first (buffer 1 may still hold the
            # last item's staged output, freed by its bulk copies)
            first_of_item = items is not None and j == 0
            order = [(0, 0), (0, 1), (1, 1), (1, 0)] if first_of_item else [(0, 0), (1, 1), (0, 1), (1, 0)]
            for buf, r_half in order:
                h = 2 * buf + r_half
                yield ("mwait", f"free{h}", (g & 1) ^ 1)
                if flags and h in (0, 3):  # WS_FLAGS_SMEM: block buf's flags, then a release arrival on ready[h]
                    yield ("write_flags", buf, 2 * g + buf)
                    if flag_arrival:
                        yield ("marrive", f"ready{h}")
                yield ("copy", HALVES[h], 2 * g + buf, f"ready{h}")
            g += 1


def math(wg, pairs, flags=False, items=None, partials=()):
    """items: as producer's. Per item: Q waited with the item's parity, q_free arrived once this warpgroup's
    last S is done; the last pair's K1L (warpgroup 0) / K1R (warpgroup 1) freed only after the epilogue
    staged O in buffer 1 and its bulk copies read it (the staged rows 0..31 lie in K1L, 32..63 in K1R).
    partials: the items that are WS_TAIL_SPLIT's split pieces (ws_tail_partial): the CTA's last one stages O in Q
    and the buffers (no frees: nothing follows), any other stores it from registers, takes the sums barrier, then
    frees K1L / K1R (buffer 1 not staged)."""
    def issue_s(g, i, first, release_k1l):
        own = [f"K{wg}L", f"K{wg}R"]
        yield ("mwait", f"ready{2 * wg + first}", g & 1)
        if flags:  # the flags of the block whose S this is, read after that first wait
            yield ("read_flags", wg, 2 * g + wg)
        yield ("wgmma", [(own[first], 2 * g + wg)])
        if release_k1l:
            yield ("wait_groups", 1)
            yield ("marrive", "free2")
        yield ("mwait", f"ready{2 * wg + (first ^ 1)}", g & 1)
        yield ("wgmma", [(own[first ^ 1], 2 * g + wg), ("Q", i)])

    persistent = items is not None
    g0 = 0
    for i, item_pairs in enumerate([pairs] if items is None else items):
        yield ("mwait", "q", i & 1)
        last = item_pairs - 1
        if wg == 0:
            if item_pairs:
                yield from issue_s(g0, i, 0, False)
            for j in range(item_pairs):
                g = g0 + j
                yield ("wait_groups", 0)
                if persistent and j == last:
                    yield ("marrive", "q_free")  # both S of the item done: Q may be refilled
                yield ("barrive", "MAX_A")
                yield ("wgmma", [("K0L", 2 * g)])  # O_L += P_A V_A,L (P from registers)
                yield ("wait_groups", 0)
                yield ("marrive", "free0")
                yield ("bsync", "MAX_PAIR")
                yield ("store_p", "P0", 2 * g)
                yield ("barrive", "P_A")
                yield ("bsync", "P_B")
                yield ("wgmma", [("P1", 2 * g + 1), ("K1L", 2 * g + 1)])
                if j + 1 < item_pairs:
                    yield from issue_s(g + 1, i, 0, True)
                else:
                    yield ("wait_groups", 0)
                    if not persistent:
                        yield ("marrive", "free2")
        else:
            for j in range(item_pairs):
                g = g0 + j
                yield from issue_s(g, i, 1, False)
                yield ("wait_groups", 0)
                if persistent and j == last:
                    yield ("marrive", "q_free")
                yield ("bsync", "MAX_A")
                yield ("barrive", "MAX_PAIR")
                yield ("wgmma", [("K1R", 2 * g + 1)])
                yield ("store_p", "P1", 2 * g + 1)
                yield ("bsync", "P_A")
                yield ("wgmma", [("P0", 2 * g), ("K0R", 2 * g)])
                yield ("barrive", "P_B")
                yield ("wait_groups", 1)
                if not (persistent and j == last):
                    yield ("marrive", "free3")
                yield ("wait_groups", 0)
                yield ("marrive", "free1")
        yield ("bsync", "SUMS")
        if i in partials and i == len(items) - 1:  # ws_tail_partial's staged path (Q and buffer 0, then K1L)
            yield ("stage", ["Q", "K0L", "K0R", "K1L"], ("part", i))
            yield ("bsync", "SUMS")
            yield ("bulk_read", "Q" if wg == 0 else "K0R", ("part", i))
        elif i in partials:  # ws_tail_partial's register stores, the sums barrier, then the half freed
            yield ("bsync", "SUMS")
            yield ("marrive", "free2" if wg == 0 else "free3")
        elif persistent:  # the epilogue: O staged in buffer 1, a barrier, the bulk copies, then buffer 1 freed
            yield ("stage", ["K1L", "K1R"], ("out", i))
            yield ("bsync", "SUMS")
            own = "K1L" if wg == 0 else "K1R"
            yield ("bulk_read", own, ("out", i))
            yield ("marrive", "free2" if wg == 0 else "free3")
        g0 += item_pairs


def run_protocol(pairs, rng, flags=False, flag_arrival=True, items=None, partials=()):
    """Runs the three warpgroups to the end in a random interleaving; returns the reads each made. flags:
    WS_FLAGS_SMEM's flag words, written by the producer and read by the math warpgroups (ready[K0L] and
    ready[K1R] then need two arrivals a phase: the copies' and the flag writers'; flag_arrival=False drops the
    writers' arrival and its count, the mistake the model must catch). items: the persistent variant's items
    (producer's), Q then copied by the producer for each."""
    completed = {b: 0 for b in ["q", "q_free"] + [f"{k}{h}" for k in ("ready", "free") for h in range(4)]}
    need = {b: 2 if flags and flag_arrival and b in ("ready0", "ready3") else 1 for b in completed}  # a phase's
    need["q_free"] = 2  # one arrival a math warpgroup (its 128 threads)
    arrived = {b: 0 for b in completed}
    flag_words = {}  # block 0 / 1 -> the pair's block whose flags the shared words hold, as the readers see them
    unpublished = {}  # flag stores not yet visible to the readers: a release arrival (or, at some time, the
    # memory system) makes them so
    content = {} if items is not None else {"Q": 0}  # buffer -> block it holds once landed (absent while a copy
    # is in flight)
    named = {}  # named barrier -> the warpgroups arrived in its current generation (2 complete it)
    groups = {0: [], 1: []}  # each math warpgroup's unfinished wgmma groups: lists of buffers read
    copies = []  # in flight: (buffer, block, mbarrier)
    procs = {"p": producer(pairs, flags, flag_arrival, items), 0: math(0, pairs, flags, items, partials),
             1: math(1, pairs, flags, items, partials)}
    pending = {k: op for k, op in ((k, next(g, None)) for k, g in procs.items()) if op is not None}
    reads, waiting_sync, released = [], set(), set()
    if items is None:
        completed["q"] += 1  # Q lands before anything in this model (its own mbarrier, waited once)

    def reading(buf):
        return any(buf == b for wg in groups for grp in groups[wg] for b in grp)

    def arrive(bar):
        arrived[bar] += 1
        if arrived[bar] == need[bar]:
            arrived[bar] = 0
            completed[bar] += 1

    def step(who, op):
        kind = op[0]
        if kind == "mwait":
            return completed[op[1]] % 2 != op[2]
        if kind == "marrive":
            if who == "p":  # release: the producer's earlier stores are visible to whoever acquires the phase
                flag_words.update(unpublished)
                unpublished.clear()
            arrive(op[1])
        elif kind == "stage":  # generic stores into buffers no wgmma reads and no copy fills
            for buf in op[1]:
                assert not reading(buf) and all(c[0] != buf for c in copies), f"{buf} staged while in use"
                content[buf] = op[2]
        elif kind == "bulk_read":
            assert content.get(op[1]) == op[2], (who, op, content.get(op[1]))
            reads.append((who, op[1], op[2]))
        elif kind == "write_flags":
            unpublished[op[1]] = op[2]
        elif kind == "read_flags":
            assert flag_words.get(op[1]) == op[2], (who, op, flag_words)
            reads.append((who, f"flags{op[1]}", op[2]))
        elif kind == "copy":
            assert not reading(op[1]), f"{op[1]} overwritten while a wgmma reads it"
            assert all(c[0] != op[1] for c in copies), f"{op[1]}: a second copy while one is in flight"
            content.pop(op[1], None)
            copies.append((op[1], op[2], op[3]))
        elif kind == "wgmma":
            for buf, block in op[1]:
                assert content.get(buf) == block, (who, buf, block, content.get(buf))
                reads.append((who, buf, block))
            groups[who].append([buf for buf, _ in op[1]])
        elif kind == "wait_groups":
            return len(groups[who]) <= op[1]
        elif kind == "store_p":
            assert not reading(op[1]), f"{op[1]} rewritten while a wgmma reads it"
            content[op[1]] = op[2]
        elif kind == "barrive":
            # a second arrival of one side before the other's sync would complete the barrier wrongly
            assert who not in named.setdefault(op[1], set()), (who, op[1])
            named[op[1]].add(who)
        elif kind == "bsync":
            if (who, op[1]) in released:  # the generation it waited in completed
                released.discard((who, op[1]))
                return True
            if (who, op[1]) not in waiting_sync:
                assert who not in named.setdefault(op[1], set()), (who, op[1])
                waiting_sync.add((who, op[1]))
                named[op[1]].add(who)
            if len(named[op[1]]) < 2:
                return False
            # the second arrival completes the generation: every waiter is released and the barrier starts
            # its next generation at once (so the same id can be synced again right away, as in bar.sync)
            for other in named[op[1]]:
                if (other, op[1]) in waiting_sync and other != who:
                    released.add((other, op[1]))
                waiting_sync.discard((other, op[1]))
            named[op[1]] = set()
        return True

    while pending:
        steps = [("proc", k) for k in pending]
        finishes = [("copy", i) for i in range(len(copies))] + [("group", wg) for wg in groups if groups[wg]]
        finishes += [("flags", blk) for blk in unpublished]
        rng.shuffle(steps)
        rng.shuffle(finishes)
        # copies and wgmma groups finish late more often than not, so the warpgroups run ahead of them
        events = finishes + steps if rng.random() < 0.2 else steps + finishes
        progressed = False
        for kind, key in events:
            if kind == "proc":
                if step(key, pending[key]):
                    nxt = next(procs[key], None)
                    if nxt is None:
                        del pending[key]
                    else:
                        pending[key] = nxt
                    progressed = True
                    break
            elif kind == "flags":
                flag_words[key] = unpublished.pop(key)
                progressed = True
                break
            elif kind == "copy":
                buf, block, bar = copies.pop(key)
                content[buf] = block
                arrive(bar)  # cp.async.mbarrier.arrive.noinc: when the copies have landed
                progressed = True
                break
            else:
                groups[key].pop(0)  # wgmma groups finish in order
                progressed = True
                break
        assert progressed, f"deadlock: {pending}"
    return reads


@pytest.mark.parametrize("flags", [False, True])
@pytest.mark.parametrize("pairs", [0, 1, 2, 5])
def test_handshakes_never_deadlock_and_every_read_sees_its_block(pairs, flags):
    rng = np.random.default_rng(pairs)
    for _ in range(40):
        reads = run_protocol(pairs, rng, flags)
        # every block's two halves are read for S by its owner and as V by both warpgroups
        for j in range(2 * pairs):
            buf = j % 2
            assert sum(1 for _, b, blk in reads if blk == j and b.startswith(f"K{buf}")) == 4, (j, reads)
            # and its flags once, by its owner, holding that block's (a rewrite before the read would fail there)
            assert [w for w, b, blk in reads if b.startswith("flags") and blk == j] == ([buf] if flags else [])
        assert sum(1 for _, b, _ in reads if b == "Q") == 2 * pairs


@pytest.mark.parametrize("flags", [False, True])
@pytest.mark.parametrize("items", [[1, 1, 1], [3, 2], [2, 5, 1, 1]])
def test_persistent_handshakes_carry_parities_q_and_the_staged_output_across_items(items, flags):
    rng = np.random.default_rng(len(items))
    for _ in range(40):
        reads = run_protocol(0, rng, flags, items=items)
        for block in range(2 * sum(items)):  # global block numbers: both halves read as S and as V, flags once
            buf = block % 2
            assert sum(1 for _, b, blk in reads if blk == block and b.startswith(f"K{buf}")) == 4, (block, reads)
            assert len([w for w, b, blk in reads if b.startswith("flags") and blk == block]) == int(flags)
        for i, pairs in enumerate(items):  # each item's Q by its own S, its output read back from both halves
            assert sum(1 for _, b, blk in reads if b == "Q" and blk == i) == 2 * pairs
            assert sorted((w, b) for w, b, blk in reads if blk == ("out", i)) == [(0, "K1L"), (1, "K1R")]


@pytest.mark.parametrize("items, partials", [([3, 1, 1], {1, 2}), ([2, 1, 2], {1}), ([1, 1], {0})])
def test_persistent_handshakes_hold_with_tail_split_pieces(items, partials):
    # WS_TAIL_SPLIT's split pieces (the last round's, each a few pairs) take the register epilogue; the model
    # allows them anywhere in a CTA's run, so the item after one checks its frees
    rng = np.random.default_rng(7 * len(items))
    for _ in range(40):
        reads = run_protocol(0, rng, True, items=items, partials=partials)
        for block in range(2 * sum(items)):
            assert sum(1 for _, b, blk in reads if blk == block and b.startswith(f"K{block % 2}")) == 4, block
        for i in range(len(items)):
            staged = sorted((w, b) for w, b, blk in reads if blk == ("out", i))
            assert staged == ([] if i in partials else [(0, "K1L"), (1, "K1R")]), (i, staged)
            parts = sorted((w, b) for w, b, blk in reads if blk == ("part", i))
            assert parts == ([(0, "Q"), (1, "K0R")] if i in partials and i == len(items) - 1 else []), (i, parts)


def test_persistent_model_fails_when_buffer_1_is_freed_before_the_epilogue():
    # the last pair's K1R freed by warpgroup 1 as in the one-item kernel: the producer refills it for the next
    # item while the epilogue stages or copies out of it
    original = math

    def early_free(wg, pairs, flags=False, items=None, partials=()):
        ops = list(original(wg, pairs, flags, items, partials))
        if wg == 1:  # item 0's post-epilogue free3 moved before its sums barrier (after its last P V waits)
            at = ops.index(("bulk_read", "K1R", ("out", 0))) + 1
            assert ops.pop(at) == ("marrive", "free3")
            ops.insert(ops.index(("bsync", "SUMS")), ("marrive", "free3"))
        yield from ops
    rng = np.random.default_rng(3)
    failures = 0
    try:
        globals()["math"] = early_free
        for _ in range(40):
            try:
                run_protocol(0, rng, items=[2, 2])
            except AssertionError:
                failures += 1
    finally:
        globals()["math"] = original
    assert failures > 0


def test_flag_model_fails_when_the_flags_are_published_without_their_arrival():
    # the flag writer's arrival dropped (and the count back to the copies' alone): a phase of ready[K0L] can
    # complete before the flags are written, and some interleaving reads the last pair's
    rng = np.random.default_rng(7)
    failures = 0
    for _ in range(40):
        try:
            run_protocol(3, rng, flags=True, flag_arrival=False)
        except AssertionError:
            failures += 1
    assert failures > 0


# ---------------------------------------------------------------------------------------------
# A numpy model of the kernel's arithmetic (fp32, P rounded to bf16 where the kernel rounds it): per
# pair, warpgroup 0's softmax of block A against its own max, warpgroup 1's against max(own, A's) =
# the pair's max, warpgroup 0's rescale of P_A, O_L and l_A to it; the row sums added at the end;
# wg_epilogue and, for a split list, the combine kernel. Compared with the float64 reference under
# the harness's bounds, on rows that move the max between blocks and pairs and rows with masked blocks.
LOG2E = 1.4426950408889634


def bf16(x):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return bits.astype(np.uint32).view(np.float32)


def exp2(x):
    with np.errstate(invalid="ignore"):  # -inf - -inf: the kernel selects around these lanes too
        return np.exp2(x)


def ex2_ftz(x):
    """ex2.approx.ftz's range: results under 2^-126 flush to 0 (the MUFU's precision itself is not modelled)."""
    y = exp2(x).astype(np.float32)
    return np.where(y < np.float32(2.0 ** -126), np.float32(0), y)


def ws_split(q, rows, valid, scale2, ffma=False):
    """One CTA's 64 heads over one split: (O [64, 512], m, l), base 2, O unnormalised. ffma: WS_SOFTMAX_FFMA's
    arithmetic (the max over the raw S, then scaled; P = ex2.ftz(fma(S, scale2, -m)), one rounding)."""
    pairs = -(-len(rows) // 128)
    pad = pairs * 128 - len(rows)
    rows = np.concatenate([rows, np.zeros((pad, rows.shape[1]), np.float32)])  # zero-filled copies
    valid = np.concatenate([valid, np.zeros(pad, bool)])
    m = np.full(64, -np.inf, np.float32)
    sums, o = [np.zeros(64, np.float32), np.zeros(64, np.float32)], [np.zeros((64, 256), np.float32) for _ in range(2)]

    def softmax(s, v, mx_other):
        if ffma:
            raw = np.where(v[None, :], s, -np.inf).astype(np.float32)
            new = np.maximum(m, np.maximum((raw.max(1) * scale2).astype(np.float32), mx_other))
            use = np.where(new == -np.inf, 0, new).astype(np.float32)
            with np.errstate(invalid="ignore"):  # the product is exact in float64: one rounding, as fma
                arg = (raw.astype(np.float64) * np.float64(scale2) - use[:, None]).astype(np.float32)
            return ex2_ftz(arg), ex2_ftz(m - use), new
        s = np.where(v[None, :], s * scale2, -np.inf).astype(np.float32)
        new = np.maximum(m, np.maximum(s.max(1), mx_other))
        use = np.where(new == -np.inf, 0, new)
        return exp2(s - use[:, None]), exp2(m - use), new

    for j in range(pairs):
        a, b = rows[128 * j:128 * j + 64], rows[128 * j + 64:128 * j + 128]
        va, vb = valid[128 * j:128 * j + 64], valid[128 * j + 64:128 * j + 128]
        p_a, alpha, m_a = softmax(q @ a.T, va, -np.inf)  # warpgroup 0
        sums[0] = sums[0] * alpha + p_a.sum(1)
        o[0] = o[0] * alpha[:, None] + bf16(p_a) @ a[:, :256]
        p_b, alpha, m_pair = softmax(q @ b.T, vb, m_a)  # warpgroup 1
        sums[1] = sums[1] * alpha + p_b.sum(1)
        o[1] = o[1] * alpha[:, None] + bf16(p_b) @ b[:, 256:]
        with np.errstate(invalid="ignore"):  # warpgroup 0, to the pair's max (0 while its rows saw nothing)
            sc = np.where(m_a == -np.inf, 0, (ex2_ftz if ffma else exp2)(m_a - m_pair)).astype(np.float32)
        sums[0] *= sc
        o[0] = o[0] * sc[:, None] + bf16(p_b) @ b[:, :256]
        o[1] = o[1] + bf16(p_a * sc[:, None]) @ a[:, 256:]
        m = m_pair
    return np.concatenate(o, axis=1), m, sums[0] + sums[1]


def ws_attention(q, kv, indices, sm_scale, sink, chunk, ffma=False):
    """The kernel (splits of `chunk` indices) and the combine kernel, per query row and 64-head block."""
    batch, heads, _ = q.shape
    out = np.zeros(q.shape, np.float32)
    lse = np.zeros((batch, heads), np.float32)
    scale2 = np.float32(sm_scale * LOG2E)
    for row in range(batch):
        for h0 in range(0, heads, 64):
            parts = []
            for k0 in range(0, indices.shape[1], chunk):
                ids = indices[row, k0:k0 + chunk]
                parts.append(ws_split(q[row, h0:h0 + 64], kv[np.maximum(ids, 0)], ids >= 0, scale2, ffma))
            hs = slice(h0, h0 + 64)
            if len(parts) == 1:  # wg_epilogue, unsplit
                o, m, l = parts[0]
                denom = np.where(l > 0, l, 1)
                if sink is not None:
                    denom = l + exp2(sink[hs] * LOG2E - np.where(l > 0, m, 0))
                out[row, hs] = o / denom[:, None]
                lse[row, hs] = np.where(l > 0, (m + np.log2(np.where(l > 0, l, 1))) / LOG2E, -np.inf)
                continue
            # wg_epilogue's partials, then dsv4_sparse_attention_combine
            p_out = np.stack([o * np.where(l > 0, 1 / np.where(l > 0, l, 1), 0)[:, None] for o, m, l in parts])
            p_lse = np.stack([np.where(l > 0, (m + np.log2(np.where(l > 0, l, 1))) / LOG2E, -np.inf)
                              for o, m, l in parts])
            mx = p_lse.max(0)
            mx_use = np.where(mx == -np.inf, 0, mx)
            w = exp2((p_lse - mx_use) * LOG2E)
            total = w.sum(0)
            row_lse = np.where(total > 0, mx_use + np.log(np.where(total > 0, total, 1)), -np.inf)
            scale = np.where(total > 0, 1 / np.where(total > 0, total, 1), 0)
            if sink is not None:
                scale = np.where(total > 0, scale / (1 + exp2(np.minimum((sink[hs] - row_lse) * LOG2E, 126))), scale)
            out[row, hs] = (w[:, :, None] * p_out).sum(0) * scale[:, None]
            lse[row, hs] = row_lse
    return out, lse


@pytest.mark.parametrize("ffma", [False, True])
@pytest.mark.parametrize("heads, chunk, masking", [(64, 1 << 20, "engine"), (128, 256, "engine"),
                                                   (64, 1 << 20, "blocks"), (64, 384, "blocks")])
def test_ws_arithmetic_matches_the_reference(heads, chunk, masking, ffma):
    import torch

    from harness import comparators, inputs
    from references.sparse_attention import sparse_attention as reference
    x = inputs.attention_inputs(positions=[700, 300, 1000], heads=heads, topk=512, seed=11, q_scale=3.0)
    q, kv, indices = x.args
    indices = indices.clone()
    if masking == "blocks":  # whole blocks and pairs masked: before, between and after valid ones
        indices[0, :128] = -1  # the first pair: m stays -inf into pair 2
        indices[1, 64:128] = -1  # block B of pair 1
        indices[1, 256:320] = -1  # block A of pair 3
        indices[2, :] = -1  # an empty row: out 0, lse -inf
    sink = x.kwargs["attn_sink"]
    got_out, got_lse = ws_attention(q.float().numpy(), kv.float().numpy(), indices.numpy(), x.kwargs["sm_scale"],
                                    sink.numpy(), chunk, ffma)
    ref_out, ref_lse = reference(q, kv, indices, sm_scale=x.kwargs["sm_scale"], attn_sink=sink)
    got = {"out": torch.from_numpy(got_out).bfloat16(), "lse": torch.from_numpy(got_lse)}
    report = comparators.sparse_attention(got, {"out": ref_out, "lse": ref_lse})
    assert report.ok, report.message
    if masking == "blocks":
        assert (got_out[2] == 0).all() and (got_lse[2] == -np.inf).all()
