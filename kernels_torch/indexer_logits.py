"""Plain-PyTorch `indexer_logits` (SPEC 2): gather the blocks, dequantise, one fp32 batched matmul."""

import torch

from harness import contract


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    device = q_fp8.device
    blocks = min(contract.cdiv(max_context_len, contract.INDEXER_BLOCK), block_table.shape[1])
    span = blocks * contract.INDEXER_BLOCK
    # columns past a context's blocks may hold anything (stale entries): read block 0 there instead
    needed = (context_lens.long()[:, None] + contract.INDEXER_BLOCK - 1) // contract.INDEXER_BLOCK
    table = block_table[:, :blocks].long()
    table = torch.where(torch.arange(blocks, device=device)[None, :] < needed, table, 0)
    nb = kv_cache.shape[0]
    keys = kv_cache[:, :contract.INDEXER_KEY_BYTES].view(torch.float8_e4m3fn).view(nb, 64, 128)
    scales = kv_cache.view(torch.float32)[:, contract.INDEXER_KEY_BYTES // 4:]  # [nb, 64]
    k = keys[table].reshape(layout.batch, span, contract.INDEXER_DIM).float()
    s = scales[table].reshape(layout.batch, span)
    scores = torch.bmm(q_fp8.float(), k.transpose(1, 2)) * s[:, None, :]  # [B, H, span]
    logits = (torch.relu(scores) * weights[:, :, None]).sum(1)
    t = torch.arange(span, device=device)
    logits = logits.masked_fill(t[None, :] >= context_lens[:, None], float("-inf"))
    out = torch.full((layout.batch, max_context_len), float("-inf"), device=device)
    width = min(span, max_context_len)
    out[:, :width] = logits[:, :width]
    return out
