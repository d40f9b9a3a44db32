"""DeepGEMM's `fp8_paged_mqa_logits` (package `sgl-deep-gemm`) as the SPEC's `indexer_logits`.

Layouts: DeepGEMM's paged cache is the SPEC's, seen as [blocks, 64, 1, 132] (a view, no copy);
the query gains a next_n axis of 1 ([B, 1, H, 128], a view); context_lens goes in 2-D ([B, 1], a
view: the Hopper kernel wants it so); the schedule metadata from `get_paged_mqa_logits_metadata` is
the adapter's `indexer_logits_plan` (SPEC 7: once per step, outside the per-layer call); a call
without a plan makes one.
Supported: H = 64 (the kernel is built for next_n * heads = 64). The logits past each context are
set to -inf by the adapter, one masked fill (timed with the call) over a mask built once per
context_lens: DeepGEMM's own cleaning (`clean_logits=True`) asserts 1-D context_lens, which its
Hopper kernel refuses (seen with sgl-deep-gemm 0.1.5.post1 on the H200).
"""

from __future__ import annotations

import math

import torch

from harness import contract, plans
from harness.contract import INDEXER_BLOCK
from kernels_peers._common import declining, unavailable

HEADS = 64

compress, topk_indices, sparse_attention, sparse_attention_fp8 = declining(
    "DeepGEMM", "compress", "topk_indices", "sparse_attention", "sparse_attention_fp8")


def unavailable_reason(device):
    """Missing packages, else whether deep_gemm loads: from 0.1.5.post3 on its `_C.so` is a
    TORCH_LIBRARY extension linked against one torch's C++ ABI (0.2.5's needs a c10 CUDA check
    that torch 2.11 lacks), so a wheel built for another torch fails at import, which is reported
    here instead of failing every case. 0.1.5.post1 loads through apache-tvm-ffi."""
    reason = unavailable(device, "deep_gemm")
    if reason is None:
        try:
            import deep_gemm  # noqa: F401
        except (ImportError, OSError, RuntimeError) as err:
            cause = err.__cause__ or err.__context__  # torch's "Could not load this library" wraps the dlopen error
            reason = f"deep_gemm does not load with torch {torch.__version__}: {err}" + (f" ({cause})" if cause else "")
    return reason


def indexer_logits_plan(context_lens, block_table, *, max_context_len, validate=True):
    """DeepGEMM's schedule metadata for these context lengths, with the 2-D lens and the mask of
    columns past each context that the adapter's cleaning uses."""
    contract.check_indexer_metadata(context_lens, block_table, max_context_len=max_context_len, validate=validate)
    import deep_gemm
    lens_2d = context_lens.view(-1, 1)
    past = torch.arange(max_context_len, device=context_lens.device) >= lens_2d
    schedule = deep_gemm.get_paged_mqa_logits_metadata(lens_2d, INDEXER_BLOCK, deep_gemm.get_num_sms())
    return plans.make_plan("indexer_logits", context_lens.device, {"max_context_len": max_context_len},
                           {"context_lens": context_lens, "block_table": block_table},
                           lens_2d=lens_2d, schedule=schedule, past=past)


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True,
                   plan=None):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    if layout.heads != HEADS:
        raise contract.Unsupported(f"H={layout.heads}: DeepGEMM's paged MQA logits kernel is built for {HEADS} heads")
    import deep_gemm
    if plan is None:
        plan = indexer_logits_plan(context_lens, block_table, max_context_len=max_context_len, validate=False)
    else:
        plans.check_plan(plan, "indexer_logits", q_fp8.device, {"max_context_len": max_context_len},
                         {"context_lens": context_lens, "block_table": block_table}, validate)
    cache = kv_cache.view(kv_cache.shape[0], INDEXER_BLOCK, 1, kv_cache.shape[1] // INDEXER_BLOCK)
    logits = deep_gemm.fp8_paged_mqa_logits(q_fp8.unsqueeze(1), cache, weights, plan["lens_2d"], block_table,
                                            plan["schedule"], max_context_len, clean_logits=False)
    return logits.masked_fill_(plan["past"], -math.inf)
