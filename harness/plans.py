"""Plans (SPEC section 7): the per-step metadata work, done once and shared by every layer's call.

A `Plan` records what it was made from (kind, device, scalars, a fingerprint of each metadata
tensor: shape, dtype and a digest of its values) and carries the backend's own data (device
tensors, counts, flags). `check_plan` is the op's side: with validate=True the op's own metadata
must match the plan's by value (one host copy), else ValueError naming `plan`.

`compress_plan` is the planner the reference, Triton and CUDA backends share: the work list of
ratio-blocks ("segments") a call touches, as int32 device tensors, and the output size.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch

from harness import contract
from harness.contract import InputError


@dataclass(frozen=True)
class Fingerprint:
    """A metadata tensor by value: shape, dtype and a digest of its bytes."""
    shape: tuple
    dtype: str
    digest: str


def fingerprint(t):
    if t is None:
        return None
    host = t.detach().cpu().contiguous()
    digest = hashlib.blake2b(host.numpy().tobytes(), digest_size=16).hexdigest()
    return Fingerprint(tuple(host.shape), str(host.dtype), digest)


@dataclass
class Plan:
    kind: str  # the op it plans: "compress", "indexer_logits", "topk_indices"
    device: torch.device
    scalars: dict  # the planner's scalar arguments (ratio, mode, k, page_size, ...)
    metadata: dict  # argument name -> Fingerprint (None for an absent optional argument)
    data: dict = field(default_factory=dict)  # the backend's own: device tensors, counts, flags

    def __getitem__(self, name):
        return self.data[name]


def _device(device):
    """A torch.device with its index ('cuda' is the current CUDA device), as tensors report theirs."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def make_plan(kind, device, scalars, metadata, **data):
    """A plan of `kind` made from `metadata` (argument name -> tensor or None)."""
    return Plan(kind, _device(device), dict(scalars), {k: fingerprint(v) for k, v in metadata.items()}, data)


def check_plan(plan, kind, device, scalars, metadata, validate=True):
    """The op's check of a plan: of this op always; with validate, made on this device from these
    scalars and metadata values (ValueError naming `plan` and what differs). Returns the plan."""
    if not isinstance(plan, Plan) or plan.kind != kind:
        got = plan.kind if isinstance(plan, Plan) else type(plan).__name__
        raise InputError("plan", f"expected a plan made by {kind}_plan, got {got}")
    if not validate:
        return plan
    if plan.device != _device(device):
        raise InputError("plan", f"made for device {plan.device}, the call runs on {device}")
    for name, value in scalars.items():
        if plan.scalars.get(name) != value:
            raise InputError("plan", f"made for {name}={plan.scalars.get(name)!r}, the call has {name}={value!r}")
    for name, tensor in metadata.items():
        mine = fingerprint(tensor)
        theirs = plan.metadata.get(name)
        if mine != theirs:
            what = "shape" if mine is None or theirs is None or mine.shape != theirs.shape else "values"
            raise InputError("plan", f"made from other {name} ({what} differ): a plan serves only the metadata "
                                     f"it was made from")
    return plan


# ---------------------------------------------------------------------------------------------
# compress


def compress_segments(prefix, extend, ratio):
    """The work list of a compress call (numpy, from host lengths): every ratio-block a request's new
    positions touch is one segment, in request then block order. Per segment: its request, block, output
    row (the block's entry is emitted when the call completes it) or -1, and whether it is the request's
    last. Also each request's first kv_score row and the output row count."""
    prefix, extend = np.asarray(prefix, dtype=np.int64), np.asarray(extend, dtype=np.int64)
    end = prefix + extend
    first = prefix // ratio
    segments = np.where(extend > 0, (end - 1) // ratio - first + 1, 0)
    emitted = end // ratio - first  # entries first .. end//ratio - 1: the leading segments
    out_start = np.cumsum(emitted) - emitted
    seg_req = np.repeat(np.arange(len(prefix)), segments)
    local = np.arange(len(seg_req)) - (np.cumsum(segments) - segments)[seg_req]
    return {"seg_req": seg_req, "seg_block": first[seg_req] + local,
            "seg_out": np.where(local < emitted[seg_req], out_start[seg_req] + local, -1),
            "seg_last": (local == segments[seg_req] - 1).astype(np.int64),
            "kv_start": np.cumsum(extend) - extend}, int(emitted.sum())


def ring_overwrites_reads(prefix, extend, ratio):
    """Ring mode: does some request write a slot this call also reads (then every read must finish
    before any write: two launches)? Reads are the positions before the prefix that the first emitted
    window needs; writes the last W new positions; slots repeat every W positions."""
    ring = contract.RING_WIDTH[ratio]
    for p, e in zip(prefix, extend):
        reads = contract.compress_state_reads(ratio, p, e)
        if len(reads) and e and (p + e - 1) - reads[0] >= ring:
            return True
    return False


def online_state_split(prefix, extend):
    """Online mode: does a request read its running state in one segment and write it in another
    (a prefix that ends mid-block and an extend that reaches a later block)? Then new states go
    to a scratch buffer first."""
    return any(e and p % 128 and (p + e - 1) // 128 > p // 128 for p, e in zip(prefix, extend))


def compress_plan(prefix_lens, extend_lens, *, ratio, mode, state_rows=None, page_table=None, validate=True,
                  device=None):
    """SPEC 7's compress planner. device: where the plan's tensors live (default: the metadata's)."""
    meta = contract.check_compress_metadata(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                            page_table=page_table, validate=validate)
    device = _device(device) if device is not None else prefix_lens.device
    prefix = meta.prefix_lens if validate else prefix_lens.tolist()
    extend = meta.extend_lens if validate else extend_lens.tolist()
    work, n_out = compress_segments(prefix, extend, meta.ratio)
    arrays = {**work, "prefix": prefix, "extend": extend}
    flat = torch.from_numpy(np.concatenate([np.asarray(a, dtype=np.int32) for a in arrays.values()]))
    flat = flat.pin_memory() if device.type == "cuda" else flat
    flat = flat.to(device, non_blocking=True)
    tensors, offset = {}, 0
    for name, a in arrays.items():
        tensors[name] = flat[offset:offset + len(a)]
        offset += len(a)
    return make_plan("compress", device, {"ratio": meta.ratio, "mode": mode},
                     {"prefix_lens": prefix_lens, "extend_lens": extend_lens, "state_rows": state_rows,
                      "page_table": page_table},
                     n_out=n_out, n_seg=len(work["seg_req"]), batch=meta.batch, tensors=tensors,
                     ring_conflict=mode == "ring" and ring_overwrites_reads(prefix, extend, meta.ratio),
                     online_split=mode == "online" and online_state_split(prefix, extend))


def check_compress_plan(plan, prefix_lens, extend_lens, *, ratio, mode, state_rows, page_table, validate, device):
    """The op's check of a compress plan against its own metadata (see check_plan)."""
    return check_plan(plan, "compress", device, {"ratio": ratio, "mode": mode},
                      {"prefix_lens": prefix_lens, "extend_lens": extend_lens, "state_rows": state_rows,
                       "page_table": page_table}, validate)


def compress_call_plan(plan, prefix_lens, extend_lens, *, ratio, mode, state_rows, page_table, validate, device,
                       planner=None):
    """The op's side: its plan checked against its metadata, or one made now (by `planner`, default
    the shared compress_plan) when it has none."""
    if plan is None:
        return (planner or compress_plan)(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                          page_table=page_table, validate=False)
    return check_compress_plan(plan, prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                               page_table=page_table, validate=validate, device=device)
