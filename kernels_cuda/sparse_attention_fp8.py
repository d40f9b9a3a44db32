"""CUDA `sparse_attention_fp8` (SPEC 8): not written yet. The function validates as every backend
does and then declines, so `harness check` reports the op as skipped for this backend. The kernel
to come fuses the dequantisation into the gather (e4m3 bytes and scales straight to the tensor
cores' input format, no bf16 copy of the cache)."""

from harness import contract


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                        attn_sink=attn_sink, validate=validate)
    raise contract.Unsupported("kernels_cuda: sparse_attention_fp8 is not yet written")
