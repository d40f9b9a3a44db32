"""Raw CUDA backend: one .cu source per op, built with NVRTC through CuPy `RawModule` and launched on
torch tensors (raw device pointers, torch's current stream). `python -m kernels_cuda.build`
compiles every kernel without a GPU and reports registers, shared memory and spills."""

from kernels_cuda.compress import compress, compress_plan
from kernels_cuda.indexer_logits import indexer_logits
from kernels_cuda.sparse_attention import sparse_attention
from kernels_cuda.sparse_attention_fp8 import sparse_attention_fp8
from kernels_cuda.topk_indices import topk_indices, topk_indices_plan

__all__ = ["compress", "compress_plan", "indexer_logits", "topk_indices", "topk_indices_plan", "sparse_attention",
           "sparse_attention_fp8", "unavailable_reason"]


def unavailable_reason(device):
    import torch
    if str(device).split(":")[0] != "cuda":
        return "the CUDA kernels run on CUDA devices only"
    try:
        import cupy  # noqa: F401
    except ImportError as err:
        return f"CuPy is not installed ({err}); pip install cupy-cuda13x"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return None
