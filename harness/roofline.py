"""The fewest bytes each op must move and the flops it must do, counting only valid tokens and
indices: every needed input read once, every output and state row written once."""

from __future__ import annotations

from dataclasses import dataclass

from harness import contract


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int


def work(op, x) -> Work:
    return {"compress": _compress, "indexer_logits": _indexer, "topk_indices": _topk,
            "sparse_attention": _attention}[op](x)


def _compress(x):
    kv, ape, state = x.args
    kw = x.kwargs
    ratio, mode = kw["ratio"], kw["mode"]
    width = kv.shape[1]
    d = width // contract.ROW_WIDTH_FACTOR[ratio]
    prefix, extend = kw["prefix_lens"].tolist(), kw["extend_lens"].tolist()
    state_reads = state_writes = out_rows = 0
    for p, e in zip(prefix, extend):
        out_rows += len(contract.compress_emitted(ratio, p, e))
        if mode == "online":
            state_reads += 1 if e and p % 128 else 0
            state_writes += 1 if e else 0
        else:
            state_reads += len(contract.compress_state_reads(ratio, p, e))
            state_writes += min(e, contract.RING_WIDTH[ratio]) if mode == "ring" else e
    row_bytes = 3 * d * 4 if mode == "online" else width * 4
    terms = 8 if ratio == 4 else 128
    moved = kv.numel() * 4 + ape.numel() * 4 + (state_reads + state_writes) * row_bytes + out_rows * d * 4
    return Work(moved, out_rows * terms * d * 5)  # per term and channel: add, exp, max, mul, add


def _indexer(x):
    q, w, cache, ctx, table = x.args
    entries = int(ctx.sum())
    heads = q.shape[1]
    moved = (q.numel() + w.numel() * 4 + entries * (contract.INDEXER_DIM + 4)
             + q.shape[0] * x.kwargs["max_context_len"] * 4)
    return Work(moved, 2 * heads * contract.INDEXER_DIM * entries)


def _topk(x):
    logits, seq_lens, _ = x.args
    k = x.kwargs["k"]
    lens = seq_lens.tolist()
    read = sum(n for n in lens if n > k) * 4
    return Work(read + len(lens) * k * 4 * 2, 0)  # logits once; indices written, page ids read


def _attention(x):
    q, kv, idx = x.args
    valid = int((idx >= 0).sum())
    batch, heads, dim = q.shape
    moved = q.numel() * 2 * 2 + valid * dim * 2 + idx.numel() * 4 + batch * heads * 4  # q in, out, rows, lse
    return Work(moved, 4 * heads * dim * valid)  # q.k and p.v

