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
