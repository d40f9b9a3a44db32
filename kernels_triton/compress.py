"""Triton `compress` (SPEC 1): ratio 4 and 128, ring / paged / online state, any extend.

One program per (segment, channel block) of the plan (harness/plans.py: a segment is one ratio-block
that a request's new positions touch): it pools the block's entry when the call completes it and
stores the block's new rows that the state keeps. A second launch runs only where the planner found
a ring slot that one program reads and another overwrites (pool, then store), and online states read
and written by different programs go through a scratch buffer. With a plan and validate=False the call
never synchronises, so a CUDA graph can capture it.
"""

import torch
import triton
import triton.language as tl

from harness import contract, plans

compress_plan = plans.compress_plan
MODE_ID = {"ring": 0, "paged": 1, "online": 2}


@triton.jit
def _segment(seg_ptr, s):
    """A segment record of the plan (harness/plans.py SEGMENT_FIELDS): request, block, output row or -1,
    last of its request, prefix, end, kv_score row of `prefix`, state row or page of block g, page of
    block g - 1."""
    r = seg_ptr + s * 12
    return (tl.load(r), tl.load(r + 1), tl.load(r + 2), tl.load(r + 3), tl.load(r + 4), tl.load(r + 5),
            tl.load(r + 6).to(tl.int64), tl.load(r + 7).to(tl.int64), tl.load(r + 8).to(tl.int64))


