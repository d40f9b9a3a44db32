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


def test_ws_launches_three_warpgroups_over_whole_pairs(monkeypatch):
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
    chunk = values[-2]
    assert chunk % A.WG2_PAIR == 0 and grid[2] == -(-x.args[2].shape[1] // chunk) > 1, (chunk, grid)
    assert launched[1][0].startswith("dsv4_sparse_attention_combine<")


# ---------------------------------------------------------------------------------------------
# A model of the kernel's handshakes: the three warpgroups as generators of the .cu's steps, each
# warpgroup's 128 threads acting as one (they arrive and wait together), copies and wgmma groups
# finishing at random later times. Checked over random interleavings: no deadlock, every wgmma
# reads the block it expects from a landed half buffer (or P buffer), and no copy or P store
# overwrites a buffer that an unfinished wgmma group still reads.
HALVES = ("K0L", "K0R", "K1L", "K1R")  # mbarrier index h = 2 buffer + (R half), as in the kernel


def producer(pairs):
    order = [(0, 0), (1, 1), (0, 1), (1, 0)]  # (buffer, R half): K0L, K1R, K0R, K1L
    for j in range(pairs):
        for buf, r_half in order:
            h = 2 * buf + r_half
            yield ("mwait", f"free{h}", (j & 1) ^ 1)
            yield ("copy", HALVES[h], 2 * j + buf, f"ready{h}")


def math(wg, pairs):
    def issue_s(j, first, release_k1l):
        own = [f"K{wg}L", f"K{wg}R"]
        yield ("mwait", f"ready{2 * wg + first}", j & 1)
        yield ("wgmma", [(own[first], 2 * j + wg)])
        if release_k1l:
            yield ("wait_groups", 1)
            yield ("marrive", "free2")
        yield ("mwait", f"ready{2 * wg + (first ^ 1)}", j & 1)
        yield ("wgmma", [(own[first ^ 1], 2 * j + wg), ("Q", 0)])

    yield ("mwait", "q", 0)
    if wg == 0:
        if pairs:
            yield from issue_s(0, 0, False)
        for j in range(pairs):
            yield ("wait_groups", 0)
            yield ("barrive", "MAX_A")
            yield ("wgmma", [("K0L", 2 * j)])  # O_L += P_A V_A,L (P from registers)
            yield ("wait_groups", 0)
            yield ("marrive", "free0")
            yield ("bsync", "MAX_PAIR")
            yield ("store_p", "P0", 2 * j)
            yield ("barrive", "P_A")
            yield ("bsync", "P_B")
            yield ("wgmma", [("P1", 2 * j + 1), ("K1L", 2 * j + 1)])
            if j + 1 < pairs:
                yield from issue_s(j + 1, 0, True)
            else:
                yield ("wait_groups", 0)
                yield ("marrive", "free2")
    else:
        for j in range(pairs):
            yield from issue_s(j, 1, False)
            yield ("wait_groups", 0)
            yield ("bsync", "MAX_A")
            yield ("barrive", "MAX_PAIR")
            yield ("wgmma", [("K1R", 2 * j + 1)])
            yield ("store_p", "P1", 2 * j + 1)
            yield ("bsync", "P_A")
            yield ("wgmma", [("P0", 2 * j), ("K0R", 2 * j)])
            yield ("barrive", "P_B")
            yield ("wait_groups", 1)
            yield ("marrive", "free3")
            yield ("wait_groups", 0)
            yield ("marrive", "free1")
    yield ("bsync", "SUMS")


def run_protocol(pairs, rng):
    """Runs the three warpgroups to the end in a random interleaving; returns the reads each made."""
    completed = {b: 0 for b in ["q"] + [f"{k}{h}" for k in ("ready", "free") for h in range(4)]}
    content = {"Q": 0}  # buffer -> block it holds once landed (absent while a copy is in flight)
    named = {}  # named barrier -> the warpgroups arrived in its current generation (2 complete it)
    groups = {0: [], 1: []}  # each math warpgroup's unfinished wgmma groups: lists of buffers read
    copies = []  # in flight: (buffer, block, mbarrier)
    procs = {"p": producer(pairs), 0: math(0, pairs), 1: math(1, pairs)}
    pending = {k: op for k, op in ((k, next(g, None)) for k, g in procs.items()) if op is not None}
    reads, waiting_sync = [], set()
    completed["q"] += 1  # Q lands before anything in this model (its own mbarrier, waited once)

    def reading(buf):
        return any(buf == b for wg in groups for grp in groups[wg] for b in grp)

    def step(who, op):
        kind = op[0]
        if kind == "mwait":
            return completed[op[1]] % 2 != op[2]
        if kind == "marrive":
            completed[op[1]] += 1
        elif kind == "copy":
            assert not reading(op[1]), f"{op[1]} overwritten while a wgmma reads it"
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
            if (who, op[1]) not in waiting_sync:
                assert who not in named.setdefault(op[1], set()), (who, op[1])
                waiting_sync.add((who, op[1]))
                named[op[1]].add(who)
            if len(named[op[1]]) < 2:
                return False
            waiting_sync.discard((who, op[1]))
            if not any(n == op[1] for _, n in waiting_sync):
                named[op[1]] = set()  # both passed: the barrier's next generation
        return True

    while pending:
        steps = [("proc", k) for k in pending]
        finishes = [("copy", i) for i in range(len(copies))] + [("group", wg) for wg in groups if groups[wg]]
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
            elif kind == "copy":
                buf, block, bar = copies.pop(key)
                content[buf] = block
                completed[bar] += 1  # cp.async.mbarrier.arrive.noinc: when the copies have landed
                progressed = True
                break
            else:
                groups[key].pop(0)  # wgmma groups finish in order
                progressed = True
                break
        assert progressed, f"deadlock: {pending}"
    return reads


@pytest.mark.parametrize("pairs", [0, 1, 2, 5])
def test_handshakes_never_deadlock_and_every_read_sees_its_block(pairs):
    rng = np.random.default_rng(pairs)
    for _ in range(40):
        reads = run_protocol(pairs, rng)
        # every block's two halves are read for S by its owner and as V by both warpgroups
        for j in range(2 * pairs):
            buf = j % 2
            assert sum(1 for _, b, blk in reads if blk == j and b.startswith(f"K{buf}")) == 4, (j, reads)
        assert sum(1 for _, b, _ in reads if b == "Q") == 2 * pairs
