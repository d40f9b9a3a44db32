"""CUDA `sparse_attention` (sparse_attention.cu): one 8-warp block per (query row, 8 heads)."""

import torch

from harness import contract
from kernels_cuda._loader import launch

HEADS_PER_BLOCK = 8


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    if layout.batch:
        expr = "sparse_attention<true>" if attn_sink is not None else "sparse_attention<false>"
        launch("sparse_attention.cu", expr, (layout.batch, contract.cdiv(layout.heads, HEADS_PER_BLOCK)), (256,),
               (q, kv, indices, attn_sink if attn_sink is not None else lse, out, lse, layout.topk, layout.heads,
                float(sm_scale)), q.device)
    return out, lse
