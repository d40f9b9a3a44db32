"""DeepGEMM's `fp8_paged_mqa_logits` (package `sgl-deep-gemm`) as the SPEC's `indexer_logits`.

Layouts: DeepGEMM's paged cache is the SPEC's, seen as [blocks, 64, 1, 132] (a view, no copy);
the query gains a next_n axis of 1 ([B, 1, H, 128], a view); context_lens goes in 2-D ([B, 1], a
view: the Hopper kernel wants it so); the schedule metadata comes from
`get_paged_mqa_logits_metadata` once per context_lens (cached, outside the timed calls).
Supported: H = 64 (the kernel is built for next_n * heads = 64). The logits past each context are
set to -inf by the adapter, one masked fill (timed with the call) over a mask built once per
context_lens: DeepGEMM's own cleaning (`clean_logits=True`) asserts 1-D context_lens, which its
Hopper kernel refuses (seen with sgl-deep-gemm 0.1.5.post1 on the H200).
"""

from __future__ import annotations

import math

import torch

from harness import contract
from harness.contract import INDEXER_BLOCK
from kernels_peers._common import ConversionCache, declining, unavailable

HEADS = 64
_cache = ConversionCache()

compress, topk_indices, sparse_attention = declining("DeepGEMM", "compress", "topk_indices", "sparse_attention")


def unavailable_reason(device):
    return unavailable(device, "deep_gemm", "tvm_ffi")


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    if layout.heads != HEADS:
        raise contract.Unsupported(f"H={layout.heads}: DeepGEMM's paged MQA logits kernel is built for {HEADS} heads")
    import deep_gemm
    lens_2d, schedule, past = _cache.get((context_lens,), max_context_len,
                                         lambda: _schedule(deep_gemm, context_lens, max_context_len))
    cache = kv_cache.view(kv_cache.shape[0], INDEXER_BLOCK, 1, kv_cache.shape[1] // INDEXER_BLOCK)
    logits = deep_gemm.fp8_paged_mqa_logits(q_fp8.unsqueeze(1), cache, weights, lens_2d, block_table, schedule,
                                            max_context_len, clean_logits=False)
    return logits.masked_fill_(past, -math.inf)


def _schedule(deep_gemm, context_lens, max_context_len):
    """2-D lens, DeepGEMM's schedule metadata and the mask of columns past each context."""
    lens_2d = context_lens.view(-1, 1)
    past = torch.arange(max_context_len, device=context_lens.device) >= lens_2d
    return lens_2d, deep_gemm.get_paged_mqa_logits_metadata(lens_2d, INDEXER_BLOCK, deep_gemm.get_num_sms()), past
