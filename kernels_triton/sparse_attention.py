"""Triton `sparse_attention` (SPEC 4): gather-by-index MQA with online softmax and an attention sink.

One program per (query row, block of heads, split of the index list). The block's heads are the M
dimension of both dots (64 heads: one wgmma M tile on Hopper), so each gathered kv row is read once
for all of them; the gathered [BLOCK_K, 512] tile serves as K in S = Q K^T and as V in O += P V
(K = V). Scores and the running max / sum / output stay in fp32.

Split-K (flash-decoding): when batch x head blocks cannot fill the SMs (decode at small batch), the
index list is cut into `splits` contiguous ranges; each program writes its normalised partial output
and its partial lse to an fp32 workspace and a combine kernel merges them by their lse weights. The
sink joins only the denominator: out = O / (l + exp(sink - m)) = (O / l) / (1 + exp(sink - lse));
lse = m + log(l) excludes it. A row with no valid index gives out 0 and lse -inf.
"""

import functools

import torch
import triton
import triton.language as tl

from harness import contract, plans
from kernels_triton._common import INTERPRET, to_bf16


@triton.jit
def _attention_kernel(q_ptr, kv_ptr, idx_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, K, H, chunk,
                      sm_scale, SPLIT: tl.constexpr, HAS_SINK: tl.constexpr, BLOCK_H: tl.constexpr,
                      BLOCK_K: tl.constexpr, D: tl.constexpr, F32_DOT: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    hmask = h < H
    cols = tl.arange(0, D)
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
        kv = tl.load(kv_ptr + idx.to(tl.int64)[:, None] * D + cols[None, :], mask=valid[:, None], other=0.0)
        if F32_DOT:
            kv = kv.to(tl.float32)
        s = tl.dot(q, tl.trans(kv)) * scale2
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, axis=1)
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
        tl.store(out_ptr + q_rows[:, None] + cols[None, :], out.to(tl.bfloat16), mask=hmask[:, None])
        tl.store(lse_ptr + b.to(tl.int64) * H + h, lse, mask=hmask)


@triton.jit
def _combine_kernel(part_out_ptr, part_lse_ptr, sink_ptr, out_ptr, lse_ptr, H, splits, HAS_SINK: tl.constexpr,
                    BLOCK_H: tl.constexpr, SPLITS_POW2: tl.constexpr, D: tl.constexpr,
                    INTERPRETING: tl.constexpr = False):
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = h < H
    cols = tl.arange(0, D)
    s_ids = tl.arange(0, SPLITS_POW2)
    part = (b.to(tl.int64) * splits + s_ids[None, :]) * H + h[:, None]  # [BLOCK_H, SPLITS_POW2]
    lse_s = tl.load(part_lse_ptr + part, mask=hmask[:, None] & (s_ids[None, :] < splits), other=float("-inf"))
    mx = tl.max(lse_s, axis=1)
    mx_safe = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp(lse_s - mx_safe[:, None])  # an empty split (lse -inf) weighs 0
    total = tl.sum(w, axis=1)
    lse = tl.where(total > 0, mx_safe + tl.log(tl.where(total > 0, total, 1.0)), float("-inf"))
    scale = 1.0 / tl.where(total > 0, total, 1.0)
    if HAS_SINK:  # 1 / (1 + exp(sink - lse)); an empty row stays 0 (its partials are 0)
        sink = tl.load(sink_ptr + h, mask=hmask, other=0.0)
        scale = scale / (1.0 + tl.exp(tl.minimum(sink - tl.where(total > 0, lse, 0.0), 80.0)))
    acc = tl.zeros([BLOCK_H, D], tl.float32)
    for s in range(0, splits):
        ws = tl.sum(tl.where(s_ids[None, :] == s, w, 0.0), axis=1)
        rows = (b.to(tl.int64) * splits + s) * H + h
        acc += ws[:, None] * tl.load(part_out_ptr + rows[:, None] * D + cols[None, :], mask=hmask[:, None], other=0.0)
    out = acc * scale[:, None]
    tl.store(out_ptr + (b.to(tl.int64) * H + h)[:, None] * D + cols[None, :], to_bf16(out, INTERPRETING),
             mask=hmask[:, None])
    tl.store(lse_ptr + b.to(tl.int64) * H + h, lse, mask=hmask)


