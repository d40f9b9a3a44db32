"""Builders of realistic inputs for the four ops, shared by tests, checks and benchmarks.

Everything random is drawn on the CPU from a seeded generator and then moved to the target device,
so a seed gives the same case on every device. Memory an op must not read (ring slots and pages
that hold no position, cache blocks no table names, logits past the valid length) is poisoned, so a
kernel that reads it produces NaN or a wrong selection instead of passing by luck.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness import contract

POISON = float("nan")


# ---------------------------------------------------------------------------------------------
# model shapes (SPEC 6)


@dataclass(frozen=True)
class ModelShape:
    name: str
    layers: int
    query_heads: int
    index_topk: int
    head_dim: int = 512
    rope_dim: int = 64
    indexer_heads: int = 64
    indexer_dim: int = 128
    window: int = 128
    max_context: int = 1 << 20

    @property
    def sm_scale(self):
        return self.head_dim ** -0.5


V4_FLASH = ModelShape("v4-flash", layers=43, query_heads=64, index_topk=512)
V4_PRO = ModelShape("v4-pro", layers=61, query_heads=128, index_topk=1024)
PRESETS = {m.name: m for m in (V4_FLASH, V4_PRO)}


# ---------------------------------------------------------------------------------------------
# the bundle a builder returns


@dataclass
class OpInputs:
    """Positional tensors and keyword arguments of one op call, plus what built them."""

    args: tuple
    kwargs: dict
    extra: dict = field(default_factory=dict)

    def call(self, op, **overrides):
        return op(*self.args, **{**self.kwargs, **overrides})

    def clone(self):
        """A deep copy of every tensor, so a state updated in place by one call leaves this intact."""
        def copy(x):
            return x.clone() if isinstance(x, torch.Tensor) else x
        return OpInputs(tuple(copy(a) for a in self.args), {k: copy(v) for k, v in self.kwargs.items()},
                        dict(self.extra))


def generator(seed):
    return torch.Generator().manual_seed(seed)


def randn(gen, *shape, scale=1.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float32).mul_(scale)


# ---------------------------------------------------------------------------------------------
# FP8 quantisers (SPEC 2)


def quantize_fp8_rows(x, eps=1e-10):
    """Per-row e4m3 quantisation over the last dim: scale = amax(|x|)/448, x_fp8 = x/scale.
    Returns (x_fp8, scale float32 [...]); a row of zeros gets a tiny scale, not a NaN."""
    x = x.float()
    scale = x.abs().amax(dim=-1).clamp_min(eps) / contract.FP8_MAX
    x_fp8 = (x / scale[..., None]).clamp(-contract.FP8_MAX, contract.FP8_MAX).to(torch.float8_e4m3fn)
    return x_fp8, scale


def dequantize_fp8_rows(x_fp8, scale):
    return x_fp8.double() * scale.double()[..., None]


def quantize_indexer_queries(q, weights, softmax_scale=contract.INDEXER_DIM ** -0.5):
    """q float [B, H, 128], weights [B, H] -> (q_fp8, weights with softmax and query scales folded in).
    Valid because relu(c*x) = c*relu(x) for the positive query scale c."""
    q_fp8, q_scale = quantize_fp8_rows(q)
    return q_fp8, (weights.float() * q_scale * softmax_scale).float()


# ---------------------------------------------------------------------------------------------
# page tables and the paged indexer cache


def random_page_table(blocks_per_request, num_pages, gen, *, columns=None, released=None):
    """int32 [B, columns]: each request's blocks get distinct random pages of a pool of num_pages;
    columns past a request's blocks are -1, and so is every block in released[b] (a set)."""
    kept = [[blk for blk in range(n) if not (released and blk in released[b])]
            for b, n in enumerate(blocks_per_request)]
    needed = sum(len(k) for k in kept)
    if needed > num_pages:
        raise ValueError(f"{needed} blocks do not fit in {num_pages} pages")
    columns = max(blocks_per_request, default=0) if columns is None else columns
    pages = torch.randperm(num_pages, generator=gen)[:needed]
    table = torch.full((len(blocks_per_request), columns), -1, dtype=torch.int32)
    start = 0
    for b, blocks in enumerate(kept):
        table[b, blocks] = pages[start:start + len(blocks)].int()
        start += len(blocks)
    return table


