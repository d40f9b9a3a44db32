"""Triton `sparse_attention_fp8` (SPEC 8): kernels_triton.sparse_attention's gather-by-index MQA
with the dequantisation fused into the gather: no bf16 copy of the cache is made.

Each step gathers BLOCK_K records straight from the paged cache: for slot t, page t // PAGE_SIZE
at the page stride, offset o = t % PAGE_SIZE; the 448 e4m3 bytes at 576 * o and the 7 scale bytes
at 576 * PAGE_SIZE + 8 * o give x = e4m3 * 2**(byte - 127), the 64 bf16 RoPE dims at 576 * o + 448
are taken as stored. The row is exact in bf16 (power-of-two scales), so on the GPU the dots take it
in bf16 as the bf16 kernel does; in the interpreter they run in fp32 (its bf16 dot is wrong). The
online softmax, the sink, split-K and the combine are the bf16 kernel's (its combine is reused). Outputs round to bf16
to nearest even (_common.to_bf16: the interpreter's own conversion does not).
"""

import torch
import triton
import triton.language as tl

from harness import contract
from kernels_triton._common import to_bf16
from kernels_triton.sparse_attention import launch_split


@triton.jit
def _attention_fp8_kernel(q_ptr, bytes_ptr, e4m3_ptr, bf16_ptr, idx_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                          part_lse_ptr, K, H, chunk, page_stride, sm_scale, PAGE_SIZE: tl.constexpr,
                          SPLIT: tl.constexpr, HAS_SINK: tl.constexpr, BLOCK_H: tl.constexpr,
                          BLOCK_K: tl.constexpr, D: tl.constexpr, NOPE: tl.constexpr, TILE: tl.constexpr,
                          ROW_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, F32_DOT: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    hmask = h < H
    cols = tl.arange(0, D)
    is_nope = cols < NOPE
    q_rows = (b.to(tl.int64) * H + h) * D
    q = tl.load(q_ptr + q_rows[:, None] + cols[None, :], mask=hmask[:, None], other=0.0)
    if F32_DOT:  # the interpreter's bf16 dot is wrong; fp32 is exact there
        q = q.to(tl.float32)
    scale2 = sm_scale * 1.4426950408889634  # scores in base 2: exp2 is the hardware's exp
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    k_begin = split * chunk
    k_end = tl.minimum(k_begin + chunk, K)
    for k0 in range(k_begin, k_end, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        idx = tl.load(idx_ptr + b.to(tl.int64) * K + kk, mask=kk < k_end, other=-1)
        valid = idx >= 0
        slot = tl.where(valid, idx, 0).to(tl.int64)
        page_base = (slot // PAGE_SIZE) * page_stride
        o = slot % PAGE_SIZE
        record = page_base + o * ROW_BYTES  # byte offset of the 576-byte record
        scale_at = page_base + PAGE_SIZE * ROW_BYTES + o * SCALE_BYTES
        nope_mask = valid[:, None] & is_nope[None, :]
        rope_mask = valid[:, None] & (cols[None, :] >= NOPE)
        e4m3 = tl.load(e4m3_ptr + record[:, None] + cols[None, :], mask=nope_mask, other=0.0).to(tl.float32)
        sbyte = tl.load(bytes_ptr + scale_at[:, None] + cols[None, :] // TILE, mask=nope_mask, other=127)
        scale = tl.exp2(sbyte.to(tl.float32) - 127.0)
        # the RoPE dims: bf16 elements at byte record + NOPE + 2 * (col - NOPE); the stride is even
        rope = tl.load(bf16_ptr + (record[:, None] + NOPE) // 2 + (cols[None, :] - NOPE), mask=rope_mask,
                       other=0.0).to(tl.float32)
        kv = tl.where(is_nope[None, :], e4m3 * scale, rope)
        if not F32_DOT:
            kv = kv.to(tl.bfloat16)  # exact: e4m3 times a power of two
        if F32_DOT:  # fp32 dots exact (the default tf32 would round the operands)
            s = tl.dot(q, tl.trans(kv), input_precision="ieee") * scale2
        else:
            s = tl.dot(q, tl.trans(kv)) * scale2
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        if F32_DOT:
            acc = acc * alpha[:, None] + tl.dot(p, kv, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(kv.dtype), kv)
        m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    lse = tl.where(l > 0, (m_safe + tl.log2(tl.where(l > 0, l, 1.0))) * 0.6931471805599453, float("-inf"))
    if SPLIT:  # partial output normalised by its own sum; the combine applies weights and the sink
        part = (b.to(tl.int64) * tl.num_programs(2) + split) * H + h
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(part_out_ptr + part[:, None] * D + cols[None, :], out, mask=hmask[:, None])
        tl.store(part_lse_ptr + part, lse, mask=hmask)
    else:
        if HAS_SINK:
            sink2 = tl.load(sink_ptr + h, mask=hmask, other=0.0) * 1.4426950408889634
            denom = l + tl.exp2(sink2 - m_safe)
        else:
            denom = tl.where(l > 0, l, 1.0)
        out = acc / denom[:, None]
        tl.store(out_ptr + q_rows[:, None] + cols[None, :], to_bf16(out, F32_DOT), mask=hmask[:, None])
        tl.store(lse_ptr + b.to(tl.int64) * H + h, lse, mask=hmask)


CONFIG = {}  # overrides of kernels_triton.sparse_attention's per-shape configuration; not yet tuned


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                                 attn_sink=attn_sink, validate=validate)
    # one cache, three typed views: scale bytes, e4m3 dims, bf16 RoPE dims (the stride is even)
    rows = (kv_cache, kv_cache.view(torch.float8_e4m3fn), kv_cache.view(torch.bfloat16), indices)
    return launch_split(_attention_fp8_kernel, q, layout, attn_sink, CONFIG, rows,
                        (layout.page_stride, float(sm_scale)), PAGE_SIZE=layout.page_size,
                        NOPE=contract.FP8_KV_NOPE, TILE=contract.FP8_KV_TILE, ROW_BYTES=contract.FP8_KV_ROW_BYTES,
                        SCALE_BYTES=contract.FP8_KV_SCALE_BYTES)
