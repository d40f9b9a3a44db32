"""Plain-PyTorch backend: the five SPEC ops as a competent engineer writes them with torch ops
(gathers, softmax, einsum, torch.topk), one file per op. The baseline every kernel is timed against."""

from kernels_torch.compress import compress
from kernels_torch.indexer_logits import indexer_logits
from kernels_torch.sparse_attention import sparse_attention
from kernels_torch.sparse_attention_fp8 import sparse_attention_fp8
from kernels_torch.topk_indices import topk_indices

__all__ = ["compress", "indexer_logits", "topk_indices", "sparse_attention", "sparse_attention_fp8"]
