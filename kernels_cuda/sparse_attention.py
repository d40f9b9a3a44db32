"""CUDA `sparse_attention` (sparse_attention.cu): one 4-warp CTA per (query row, 16 heads), bf16
tensor-core mma over gathered tiles of 32 rows."""

import torch

from harness import contract
from kernels_cuda._loader import launch

HEADS_PER_CTA = 16
WARPS = 4
TILE, KV_STRIDE = 32, 1040  # as in sparse_attention.cu
SHARED_BYTES = 2 * TILE * KV_STRIDE + WARPS * 16 * 32 * 4 + 2 * TILE * 4


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    if layout.batch:
        expr = "dsv4_sparse_attention<true>" if attn_sink is not None else "dsv4_sparse_attention<false>"
        launch("sparse_attention.cu", expr, (layout.batch, contract.cdiv(layout.heads, HEADS_PER_CTA)), (WARPS * 32,),
               (q, kv, indices, attn_sink if attn_sink is not None else lse, out, lse, layout.topk, layout.heads,
                float(sm_scale)), q.device, shared_mem=SHARED_BYTES)
    return out, lse
