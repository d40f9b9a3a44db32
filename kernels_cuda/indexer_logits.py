"""CUDA `indexer_logits` (indexer_logits.cu), two kernels:
- `dsv4_indexer_logits_wgmma` (Hopper, sm_90a, H <= 64): fp8 tensor-core MMA (wgmma e4m3, QGMMA in
  SASS) within SPEC 5's revised bound, keys streamed through a 4-stage cp.async ring, a persistent
  grid whose CTAs take equal shares of all requests' live cache blocks;
- `dsv4_indexer_logits` (any architecture, any H): one 4-warp CTA per (request, 8 cache blocks),
  exact fp16 tensor-core dots of the e4m3 values (mma.sync).
`DSV4_INDEXER_FP8=0` in the environment forces the second one on Hopper too (exact dots in both
backends; kernels_triton reads the same variable)."""

import functools
import os

import torch

from harness import contract
from kernels_cuda import _loader
from kernels_cuda._loader import launch

# compile-time constants of indexer_logits.cu: defined here only, the loader passes DEFINES as -D options
WARPS = 4  # mma.sync kernel: warps a CTA
BLOCKS_PER_CTA = 8  # mma.sync kernel: cache blocks a CTA
WG_THREADS = 128  # wgmma kernel: one warpgroup
WG_HEADS = 64  # wgmma kernel: one n64 tile of heads
DEFINES = {"KEY_DIM": contract.INDEXER_DIM, "BLOCK_ENTRIES": contract.INDEXER_BLOCK, "WARPS": WARPS,
           "BLOCKS_PER_CTA": BLOCKS_PER_CTA, "WG_THREADS": WG_THREADS, "WG_HEADS": WG_HEADS}
# the kernels' parameters, checked by the loader's launch()
_PARAMS = ("ptr q", "ptr weights", "ptr cache", "ptr context_lens", "ptr block_table", "i64 table_stride", "ptr out",
           "i32 max_len", "i32 heads")
SIGNATURES = {"dsv4_indexer_logits": _PARAMS, "dsv4_indexer_logits_wgmma": (*_PARAMS, "i32 batch")}
WGMMA_STAGES = (4, 5, 6)  # ring depths built (the kernel's template argument)
# default ring depth; DSV4_INDEXER_STAGES=4|6 picks another (to compare on the GPU: the CTA count, and so
# the share size and the last-share tail, changes with it; see the .cu)
WGMMA_DEFAULT_STAGES = 4


def _wgmma_smem(stages):
    """Dynamic shared memory of the ring: alignment slack, q, stages x (keys + scales)."""
    return 1024 + contract.INDEXER_KEY_BYTES * (1 + stages) + stages * contract.INDEXER_BLOCK * 4


def _wgmma_stages():
    stages = int(os.environ.get("DSV4_INDEXER_STAGES", WGMMA_DEFAULT_STAGES))
    if stages not in WGMMA_STAGES:
        raise ValueError(f"DSV4_INDEXER_STAGES={stages}: built ring depths are {WGMMA_STAGES}")
    return stages


def _use_wgmma(q_fp8, kv_cache, heads):
    if os.environ.get("DSV4_INDEXER_FP8", "1") == "0" or heads > WG_HEADS:
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
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, WG_THREADS, _wgmma_smem(stages))
    return max(1, per_sm) * torch.cuda.get_device_properties(device_index).multi_processor_count


def indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table, *, max_context_len, validate=True):
    layout = contract.check_indexer_logits(q_fp8, weights, kv_cache, context_lens, block_table,
                                           max_context_len=max_context_len, validate=validate)
    out = torch.empty((layout.batch, max_context_len), dtype=torch.float32, device=q_fp8.device)
    if not (layout.batch and max_context_len):
        return out
    table_stride = block_table.stride(0)
    if _use_wgmma(q_fp8, kv_cache, layout.heads):
        stages = _wgmma_stages()
        grid = (_wgmma_grid(_loader._index(q_fp8.device), stages),)
        launch("indexer_logits.cu", f"dsv4_indexer_logits_wgmma<{stages}>", grid, (WG_THREADS,),
               (q_fp8, weights, kv_cache, context_lens, block_table, table_stride, out, max_context_len,
                layout.heads, layout.batch), q_fp8.device, shared_mem=_wgmma_smem(stages))
    else:
        grid = (layout.batch, contract.cdiv(max_context_len, contract.INDEXER_BLOCK * BLOCKS_PER_CTA))
        launch("indexer_logits.cu", "dsv4_indexer_logits", grid, (WARPS * 32,),
               (q_fp8, weights, kv_cache, context_lens, block_table, table_stride, out, max_context_len,
                layout.heads), q_fp8.device)
    return out
