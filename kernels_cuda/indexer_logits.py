"""CUDA `indexer_logits` (indexer_logits.cu), two kernels:
- `dsv4_indexer_logits_wgmma` (Hopper, sm_90a, H <= 64): fp8 tensor-core MMA (wgmma e4m3, QGMMA in
  SASS) within SPEC 5's revised bound, keys streamed through a 5-stage cp.async ring, a persistent
  grid whose CTAs take equal shares of all requests' live cache blocks;
- `dsv4_indexer_logits` (any architecture, any H): one 4-warp CTA per (request, 8 cache blocks),
  exact fp16 tensor-core dots of the e4m3 values (mma.sync).
`DSV4_INDEXER_FP8=0` in the environment forces the second one on Hopper too (exact dots in both
backends; kernels_triton reads the same variable)."""

import functools
import os

import numpy as np
import torch

from harness import contract
from kernels_cuda import _loader
from kernels_cuda._loader import launch

WARPS = 4
BLOCKS_PER_CTA = 8  # as in indexer_logits.cu
WGMMA_THREADS = 128  # one warpgroup, as WG_THREADS in indexer_logits.cu
WGMMA_HEADS = 64  # WG_HEADS: one m64 tile of heads
WGMMA_STAGES = (4, 5, 6)  # ring depths built (the kernel's template argument)
# default ring depth; DSV4_INDEXER_STAGES=4|6 picks another (to compare on the GPU: the CTA count, and so
# the share size and the last-share tail, changes with it; see the .cu)
WGMMA_DEFAULT_STAGES = 4


def _wgmma_smem(stages):
    """Dynamic shared memory of the ring: alignment slack, q, stages x (keys + scales)."""
    return 1024 + contract.INDEXER_KEY_BYTES * (1 + stages) + stages * 64 * 4


def _wgmma_stages():
    stages = int(os.environ.get("DSV4_INDEXER_STAGES", WGMMA_DEFAULT_STAGES))
    if stages not in WGMMA_STAGES:
        raise ValueError(f"DSV4_INDEXER_STAGES={stages}: built ring depths are {WGMMA_STAGES}")
    return stages


def _use_wgmma(q_fp8, kv_cache, heads):
    if os.environ.get("DSV4_INDEXER_FP8", "1") == "0" or heads > WGMMA_HEADS:
        return False
    if torch.cuda.get_device_capability(q_fp8.device) != (9, 0):
        return False
    # cp.async and the 16-byte query loads need 16-byte aligned bases (the rows are multiples of 16)
    return q_fp8.data_ptr() % 16 == 0 and kv_cache.data_ptr() % 16 == 0


@functools.lru_cache(maxsize=None)
def _wgmma_grid(device_index, stages):
    """Persistent grid: as many CTAs as fit on all SMs at once (every CTA's share runs in one wave)."""
    from cupy_backends.cuda.api import driver
    fn = _loader.kernel("indexer_logits.cu", f"dsv4_indexer_logits_wgmma<{stages}>", torch.device("cuda", device_index))
    _loader._opt_in_shared(fn, _wgmma_smem(stages))
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, WGMMA_THREADS, _wgmma_smem(stages))
    return max(1, per_sm) * torch.cuda.get_device_properties(device_index).multi_processor_count


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if not (layout.batch and max_context_len):
        return out
    table_stride = np.int64(block_table.stride(0))
    if _use_wgmma(q_fp8, kv_cache, layout.heads):
        stages = _wgmma_stages()
        grid = (_wgmma_grid(_loader._index(q_fp8.device), stages),)
        launch("indexer_logits.cu", f"dsv4_indexer_logits_wgmma<{stages}>", grid, (WGMMA_THREADS,),
               (q_fp8, weights, kv_cache, context_lens, block_table, table_stride, out, max_context_len,
                layout.heads, layout.batch), q_fp8.device, shared_mem=_wgmma_smem(stages))
    else:
        grid = (layout.batch, contract.cdiv(max_context_len, contract.INDEXER_BLOCK * BLOCKS_PER_CTA))
        launch("indexer_logits.cu", "dsv4_indexer_logits", grid, (WARPS * 32,),
               (q_fp8, weights, kv_cache, context_lens, block_table, table_stride, out, max_context_len,
                layout.heads), q_fp8.device)
    return out
