"""Plain-PyTorch `sparse_attention` (SPEC 4): gather, fp32 einsum, softmax with the sink as an extra
column that only enlarges the denominator."""

import torch

from harness import contract


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink, validate=validate)
    valid = indices >= 0
    # a -1 reads row 0, which may be a free slot holding NaN: zero it (0 x NaN would be NaN)
    rows = kv[indices.long().clamp_min(0)].float().masked_fill(~valid[..., None], 0.0)  # [B, K, 512]
    return attend_rows(q, rows, valid, sm_scale=sm_scale, attn_sink=attn_sink)


def attend_rows(q, rows, valid, *, sm_scale, attn_sink=None):
    """The attention over gathered fp32 rows [B, K, 512] (zero where not valid), valid bool [B, K]."""
    batch, heads, topk = q.shape[0], q.shape[1], rows.shape[1]
    scores = torch.einsum("bhd,bkd->bhk", q.float(), rows) * sm_scale
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    if attn_sink is not None:
        sink = attn_sink[None, :, None].expand(batch, heads, 1)
        probs = torch.softmax(torch.cat([scores, sink], -1), dim=-1)[..., :topk]
    else:
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # empty rows: 0/0
    out = torch.einsum("bhk,bkd->bhd", probs, rows)
    return out.bfloat16(), lse
