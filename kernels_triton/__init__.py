"""Triton backend: the five SPEC ops, one file per op. On the CPU the kernels run in Triton's
interpreter (TRITON_INTERPRET=1, which must be set before Triton is imported)."""

import os

from kernels_triton.compress import compress, compress_plan
from kernels_triton.indexer_logits import indexer_logits
from kernels_triton.sparse_attention import sparse_attention
from kernels_triton.sparse_attention_fp8 import sparse_attention_fp8
from kernels_triton.topk_indices import topk_indices

__all__ = ["compress", "compress_plan", "indexer_logits", "topk_indices", "sparse_attention", "sparse_attention_fp8",
           "unavailable_reason"]


def unavailable_reason(device):
    import torch
    kind = str(device).split(":")[0]
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if kind == "cpu" and not interpreting:
        return "Triton runs on the CPU only in its interpreter: set TRITON_INTERPRET=1 before importing it"
    if kind == "cuda" and interpreting:
        return "TRITON_INTERPRET=1 is set, so the kernels would run in the interpreter, not on the GPU"
    if kind == "cuda" and not torch.cuda.is_available():
        return "no CUDA device"
    if kind not in ("cpu", "cuda"):
        return f"device {device!r} is neither cpu nor cuda"
    return None
