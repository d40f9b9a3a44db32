"""Plain-PyTorch `topk_indices` (SPEC 3): torch.topk over order-preserving integer keys, so columns
past seq_len (set below every float) can never tie with a valid -inf."""

import torch

from harness import contract


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    device = logits.device
    bits = logits.view(torch.int32).long()
    keys = torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)  # float order as integers
    cols = torch.arange(layout.columns, device=device)
    lens = seq_lens.long()[:, None]
    keys = keys.masked_fill(cols[None, :] >= lens, torch.iinfo(torch.int64).min)
    width = min(k, layout.columns)
    raw = torch.topk(keys, width, dim=1).indices if width else keys.new_zeros(layout.batch, 0)
    if width < k:
        raw = torch.cat([raw, raw.new_zeros(layout.batch, k - width)], 1)
    slot = torch.arange(k, device=device)[None, :]
    raw = torch.where(lens <= k, slot, raw)  # short rows: every valid column, ascending
    valid = slot < lens.clamp(max=k)
    raw = raw.masked_fill(~valid, 0)
    pages = page_table.long().gather(1, (raw // page_size).clamp(max=max(page_table.shape[1] - 1, 0)))
    return torch.where(valid, pages * page_size + raw % page_size, -1).int()
