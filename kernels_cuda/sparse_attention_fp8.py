"""CUDA `sparse_attention_fp8` (SPEC 8): the wgmma kernel of sparse_attention.cu over the FP8 cache.

`dsv4_sparse_attention_fp8_wgmma` is `dsv4_sparse_attention_wgmma` (one CTA of two warpgroups per
(query row, 64 heads, split), the same MMAs, softmax, split-K and combine) with another row loader:
each indexed record's 576 bytes and its 8 scale bytes go into shared memory by cp.async (64-bit
page offsets), and the tile is dequantised there (e4m3 x 2^(byte - 127), exact in bf16) into the
layout the bf16 kernel copies its rows into. No bf16 copy of the cache is made; a -1 loads nothing.
Hopper only (sm_90a; any H: a CTA covers 64 heads, those past H zero and unwritten); elsewhere the op
declines with the reason.

KERNEL (`DSV4_ATTENTION_FP8_KERNEL` in the environment):
- "pipe": `dsv4_sparse_attention_fp8_pipe`, tiles of 32 rows, two bf16 tiles and four raw stages, so
  tile i + 1 is dequantised while the tensor cores multiply tile i;
- "wgmma": the wgmma kernel over WgFp8Rows (64-row tiles, dequantisation between copy and MMAs),
  dequantising with integer ops and bf16 multiplies (e4m3x8_scaled_bf16x8), as "pipe" does;
- "cvt": the same with the first release's conversion instructions (cvt e4m3x2 -> f16x2 -> f32,
  multiply, cvt -> bf16x2);
- "pair" (H a multiple of 128): `dsv4_sparse_attention_fp8_pair`, the pipe body with the two 64-head
  blocks of a row as a cluster of 2 CTAs: each gathers and dequantises half of every 32-row tile (raw
  tiles two ahead of the math) and sends its bf16 rows to the other's shared memory, so each record
  is read and dequantised once for 128 heads, not twice;
- DSV4_ATTENTION_LATE_PV=1 (LATE_PV, as for the bf16 op) runs "pipe" with P V left in flight into the next
  tile and 3 raw stages instead of 4 (LATE_SHARED_BYTES);
- "auto" (default): wgmma. Measured on the H200 at 71421ec (medians us): pipe 501.7 at
  hca-decode-b64-h64-k8320 (the cvt wgmma kernel: 383.8 at de45cfa), pair 122.5 at
  decode-b64-h128-k1152 and 723.9 at hca-decode-b64-h128-k8320 (FlashMLA 63.6, 342.9): the 32-row
  pipe body costs about 2 us a tile, twice the wgmma kernel's per row, and halving the pair's gathers
  and dequantisation did not offset it."""

import os

import torch

from harness import contract
from kernels_cuda.sparse_attention import (FP8_LATE_RAW_STAGES, PAIR_FP8_BUFS, PAIR_RAW_STAGES, PIPE_RAW_STAGES,
                                           FP8_PITCH, KV_ROW_BYTES, LATE_PV, PAIR_HEADS, PIPE_TILE, WG_TILE,
                                           _shared_optin, launch_split, outputs)

KERNEL = os.environ.get("DSV4_ATTENTION_FP8_KERNEL", "auto")


def choose_kernel(choice, topk, heads):
    """pipe, pair, wgmma or cvt for KERNEL `choice`, K indices a row and H heads (pair needs H a
    multiple of 128: elsewhere it stands for auto's choice, wgmma)."""
    if choice == "pair" and heads % PAIR_HEADS == 0:
        return "pair"
    return choice if choice in ("pipe", "cvt") else "wgmma"

# the launches' sizes (FP8_PITCH and the stage counts are sparse_attention.py's DEFINES);
# as FP8_WG_SHARED_BYTES in sparse_attention.cu: alignment slack, Q, the bf16 tile, two stages of 64
# raw rows of FP8_PITCH bytes (the S partials share them), the row flags
SHARED_BYTES = 1024 + 2 * WG_TILE * KV_ROW_BYTES + 2 * WG_TILE * FP8_PITCH + 2 * WG_TILE * 4
# as FP8_PIPE_SHARED_BYTES: alignment slack, Q, two bf16 tiles of 32 rows, four raw stages of 32 rows,
# the S partials (2 x 64 x 32 fp32), the raw stages' and the bf16 tiles' row flags
PIPE_SHARED_BYTES = (1024 + 64 * KV_ROW_BYTES + 2 * PIPE_TILE * KV_ROW_BYTES
                     + PIPE_RAW_STAGES * PIPE_TILE * FP8_PITCH + 2 * 64 * PIPE_TILE * 4
                     + PIPE_RAW_STAGES * PIPE_TILE * 4 + 2 * PIPE_TILE * 4)