def pack_indexer_cache(keys_fp8, scales, block_table, num_blocks):
    """Per request b, keys_fp8[b] e4m3 [n_b, 128] and scales[b] float32 [n_b] -> uint8
    [num_blocks, 64*132]: entry t in block block_table[b, t // 64], row t % 64. Blocks and rows that
    hold no entry are 0xFF bytes: NaN keys and NaN scales."""
    cache = torch.full((num_blocks, contract.INDEXER_BLOCK_BYTES), 0xFF, dtype=torch.uint8)
    keys = cache[:, :contract.INDEXER_KEY_BYTES].view(num_blocks, contract.INDEXER_BLOCK, contract.INDEXER_DIM)
    scale_bytes = cache[:, contract.INDEXER_KEY_BYTES:].view(num_blocks, contract.INDEXER_BLOCK, 4)
    for b, (k, s) in enumerate(zip(keys_fp8, scales)):
        t = torch.arange(k.shape[0])
        blocks, rows = block_table[b].long()[t // contract.INDEXER_BLOCK], t % contract.INDEXER_BLOCK
        keys[blocks, rows] = k.view(torch.uint8)
        scale_bytes[blocks, rows] = s.float().contiguous().view(torch.uint8).view(-1, 4)
    return cache


# ---------------------------------------------------------------------------------------------
# compress: inputs and state built from each request's token history


class TrimmedRows:
    """Raw rows of one request for positions start.. only, indexed by absolute position (ints,
    position tensors, slices): a long prefix need not exist where no call reads it."""

    def __init__(self, start, rows):
        self.start, self.rows = start, rows

    def __getitem__(self, pos):
        if isinstance(pos, slice):
            lo = None if pos.start is None else pos.start - self.start
            hi = None if pos.stop is None else pos.stop - self.start
            if (lo is not None and lo < 0) or (hi is not None and hi < 0):
                raise IndexError(f"rows before position {self.start} were not drawn")
            return self.rows[lo:hi]
        return self.rows[pos - self.start]


def compress_inputs(*, ratio, d, prefix_lens, extend_lens, mode, seed, device="cpu", score_scale=1.0,
                    spare=2, release=False, trim=False):
    """A compress call for requests with the given prefix and extend lengths.

    Every request gets a random history of raw rows for positions 0..prefix+extend-1
    (extra["history"][b]); kv_score holds the new part, the state the part a call may read.
    spare: unused state rows or pages in the pool. release: in paged mode only the blocks this call
    reads and the blocks a later call will read have pages; the rest are -1, as an engine that frees
    (or never allocates) them would leave them. trim: draw rows only from 2*ratio positions before each
    prefix (what any call can read; paged mode then implies release), so long contexts fit."""
    gen = generator(seed)
    width = contract.ROW_WIDTH_FACTOR[ratio] * d
    batch = len(prefix_lens)
    history = []
    release = release or (trim and mode == "paged")
    for p, e in zip(prefix_lens, extend_lens):
        start = max(0, p - 2 * ratio) if trim else 0
        rows = randn(gen, p + e - start, width)
        rows[:, width // 2:] *= score_scale  # the score half of the row
        history.append(TrimmedRows(start, rows) if start else rows)
    ape = randn(gen, *contract.APE_SHAPE[ratio](d), scale=0.5)
    kv_score = torch.cat([h[p:] for h, p in zip(history, prefix_lens)]) if batch else torch.zeros(0, width)
    kwargs = dict(ratio=ratio, prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
                  extend_lens=torch.tensor(extend_lens, dtype=torch.int32), mode=mode)
    if mode == "paged":
        blocks = [contract.cdiv(p + e, ratio) for p, e in zip(prefix_lens, extend_lens)]
        released = [_unneeded_blocks(ratio, p, e) for p, e in zip(prefix_lens, extend_lens)] if release else None
        pool = sum(blocks) - sum(len(r) for r in released or []) + spare
        table = random_page_table(blocks, pool, gen, released=released)
        state = paged_state(history, prefix_lens, ratio, width, table, pool)
        kwargs["page_table"] = table
    else:
        rows = torch.randperm(batch + spare, generator=gen)[:batch].int()
        if mode == "ring":
            state = ring_state(history, prefix_lens, ratio, width, rows, batch + spare)
        else:
            state = online_state(history, prefix_lens, ape, rows, batch + spare)
        kwargs["state_rows"] = rows
    inputs = OpInputs((kv_score, ape, state), kwargs, dict(history=history, seed=seed))
    return to_device(inputs, device)


def compress_steps(x, steps):
    """The calls of a chain: x was built with extend_lens = the per-request totals of `steps` (one
    extend list per call). Yields (kv_score, prefix_lens, extend_lens) of each call, in order, to be
    run on x's state and tables."""
    device = x.args[0].device
    done = x.kwargs["prefix_lens"].tolist()
    initial = list(done)
    for ext in steps:
        rows = [x.extra["history"][b][done[b]:done[b] + e] for b, e in enumerate(ext)]
        kv = torch.cat(rows) if rows else x.args[0][:0]
        yield (kv.to(device), torch.tensor(done, dtype=torch.int32, device=device),
               torch.tensor(ext, dtype=torch.int32, device=device))
        done = [d + e for d, e in zip(done, ext)]
    totals = [d - i for d, i in zip(done, initial)]
    if totals != x.kwargs["extend_lens"].tolist():
        raise ValueError(f"steps add up to extends {totals}, but the inputs were built for "
                         f"{x.kwargs['extend_lens'].tolist()}")


def _unneeded_blocks(ratio, prefix_len, extend_len):
    """Blocks an engine need not keep a page for: neither read by this call nor by the next
    emission after it (C4 keeps the overlap block too)."""
    total = prefix_len + extend_len
    read = {p // ratio for p in contract.compress_state_reads(ratio, prefix_len, extend_len)}
    later = contract.compress_state_reads(ratio, total, ratio)  # what the next emission reads
    first_later = (later[0] if len(later) else total) // ratio
    return set(range(first_later)) - read


def ring_state(history, prefix_lens, ratio, width, state_rows, num_rows):
    """float32 [num_rows, W, E]: request b's row keeps its last min(W, prefix) positions at p % W;
    every other slot is NaN."""
    slots = contract.RING_WIDTH[ratio]
    state = torch.full((num_rows, slots, width), POISON)
    for b, p in enumerate(prefix_lens):
        pos = torch.arange(max(0, p - slots), p)
        state[int(state_rows[b]), pos % slots] = history[b][pos]
    return state


def paged_state(history, prefix_lens, ratio, width, page_table, num_pages):
    """float32 [num_pages, r, E]: each prefix position whose block has a page sits at slot p % r;
    everything else is NaN."""
    state = torch.full((num_pages, ratio, width), POISON)
    for b, p in enumerate(prefix_lens):
        pos = torch.arange(getattr(history[b], "start", 0), p)
        pages = page_table[b].long()[pos // ratio]
        keep = pages >= 0
        state[pages[keep], pos[keep] % ratio] = history[b][pos[keep]]
    return state


def online_state(history, prefix_lens, ape, state_rows, num_rows):
    """float32 [num_rows, 3, d]: (max, sum, normalised mean) of the biased logits of the prefix's
    partial block; NaN where the prefix ends on a block boundary (the op must start afresh)."""
    d = ape.shape[1]
    state = torch.full((num_rows, contract.ONLINE_FIELDS, d), POISON)
    for b, p in enumerate(prefix_lens):
        start = p - p % 128
        if start == p:
            continue
        block = history[b][start:p].double()
        logits = block[:, d:] + ape[:p - start].double()
        m = logits.max(dim=0).values
        w = torch.exp(logits - m)
        state[int(state_rows[b])] = torch.stack([m, w.sum(0), (w * block[:, :d]).sum(0) / w.sum(0)]).float()
    return state


# ---------------------------------------------------------------------------------------------
# indexer logits


def indexer_inputs(*, context_lens, heads=64, seed, device="cpu", max_context_len=None, spare_blocks=2,
                   key_scale=1.0):
    """Random keys per request quantised per entry into a paged cache with a random block table;
    queries quantised per (row, head), weights with the scales folded in."""
    gen = generator(seed)
    batch = len(context_lens)
    max_context_len = max(context_lens, default=0) if max_context_len is None else max_context_len
    keys = [randn(gen, n, contract.INDEXER_DIM, scale=key_scale) for n in context_lens]
    quantised = [quantize_fp8_rows(k) for k in keys]
    blocks = [contract.cdiv(n, contract.INDEXER_BLOCK) for n in context_lens]
    num_blocks = sum(blocks) + spare_blocks
    table = random_page_table(blocks, num_blocks, gen, columns=max(1, contract.cdiv(max_context_len, 64)))
    cache = pack_indexer_cache([k for k, _ in quantised], [s for _, s in quantised], table, num_blocks)
    q_fp8, weights = quantize_indexer_queries(randn(gen, batch, heads, contract.INDEXER_DIM),
                                              randn(gen, batch, heads))
    inputs = OpInputs((q_fp8, weights, cache, torch.tensor(context_lens, dtype=torch.int32), table),
                      dict(max_context_len=max_context_len), dict(seed=seed))
    return to_device(inputs, device)


# ---------------------------------------------------------------------------------------------
# top-k


def topk_inputs(*, seq_lens, columns=None, k=512, page_size=64, seed, device="cpu", distinct=None,
                tail=float("inf")):
    """Random logits [B, columns] with a random page table. distinct: draw the valid logits from that
    many distinct values (heavy ties); tail: the value past each seq_len (+inf by default, so a kernel
    that ignores seq_lens selects it)."""
    gen = generator(seed)
    columns = max(seq_lens, default=0) if columns is None else columns
    logits = randn(gen, len(seq_lens), columns)
    if distinct is not None:
        logits = torch.randint(0, distinct, logits.shape, generator=gen).float() / max(distinct, 1)
    for b, n in enumerate(seq_lens):
        logits[b, n:] = tail
    blocks = [contract.cdiv(n, page_size) for n in seq_lens]
    table = random_page_table(blocks, sum(blocks) + 2, gen, columns=max(1, contract.cdiv(columns, page_size)))
    inputs = OpInputs((logits, torch.tensor(seq_lens, dtype=torch.int32), table),
                      dict(k=k, page_size=page_size), dict(seed=seed))
    return to_device(inputs, device)


# ---------------------------------------------------------------------------------------------
# sparse attention


def attention_indices(positions, *, ratio, topk, window=128, gen):
    """Index rows the way the engines build them, for query rows at the given absolute positions.

    The pool is [window region: window rows per query row][compressed region: each row's entries].
    Each index row: the window part in ring order (slot i of the ring is valid iff it holds one of
    the last `window` positions, else -1), then the compressed part: ratio 4 (CSA) a random choice of
    min(topk, visible) visible entries, ratio 128 (HCA) all visible entries j < (p+1)//128, then -1.
    Returns (indices int32 [B, window + topk], pool rows)."""
    batch = len(positions)
    indices = torch.full((batch, window + topk), -1, dtype=torch.int32)
    base = batch * window
    for b, p in enumerate(positions):
        valid_slots = min(p + 1, window)  # positions max(0, p-window+1)..p fill slots 0..p early on
        indices[b, :valid_slots] = b * window + torch.arange(valid_slots, dtype=torch.int32)
        visible = (p + 1) // ratio
        if ratio == 4:
            chosen = torch.randperm(visible, generator=gen)[:topk]
        else:
            if visible > topk:
                raise ValueError(f"HCA row at position {p} sees {visible} entries > topk {topk}")
            chosen = torch.arange(visible)
        indices[b, window:window + len(chosen)] = (base + chosen).int()
        base += visible
    return indices, base


def prefill_attention_indices(start, tokens, *, ratio, topk, window=128, gen):
    """Index rows of one request's prefill: query tokens at positions start .. start+tokens-1, each
    with its own window (its last `window` raw positions, oldest first, -1 where the position would
    be negative) and its own compressed part (ratio 4: min(topk, visible) entries chosen at random
    among its visible j < (p+1)//ratio; ratio 128: all visible; then -1). The pool is
    [raw rows of positions start-window+1 .. start+tokens-1][the request's compressed entries].
    Vectorised (random keys and one topk), so 4096 tokens at 64K build in about a second.
    Returns (indices int32 [tokens, window + topk], pool rows)."""
    end = start + tokens
    raw_first = max(0, start - window + 1)
    raw_rows = end - raw_first
    pos = torch.arange(start, end)
    slot_pos = pos[:, None] - window + 1 + torch.arange(window)[None, :]  # oldest .. newest
    win = torch.where(slot_pos >= 0, slot_pos - raw_first, -1)
    visible = (pos + 1) // ratio
    entries = int(visible.max()) if tokens else 0
    if ratio == 4:
        keys = torch.rand(tokens, max(entries, 1), generator=gen)
        keys = keys.masked_fill(torch.arange(keys.shape[1])[None, :] >= visible[:, None], -1.0)
        take = min(topk, keys.shape[1])
        chosen = keys.topk(take, dim=1).indices
        chosen = torch.where(chosen < visible[:, None], chosen, -1)
    else:
        if entries > topk:
            raise ValueError(f"HCA prefill: the last token sees {entries} entries > topk {topk}")
        chosen = torch.arange(entries)[None, :].expand(tokens, entries)
        chosen = torch.where(chosen < visible[:, None], chosen, -1)
    comp = torch.full((tokens, topk), -1, dtype=torch.int64)
    comp[:, :chosen.shape[1]] = torch.where(chosen >= 0, chosen + raw_rows, -1)
    return torch.cat([win, comp], dim=1).int(), raw_rows + entries


def random_indices(rows, k, pool, invalid, gen):
    """int32 [rows, k] uniform over a pool of `pool` rows, each entry -1 with probability `invalid`
    (repeats may occur: duplicates count twice)."""
    idx = torch.randint(0, pool, (rows, k), generator=gen, dtype=torch.int32)
    return idx.masked_fill(torch.rand(rows, k, generator=gen) < invalid, -1)


def duplicate_some_indices(indices, gen):
    """In place: each row repeats about a quarter of its valid entries, in its -1 slots where it has
    them, else over other entries."""
    for row in indices:
        valid = (row >= 0).nonzero().flatten()
        if len(valid) < 2:
            continue
        n = max(1, len(valid) // 4)
        src = valid[torch.randint(0, len(valid), (n,), generator=gen)]
        free = (row < 0).nonzero().flatten()
        dst = free[:n] if len(free) >= n else valid[torch.randperm(len(valid), generator=gen)[:n]]
        row[dst] = row[src].clone()


def attention_inputs(*, positions, heads, ratio=4, topk=512, window=128, seed, device="cpu", sink=True,
                     q_scale=1.0, sm_scale=contract.ATTN_DIM ** -0.5, indices=None, pool_rows=None):
    """q, kv and engine-like indices for decode rows at `positions`; pass indices and pool_rows to
    use an index set of your own."""
    gen = generator(seed)
    if indices is None:
        indices, pool_rows = attention_indices(positions, ratio=ratio, topk=topk, window=window, gen=gen)
    batch = indices.shape[0]
    q = randn(gen, batch, heads, contract.ATTN_DIM, scale=q_scale).bfloat16()
    kv = randn(gen, max(pool_rows, 1), contract.ATTN_DIM).bfloat16()
    kwargs = dict(sm_scale=sm_scale, attn_sink=randn(gen, heads) if sink else None)
    inputs = OpInputs((q, kv, indices), kwargs, dict(seed=seed))
    return to_device(inputs, device)


def to_device(inputs, device):
    device = torch.device(device)

    def move(x):
        return x.to(device) if isinstance(x, torch.Tensor) else x
    return OpInputs(tuple(move(a) for a in inputs.args), {k: move(v) for k, v in inputs.kwargs.items()},
                    inputs.extra)