# Heads per program (64: the wgmma M tile), indices per step, warps, pipeline depth; splits of the
# index list chosen by shape (_splits) unless CONFIG names them. CONFIG overrides (harness.tune_triton
# sets it); the pre-split configuration was {"block_h": 16, "block_k": 64, "num_warps": 4,
# "num_stages": 2, "splits": 1} at H 64. Compiled for sm_90a without a GPU (ptxas -v): 64 x 64 x 8
# warps spills 564-588 bytes (the gather's 64-bit addresses, 16 a thread, beside the 128-register
# accumulator), 64 x 32 x 8 warps 116-148, 64 x 16 x 8 warps 4; 16 warps cap registers at 128 and
# spill more. Not yet timed on the H200.
def _config(heads):
    return {"block_h": 64 if heads > 32 else 32 if heads > 16 else 16, "block_k": 32, "num_warps": 8,
            "num_stages": 3}


CONFIG = {}


@functools.lru_cache(maxsize=None)
def _sm_count(device):
    if device.type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count


def _splits(programs, topk, block_k, sms):
    """plans.attention_splits for programs one per SM (the gathered tiles and Q fill shared memory);
    a split holds at least one tile of block_k indices."""
    return plans.attention_splits(programs, topk, sms, min_rows=max(block_k, 64))


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    return launch_split(_attention_kernel, q, layout, attn_sink, CONFIG, (kv, indices), (float(sm_scale),))


def launch_split(kernel, q, layout, attn_sink, config, rows_args, tail_args, **constants):
    """Both attention ops' launch: fresh out and lse, the split of the index list chosen by shape
    (or `config`), `kernel` over (request, head block, split) with arguments q, `rows_args`, sink, out,
    lse, part_out, part_lse, K, H, chunk, `tail_args` and the shared constexprs plus `constants`, then
    the combine of the splits. Returns (out, lse)."""
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    if layout.batch == 0:
        return out, lse
    cfg = {**_config(layout.heads), **config}
    head_blocks = triton.cdiv(layout.heads, cfg["block_h"])
    splits = cfg.get("splits") or _splits(layout.batch * head_blocks, layout.topk, cfg["block_k"], _sm_count(q.device))
    # each split a whole number of BLOCK_K steps, so only the list's end is ragged
    chunk = triton.cdiv(triton.cdiv(max(layout.topk, 1), splits), cfg["block_k"]) * cfg["block_k"]
    splits = triton.cdiv(max(layout.topk, 1), chunk)
    sink = attn_sink if attn_sink is not None else lse
    if splits > 1:
        part_out = torch.empty((layout.batch, splits, layout.heads, contract.ATTN_DIM), dtype=torch.float32,
                               device=q.device)
        part_lse = torch.empty((layout.batch, splits, layout.heads), dtype=torch.float32, device=q.device)
    else:
        part_out, part_lse = out, lse
    kernel[(layout.batch, head_blocks, splits)](
        q, *rows_args, sink, out, lse, part_out, part_lse, layout.topk, layout.heads, chunk, *tail_args,
        SPLIT=splits > 1, HAS_SINK=attn_sink is not None, BLOCK_H=cfg["block_h"], BLOCK_K=cfg["block_k"],
        D=contract.ATTN_DIM, F32_DOT=INTERPRET, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **constants)
    if splits > 1:
        combine_h = 16
        _combine_kernel[(layout.batch, triton.cdiv(layout.heads, combine_h))](
            part_out, part_lse, sink, out, lse, layout.heads, splits, HAS_SINK=attn_sink is not None,
            BLOCK_H=combine_h, SPLITS_POW2=triton.next_power_of_2(splits), D=contract.ATTN_DIM,
            INTERPRETING=INTERPRET, num_warps=4)
    return out, lse