@triton.jit
def _rows(p, g, prefix, start, state, state_prev, E, RATIO: tl.constexpr, MODE: tl.constexpr):
    """Element offsets of the raw rows of positions p (in block g or g - 1): kv_score rows
    (p >= prefix) and state rows (ring slot p % W of row `state`, or slot p % RATIO of the page of
    the position's block)."""
    new_row = (start + (p - prefix)).to(tl.int64) * E
    if MODE == 1:
        page = tl.where(p // RATIO == g, state, state_prev)
        old_row = (page * RATIO + p % RATIO) * E
    else:
        W: tl.constexpr = 8 if RATIO == 4 else 128
        old_row = (state * W + p % W) * E
    return new_row, old_row


@triton.jit
def _kept(p, end, state, E, RATIO: tl.constexpr, MODE: tl.constexpr):
    """(keep, state offset) of new positions p of block g: paged keeps rows whose block has a page
    (`state`), the ring the last W positions."""
    if MODE == 1:
        return p * 0 + state >= 0, (state * RATIO + p % RATIO) * E  # (a vector compare: the interpreter
        # turns a scalar bool & a vector bool into ints)
    else:
        W: tl.constexpr = 8 if RATIO == 4 else 128
        return p >= end - W, (state * W + p % W) * E


# Memory layout: kv_score [T, 4d] = [kv_ov | kv_cur | sc_ov | sc_cur]; ring state [S, 8, 4d]; paged
# state [P, 4, 4d]; ape [4, 2d]; out [N, d]. Terms 0..3: overlap half of positions 4g-4..4g-1;
# terms 4..7: current half of positions 4g..4g+3.
@triton.jit
def _c4_kernel(kv_ptr, state_ptr, ape_ptr, out_ptr, seg_ptr, d, POOL: tl.constexpr, STORE: tl.constexpr,
               MODE: tl.constexpr, BLOCK_D: tl.constexpr):
    b, g, o, last, prefix, end, start, state, state_prev = _segment(seg_ptr, tl.program_id(0))
    E = 4 * d
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = c < d
    if POOL:
        if o >= 0:
            i = tl.arange(0, 8)
            p = 4 * g - 4 + i
            half = (i >= 4).to(tl.int32)
            valid = p >= 0
            new = p >= prefix
            old = valid & (p < prefix)
            new_row, old_row = _rows(p, g, prefix, start, state, state_prev, E, 4, MODE)
            m_new = new[:, None] & cmask[None, :]
            m_old = old[:, None] & cmask[None, :]
            val_col = (half * d)[:, None] + c[None, :]
            sc_col = (2 * d + half * d)[:, None] + c[None, :]
            val = tl.load(kv_ptr + new_row[:, None] + val_col, mask=m_new, other=0.0) \
                + tl.load(state_ptr + old_row[:, None] + val_col, mask=m_old, other=0.0)
            sc = tl.load(kv_ptr + new_row[:, None] + sc_col, mask=m_new, other=0.0) \
                + tl.load(state_ptr + old_row[:, None] + sc_col, mask=m_old, other=0.0)
            bias = tl.load(ape_ptr + ((i % 4) * (2 * d) + half * d)[:, None] + c[None, :], mask=cmask[None, :],
                           other=0.0)
            logits = tl.where(valid[:, None], sc + bias, float("-inf"))  # entry 0: no overlap terms
            m = tl.max(logits, axis=0)
            w = tl.exp(logits - m[None, :])
            pooled = tl.sum(w * tl.where(valid[:, None], val, 0.0), axis=0) / tl.sum(w, axis=0)
            tl.store(out_ptr + o.to(tl.int64) * d + c, pooled, mask=cmask)
    if STORE:
        p = 4 * g + tl.arange(0, 4)
        keep, dst = _kept(p, end, state, E, 4, MODE)
        keep = keep & (p >= prefix) & (p < end)
        src = (start + (p - prefix)).to(tl.int64) * E
        m2 = keep[:, None] & cmask[None, :]
        for q in tl.static_range(4):  # the four d-wide sections of the row
            col = q * d + c[None, :]
            tl.store(state_ptr + dst[:, None] + col, tl.load(kv_ptr + src[:, None] + col, mask=m2), mask=m2)


# Memory layout: kv_score [T, 2d] = [kv | sc]; ring state [S, 128, 2d]; paged state [P, 128, 2d];
# online state [S, 3, d] (running max, running sum, normalised mean); ape [128, d]; out [N, d].
# The block's positions as one [128, BLOCK_D] tile: ring / paged pool all of them when the call
# completes the block (from the state before the prefix); online pools the new ones and merges them
# with the running state when the block began earlier.
@triton.jit
def _c128_kernel(kv_ptr, state_ptr, new_state_ptr, ape_ptr, out_ptr, seg_ptr, d, POOL: tl.constexpr,
                 STORE: tl.constexpr, MODE: tl.constexpr, SCRATCH: tl.constexpr, ROWS: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    b, g, o, last, prefix, end, start, state, state_prev = _segment(seg_ptr, tl.program_id(0))
    E = 2 * d
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = c < d
    # the tile's rows: the whole block (128), or, online with few new positions (decode), ROWS rows
    # from the first new one
    if ROWS == 128:
        first = 128 * g
    else:
        first = tl.maximum(prefix, 128 * g)
    p = first + tl.arange(0, ROWS)
    i = p - 128 * g  # position in the block (the ape row)
    fresh = (p >= prefix) & (p < tl.minimum(end, 128 * g + 128))
    read_new = fresh
    if (MODE != 2) and POOL:  # a completed block pools its positions before the prefix too
        read_old = p < tl.where(o >= 0, prefix, 0)  # (one comparison: the interpreter keeps it boolean)
    else:
        read_old = p < 0
    new_row, old_row = _rows(p, g, prefix, start, state, state_prev, E, 128, MODE)
    m_new = read_new[:, None] & cmask[None, :]
    m_old = read_old[:, None] & cmask[None, :]
    y = tl.load(kv_ptr + new_row[:, None] + c[None, :], mask=m_new, other=0.0)
    x = tl.load(kv_ptr + new_row[:, None] + d + c[None, :], mask=m_new, other=0.0)
    if MODE != 2:
        y += tl.load(state_ptr + old_row[:, None] + c[None, :], mask=m_old, other=0.0)
        x += tl.load(state_ptr + old_row[:, None] + d + c[None, :], mask=m_old, other=0.0)
        if STORE:
            keep, dst = _kept(p, end, state, E, 128, MODE)
            m2 = (keep & fresh)[:, None] & cmask[None, :]
            tl.store(state_ptr + dst[:, None] + c[None, :], y, mask=m2)
            tl.store(state_ptr + dst[:, None] + d + c[None, :], x, mask=m2)
    if POOL:  # (a block the call leaves open pools to nothing in ring / paged mode: not stored)
        live = read_new | read_old
        m_live = live[:, None] & cmask[None, :]  # (decode: one row; the ape tile only where it is used)
        x = tl.where(live[:, None], x + tl.load(ape_ptr + i[:, None] * d + c[None, :], mask=m_live, other=0.0),
                     float("-inf"))
        m = tl.max(x, axis=0)
        w = tl.exp(x - m[None, :])
        total = tl.sum(w, axis=0)
        v = tl.sum(w * y, axis=0) / total
        if MODE == 2:
            srow3 = state * 3 * d
            if prefix > 128 * g:  # the block began in an earlier call: merge with the running state
                m0 = tl.load(state_ptr + srow3 + c, mask=cmask, other=0.0)
                s0 = tl.load(state_ptr + srow3 + d + c, mask=cmask, other=1.0)
                v0 = tl.load(state_ptr + srow3 + 2 * d + c, mask=cmask, other=0.0)
                mm = tl.maximum(m0, m)
                a0 = s0 * tl.exp(m0 - mm)
                a1 = total * tl.exp(m - mm)
                m, total, v = mm, a0 + a1, (v0 * a0 + v * a1) / (a0 + a1)
            if last != 0:
                if SCRATCH:
                    dst3 = new_state_ptr + b.to(tl.int64) * 3 * d
                else:
                    dst3 = state_ptr + srow3
                tl.store(dst3 + c, m, mask=cmask)
                tl.store(dst3 + d + c, total, mask=cmask)
                tl.store(dst3 + 2 * d + c, v, mask=cmask)
        if o >= 0:
            tl.store(out_ptr + o.to(tl.int64) * d + c, v, mask=cmask)


# Online mode after _c128_kernel wrote to scratch: each request's last segment's new running state
# goes to the request's state row.
@triton.jit
def _commit_kernel(state_ptr, new_state_ptr, seg_ptr, d, BLOCK: tl.constexpr):
    b, g, o, last, prefix, end, start, state, state_prev = _segment(seg_ptr, tl.program_id(0))
    if last != 0:
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(new_state_ptr + b.to(tl.int64) * 3 * d + i, mask=i < 3 * d)
        tl.store(state_ptr + state * 3 * d + i, x, mask=i < 3 * d)


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    d, device = layout.d, kv_score.device
    plan = plans.compress_call_plan(plan, prefix_lens, extend_lens, ratio=layout.ratio, mode=mode,
                                    state_rows=state_rows, page_table=page_table, validate=validate, device=device)
    out = torch.empty((plan["n_out"], d), dtype=torch.float32, device=device)
    if plan["n_seg"] == 0:
        return out
    segments = plan["segments"]
    # C4 tiles are [8 terms, BLOCK_D]: wide channel blocks keep a 64K-token prefill to 16K programs;
    # C128 tiles are [128 positions, BLOCK_D]
    block_d = min(256 if layout.ratio == 4 else 64, triton.next_power_of_2(d))
    grid = (plan["n_seg"], triton.cdiv(d, block_d))
    # ring slots read and overwritten by different programs: every read (pool launch) before any write
    passes = ((True, False), (False, True)) if plan["ring_conflict"] else ((True, True),)
    if layout.ratio == 4:
        for pool, store in passes:
            _c4_kernel[grid](kv_score, state, ape, out, segments, d, POOL=pool, STORE=store, MODE=MODE_ID[mode],
                             BLOCK_D=block_d)
        return out
    scratch = torch.empty((layout.batch, 3, d), dtype=torch.float32, device=device) if plan["online_split"] else out
    # online reads only new positions: a decode step's tile needs 16 rows, not the block's 128
    rows = 16 if mode == "online" and plan["most_new"] <= 16 else 128
    for pool, store in passes:
        _c128_kernel[grid](kv_score, state, scratch, ape, out, segments, d, POOL=pool, STORE=store,
                           MODE=MODE_ID[mode], SCRATCH=plan["online_split"], ROWS=rows, BLOCK_D=block_d)
    if plan["online_split"]:
        _commit_kernel[(plan["n_seg"], triton.cdiv(3 * d, 256))](state, scratch, segments, d, BLOCK=256)
    return out