# as FP8_LATE_SHARED_BYTES: the pipe's layout with 3 raw stages, rounded up to 1024 bytes, then the two
# warpgroups' P blocks
LATE_SHARED_BYTES = (1024 + 64 * KV_ROW_BYTES
                     + contract.cdiv(2 * PIPE_TILE * KV_ROW_BYTES + FP8_LATE_RAW_STAGES * PIPE_TILE * FP8_PITCH
                                     + 2 * 64 * PIPE_TILE * 4 + FP8_LATE_RAW_STAGES * PIPE_TILE * 4 + 2 * PIPE_TILE * 4,
                                     1024) * 1024 + 2 * 64 * 128)
# as FP8_PAIR_SHARED_BYTES: alignment slack, Q, three bf16 tiles of 32 rows, five raw stages of a CTA's 16
# rows, the S partials, the raw stages' and the bf16 tiles' row flags, three mbarriers
PAIR_ROWS = PIPE_TILE // 2
PAIR_SHARED_BYTES = (1024 + 64 * KV_ROW_BYTES + PAIR_FP8_BUFS * PIPE_TILE * KV_ROW_BYTES
                     + PAIR_RAW_STAGES * PAIR_ROWS * FP8_PITCH + 2 * 64 * PIPE_TILE * 4
                     + PAIR_RAW_STAGES * PAIR_ROWS * 4 + PAIR_FP8_BUFS * PIPE_TILE * 4 + PAIR_FP8_BUFS * 8)


def decline_reason(q):
    """Why the kernel cannot run on these tensors, or None."""
    if q.device.type != "cuda":
        return "runs on CUDA devices only"
    capability = torch.cuda.get_device_capability(q.device)
    if capability != (9, 0):
        return f"needs Hopper (sm_90a wgmma); this device is sm_{capability[0]}{capability[1]}"
    needed = max(SHARED_BYTES, PIPE_SHARED_BYTES, PAIR_SHARED_BYTES)  # any kernel may run, by K and H
    if _shared_optin(q.device) < needed:
        return f"needs {needed} bytes of shared memory a block, the device has {_shared_optin(q.device)}"
    if q.data_ptr() % 16:
        return "needs q 16-byte aligned (cp.async)"
    return None


def sparse_attention_fp8(q, kv_cache, indices, *, page_size, sm_scale, attn_sink=None, validate=True):
    layout = contract.check_sparse_attention_fp8(q, kv_cache, indices, page_size=page_size, sm_scale=sm_scale,
                                                 attn_sink=attn_sink, validate=validate)
    reason = decline_reason(q)
    if reason:
        raise contract.Unsupported(f"kernels_cuda: sparse_attention_fp8 {reason}")
    out, lse, sink, has_sink = outputs(q, layout, attn_sink)
    if not layout.batch:
        return out, lse
    page_shift = layout.page_size.bit_length() - 1  # page_size is a power of two (the contract checks)
    tail = (float(sm_scale), page_shift, layout.page_stride)  # the signature makes page_stride a long long
    kernel = choose_kernel(KERNEL, layout.topk, layout.heads)
    if kernel in ("pipe", "pair"):
        late = LATE_PV and kernel == "pipe"
        shared = LATE_SHARED_BYTES if late else PIPE_SHARED_BYTES if kernel == "pipe" else PAIR_SHARED_BYTES
        launch_split(f"dsv4_sparse_attention_fp8_{kernel}", layout, PIPE_TILE, q, sink, has_sink, out, lse,
                     (kv_cache, indices), tail, shared, ", true" if late else "")
    else:
        launch_split("dsv4_sparse_attention_fp8_wgmma", layout, WG_TILE, q, sink, has_sink, out, lse,
                     (kv_cache, indices), tail, SHARED_BYTES, ", false" if kernel == "cvt" else ", true")
    return out, lse
