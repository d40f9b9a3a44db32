"""FlashInfer's `top_k_page_table_transform` (package `flashinfer-python`) as the SPEC's
`topk_indices`.

Layouts: FlashInfer's page table holds one physical slot per token ([B, L]); the adapter builds it
from the SPEC's block table once per (table, page_size, L) (cached, outside the timed calls):
slot = page_table[b, t // page_size] * page_size + t % page_size. Rows with seq_len <= k come back
as the first seq_len slots in order, then -1, as the SPEC asks.

Declined: a call that takes FlashInfer's multi-CTA radix path (float32 rows: k > 2048, or
L > 32768 with at most L / 16384 rows) while some row is longer than k but shorter than L. There
FlashInfer 0.6.4 gives each CTA of a row one chunk of the L columns, and a CTA whose chunk starts
past its row's length computes a negative (unsigned) chunk size: an illegal address that breaks
the CUDA context (seen on the H200 at 2 x 262144 with lengths 262144 and 100000, k = 2048, and at
2 x 65536 with a row of 20000; equal lengths ran at every size tried). The rule is conservative:
it also declines short rows that stay inside their first chunks.
"""

from __future__ import annotations

from harness import contract
from kernels_peers._common import ConversionCache, declining, token_page_table, unavailable

FILTERED_MAX_K = 2048
_cache = ConversionCache()

compress, indexer_logits, sparse_attention = declining("FlashInfer", "compress", "indexer_logits", "sparse_attention")


def unavailable_reason(device):
    return unavailable(device, "flashinfer")


def _multi_cta(rows, columns, k):
    """FlashInfer 0.6.4's choice for float32 logits (ShouldUseFilteredTopK, on a GPU with the
    shared memory for its filtered kernel)."""
    return k > FILTERED_MAX_K or columns <= k or (columns > 32768 and rows <= columns // 16384)


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    if _multi_cta(layout.batch, layout.columns, k) and _cache.get(
            (seq_lens,), ("partial rows", k, layout.columns),
            lambda: bool(((seq_lens > k) & (seq_lens < layout.columns)).any())):
        raise contract.Unsupported("a row longer than k but shorter than the logits on FlashInfer's multi-CTA "
                                   "path: FlashInfer 0.6.4 reads past it (illegal address)")
    import flashinfer
    slots = _cache.get((page_table,), (page_size, layout.columns),
                       lambda: token_page_table(page_table, page_size, layout.columns))
    return flashinfer.top_k_page_table_transform(logits, slots, seq_lens, k)
