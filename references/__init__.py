"""The float64 PyTorch reference backend: the five SPEC ops, written to be read as the spec."""

from references.compress import compress, compress_plan
from references.indexer_logits import indexer_logits
from references.sparse_attention import sparse_attention
from references.sparse_attention_fp8 import sparse_attention_fp8
from references.topk_indices import topk_indices

# The reference's loops read lengths on the host, so its planned call synchronises: its plans are
# checked for the same result, never captured in a CUDA graph (harness/check.py check_plans).
graph_capturable = False

__all__ = ["compress", "compress_plan", "indexer_logits", "topk_indices", "sparse_attention", "sparse_attention_fp8"]
