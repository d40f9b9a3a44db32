"""What the peer adapters share: declining ops they lack, the conversion cache, the reason a peer
cannot run, stand-in packages, and the per-token page table."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

import torch

from harness import contract


def declining(peer, *ops):
    """SPEC functions for ops the peer lacks: validate as every backend does, then decline."""
    def decline(op):
        raise contract.Unsupported(f"{peer} has no {op} kernel")

    def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
                 validate=True):
        contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens, extend_lens=extend_lens,
                                mode=mode, state_rows=state_rows, page_table=page_table, validate=validate)
        decline("compress")

    def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
        contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                      max_context_len=max_context_len, validate=validate)
        decline("indexer_logits")

    def topk_indices(logits, seq_lens, page_table, *, k=512, page_size=64, validate=True):
        contract.check_topk_indices(logits, seq_lens, page_table, k=k, page_size=page_size, validate=validate)
        decline("topk_indices")

    def sparse_attention(q, kv, indices, *, sm_scale, attn_sink=None, validate=True):
        contract.check_sparse_attention(q, kv, indices, sm_scale=sm_scale, attn_sink=attn_sink, validate=validate)
        decline("sparse_attention")

    def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
        contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                            attn_sink=attn_sink, validate=validate)
        decline("sparse_attention_fp8")

    found = {"compress": compress, "indexer_logits": indexer_logits, "topk_indices": topk_indices,
             "sparse_attention": sparse_attention, "sparse_attention_fp8": sparse_attention_fp8}
    return tuple(found[op] for op in ops)


def _identity(t):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device, t._version)


class ConversionCache:
    """Converted inputs keyed on the source tensors (storage, shape, strides, dtype and version, so
    an in-place change rebuilds) and a hashable tag; the newest `size` entries are kept (more than
    the input copies the benchmark rotates through in one CUDA graph, so a capture finds them). An entry
    holds its source tensors, so their memory cannot be handed to another tensor (which would then
    match the key) while the entry lives."""

    def __init__(self, size=64):
        self.size, self.entries = size, {}

    def get(self, tensors, tag, build):
        key = (tuple(_identity(t) for t in tensors), tag)
        if key not in self.entries:
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))
            self.entries[key] = (tuple(tensors), build())
        return self.entries[key][1]


def unavailable(device, *packages):
    """Why a peer cannot run on `device`: not CUDA, no GPU, or a package missing; else None."""
    if str(device).split(":")[0] != "cuda":
        return "peer kernels run on CUDA devices only"
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        return (f"package(s) {', '.join(missing)} not installed (ci/peer_wheels.sh fetches the wheels; "
                f"pip install --no-deps them)")
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None


def stand_in(name, path=None, **attrs):
    """A light module registered as `name` (a peer package whose `__init__` imports far more than
    the launchers an adapter needs), with a spec (find_spec, which the registry's availability check
    calls, reads a registered module's spec) and, for a package, its real folder."""
    if name in sys.modules:  # the real module (or our stand-in) is there already
        return
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=path is not None)
    if path is not None:
        module.__path__ = module.__spec__.submodule_search_locations = [str(path)]
    module.__dict__.update(attrs)
    sys.modules[name] = module


def token_page_table(page_table, page_size, columns):
    """SPEC's block table [B, P] (page_size tokens per page) as one physical slot per token
    [B, columns] (int32): slot(b, t) = page_table[b, t // page_size] * page_size + t % page_size,
    -1 where the page is -1 or past the table."""
    if page_table.shape[1] == 0:
        return torch.full((page_table.shape[0], columns), -1, dtype=torch.int32, device=page_table.device)
    t = torch.arange(columns, device=page_table.device)
    block, within = t // page_size, t % page_size
    inside = block < page_table.shape[1]
    pages = page_table[:, block.clamp(max=page_table.shape[1] - 1)].long()
    slots = pages * page_size + within
    return torch.where(inside & (pages >= 0), slots, torch.full_like(slots, -1)).to(torch.int32).contiguous()
