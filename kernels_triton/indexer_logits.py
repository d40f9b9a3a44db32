"""Triton `indexer_logits` (SPEC 2): paged FP8 MQA logits.

One program per (request, CONFIG["steps"] tiles of CONFIG["tile"] 64-entry cache blocks): the
request's e4m3 queries [H, 128] against each tile's gathered e4m3 keys on the tensor cores (fp8 MMA),
times the per-entry key scale, ReLU, weighted sum over heads. Blocks past the context write -inf.
"""

import os

import torch
import triton
import triton.language as tl

from harness import contract

BLOCK = contract.INDEXER_BLOCK
ROW_FLOATS = contract.INDEXER_BLOCK_BYTES // 4  # a cache block seen as float32: keys, then scales
SCALE_FLOAT_OFFSET = contract.INDEXER_KEY_BYTES // 4


# kv_cache [num_blocks, 64*132] bytes: 64 keys x 128 e4m3 (entry-major), then 64 float32 scales.
# The dot takes the e4m3 operands as they are: on Hopper an fp8 tl.dot of [H x 128] x [128 x N]
# (keys K-major through tl.trans) is wgmma e4m3 (QGMMA), whose accumulator keeps fewer bits than
# float32 (rel. L2 about 1.1e-4, inside SPEC 5's revised 3e-4 per row); under the interpreter the
# fp8 dot is exact. All 128 dims accumulate inside one dot (no split-K partials added outside).
@triton.jit
def _indexer_kernel(q_ptr, w_ptr, key_ptr, scale_ptr, ctx_ptr, table_ptr, table_stride, out_ptr, max_len, H,
                    BLOCK_H: tl.constexpr, DIM: tl.constexpr, BLOCK_T: tl.constexpr, TILE: tl.constexpr,
                    STEPS: tl.constexpr, ROW_BYTES: tl.constexpr, ROW_FLOATS: tl.constexpr,
                    SCALE_OFF: tl.constexpr, FP8_DOT: tl.constexpr, NUM_STAGES: tl.constexpr):
    b = tl.program_id(0)
    ctx = tl.load(ctx_ptr + b)
    out_row = out_ptr + b.to(tl.int64) * max_len
    table_row = table_ptr + b.to(tl.int64) * table_stride
    h = tl.arange(0, BLOCK_H)
    hmask = h < H
    r = tl.arange(0, TILE * BLOCK_T)  # TILE cache blocks side by side in one dot
    cols = tl.arange(0, DIM)
    q = tl.load(q_ptr + (b.to(tl.int64) * H + h[:, None]) * DIM + cols[None, :], mask=hmask[:, None], other=0.0)
    if not FP8_DOT:  # exact: fp16 holds every e4m3 value, products and sums in fp32
        q = q.to(tl.float16)
    w = tl.load(w_ptr + b.to(tl.int64) * H + h, mask=hmask, other=0.0)
    span: tl.constexpr = TILE * BLOCK_T
    start = tl.program_id(1) * STEPS * span
    # The steps that hold live entries come first and run as one software-pipelined loop (no branch
    # inside: the keys and scales of the next NUM_STAGES - 1 tiles are in flight while a tile is
    # multiplied); the steps wholly past the context only write -inf.
    live_steps = tl.minimum(tl.maximum(tl.cdiv(ctx - start, span), 0), STEPS)
    for step in tl.range(0, live_steps, num_stages=NUM_STAGES):
        t = start + step * span + r
        live = t < ctx
        blk = tl.load(table_row + t // BLOCK_T, mask=live, other=0).to(tl.int64)
        k = tl.load(key_ptr + blk[:, None] * ROW_BYTES + (t % BLOCK_T)[:, None] * DIM + cols[None, :],
                    mask=live[:, None], other=0.0)
        scale = tl.load(scale_ptr + blk * ROW_FLOATS + SCALE_OFF + t % BLOCK_T, mask=live, other=0.0)
        if not FP8_DOT:
            k = k.to(tl.float16)
        scores = tl.dot(k, tl.trans(q))  # [TILE*64, H], e4m3 x e4m3 -> fp32; keys as M: the head sum stays in-thread
        scores = tl.maximum(scores * scale[:, None], 0.0)
        logit = tl.sum(scores * w[None, :], axis=1)
        tl.store(out_row + t, tl.where(live, logit, float("-inf")), mask=t < max_len)
    for step in range(live_steps, STEPS):
        t = start + step * span + r
        tl.store(out_row + t, tl.full([span], float("-inf"), tl.float32), mask=t < max_len)


# tile: cache blocks per dot; steps: tiles per program (the queries load once per program);
# measured on the H200 (docs/perf-notes.md). fp8_dot: e4m3 operands straight into the MMA (QGMMA on
# Hopper); False (or DSV4_INDEXER_FP8=0 in the environment) gives exact fp16 dots.
CONFIG = {"tile": 2, "steps": 4, "num_warps": 4, "num_stages": 3, "fp8_dot": True}


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if layout.batch == 0 or max_context_len == 0:
        return out
    keys = kv_cache.view(torch.float8_e4m3fn)
    scales = kv_cache.view(torch.float32)
    tile, steps = CONFIG["tile"], CONFIG["steps"]
    grid = (layout.batch, triton.cdiv(max_context_len, BLOCK * tile * steps))
    _indexer_kernel[grid](q_fp8, weights, keys, scales, context_lens, block_table, block_table.stride(0), out,
                          max_context_len, layout.heads, BLOCK_H=max(16, triton.next_power_of_2(layout.heads)),
                          DIM=contract.INDEXER_DIM, BLOCK_T=BLOCK, TILE=tile, STEPS=steps,
                          ROW_BYTES=contract.INDEXER_BLOCK_BYTES, ROW_FLOATS=ROW_FLOATS,
                          SCALE_OFF=SCALE_FLOAT_OFFSET,
                          FP8_DOT=CONFIG["fp8_dot"] and os.environ.get("DSV4_INDEXER_FP8", "1") != "0",
                          NUM_STAGES=CONFIG["num_stages"], num_warps=CONFIG["num_warps"])
    return out
