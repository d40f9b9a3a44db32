"""Peer backends: public packages' DeepSeek-V4 kernels behind the SPEC API, so `harness check`
verifies them and `harness bench` times them beside ours. Each module adapts one package:

| registry name | module | package | ops |
| --- | --- | --- | --- |
| `sglang` | `sglang_dsv4` | `sglang` 0.5.23 (kernels/ops/attention/dsv4) or 0.5.15 (jit_kernel/dsv4), compiled at first use through apache-tvm-ffi | compress (ring, paged C4, online C128), topk_indices, sparse_attention_fp8 (0.5.2x's Triton FP8 sparse decode; timed on the H200, its full check not yet run there) |
| `deepgemm` | `deepgemm_logits` | `sgl-deep-gemm` (0.1.5.post1; later wheels need a newer torch's C++ ABI) | indexer_logits |
| `flashmla` | `flashmla_sparse` | `sgl-flash-mla` | sparse_attention, sparse_attention_fp8 (the FP8 decode kernel; checked on the H200) |
| `flashinfer` | `flashinfer_topk` | `flashinfer-python` 0.7.4 or 0.6.4 | topk_indices |
| `flashinfer_deterministic` | `flashinfer_topk_deterministic` | `flashinfer-python` >= 0.7, deterministic mode | topk_indices |

An adapter converts SPEC inputs to the peer's layout once per input (a conversion cache keyed on
the tensors' storage and version, filled by the warm-up calls, so the timed calls reuse it), says
which cases it does not support by raising `harness.contract.Unsupported` after validation (the
harness reports those cases as skipped, with the reason), and reports a missing package through
`unavailable_reason`. The peer packages are imported at first use, never at import.
"""
