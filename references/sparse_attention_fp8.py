"""Float64 reference of SPEC 8, `sparse_attention_fp8`: SPEC 4's attention over the FP8 cache.

The records the indices name are read by byte offset as SPEC 8 lays them out (448 e4m3 dims at
576 * o in the page, 64 bf16 RoPE dims after them, 7 ue8m0 scales at 576 * page_size + 8 * o),
dequantised in float64 (x = e4m3 * 2**(byte - 127) per 64 dims; RoPE dims as stored), and handed
to SPEC 4's float64 math. No other byte of the cache is read.
"""

import torch

from harness import contract
from harness.inputs import dequantize_attention_rows, read_attention_fp8_cache
from references.sparse_attention import attend


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                        attn_sink=attn_sink, validate=validate)
    named, rows_of = torch.unique(indices[indices >= 0].long(), return_inverse=True)
    kv = dequantize_attention_rows(*read_attention_fp8_cache(kv_cache, named, page_size)).to(q.device)
    compact = torch.full(indices.shape, -1, dtype=torch.long, device=indices.device)
    compact[indices >= 0] = rows_of  # the slot ids renumbered into the rows of kv
    return attend(q, kv, compact, sm_scale=sm_scale, attn_sink=attn_sink)
