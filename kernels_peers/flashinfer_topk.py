"""FlashInfer's `top_k_page_table_transform` (package `flashinfer-python`) as the SPEC's
`topk_indices`.

Layouts: FlashInfer's page table holds one physical slot per token ([B, L]); the adapter builds it
from the SPEC's block table once per (table, page_size, L) (cached, outside the timed calls):
slot = page_table[b, t // page_size] * page_size + t % page_size. Rows with seq_len <= k come back
as the first seq_len slots in order, then -1, as the SPEC asks.
"""

from __future__ import annotations

from harness import contract
from kernels_peers._common import ConversionCache, declining, token_page_table, unavailable

_cache = ConversionCache()

compress, indexer_logits, sparse_attention = declining("FlashInfer", "compress", "indexer_logits", "sparse_attention")


def unavailable_reason(device):
    return unavailable(device, "flashinfer")


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    import flashinfer
    slots = _cache.get((page_table,), (page_size, layout.columns),
                       lambda: token_page_table(page_table, page_size, layout.columns))
    return flashinfer.top_k_page_table_transform(logits, slots, seq_lens, k)
