"""Known wrong (contract §7): the planned call ignores the plan's work and plans again from the lengths
on every call (a host copy: the host waits for the device), so it cannot be captured in a CUDA graph.
Results are right: only the graph check on a GPU can reject it."""

import references
from harness import plans
from references import indexer_logits, sparse_attention, sparse_attention_fp8, topk_indices  # noqa: F401

compress_plan = plans.compress_plan


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    if plan is not None:
        plans.check_compress_plan(plan, prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                  page_table=page_table, validate=validate, device=kv_score.device)
        plans.compress_plan(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                            page_table=page_table, validate=False)  # the bug: planned again, with a sync
    return references.compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens, extend_lens=extend_lens,
                               mode=mode, state_rows=state_rows, page_table=page_table, validate=validate)
