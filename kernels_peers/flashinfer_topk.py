"""FlashInfer's `top_k_page_table_transform` (package `flashinfer-python`) as the SPEC's
`topk_indices`.

Layouts: FlashInfer's page table holds one physical slot per token ([B, L]); the adapter's
`topk_indices_plan` (SPEC 7: once per step) builds it from the SPEC's block table for every token
the table covers: slot = page_table[b, t // page_size] * page_size + t % page_size. Rows with seq_len <= k come back
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

from harness import contract, plans
from kernels_peers._common import declining, token_page_table, unavailable

FILTERED_MAX_K = 2048

compress, indexer_logits, sparse_attention, sparse_attention_fp8 = declining(
    "FlashInfer", "compress", "indexer_logits", "sparse_attention", "sparse_attention_fp8")


def unavailable_reason(device):
    return unavailable(device, "flashinfer")


def _multi_cta(rows, columns, k):
    """FlashInfer 0.6.4's choice for float32 logits (ShouldUseFilteredTopK, on a GPU with the
    shared memory for its filtered kernel)."""
    return k > FILTERED_MAX_K or columns <= k or (columns > 32768 and rows <= columns // 16384)


def topk_indices_plan(seq_lens, page_table, *, k=512, page_size=64, validate=True):
    """The per-token slot table FlashInfer reads, for every token the block table covers, and the
    host lengths the decline rule reads (so a planned call need not copy them)."""
    contract.check_topk_metadata(seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    return plans.make_plan("topk_indices", seq_lens.device, {"k": k, "page_size": page_size},
                           {"seq_lens": seq_lens, "page_table": page_table},
                           slots=token_page_table(page_table, page_size, page_table.shape[1] * page_size),
                           lens=seq_lens.tolist())


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True, plan=None):
    layout = contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
    if plan is None:
        plan = topk_indices_plan(seq_lens, page_table, k=k, page_size=page_size, validate=False)
    else:
        plans.check_plan(plan, "topk_indices", logits.device, {"k": k, "page_size": page_size},
                         {"seq_lens": seq_lens, "page_table": page_table}, validate)
    if _multi_cta(layout.batch, layout.columns, k) and any(k < n < layout.columns for n in plan["lens"]):
        raise contract.Unsupported("a row longer than k but shorter than the logits on FlashInfer's multi-CTA "
                                   "path: FlashInfer 0.6.4 reads past it (illegal address)")
    import flashinfer
    # FlashInfer reads the slot table by its own row stride and only below each row's length, so a
    # table as wide as the block table covers serves logits of any width (its source checks that it
    # is contiguous, not its width)
    return flashinfer.top_k_page_table_transform(logits, plan["slots"], seq_lens, k)
