"""Plain-PyTorch `sparse_attention_fp8` (SPEC 8): gather the indexed 576-byte records and their
scale groups out of the paged cache, dequantise to fp32 (e4m3 x 2**(byte - 127) per 64 dims, the
RoPE dims as stored), then SPEC 4's attention as kernels_torch.sparse_attention computes it."""

import torch

from harness import contract
from kernels_torch.sparse_attention import attend_rows


def dequantize_gathered(kv_cache, indices, page_size):
    """fp32 [B, K, 512] dequantised rows at the slot ids `indices` (a -1 gives zeros) and valid [B, K]."""
    num_pages = kv_cache.shape[0]
    valid = indices >= 0
    slots = indices.long().clamp_min(0)
    page, o = slots // page_size, slots % page_size
    records = kv_cache[:, :contract.FP8_KV_ROW_BYTES * page_size].view(num_pages, page_size,
                                                                       contract.FP8_KV_ROW_BYTES)[page, o]
    groups = kv_cache[:, contract.FP8_KV_ROW_BYTES * page_size:contract.FP8_KV_TOKEN_BYTES * page_size]
    scale_bytes = groups.view(num_pages, page_size, contract.FP8_KV_SCALE_BYTES)[page, o, :contract.FP8_KV_SCALES]
    scales = torch.exp2(scale_bytes.float() - contract.FP8_KV_SCALE_BIAS)  # [B, K, 7]
    nope = records[..., :contract.FP8_KV_NOPE].view(torch.float8_e4m3fn).float()
    nope = nope.unflatten(-1, (contract.FP8_KV_SCALES, contract.FP8_KV_TILE)) * scales[..., None]
    rope = records[..., contract.FP8_KV_NOPE:].contiguous().view(torch.bfloat16).float()
    rows = torch.cat([nope.flatten(-2), rope], dim=-1)
    # a -1 reads slot 0, which may hold garbage: zero it (0 x NaN would be NaN)
    return rows.masked_fill(~valid[..., None], 0.0), valid


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                        attn_sink=attn_sink, validate=validate)
    rows, valid = dequantize_gathered(kv_cache, indices, page_size)
    return attend_rows(q, rows, valid, sm_scale=sm_scale, attn_sink=attn_sink)
