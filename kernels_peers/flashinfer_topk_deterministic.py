"""FlashInfer's top-k in its deterministic mode (flashinfer-python >= 0.7: the radix kernels with a
reproducible selection and order) as a backend of its own, so one run times it beside FlashInfer's
default dispatch. Everything but the mode is flashinfer_topk's (layouts, planner, declines); with
FlashInfer 0.6 every top-k case is declined (it has no such mode)."""

from __future__ import annotations

from kernels_peers import flashinfer_topk as _base

compress, indexer_logits, sparse_attention, sparse_attention_fp8 = (
    _base.compress, _base.indexer_logits, _base.sparse_attention, _base.sparse_attention_fp8)
unavailable_reason, topk_indices_plan = _base.unavailable_reason, _base.topk_indices_plan


def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True, plan=None):
    return _base.topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate, plan=plan,
                              mode="deterministic")
