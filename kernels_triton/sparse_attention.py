"""Triton `sparse_attention` (SPEC 4): gather-by-index MQA with online softmax and an attention sink.

One program per (query row, block of heads): the heads' queries [BLOCK_H, 512] stay in registers;
the row's indices are walked BLOCK_K at a time, gathering kv rows (-1 masked), scores on the tensor
cores with fp32 accumulation, a running max / sum / output in fp32. The sink joins only the
denominator: out = acc / (l + exp(sink - m)); lse = m + log(l) excludes it.
"""

import torch
import triton
import triton.language as tl

from harness import contract
from kernels_triton._common import INTERPRET


@triton.jit
def _attention_kernel(q_ptr, kv_ptr, idx_ptr, sink_ptr, out_ptr, lse_ptr, K, H, sm_scale,
                      HAS_SINK: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr, D: tl.constexpr,
                      F32_DOT: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < H
    cols = tl.arange(0, D)
    q_rows = (b.to(tl.int64) * H + h) * D
    q = tl.load(q_ptr + q_rows[:, None] + cols[None, :], mask=hmask[:, None], other=0.0)
    if F32_DOT:  # the interpreter's bf16 dot is wrong; fp32 is exact there
        q = q.to(tl.float32)
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        idx = tl.load(idx_ptr + b.to(tl.int64) * K + kk, mask=kk < K, other=-1)
        valid = idx >= 0
        kv = tl.load(kv_ptr + idx.to(tl.int64)[:, None] * D + cols[None, :], mask=valid[:, None], other=0.0)
        if F32_DOT:
            kv = kv.to(tl.float32)
        s = tl.dot(q, tl.trans(kv)) * sm_scale
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(kv.dtype), kv)
        m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    if HAS_SINK:
        denom = l + tl.exp(tl.load(sink_ptr + h, mask=hmask, other=0.0) - m_safe)
    else:
        denom = tl.where(l > 0, l, 1.0)
    out = acc / denom[:, None]
    tl.store(out_ptr + q_rows[:, None] + cols[None, :], out.to(tl.bfloat16), mask=hmask[:, None])
    lse = tl.where(l > 0, m_safe + tl.log(tl.where(l > 0, l, 1.0)), float("-inf"))
    tl.store(lse_ptr + b.to(tl.int64) * H + h, lse, mask=hmask)


# Heads per program, indices per step, warps and pipeline depth, by head count; best of a sweep on
# the H200 (docs/perf-notes.md). CONFIG overrides them (kernels_triton.tune sets it).
def _config(heads):
    if heads <= 64:
        return {"block_h": 16, "block_k": 64, "num_warps": 4, "num_stages": 2}
    return {"block_h": 64, "block_k": 64, "num_warps": 8, "num_stages": 2}


CONFIG = {}


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    if layout.batch == 0:
        return out, lse
    cfg = {**_config(layout.heads), **CONFIG}
    grid = (layout.batch, triton.cdiv(layout.heads, cfg["block_h"]))
    _attention_kernel[grid](q, kv, indices, attn_sink if attn_sink is not None else lse, out, lse, layout.topk,
                            layout.heads, float(sm_scale), HAS_SINK=attn_sink is not None, BLOCK_H=cfg["block_h"],
                            BLOCK_K=cfg["block_k"], D=contract.ATTN_DIM, F32_DOT=INTERPRET,
                            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out, lse
