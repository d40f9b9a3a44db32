"""Triton `indexer_logits` (SPEC 2): paged FP8 MQA logits.

One program per (request, 64-entry cache block of its context): the request's e4m3 queries [H, 128]
against the block's e4m3 keys [64, 128] on the tensor cores (fp8 `tl.dot`, fp32 accumulation),
times the per-entry key scale, ReLU, weighted sum over heads. Blocks past the context write -inf.
"""

import torch
import triton
import triton.language as tl

from harness import contract

BLOCK = contract.INDEXER_BLOCK
ROW_FLOATS = contract.INDEXER_BLOCK_BYTES // 4  # a cache block seen as float32: keys, then scales
SCALE_FLOAT_OFFSET = contract.INDEXER_KEY_BYTES // 4


# kv_cache [num_blocks, 64*132] bytes: 64 keys x 128 e4m3 (entry-major), then 64 float32 scales.
@triton.jit
def _indexer_kernel(q_ptr, w_ptr, key_ptr, scale_ptr, ctx_ptr, table_ptr, table_stride, out_ptr, max_len, H,
                    BLOCK_H: tl.constexpr, DIM: tl.constexpr, BLOCK_T: tl.constexpr, ROW_BYTES: tl.constexpr,
                    ROW_FLOATS: tl.constexpr, SCALE_OFF: tl.constexpr):
    b = tl.program_id(0)
    tb = tl.program_id(1)
    t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    ctx = tl.load(ctx_ptr + b)
    out_row = out_ptr + b.to(tl.int64) * max_len
    if tb * BLOCK_T >= ctx:
        tl.store(out_row + t, tl.full([BLOCK_T], float("-inf"), tl.float32), mask=t < max_len)
    else:
        blk = tl.load(table_ptr + b.to(tl.int64) * table_stride + tb).to(tl.int64)
        rows = tl.arange(0, BLOCK_T)
        cols = tl.arange(0, DIM)
        k = tl.load(key_ptr + blk * ROW_BYTES + rows[:, None] * DIM + cols[None, :])  # [64, 128] e4m3
        h = tl.arange(0, BLOCK_H)
        hmask = h < H
        q = tl.load(q_ptr + (b.to(tl.int64) * H + h[:, None]) * DIM + cols[None, :], mask=hmask[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k))  # [H, 64] fp32
        scale = tl.load(scale_ptr + blk * ROW_FLOATS + SCALE_OFF + rows)
        scores = tl.maximum(scores * scale[None, :], 0.0)
        w = tl.load(w_ptr + b.to(tl.int64) * H + h, mask=hmask, other=0.0)
        logit = tl.sum(w[:, None] * scores, axis=0)
        tl.store(out_row + t, tl.where(t < ctx, logit, float("-inf")), mask=t < max_len)


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if layout.batch == 0 or max_context_len == 0:
        return out
    keys = kv_cache.view(torch.float8_e4m3fn)
    scales = kv_cache.view(torch.float32)
    grid = (layout.batch, triton.cdiv(max_context_len, BLOCK))
    _indexer_kernel[grid](q_fp8, weights, keys, scales, context_lens, block_table, block_table.stride(0), out,
                          max_context_len, layout.heads, BLOCK_H=max(16, triton.next_power_of_2(layout.heads)),
                          DIM=contract.INDEXER_DIM, BLOCK_T=BLOCK, ROW_BYTES=contract.INDEXER_BLOCK_BYTES,
                          ROW_FLOATS=ROW_FLOATS, SCALE_OFF=SCALE_FLOAT_OFFSET)
    return out
