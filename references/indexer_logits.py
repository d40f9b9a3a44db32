"""Float64 reference of SPEC 2, `indexer_logits`: paged FP8 MQA logits, one query per request.

logits[b, t] = sum_h weights[b, h] * relu(dot(q[b, h], k[t]) * k_scale[t]) for t < context_lens[b],
-inf after. Keys and scales are read from the block-major cache through the block table.
"""

import torch

from harness import contract


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    keys, scales = _unpack_cache(kv_cache)
    q = q_fp8.double()  # exact: every e4m3 value is a float64
    logits = torch.full((layout.batch, max_context_len), float("-inf"), dtype=torch.float64, device=q.device)
    for b, n in enumerate(context_lens.tolist()):
        blocks = block_table[b, :contract.cdiv(n, contract.INDEXER_BLOCK)].long()
        k = keys[blocks].reshape(-1, contract.INDEXER_DIM)[:n]  # [n, 128], entry t = block t//64, row t%64
        k_scale = scales[blocks].reshape(-1)[:n]
        scores = (q[b] @ k.T) * k_scale  # [H, n]
        logits[b, :n] = (weights[b].double()[:, None] * torch.relu(scores)).sum(dim=0)
    return logits.float()


def _unpack_cache(kv_cache):
    """uint8 [blocks, 64*132] -> float64 keys [blocks, 64, 128] and float64 scales [blocks, 64]."""
    blocks = kv_cache.shape[0]
    keys = kv_cache[:, :contract.INDEXER_KEY_BYTES].contiguous().view(torch.float8_e4m3fn)
    scales = kv_cache[:, contract.INDEXER_KEY_BYTES:].contiguous().view(torch.float32)
    return (keys.double().reshape(blocks, contract.INDEXER_BLOCK, contract.INDEXER_DIM),
            scales.double().reshape(blocks, contract.INDEXER_BLOCK))
