"""CUDA `compress` (compress.cu): pool launch, then the state-store launch (reads before writes);
online mode: one launch into a scratch state, copied in afterwards."""

import numpy as np
import torch

from harness import contract
from kernels_cuda._loader import launch

CHANNELS = 128  # threads per block, one channel each


def compress(kv_score, ape, state, *, ratio, prefix_lens, extend_lens, mode, state_rows=None, page_table=None,
             validate=True):
    layout = contract.check_compress(kv_score, ape, state, ratio=ratio, prefix_lens=prefix_lens,
                                     extend_lens=extend_lens, mode=mode, state_rows=state_rows,
                                     page_table=page_table, validate=validate)
    d, device = layout.d, kv_score.device
    plan = contract.to_device_int32(contract.compress_plan(prefix_lens, extend_lens, ratio), device)
    n_out, n_seg = len(plan["entry_req"]), len(plan["seg_req"])
    out = torch.empty((n_out, d), dtype=torch.float32, device=device)
    channel_blocks = contract.cdiv(d, CHANNELS)
    if mode == "online":
        if n_seg:
            new_state = torch.empty((layout.batch, 3, d), dtype=torch.float32, device=device)
            launch("compress.cu", "dsv4_compress_online", (n_seg, channel_blocks), (CHANNELS,),
                   (kv_score, state, new_state, ape, out, plan["seg_req"], plan["seg_block"], plan["seg_out"],
                    plan["seg_last"], prefix_lens, extend_lens, plan["kv_start"], state_rows, d), device)
            contract.commit_online_state(state, state_rows, new_state, plan["has_extend"])
        return out
    sa = contract.compress_state_args(mode, ratio, prefix_lens, state_rows, page_table)
    if n_out:
        expr = "dsv4_compress_pool<4, 8>" if ratio == 4 else "dsv4_compress_pool<128, 128>"
        launch("compress.cu", expr, (n_out, channel_blocks), (CHANNELS,),
               (kv_score, state, ape, out, plan["entry_req"], plan["entry_j"], prefix_lens, plan["kv_start"],
                sa.rows, sa.table, np.int64(sa.stride), d, layout.width, sa.ring, int(sa.paged)), device)
    if kv_score.shape[0]:
        launch("compress.cu", "dsv4_compress_store", (kv_score.shape[0],), (256,),
               (kv_score, state, plan["row_req"], prefix_lens, extend_lens, plan["kv_start"], sa.rows, sa.table,
                np.int64(sa.stride), layout.width, ratio, sa.ring, int(sa.paged)), device)
    return out
