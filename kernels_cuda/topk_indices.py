"""CUDA `topk_indices` (topk_indices.cu): one 1024-thread block per row, radix select."""

import numpy as np
import torch

from harness import contract
from kernels_cuda._loader import launch


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    out = torch.empty((layout.batch, k), dtype=torch.int32, device=logits.device)
    if layout.batch:
        launch("topk_indices.cu", "dsv4_topk_indices", (layout.batch,), (1024,),
               (logits, np.int64(layout.columns), seq_lens, page_table, np.int64(page_table.stride(0)), out, k,
                page_size), logits.device)
    return out
