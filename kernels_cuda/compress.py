"""CUDA `compress` (compress.cu): one launch per call over the plan's segments (harness/plans.py);
a second only where the planner found a ring slot both read and overwritten (pool, then store) or an
online state read and written by different segments (scratch, then commit). With a plan and
validate=False the call does no host work that grows with the batch and never synchronises, so a
CUDA graph can capture it."""

import functools
import os

import torch

from harness import contract, plans
from kernels_cuda._loader import launch

C4_THREADS = 128  # per C4 CTA; each thread owns VEC channels
C128_RUN_THREADS = 128  # per C128 CTA that walks each channel's positions in one run (decode, filled prefill)
PDL_CTAS_PER_SM = 4  # grids up to this many CTAs an SM (one wave) launch with programmatic dependent launch
C128_ONE_RUN = 16  # C128 segments with at most this many new positions are walked by one thread each
C128_MAX_GROUPS = 16  # warps a C128 CTA splits a block's positions over
C128_WARPS_PER_SM = 16  # ...chosen to keep this many warps an SM in flight
# ...and so are all segments once one-run CTAs number this many per SM (64K prefill: 3.9);
# DSV4_C128_FILL_WAVES=0 sends every C128 call to the one-run path (the check's small cases then cover it)
C128_FILL_WAVES = int(os.environ.get("DSV4_C128_FILL_WAVES", "2"))
C128_GROUP_LANES = 32  # lanes of a group; groups after the first leave (max, sum, acc) in shared memory

compress_plan = plans.compress_plan
MODE_ID = {"ring": 0, "paged": 1, "online": 2}  # the kernels' MODE template argument

# compress.cu's compile-time constants: defined above (or in the contract and the planner) only, passed
# by the loader as -D options
DEFINES = {"MODE_RING": MODE_ID["ring"], "MODE_PAGED": MODE_ID["paged"], "MODE_ONLINE": MODE_ID["online"],
           "C4_RING_WIDTH": contract.RING_WIDTH[4], "C128_RING_WIDTH": contract.RING_WIDTH[128],
           "SEGMENT_WIDTH": plans.SEGMENT_WIDTH, "C4_THREADS": C4_THREADS, "C128_RUN_THREADS": C128_RUN_THREADS,
           "C128_MAX_GROUPS": C128_MAX_GROUPS, "C128_GROUP_LANES": C128_GROUP_LANES}
# the kernels' parameters, checked by the loader's launch(); new_state None: update the state in place
_TAIL = ("ptr segments", "i32 d", "i32 pool", "i32 store", "i32 pdl")
SIGNATURES = {"dsv4_compress_c4": ("ptr kv", "ptr state", "ptr ape", "ptr out", *_TAIL),
              "dsv4_compress_c128": ("ptr kv", "ptr state", "ptr new_state", "ptr ape", "ptr out", *_TAIL),
              "dsv4_compress_online_commit": ("ptr state", "ptr new_state", "ptr segments", "i32 d")}


@functools.lru_cache(maxsize=None)
def _sms(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


def _vec(d, tensors):
    """4 (16-byte loads) when every row and column offset is 16-byte aligned, else 1."""
    return 4 if d % 4 == 0 and all(t.data_ptr() % 16 == 0 for t in tensors) else 1


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True, plan=None):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    d, device = layout.d, kv_score.device
    plan = plans.compress_call_plan(plan, prefix_lens, extend_lens, ratio=layout.ratio, mode=mode,
                                    state_rows=state_rows, page_table=page_table, validate=validate, device=device)
    out = torch.empty((plan["n_out"], d), dtype=torch.float32, device=device)
    if plan["n_seg"] == 0:
        return out
    segments = plan["segments"]
    vec = _vec(d, (kv_score, ape, state, out))
    if layout.ratio == 4:  # one thread per VEC channels
        block = (min(C4_THREADS, -(-contract.cdiv(d, vec) // 32) * 32),)
        grid = (plan["n_seg"], contract.cdiv(d, block[0] * vec))
    else:  # 128 threads over 128 x VEC channels, one run of positions each (decode, and prefill whose
        # segments fill the GPU); few segments with many new positions (a 4K chunk: 32 blocks): a warp
        # per run, up to 16 runs over the same 32 x VEC channels, as many as bring the warps in flight to
        # C128_WARPS_PER_SM (a 4K chunk at d = 512: 128 CTAs of 16 warps, 8 positions a warp)
        one_run_ctas = plan["n_seg"] * contract.cdiv(d, C128_RUN_THREADS * vec)
        few = plan["most_new"] > C128_ONE_RUN and one_run_ctas < C128_FILL_WAVES * _sms(device)
        if few:
            ctas = plan["n_seg"] * contract.cdiv(d, C128_GROUP_LANES * vec)
            wanted = contract.cdiv(C128_WARPS_PER_SM * _sms(device), ctas)  # warps a CTA, rounded up to 2^n
            groups = min(C128_MAX_GROUPS, max(4, 1 << (wanted - 1).bit_length()))
            block = (C128_GROUP_LANES, groups)
        else:
            block = (C128_RUN_THREADS, 1)
        grid = (plan["n_seg"], contract.cdiv(d, block[0] * vec))
    expr = f"dsv4_compress_c{layout.ratio}<{vec}, {MODE_ID[mode]}>"
    # C128: the partials of groups 1.. (none for one group)
    shared = 0 if layout.ratio == 4 else (block[-1] - 1) * 3 * C128_GROUP_LANES * vec * 4
    # ring slots read and overwritten by different CTAs: every read (pool launch) before any write
    passes = ((1, 0), (0, 1)) if plan["ring_conflict"] else ((1, 1),)
    scratch = torch.empty((layout.batch, 3, d), dtype=torch.float32, device=device) if plan["online_split"] else None
    # a grid that fits the GPU in one wave starts while the kernel before it finishes (decode)
    pdl = grid[0] * grid[1] <= PDL_CTAS_PER_SM * _sms(device)
    for pool, store in passes:
        args = (kv_score, state, ape, out) if layout.ratio == 4 else \
            (kv_score, state, scratch, ape, out)
        launch("compress.cu", expr, grid, block, (*args, segments, d, pool, store, int(pdl)), device,
               shared_mem=shared, pdl=pdl)
    if scratch is not None:
        launch("compress.cu", "dsv4_compress_online_commit", (plan["n_seg"],), (256,), (state, scratch, segments, d),
               device, pdl=pdl)
    return out
