"""Known wrong (contract §7): with a plan, the op takes the lengths from the plan and never compares them
with its own arguments, even with validate=True, so a plan made from other metadata is trusted."""

import torch

import references
from harness import contract, plans
from references import indexer_logits, sparse_attention, sparse_attention_fp8, topk_indices  # noqa: F401

compress_plan = plans.compress_plan


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens, extend_lens=extend_lens,
                            mode=mode, state_rows=state_rows, page_table=page_table, validate=validate)
    if isinstance(plan, plans.Plan):  # the bug: the plan's metadata replaces the call's, never compared
        values = {name: torch.from_numpy(f.values).to(kv_score.device) if f is not None else None
                  for name, f in plan.metadata.items()}
        prefix_lens, extend_lens = values["prefix_lens"], values["extend_lens"]
        state_rows, page_table = values["state_rows"], values["page_table"]
    elif plan is not None:
        raise contract.InputError("plan", "not a plan")
    return references.compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens, extend_lens=extend_lens,
                               mode=mode, state_rows=state_rows, page_table=page_table, validate=False)
