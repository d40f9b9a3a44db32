"""Triton `compress` (SPEC 1): ratio 4 and 128, ring / paged / online state, any extend.

Ring and paged modes run two launches in stream order, so every read precedes the writes that could
overwrite it: `_pool_kernel` pools each emitted entry (one program per entry and channel block,
the window's rows read from `kv_score` or, before the prefix, from the state), then
`_store_kernel` copies the new rows the state must keep. Online mode runs `_online_kernel`, one
program per (request, 128-block the extend touches, channel block): it pools its part of the block
as a tile and merges it with the running state when the block started before this call; new states
go to a scratch buffer and are copied in afterwards (the first and last segment of a request may be
different programs).
"""

import torch
import triton
import triton.language as tl

from harness import contract

# Memory layout: kv_score [T, E] row-major, E = 4d ([kv_ov|kv_cur|sc_ov|sc_cur]) or 2d ([kv|sc]);
# ring state [S, W, E]; paged state [P, r, E]; ape [4, 2d] or [128, d]; out [N, d].
@triton.jit
def _pool_kernel(kv_ptr, state_ptr, ape_ptr, out_ptr, entry_req_ptr, entry_j_ptr, prefix_ptr, kv_start_ptr,
                 state_rows_ptr, table_ptr, table_stride, d, E,
                 RATIO: tl.constexpr, TERMS: tl.constexpr, PAGED: tl.constexpr, RING: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    e = tl.program_id(0)
    b = tl.load(entry_req_ptr + e)
    j = tl.load(entry_j_ptr + e)
    prefix = tl.load(prefix_ptr + b)
    start = tl.load(kv_start_ptr + b).to(tl.int64)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = c < d
    i = tl.arange(0, TERMS)
    if RATIO == 4:  # terms 0..3: overlap half of positions 4j-4..4j-1; 4..7: current half of 4j..4j+3
        p = 4 * j - 4 + i
        half = (i >= 4).to(tl.int32)
        val_col = half * d
        sc_col = 2 * d + half * d
        ape_off = (i % 4) * (2 * d) + half * d
    else:  # 128 terms: positions 128j..128j+127, [kv | sc]
        p = 128 * j + i
        val_col = i * 0
        sc_col = i * 0 + d
        ape_off = i * d
    valid = p >= 0
    new = p >= prefix
    old = valid & (p < prefix)
    new_row = (start + (p - prefix)).to(tl.int64) * E
    if PAGED:
        page = tl.load(table_ptr + b.to(tl.int64) * table_stride + p // RATIO, mask=old, other=0)
        old_row = (page.to(tl.int64) * RATIO + p % RATIO) * E
    else:
        srow = tl.load(state_rows_ptr + b).to(tl.int64)
        old_row = (srow * RING + p % RING) * E
    m2_new = new[:, None] & cmask[None, :]
    m2_old = old[:, None] & cmask[None, :]
    val = tl.load(kv_ptr + new_row[:, None] + (val_col[:, None] + c[None, :]), mask=m2_new, other=0.0) \
        + tl.load(state_ptr + old_row[:, None] + (val_col[:, None] + c[None, :]), mask=m2_old, other=0.0)
    sc = tl.load(kv_ptr + new_row[:, None] + (sc_col[:, None] + c[None, :]), mask=m2_new, other=0.0) \
        + tl.load(state_ptr + old_row[:, None] + (sc_col[:, None] + c[None, :]), mask=m2_old, other=0.0)
    bias = tl.load(ape_ptr + ape_off[:, None] + c[None, :], mask=cmask[None, :], other=0.0)
    logits = tl.where(valid[:, None], sc + bias, float("-inf"))
    m = tl.max(logits, axis=0)
    w = tl.exp(logits - m[None, :])
    val = tl.where(valid[:, None], val, 0.0)
    pooled = tl.sum(w * val, axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + e.to(tl.int64) * d + c, pooled, mask=cmask)


# One program per new row: copies it into the state if the state must keep it.
@triton.jit
def _store_kernel(kv_ptr, state_ptr, row_req_ptr, prefix_ptr, extend_ptr, kv_start_ptr, state_rows_ptr, table_ptr,
                  table_stride, E, RATIO: tl.constexpr, PAGED: tl.constexpr, RING: tl.constexpr,
                  BLOCK_E: tl.constexpr):
    row = tl.program_id(0)
    b = tl.load(row_req_ptr + row)
    p = tl.load(prefix_ptr + b) + (row - tl.load(kv_start_ptr + b))
    if PAGED:
        page = tl.load(table_ptr + b.to(tl.int64) * table_stride + p // RATIO)
        keep = page >= 0
        dst = (page.to(tl.int64) * RATIO + p % RATIO) * E
    else:  # the ring keeps the last RING positions of the request
        end = tl.load(prefix_ptr + b) + tl.load(extend_ptr + b)
        keep = p >= end - RING
        dst = (tl.load(state_rows_ptr + b).to(tl.int64) * RING + p % RING) * E
    if keep:
        src = row.to(tl.int64) * E
        for off in range(0, E, BLOCK_E):
            cols = off + tl.arange(0, BLOCK_E)
            x = tl.load(kv_ptr + src + cols, mask=cols < E)
            tl.store(state_ptr + dst + cols, x, mask=cols < E)


# Online ratio 128: state [S, 3, d] = running max, running sum, normalised mean.
@triton.jit
def _online_kernel(kv_ptr, state_ptr, new_state_ptr, ape_ptr, out_ptr, seg_req_ptr, seg_block_ptr, seg_out_ptr,
                   seg_last_ptr, prefix_ptr, extend_ptr, kv_start_ptr, state_rows_ptr, d,
                   BLOCK_D: tl.constexpr):
    g_id = tl.program_id(0)
    b = tl.load(seg_req_ptr + g_id)
    g = tl.load(seg_block_ptr + g_id)
    prefix = tl.load(prefix_ptr + b)
    end = prefix + tl.load(extend_ptr + b)
    start = tl.load(kv_start_ptr + b).to(tl.int64)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = c < d
    i = tl.arange(0, 128)
    p = 128 * g + i
    live = (p >= prefix) & (p < end)
    rows = (start + (p - prefix)).to(tl.int64) * (2 * d)
    m2 = live[:, None] & cmask[None, :]
    y = tl.load(kv_ptr + rows[:, None] + c[None, :], mask=m2, other=0.0)
    x = tl.load(kv_ptr + rows[:, None] + d + c[None, :], mask=m2, other=0.0) \
        + tl.load(ape_ptr + i[:, None] * d + c[None, :], mask=cmask[None, :], other=0.0)
    x = tl.where(live[:, None], x, float("-inf"))
    m = tl.max(x, axis=0)
    w = tl.exp(x - m[None, :])
    s = tl.sum(w, axis=0)
    v = tl.sum(w * y, axis=0) / s
    srow = tl.load(state_rows_ptr + b).to(tl.int64) * 3 * d
    if prefix > 128 * g:  # the block began in an earlier call: merge with the running state
        m0 = tl.load(state_ptr + srow + c, mask=cmask, other=0.0)
        s0 = tl.load(state_ptr + srow + d + c, mask=cmask, other=1.0)
        v0 = tl.load(state_ptr + srow + 2 * d + c, mask=cmask, other=0.0)
        mm = tl.maximum(m0, m)
        a0 = s0 * tl.exp(m0 - mm)
        a1 = s * tl.exp(m - mm)
        m, s, v = mm, a0 + a1, (v0 * a0 + v * a1) / (a0 + a1)
    out_row = tl.load(seg_out_ptr + g_id)
    if out_row >= 0:
        tl.store(out_ptr + out_row.to(tl.int64) * d + c, v, mask=cmask)
    if tl.load(seg_last_ptr + g_id) != 0:
        dst = b.to(tl.int64) * 3 * d
        tl.store(new_state_ptr + dst + c, m, mask=cmask)
        tl.store(new_state_ptr + dst + d + c, s, mask=cmask)
        tl.store(new_state_ptr + dst + 2 * d + c, v, mask=cmask)


def _block_d(d):
    return min(64, triton.next_power_of_2(d))


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    d, batch, device = layout.d, layout.batch, kv_score.device
    plan = contract.to_device_int32(contract.compress_plan(prefix_lens, extend_lens, ratio), device)
    n_out, n_seg = len(plan["entry_req"]), len(plan["seg_req"])
    out = torch.empty((n_out, d), dtype=torch.float32, device=device)
    block_d = _block_d(d)

    if mode == "online":
        if n_seg == 0:
            return out
        new_state = torch.empty((batch, 3, d), dtype=torch.float32, device=device)
        _online_kernel[(n_seg, triton.cdiv(d, block_d))](
            kv_score, state, new_state, ape, out, plan["seg_req"], plan["seg_block"], plan["seg_out"],
            plan["seg_last"], prefix_lens, extend_lens, plan["kv_start"], state_rows, d, BLOCK_D=block_d)
        contract.commit_online_state(state, state_rows, new_state, plan["has_extend"])
        return out

    sa = contract.compress_state_args(mode, ratio, prefix_lens, state_rows, page_table)
    if n_out:
        _pool_kernel[(n_out, triton.cdiv(d, block_d))](
            kv_score, state, ape, out, plan["entry_req"], plan["entry_j"], prefix_lens, plan["kv_start"], sa.rows,
            sa.table, sa.stride, d, layout.width, RATIO=ratio, TERMS=8 if ratio == 4 else 128, PAGED=sa.paged,
            RING=sa.ring, BLOCK_D=block_d)
    if kv_score.shape[0]:
        _store_kernel[(kv_score.shape[0],)](kv_score, state, plan["row_req"], prefix_lens, extend_lens,
                                            plan["kv_start"], sa.rows, sa.table, sa.stride, layout.width,
                                            RATIO=ratio, PAGED=sa.paged, RING=sa.ring,
                                            BLOCK_E=min(1024, triton.next_power_of_2(layout.width)))
    return out
