"""CUDA `indexer_logits` (indexer_logits.cu): one 256-thread block per (request, 64-entry block)."""

import numpy as np
import torch

from harness import contract
from kernels_cuda._loader import launch


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if layout.batch and max_context_len:
        grid = (layout.batch, contract.cdiv(max_context_len, contract.INDEXER_BLOCK))
        launch("indexer_logits.cu", "indexer_logits", grid, (256,),
               (q_fp8, weights, kv_cache, context_lens, block_table, np.int64(block_table.stride(0)), out,
                max_context_len, layout.heads), q_fp8.device)
    return out
