"""Known wrong: correct math, but the data-dependent checks never run (validate forced off), so bad
lengths, tables and indices are not rejected with a ValueError."""

from tests.known_wrong import correct


def _unvalidated(op):
    def call(*args, **kwargs):
        kwargs["validate"] = False
        return op(*args, **kwargs)
    return call


compress = _unvalidated(correct.compress)
indexer_logits = _unvalidated(correct.indexer_logits)
topk_indices = _unvalidated(correct.topk_indices)
sparse_attention = _unvalidated(correct.sparse_attention)
sparse_attention_fp8 = _unvalidated(correct.sparse_attention_fp8)
