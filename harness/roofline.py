"""The fewest bytes each op must move and the flops it must do, counting only valid tokens and
indices: every needed input read once, every output and state row written once."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness import contract


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int


# per op, work(x) of a case's inputs x; harness/ops.py names each op's


def compress_work(x):
    kv, ape, state = x.args
    kw = x.kwargs
    ratio, mode = kw["ratio"], kw["mode"]
    width = kv.shape[1]
    d = width // contract.ROW_WIDTH_FACTOR[ratio]
    prefix, extend = kw["prefix_lens"].tolist(), kw["extend_lens"].tolist()
    table = kw["page_table"].cpu() if mode == "paged" else None
    state_reads = state_writes = out_rows = 0
    for b, (p, e) in enumerate(zip(prefix, extend)):
        out_rows += len(contract.compress_emitted(ratio, p, e))
        if mode == "online":
            state_reads += 1 if e and p % 128 else 0
            state_writes += 1 if e else 0
        else:
            state_reads += len(contract.compress_state_reads(ratio, p, e))
            if mode == "ring":
                state_writes += min(e, contract.RING_WIDTH[ratio])
            else:  # only rows whose block has a page are written (released blocks have none)
                blocks = torch.arange(p, p + e) // ratio
                state_writes += int((table[b, blocks.clamp(max=table.shape[1] - 1)] >= 0).sum()) if e else 0
    row_bytes = 3 * d * 4 if mode == "online" else width * 4
    terms = 8 if ratio == 4 else 128
    moved = kv.numel() * 4 + ape.numel() * 4 + (state_reads + state_writes) * row_bytes + out_rows * d * 4
    return Work(moved, out_rows * terms * d * 5)  # per term and channel: add, exp, max, mul, add


def indexer_logits_work(x):
    q, w, cache, ctx, table = x.args
    entries = int(ctx.sum())
    heads = q.shape[1]
    moved = (q.numel() + w.numel() * 4 + entries * (contract.INDEXER_DIM + 4)
             + q.shape[0] * x.kwargs["max_context_len"] * 4)
    return Work(moved, 2 * heads * contract.INDEXER_DIM * entries)


def topk_indices_work(x):
    logits, seq_lens, _ = x.args
    k = x.kwargs["k"]
    lens = seq_lens.tolist()
    read = sum(n for n in lens if n > k) * 4
    return Work(read + len(lens) * k * 4 * 2, 0)  # logits once; indices written, page ids read


def sparse_attention_work(x):
    q, kv, idx = x.args
    valid = int((idx >= 0).sum())
    # a row picked by many query tokens (prefill: the tokens of one request share most of their
    # top-k) comes from HBM once: the floor counts distinct rows, the FLOPs every pick
    distinct = int(torch.unique(idx[idx >= 0]).numel())
    batch, heads, dim = q.shape
    moved = q.numel() * 2 * 2 + distinct * dim * 2 + idx.numel() * 4 + batch * heads * 4  # q in, out, rows, lse
    return Work(moved, 4 * heads * dim * valid)  # q.k and p.v


def sparse_attention_fp8_work(x):
    """As sparse_attention_work, but a gathered token costs its 584-byte record (448 e4m3 bytes, 128 bytes of
    bf16 RoPE dims, 8 scale bytes), counted once per distinct slot, as FlashMLA counts them."""
    q, _, idx = x.args
    valid = int((idx >= 0).sum())
    distinct = int(torch.unique(idx[idx >= 0]).numel())
    batch, heads, dim = q.shape
    moved = q.numel() * 2 * 2 + distinct * contract.FP8_KV_TOKEN_BYTES + idx.numel() * 4 + batch * heads * 4
    return Work(moved, 4 * heads * dim * valid)


# ---------------------------------------------------------------------------------------------
# device peaks: datasheet values (dense, no sparsity), leads to check against `harness calibrate`


@dataclass(frozen=True)
class DevicePeaks:
    name: str
    sms: int | None  # to tell apart parts that share a name
    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    memory_gb: float | None = None


DATASHEET = [
    DevicePeaks("A100-SXM4-40GB", 108, 1555, 312, None, 40),
    DevicePeaks("A100-SXM4-80GB", 108, 2039, 312, None, 80),
    DevicePeaks("A100-PCIE-80GB", 108, 1935, 312, None, 80),
    DevicePeaks("H100-SXM", 132, 3350, 989, 1979, 80),
    DevicePeaks("H100-PCIe", 114, 2000, 756, 1513, 80),
    DevicePeaks("H200", 132, 4800, 989, 1979, 141),
    DevicePeaks("B200", 148, 8000, 2250, 4500, 180),
    DevicePeaks("GB200", None, 8000, 2500, 5000, 186),
    DevicePeaks("L40S", 142, 864, 362, 733, 48),
    DevicePeaks("RTX 4090", 128, 1008, 165, 330, 24),
    DevicePeaks("RTX 5090", 170, 1792, 209, 419, 32),
]


def _norm(s):
    return "".join(ch for ch in s.lower() if ch.isalnum())


def device_peaks(name, sms=None, memory_bytes=None):
    """The datasheet entry for a device name as torch reports it ('NVIDIA H100 80GB HBM3'), told
    apart by SM count and memory size where several share a name; None if unknown."""
    n = _norm(name)
    if "gh200" in n:  # Grace Hopper superchips: not in the table
        return None
    family = [p for p in DATASHEET if _norm(p.name.split("-")[0]) in n]
    if "gb200" in n:
        family = [p for p in DATASHEET if p.name == "GB200"]
    elif "b200" in n:
        family = [p for p in DATASHEET if p.name == "B200"]
    if len(family) > 1 and sms is not None:
        family = [p for p in family if p.sms == sms] or family
    if len(family) > 1 and memory_bytes is not None:
        gb = memory_bytes / 1e9
        family = sorted(family, key=lambda p: abs((p.memory_gb or gb) - gb))[:1]
    if len(family) > 1:
        pcie = "pcie" in n
        family = [p for p in family if ("pcie" in _norm(p.name)) == pcie] or family
    return family[0] if family else None


def peaks_of(device):
    """The datasheet entry of a torch device, or None (CPU, or a GPU not in the table)."""
    import torch
    if torch.device(device).type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    return device_peaks(props.name, props.multi_processor_count, props.total_memory)


def floor_us(work, peaks):
    """The roofline floor of a work item on a device: max(bytes / bandwidth, flops / bf16 rate)."""
    return max(work.bytes / (peaks.hbm_gbps * 1e9), work.flops / (peaks.bf16_tflops * 1e12)) * 1e6
