"""Float64 reference of SPEC 3, `topk_indices`: top-k selection fused with the page-table translation."""

import torch

from harness import contract


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    out = torch.full((layout.batch, k), -1, dtype=torch.int32, device=logits.device)
    for b, n in enumerate(seq_lens.tolist()):
        if n <= k:  # short path: every valid column, ascending; the logits are not read
            raw = torch.arange(n, device=logits.device)
        else:  # the k largest; ties go to the lower column (any tie-break is valid)
            raw = torch.sort(logits[b, :n].double(), descending=True, stable=True).indices[:k]
        pages = page_table[b, raw // page_size].long()
        out[b, :len(raw)] = (pages * page_size + raw % page_size).int()
    return out
