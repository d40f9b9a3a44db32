"""Triton `topk_indices` (SPEC 3): radix select fused with the page-table translation.

One program per row. Rows with seq_len <= k write 0..seq_len-1 mapped, without reading the logits.
Longer rows map each float to an order-preserving 32-bit key and narrow a bucket [lo, hi] that holds
the k-th largest key, by the same digits as the CUDA kernel: a 2048-bin histogram of bits 31..21,
then bits 20..10 and 9..0 of the keys inside the bucket, stopping as soon as the whole bucket is
taken. A collecting pass writes every key above the bucket and the first `remaining` keys inside it,
in column order, so the selection and its order are deterministic. Triton has no cluster or
row-sized on-chip buffer here, so each pass reads the row again (L2 serves the repeats when it can):
two to four reads, against five for the 8-bit radix it replaces.
"""

import torch
import triton
import triton.language as tl

from harness import contract


@triton.jit
def _sortable_key(x):
    bits = x.to(tl.uint32, bitcast=True)
    return tl.where((bits & 0x80000000) != 0, ~bits, bits | 0x80000000)


@triton.jit
def _translate(table_row, raw, mask, page_size):
    page = tl.load(table_row + raw // page_size, mask=mask, other=0)
    return tl.where(mask, page * page_size + raw % page_size, -1)


@triton.jit
def _topk_kernel(logits_ptr, columns, seq_ptr, table_ptr, table_stride, out_ptr, page_size,
                 K: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    n = tl.load(seq_ptr + b)
    out_row = out_ptr + b.to(tl.int64) * K
    table_row = table_ptr + b.to(tl.int64) * table_stride
    if n <= K:
        for off in range(0, K, BLOCK):
            idx = off + tl.arange(0, BLOCK)
            tl.store(out_row + idx, _translate(table_row, idx, idx < n, page_size), mask=idx < K)
    else:
        row = logits_ptr + b.to(tl.int64) * columns
        bins = tl.arange(0, 2048)
        lo = tl.full([], 0, tl.uint32)
        hi = tl.full([], 0xFFFFFFFF, tl.uint32)
        remaining = tl.full([], K, tl.int32)
        done = tl.full([], 0, tl.int32)
        for step in tl.static_range(3):
            shift = 21 - 11 * step if step < 2 else 0  # digits: bits 31..21, 20..10, 9..0
            digit_mask = 0x3FF if step == 2 else 0x7FF
            if done == 0:
                hist = tl.zeros([2048], tl.int32)
                for off in range(0, n, BLOCK):
                    idx = off + tl.arange(0, BLOCK)
                    inside_row = idx < n
                    key = _sortable_key(tl.load(row + idx, mask=inside_row, other=0.0))
                    match = inside_row & (key >= lo) & (key <= hi)
                    digit = ((key >> shift) & digit_mask).to(tl.int32)
                    hist += tl.histogram(tl.where(match, digit, 0), 2048)
                    hist -= tl.where(bins == 0, tl.sum((~match).to(tl.int32)), 0)  # the non-matching went to bin 0
                at_or_above = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # keys with digit >= bin
                cut = tl.max(tl.where(at_or_above >= remaining, bins, -1))
                remaining -= tl.sum(tl.where(bins > cut, hist, 0))
                in_bucket = tl.sum(tl.where(bins == cut, hist, 0))
                lo |= cut.to(tl.uint32) << shift
                hi = lo | ((1 << shift) - 1)
                done = (in_bucket == remaining).to(tl.int32)  # the whole bucket is taken
        # collect: above the bucket, then the first `remaining` inside it, in column order
        taken_above = tl.full([], 0, tl.int32)
        taken_inside = tl.full([], 0, tl.int32)
        first_inside_slot = K - remaining
        for off in range(0, n, BLOCK):
            idx = off + tl.arange(0, BLOCK)
            inside_row = idx < n
            key = _sortable_key(tl.load(row + idx, mask=inside_row, other=0.0))
            above = inside_row & (key > hi)
            inside = inside_row & (key >= lo) & (key <= hi)
            above_rank = taken_above + tl.cumsum(above.to(tl.int32), 0) - 1
            inside_rank = taken_inside + tl.cumsum(inside.to(tl.int32), 0) - 1
            take_inside = inside & (inside_rank < remaining)
            slot = tl.where(above, above_rank, first_inside_slot + inside_rank)
            chosen = above | take_inside
            tl.store(out_row + slot, _translate(table_row, idx, chosen, page_size), mask=chosen)
            taken_above += tl.sum(above.to(tl.int32))
            taken_inside += tl.sum(inside.to(tl.int32))


# Columns per step and warps per program (docs/perf-notes.md has the H200 sweep).
CONFIG = {"block": 8192, "num_warps": 16}


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    out = torch.empty((layout.batch, k), dtype=torch.int32, device=logits.device)
    if layout.batch:
        _topk_kernel[(layout.batch,)](logits, layout.columns, seq_lens, page_table, page_table.stride(0), out,
                                      page_size, K=k, BLOCK=CONFIG["block"], num_warps=CONFIG["num_warps"])
    return out
