"""Plans (contract §7): the per-step metadata work, done once and shared by every layer's call.

A `Plan` records what it was made from (kind, device, scalars, a fingerprint of each metadata
tensor: shape, dtype and a host copy of its values) and carries the backend's own data (device
tensors, counts, flags). `check_plan` is the op's side: with validate=True the op's own metadata
must match the plan's by value (one host copy), else ValueError naming `plan`.

`compress_plan` is the planner the reference, Triton and CUDA backends share: the work list of
ratio-blocks ("segments") a call touches, one int32 record each on the device, and the output size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from harness import contract
from harness.contract import InputError


@dataclass(frozen=True, eq=False)
class Fingerprint:
    """A metadata tensor by value: shape, dtype and a host copy of its values."""
    shape: tuple
    dtype: str
    values: np.ndarray

    def __eq__(self, other):
        return (isinstance(other, Fingerprint) and self.shape == other.shape and self.dtype == other.dtype
                and np.array_equal(self.values, other.values))


def fingerprint(t):
    if t is None:
        return None
    host = t.detach().cpu().contiguous()
    values = host.numpy()
    # a CPU tensor is its own host copy: copy it, so a later in-place change shows as a difference
    return Fingerprint(tuple(host.shape), str(host.dtype), values.copy() if t.device.type == "cpu" else values)


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
# sparse attention: a split-K count chosen by shape (contract §7: no planner; the ops choose by shape)

MAX_SPLITS = 64
PART_COST_ROWS = 128  # a CTA's fp32 partial [64, 512] written and read back, in 1 KB gathered rows
UNIT_COST_ROWS = 64  # a CTA's fixed cost (Q load, pipeline fill, epilogue), in gathered rows


def attention_splits(units, topk, sms, min_rows=64):
    """How many parts to split each row's index list into, for `units` CTAs (or programs) that run
    one per SM: fewest waves x rows per unit, where a split pays off only while the grid is short of
    the SMs and each split beyond one costs a partial written and combined. min_rows: the fewest
    index rows a split may hold (fewer cost more in Q load and combine than they save)."""
    best, best_cost = 1, None
    for s in range(1, min(MAX_SPLITS, max(1, contract.cdiv(topk, min_rows))) + 1):
        waves = contract.cdiv(units * s, sms)
        cost = waves * (contract.cdiv(topk, s) + UNIT_COST_ROWS + (PART_COST_ROWS if s > 1 else 0))
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


# ---------------------------------------------------------------------------------------------
# compress


SEGMENT_FIELDS = ("request", "block", "out_row", "last", "prefix", "end", "kv_start", "state", "state_prev")
SEGMENT_WIDTH = 12  # int32 per segment record (three 16-byte loads); fields past SEGMENT_FIELDS are 0


def compress_segments(prefix, extend, ratio, mode, state_rows=None, page_table=None):
    """The work list of a compress call (numpy, from host metadata): every ratio-block that a
    request's new positions touch is one segment, in request then block order, as a record of
    SEGMENT_WIDTH int32 so a kernel finds everything it addresses in one load:
    request; block g; output row (the entry the call completes) or -1; last segment of its request;
    the request's prefix and end positions; the kv_score row of position `prefix`; `state`: the
    request's state row (ring, online) or the page of block g (paged, -1: none); `state_prev`: the
    page of block g - 1 (paged; -1: none). Returns (records [S, SEGMENT_WIDTH], output rows)."""
    prefix, extend = np.asarray(prefix, dtype=np.int64), np.asarray(extend, dtype=np.int64)
    end = prefix + extend
    first = prefix // ratio
    segments = np.where(extend > 0, (end - 1) // ratio - first + 1, 0)
    emitted = end // ratio - first  # entries first .. end//ratio - 1: the leading segments
    out_start = np.cumsum(emitted) - emitted
    req = np.repeat(np.arange(len(prefix)), segments)
    local = np.arange(len(req)) - (np.cumsum(segments) - segments)[req]
    block = first[req] + local
    records = np.zeros((len(req), SEGMENT_WIDTH), dtype=np.int64)
    records[:, :7] = np.stack([req, block, np.where(local < emitted[req], out_start[req] + local, -1),
                               local == segments[req] - 1, prefix[req], end[req],
                               (np.cumsum(extend) - extend)[req]], axis=1)
    if mode == "paged":
        table = np.asarray(page_table)  # int32, read only where a segment needs it
        width = table.shape[1]
        records[:, 7] = np.where(block < width, table[req, np.minimum(block, width - 1)], -1)
        records[:, 8] = np.where((block > 0) & (block <= width), table[req, np.clip(block - 1, 0, width - 1)], -1)
    else:
        records[:, 7] = np.asarray(state_rows, dtype=np.int64)[req]
    return records, int(emitted.sum())


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


def _compress_metadata(prefix_lens, extend_lens, state_rows, page_table):
    """compress's metadata arguments by name: what a plan is made from and checked against."""
    return {"prefix_lens": prefix_lens, "extend_lens": extend_lens, "state_rows": state_rows,
            "page_table": page_table}


def compress_plan(prefix_lens, extend_lens, *, ratio, mode, state_rows=None, page_table=None, validate=True,
                  device=None):
    """contract §7's compress planner. device: where the plan's tensors live (default: the metadata's)."""
    meta = contract.check_compress_metadata(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                            page_table=page_table, validate=validate)
    device = _device(device) if device is not None else prefix_lens.device
    plan = make_plan("compress", device, {"ratio": meta.ratio, "mode": mode},
                     _compress_metadata(prefix_lens, extend_lens, state_rows, page_table))
    host = {name: (f.values if f is not None else None) for name, f in plan.metadata.items()}  # one copy each
    prefix, extend = host["prefix_lens"].tolist(), host["extend_lens"].tolist()
    records, n_out = compress_segments(prefix, extend, meta.ratio, mode, host["state_rows"], host["page_table"])
    flat = torch.from_numpy(records.astype(np.int32))
    if device.type == "cuda":
        flat = flat.pin_memory().to(device, non_blocking=True)
    fresh = (np.minimum(records[:, 5], (records[:, 1] + 1) * meta.ratio)
             - np.maximum(records[:, 4], records[:, 1] * meta.ratio)) if len(records) else np.zeros(1)
    plan.data.update(n_out=n_out, n_seg=len(records), batch=meta.batch, segments=flat.to(device),
                     most_new=int(fresh.max()),  # new positions of the fullest segment (decode: 1)
                     ring_conflict=mode == "ring" and ring_overwrites_reads(prefix, extend, meta.ratio),
                     online_split=mode == "online" and online_state_split(prefix, extend))
    return plan


def check_compress_plan(plan, prefix_lens, extend_lens, *, ratio, mode, state_rows, page_table, validate, device):
    """The op's check of a compress plan against its own metadata (see check_plan)."""
    return check_plan(plan, "compress", device, {"ratio": ratio, "mode": mode},
                      _compress_metadata(prefix_lens, extend_lens, state_rows, page_table), validate)


def compress_call_plan(plan, prefix_lens, extend_lens, *, ratio, mode, state_rows, page_table, validate, device,
                       planner=None):
    """The op's side: its plan checked against its metadata, or one made now (by `planner`, default
    the shared compress_plan) when it has none."""
    if plan is None:
        return (planner or compress_plan)(prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                                          page_table=page_table, validate=False)
    return check_compress_plan(plan, prefix_lens, extend_lens, ratio=ratio, mode=mode, state_rows=state_rows,
                               page_table=page_table, validate=validate, device=device)
