"""CUDA `sparse_attention` (sparse_attention.cu).

KERNEL "h64" (default): one 8-warp CTA per (query row, 64 heads, split of the index list), bf16
tensor-core mma over gathered tiles of 32 rows, 3-stage cp.async; with several splits a combine
kernel merges them. KERNEL "h16": the earlier kernel, one 4-warp CTA per (query row, 16 heads)."""

import functools

import torch

from harness import contract
from kernels_cuda._loader import launch

KERNEL = "h64"
SPLITS = None  # None: chosen by shape (_splits); an int forces it (tuning)

TILE, KV_STRIDE = 32, 1040  # as in sparse_attention.cu
# h16
HEADS_PER_CTA = 16
WARPS = 4
SHARED_BYTES = 2 * TILE * KV_STRIDE + WARPS * 16 * 32 * 4 + 2 * TILE * 4
# h64
H64_HEADS, H64_WARPS, STAGES = 64, 8, 3
H64_SHARED_BYTES = STAGES * TILE * KV_STRIDE + H64_WARPS * 16 * 32 * 4 + STAGES * TILE * 4 + H64_HEADS * KV_STRIDE
MAX_SPLITS = 64
MIN_SPLIT_ROWS = 64  # a split of fewer rows costs more in Q load and combine than it saves
PART_COST_ROWS = 128  # a CTA's fp32 partial [64, 512] written and read back, in 1 KB gathered rows
CTA_COST_ROWS = 64  # a CTA's fixed cost (Q load, pipeline fill, epilogue), in gathered rows


@functools.lru_cache(maxsize=None)
def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=None)
def _shared_optin(device):
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "shared_memory_per_block_optin", 232448 if props.major >= 9 else 166912)


def _splits(ctas, topk, sms):
    """Fewest waves x rows per CTA (one CTA per SM: 253 registers a thread): split the index list
    only where the grid is short of the SMs; each split beyond one costs a partial written and
    combined."""
    best, best_cost = 1, None
    for s in range(1, min(MAX_SPLITS, max(1, contract.cdiv(topk, MIN_SPLIT_ROWS))) + 1):
        waves = contract.cdiv(ctas * s, sms)
        cost = waves * (contract.cdiv(topk, s) + CTA_COST_ROWS + (PART_COST_ROWS if s > 1 else 0))
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink,
                                             validate=validate)
    out = torch.empty_like(q)
    lse = torch.empty((layout.batch, layout.heads), dtype=torch.float32, device=q.device)
    if not layout.batch:
        return out, lse
    has_sink = "true" if attn_sink is not None else "false"
    sink = attn_sink if attn_sink is not None else lse
    # h64 takes 179 KB of shared memory: Hopper's 227 KB fits it, the A100's 163 KB does not
    if KERNEL == "h16" or _shared_optin(q.device) < H64_SHARED_BYTES:
        launch("sparse_attention.cu", f"dsv4_sparse_attention<{has_sink}>",
               (layout.batch, contract.cdiv(layout.heads, HEADS_PER_CTA)), (WARPS * 32,),
               (q, kv, indices, sink, out, lse, layout.topk, layout.heads, float(sm_scale)), q.device,
               shared_mem=SHARED_BYTES)
        return out, lse
    head_blocks = contract.cdiv(layout.heads, H64_HEADS)
    topk = max(layout.topk, 1)
    splits = SPLITS or _splits(layout.batch * head_blocks, topk, _sm_count(q.device))
    chunk = contract.cdiv(contract.cdiv(topk, splits), TILE) * TILE  # whole tiles; only the list's end is ragged
    splits = contract.cdiv(topk, chunk)
    if splits > 1:
        part_out = torch.empty((layout.batch, splits, layout.heads, contract.ATTN_DIM), dtype=torch.float32,
                               device=q.device)
        part_lse = torch.empty((layout.batch, splits, layout.heads), dtype=torch.float32, device=q.device)
    else:
        part_out, part_lse = lse, lse  # not read
    launch("sparse_attention.cu", f"dsv4_sparse_attention_h64<{has_sink}, {'true' if splits > 1 else 'false'}>",
           (layout.batch, head_blocks, splits), (H64_WARPS * 32,),
           (q, kv, indices, sink, out, lse, part_out, part_lse, layout.topk, layout.heads, chunk, float(sm_scale)),
           q.device, shared_mem=H64_SHARED_BYTES)
    if splits > 1:
        launch("sparse_attention.cu", f"dsv4_sparse_attention_combine<{has_sink}>", (layout.batch, layout.heads),
               (contract.ATTN_DIM // 4,), (part_out, part_lse, sink, out, lse, layout.heads, splits), q.device)
    return out, lse
