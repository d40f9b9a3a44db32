"""CUDA `indexer_logits` (indexer_logits.cu): one 4-warp CTA per (request, 8 cache blocks of 64
entries), fp16 tensor-core dots of the e4m3 query heads with the e4m3 keys."""

import numpy as np
import torch

from harness import contract
from kernels_cuda._loader import launch

WARPS = 4
BLOCKS_PER_CTA = 8  # as in indexer_logits.cu


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if layout.batch and max_context_len:
        grid = (layout.batch, contract.cdiv(max_context_len, contract.INDEXER_BLOCK * BLOCKS_PER_CTA))
        launch("indexer_logits.cu", "dsv4_indexer_logits", grid, (WARPS * 32,),
               (q_fp8, weights, kv_cache, context_lens, block_table, np.int64(block_table.stride(0)), out,
                max_context_len, layout.heads), q_fp8.device)
    return out
