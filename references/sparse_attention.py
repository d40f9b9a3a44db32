"""Float64 reference of SPEC 4, `sparse_attention`: MQA over gathered cache rows (K = V), with a sink.

For each query row b and head h over the valid indices i (-1 skipped, duplicates counted twice):
s_i = sm_scale * q[b, h] . kv[idx_i];  lse = log sum_i exp(s_i)  (the sink is not in it);
out = sum_i exp(s_i - lse) kv[idx_i] / (1 + exp(sink[h] - lse)).  No valid index: out 0, lse -inf.
"""

import torch

from harness import contract


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink, validate=validate)
    return attend(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink)


def attend(q, kv, indices, *, sm_scale, attn_sink=None):
    """The math above in float64 over rows of any float kv (validated input; shared with SPEC 8)."""
    batch, heads = q.shape[:2]
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((batch, heads), float("-inf"), dtype=torch.float64, device=q.device)
    for b in range(batch):
        rows = indices[b][indices[b] >= 0].long()
        if rows.numel() == 0:
            continue
        k = kv[rows].double()  # [n, 512], also the values
        scores = sm_scale * (q[b].double() @ k.T)  # [H, n]
        lse[b] = torch.logsumexp(scores, dim=1)
        out[b] = torch.exp(scores - lse[b][:, None]) @ k
        if attn_sink is not None:
            out[b] /= (1 + torch.exp(attn_sink.double() - lse[b]))[:, None]
    return out.bfloat16(), lse.float()
