"""FlashMLA's `flash_mla_sparse_fwd` (package `sgl-flash-mla`) as the SPEC's `sparse_attention`.

Layouts: q as given ([B, H, 512]: B query rows); kv gains a head axis ([N, 1, 512], a view);
indices gain one ([B, 1, K], a view); -1 marks a skipped row in both. The sink joins the
denominator in both (FlashMLA multiplies the output by exp(lse) / (exp(lse) + exp(sink))); lse is
natural-log. On Hopper the kernel needs `use_legacy=True`. Supported: H in {64, 128} and K a
multiple of 128 (the Hopper kernel walks the indices in pairs of 64-wide blocks: it asserts
topk % (2 * 64) == 0, seen with sgl-flash-mla 1.0.0 on the H200).
"""

from __future__ import annotations

import torch

from harness import contract
from harness.contract import ATTN_DIM
from kernels_peers._common import declining, unavailable

HEADS = (64, 128)
TOPK_BLOCK = 128

compress, indexer_logits, topk_indices = declining("FlashMLA", "compress", "indexer_logits", "topk_indices")


def unavailable_reason(device):
    return unavailable(device, "flash_mla")


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    if layout.heads not in HEADS:
        raise contract.Unsupported(f"H={layout.heads}: FlashMLA's sparse kernel takes H in {HEADS}")
    if layout.topk % TOPK_BLOCK:
        raise contract.Unsupported(f"K={layout.topk}: FlashMLA's sparse kernel takes K in multiples of {TOPK_BLOCK}")
    from flash_mla import flash_mla_sparse_fwd
    legacy = q.is_cuda and torch.cuda.get_device_capability(q.device)[0] == 9  # Hopper
    out, _, lse = flash_mla_sparse_fwd(q, kv.view(kv.shape[0], 1, ATTN_DIM),
                                       indices.view(indices.shape[0], 1, indices.shape[1]), float(sm_scale),
                                       d_v=ATTN_DIM, attn_sink=attn_sink, use_legacy=legacy)
    return out, lse


FP8_TOPK_BLOCK = 64  # the FP8 decode kernel walks the indices in blocks of 64
_FP8_SCHEDULES = {}  # (device, batch, heads, K, page size) -> FlashMLA's filled tile-schedule metadata


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    """FlashMLA's FP8 decode kernel, `flash_mla_with_kvcache(..., is_fp8_kvcache=True, indices=...,
    use_legacy=True)` (SPEC 8's anchor). Layouts: q [B, 1, H, 512] (one query token a request);
    the cache's first 584 * page_size bytes of each page as [pages, page_size, 1, 584] (the kernel
    tells the V4 format by the 584 bytes a token and takes the page stride from the view's stride);
    indices [B, 1, K] slot ids. The kernel returns lse [B, H, 1] and +inf for a row with no valid
    index: mapped to SPEC's -inf. Supported: H in {64, 128}, K a multiple of 64. Checked on the H200
    (results/h200/2026-12-01-speed)."""
    layout = contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                                 attn_sink=attn_sink, validate=validate)
    if layout.heads not in HEADS:
        raise contract.Unsupported(f"H={layout.heads}: FlashMLA's FP8 decode kernel takes H in {HEADS}")
    if layout.topk % FP8_TOPK_BLOCK:
        raise contract.Unsupported(f"K={layout.topk}: FlashMLA's FP8 decode kernel takes K in multiples of "
                                   f"{FP8_TOPK_BLOCK}")
    from flash_mla import flash_mla_with_kvcache, get_mla_metadata
    pages = kv_cache[:, :contract.FP8_KV_TOKEN_BYTES * page_size].view(
        layout.num_pages, page_size, 1, contract.FP8_KV_TOKEN_BYTES)
    # FlashMLA fills the schedule on a metadata object's first call and reuses it after; for sparse
    # decode it depends on shapes only (batch, heads, K, page size), so one is kept per shape and
    # device, as an engine keeps one per forward step (contract §7: a shape-only schedule may be cached)
    key = (q.device, layout.batch, layout.heads, layout.topk, page_size)
    metadata = _FP8_SCHEDULES.get(key)
    if metadata is None:
        metadata = _FP8_SCHEDULES[key] = get_mla_metadata()[0]
    out, lse = flash_mla_with_kvcache(q.view(layout.batch, 1, layout.heads, ATTN_DIM), pages, None, None, ATTN_DIM,
                                      metadata, softmax_scale=float(sm_scale), is_fp8_kvcache=True,
                                      indices=indices.view(layout.batch, 1, layout.topk), attn_sink=attn_sink,
                                      use_legacy=True)
    lse = lse.view(layout.batch, layout.heads)
    return out.view(layout.batch, layout.heads, ATTN_DIM), lse.masked_fill(lse == float("inf"), float("-inf"))
